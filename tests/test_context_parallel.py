"""Context parallelism on loopback worlds of 1 to 4 ranks, float64 on numpy: ring attention and Ulysses against
nbcoll's one-process scaled-dot-product attention, forward and the gradients of q, k and v (1e-10 relative),
causal and not, with sequence lengths that divide by the rank count and, where the method allows, that do not.
The zig-zag helpers round trip, and bad inputs are refused on every rank, naming the argument."""

import numpy as np
import pytest

import nbcoll
from nbcoll.comm import loopback
from nbcoll.nn.attention import causal_mask, scaled_dot_product_attention
from nbcoll.parallel import ring_attention, ulysses_attention, zigzag_merge, zigzag_split
from nbcoll.parallel.context_parallel import zigzag_positions
from nbcoll.tensors import tensor

BATCH, HEADS, HEAD_DIM = 2, 12, 4  # 12 heads split over 1, 2, 3 and 4 ranks


@pytest.fixture
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


def _inputs(seq_len: int) -> list[np.ndarray]:
    """q, k, v and the gradient of the output (the loss is sum(out * g))."""
    rng = np.random.default_rng(seq_len)
    return [rng.standard_normal((BATCH, HEADS, seq_len, HEAD_DIM)) for _ in range(4)]


def _one_process(q, k, v, g, causal):
    leaves = [tensor(x, requires_grad=True) for x in (q, k, v)]
    out, _ = scaled_dot_product_attention(*leaves, causal_mask(q.shape[2], q.shape[2]) if causal else None)
    (out * tensor(g)).sum().backward()
    return [out.numpy()] + [t.grad.numpy() for t in leaves]


def _contiguous(x, size, rank):
    return np.array_split(x, size, axis=2)[rank]


def _check_against_one_process(method, split, nranks, seq_len, causal):
    q, k, v, g = _inputs(seq_len)
    want = _one_process(q, k, v, g, causal)

    def body(comm):
        local = [tensor(np.ascontiguousarray(split(x, comm.size, comm.rank)), requires_grad=True) for x in (q, k, v)]
        out = method(*local, comm, causal=causal)
        (out * tensor(split(g, comm.size, comm.rank))).sum().backward()
        return [out.numpy()] + [t.grad.numpy() for t in local]

    for rank, got in enumerate(loopback.run(nranks, body)):
        for name, a, b in zip(["out", "dq", "dk", "dv"], got, want, strict=True):
            np.testing.assert_allclose(a, split(b, nranks, rank), rtol=1e-10, atol=1e-13, err_msg=f"{name} {rank}")


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
@pytest.mark.parametrize("extra", [0, 3], ids=["divisible", "uneven"])
def test_causal_ring_attention_on_the_zigzag_layout_equals_one_process(numpy_backend, nranks, extra):
    _check_against_one_process(ring_attention, zigzag_split, nranks, 4 * nranks + extra, causal=True)


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
@pytest.mark.parametrize("extra", [0, 3], ids=["divisible", "uneven"])
@pytest.mark.parametrize("split", [_contiguous, zigzag_split], ids=["contiguous", "zigzag"])
def test_ring_attention_without_a_mask_takes_any_split(numpy_backend, nranks, extra, split):
    _check_against_one_process(ring_attention, split, nranks, 3 * nranks + extra, causal=False)


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_ulysses_equals_one_process(numpy_backend, nranks, causal):
    _check_against_one_process(ulysses_attention, _contiguous, nranks, 3 * nranks, causal=causal)


@pytest.mark.parametrize("size", [1, 2, 3, 4])
@pytest.mark.parametrize("seq_len", [8, 13, 3])
def test_zigzag_split_and_merge_round_trip(size, seq_len):
    x = np.arange(2 * seq_len).reshape(2, seq_len)
    blocks = [zigzag_split(x, size, r, axis=1) for r in range(size)]
    np.testing.assert_array_equal(zigzag_merge(blocks, axis=1), x)
    chunks = np.array_split(np.arange(seq_len), 2 * size)
    for r, block in enumerate(blocks):  # rank r holds chunks r and 2n-1-r, so causal work is equal
        np.testing.assert_array_equal(block[0], np.concatenate([chunks[r], chunks[2 * size - 1 - r]]))


def test_zigzag_split_and_merge_are_differentiable_on_tensors(numpy_backend):
    x = tensor(np.arange(10.0), requires_grad=True)
    blocks = [zigzag_split(x, 2, r, axis=0) for r in range(2)]
    merged = zigzag_merge(blocks, axis=0)
    (merged * tensor(np.arange(10.0))).sum().backward()
    np.testing.assert_array_equal(merged.numpy(), np.arange(10.0))
    np.testing.assert_array_equal(x.grad.numpy(), np.arange(10.0))


def test_zigzag_helpers_refuse_bad_arguments():
    with pytest.raises(ValueError, match=r"rank: expected a rank in \[0, 2\)"):
        zigzag_split(np.zeros(4), 2, 2, axis=0)
    with pytest.raises(ValueError, match="size: expected a rank count"):
        zigzag_positions(4, 0, 0)
    with pytest.raises(ValueError, match="axis: expected an axis"):
        zigzag_split(np.zeros(4), 2, 0, axis=1)
    with pytest.raises(ValueError, match="blocks: expected one block per rank"):
        zigzag_merge([])


@pytest.mark.parametrize("nranks", [2, 3])
def test_bad_layouts_and_head_counts_are_refused_on_every_rank(numpy_backend, nranks):
    lengths = [6] + [4] * (nranks - 2) + [3]  # neither the zig-zag lengths (5, 4, ..) nor equal ones
    q, k, v, _ = _inputs(sum(lengths))
    cuts = np.cumsum(lengths)[:-1]

    def body(comm):
        uneven = [tensor(np.ascontiguousarray(np.split(x, cuts, axis=2)[comm.rank])) for x in (q, k, v)]
        with pytest.raises(ValueError, match=r"q: causal ring attention takes the zig-zag layout .* got \[6, "):
            ring_attention(*uneven, comm, causal=True)
        with pytest.raises(ValueError, match="q: Ulysses' all-to-all moves equal blocks"):
            ulysses_attention(*uneven, comm)
        five_heads = [tensor(x.numpy()[:, :5]) for x in uneven]
        with pytest.raises(ValueError, match=f"heads: .* 5 do not split over {nranks}"):
            ulysses_attention(*five_heads, comm)
        # No rank is left inside a collective: the next call runs in step.
        return ring_attention(*uneven, comm).shape

    assert [shape[2] for shape in loopback.run(nranks, body)] == lengths


def test_bad_tensors_are_refused(numpy_backend):
    comm = nbcoll.init()
    try:
        q = tensor(np.zeros((1, 2, 4, 3)))
        with pytest.raises(ValueError, match=r"q: expected a Tensor \(batch, heads, local_seq, head_dim\)"):
            ring_attention(tensor(np.zeros((2, 4, 3))), q, q, comm)
        with pytest.raises(ValueError, match="k, v: expected k of q's shape"):
            ulysses_attention(q, tensor(np.zeros((1, 2, 5, 3))), q, comm)
        with pytest.raises(ValueError, match="v: expected a Tensor"):
            ring_attention(q, q, np.zeros((1, 2, 4, 3)), comm)
        with pytest.raises(TypeError, match="comm: expected an nbcoll Communicator"):
            ring_attention(q, q, q, object())
    finally:
        comm.destroy()
