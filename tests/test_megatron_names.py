"""PyTorch's and Megatron's spellings of the model-parallel API, on loopback worlds of 1 to 4 ranks (numpy, float64):
a named DeviceMesh whose ``mesh["tp"]`` is a sub-mesh, ``input_is_parallel``, padded vocabularies, the loss's
``label_smoothing`` and ``reduction``, dropout kept in a split block; each against one process."""

import warnings

import numpy as np
import pytest

import nbcoll
import nbcoll.parallel as parallel
from nbcoll import nn
from nbcoll.comm import loopback
from nbcoll.parallel import (
    ColumnParallelLinear,
    DeviceMesh,
    RowParallelLinear,
    VocabParallelEmbedding,
    full_state_dict,
    init_device_mesh,
    load_full_state,
    padded_vocab_size,
    tensor_parallel_block,
    vocab_parallel_cross_entropy,
)
from nbcoll.tensors import tensor

RANKS = [1, 2, 3, 4]


@pytest.fixture(autouse=True)
def numpy_float64():
    with nbcoll.use_backend("numpy"):
        nbcoll.set_default_dtype(np.float64)
        yield
        nbcoll.set_default_dtype(np.float32)


def close(got, want, what: str) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=what)


def test_the_documented_helpers_are_exported():
    for name in ("load_full_state", "full_state_dict", "full_expert_state", "all_reduce_shared_gradients"):
        assert name in parallel.__all__ and callable(getattr(parallel, name)), name
    for name in ("init_device_mesh", "PipelineStage", "ScheduleGPipe", "Schedule1F1B", "padded_vocab_size"):
        assert name in parallel.__all__, name


@pytest.mark.parametrize("shape", [(1, 1), (2, 1), (1, 2), (2, 2), (3, 1), (1, 3)])
def test_a_named_mesh_gives_sub_meshes_whose_groups_hold_the_ranks_of_one_row(shape):
    def body(comm):
        mesh = init_device_mesh("cpu", shape, mesh_dim_names=("dp", "tp"), comm=comm)
        try:
            dp, tp = mesh["dp"], mesh["tp"]
            assert mesh.mesh.tolist() == np.arange(comm.size).reshape(shape).tolist()
            assert (mesh.get_local_rank("dp"), mesh.get_local_rank("tp")) == divmod(comm.rank, shape[1])
            assert tp.get_group() is mesh.get_group("tp") and tp.size() == shape[1] and dp.size() == shape[0]
            row = comm.rank // shape[1] * shape[1]
            assert tp.mesh.tolist() == list(range(row, row + shape[1]))
            assert dp.mesh.tolist() == list(range(comm.rank % shape[1], comm.size, shape[1]))
            got = nbcoll.zeros(1, np.int64)
            tp.get_group().all_reduce(nbcoll.to_device(np.array([comm.rank], np.int64)), got)
            return int(nbcoll.to_host(got)[0]) == sum(range(row, row + shape[1]))
        finally:
            mesh.destroy()

    assert loopback.run(shape[0] * shape[1], body) == [True] * (shape[0] * shape[1])


def test_bad_meshes_are_refused_by_name():
    def body(comm):
        messages = []
        for call in (
            lambda: DeviceMesh(comm, (3,), mesh_dim_names=("dp",)),
            lambda: DeviceMesh(comm, (2, 1), mesh_dim_names=("dp", "dp")),
            lambda: init_device_mesh("tpu", (2,), comm=comm),
        ):
            with pytest.raises(ValueError) as info:
                call()
            messages.append(str(info.value))
        mesh = DeviceMesh(comm, (2, 1), mesh_dim_names=("dp", "tp"))
        with pytest.raises(KeyError, match="dims"):
            mesh["pp"]
        with pytest.raises(ValueError, match="mesh_dim"):
            mesh.get_group()  # two dimensions: name one
        mesh.destroy()
        return messages

    messages = loopback.run(2, body)[0]
    assert "3 ranks" in messages[0] and "has 2" in messages[0]
    assert messages[1].startswith("mesh_dim_names") and messages[2].startswith("device_type")


def test_the_keyword_mesh_and_copy_input_still_work_and_warn():
    # One rank: the record of warnings is process-wide, so two thread ranks would mix theirs.
    def body(comm):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            mesh = DeviceMesh(comm, dp=comm.size)
            size = mesh["dp"].size()
            forwarded = mesh["dp"].rank  # the communicator's attribute, through the sub-mesh
            ColumnParallelLinear(2, 2 * comm.size, comm, copy_input=True)
        mesh.destroy()
        kinds = [w.category for w in caught]
        return size, forwarded, kinds.count(DeprecationWarning)

    assert loopback.run(1, body) == [(1, 0, 3)]


@pytest.mark.parametrize("nranks", RANKS)
def test_a_row_parallel_layer_on_the_full_input_equals_linear(nranks):
    nbcoll.manual_seed(1)
    full = nn.Linear(4 * 3, 5)
    x = np.random.default_rng(2).standard_normal((3, 12))
    want_x = tensor(x, requires_grad=True)
    (full(want_x) ** 2).sum().backward()

    def body(comm):
        layer = load_full_state(RowParallelLinear(12, 5, comm), full.state_dict(), comm)
        got_x = tensor(x, requires_grad=True)
        y = layer(got_x)
        (y**2).sum().backward()
        per = 12 // comm.size
        close(y.numpy(), full(tensor(x)).numpy(), "output")
        close(got_x.grad.numpy(), want_x.grad.numpy(), "input gradient (all-gathered back)")
        close(layer.weight.grad.numpy(), full.weight.grad.numpy()[:, per * comm.rank : per * (comm.rank + 1)], "dW")
        return True

    assert loopback.run(nranks, body) == [True] * nranks


@pytest.mark.parametrize("nranks", RANKS)
def test_a_vocabulary_that_does_not_divide_is_padded_and_equals_one_process(nranks):
    vocab, dim, rows = 7, 3, 5
    nbcoll.manual_seed(3)
    table, head = nn.Embedding(vocab, dim), nn.Linear(dim, vocab)
    rng = np.random.default_rng(4)
    ids, targets = rng.integers(0, vocab, rows), np.array([0, 6, 3, -100, 6])
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.2, reduction="none")
    per_row = loss_fn(head(table(ids)), targets)
    (per_row * tensor(np.arange(1.0, rows + 1))).sum().backward()

    def body(comm):
        split_table = load_full_state(VocabParallelEmbedding(vocab, dim, comm), table.state_dict(), comm)
        split_head = ColumnParallelLinear(dim, vocab, comm)
        assert split_head.weight.shape[0] * comm.size == padded_vocab_size(vocab, comm.size)
        load_full_state(split_head, head.state_dict(), comm)
        got = vocab_parallel_cross_entropy(
            split_head(split_table(ids)),
            targets,
            comm,
            ignore_index=-100,
            label_smoothing=0.2,
            reduction="none",
            vocab_size=vocab,
        )
        close(got.numpy(), per_row.numpy(), "per-token losses")
        (got * tensor(np.arange(1.0, rows + 1))).sum().backward()
        for name, module, full in (("table", split_table, table), ("head", split_head, head)):
            for key, value in full_state_dict(module, comm).items():
                assert value.shape == full.state_dict()[key].shape, (name, key, value.shape)
        grads = {"weight": split_head.weight.grad.numpy(), "bias": split_head.bias.grad.numpy()}
        local = split_head.weight.shape[0]
        real = max(0, min(local, vocab - comm.rank * local))
        for key, grad in grads.items():
            want = getattr(head, key).grad.numpy()[comm.rank * local : comm.rank * local + real]
            close(grad[:real], want, f"head {key} gradient")
            assert not grad[real:].any(), "padded features get no gradient"
        per = split_table.local_rows
        want = table.weight.grad.numpy()[per * comm.rank : per * comm.rank + per]
        close(split_table.weight.grad.numpy()[: len(want)], want, "embedding gradient")
        return True

    assert loopback.run(nranks, body) == [True] * nranks


@pytest.mark.parametrize("nranks", RANKS)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_the_loss_reductions_and_label_smoothing_equal_cross_entropy(nranks, reduction):
    vocab = 12
    logits = np.random.default_rng(5).standard_normal((6, vocab)) * 2
    targets = np.array([1, 11, -1, 0, 5, 7])
    full = tensor(logits, requires_grad=True)
    want = nn.CrossEntropyLoss(ignore_index=-1, label_smoothing=0.1, reduction=reduction)(full, targets)
    want.backward()

    def body(comm):
        per = vocab // comm.size
        local = tensor(np.ascontiguousarray(logits[:, per * comm.rank : per * (comm.rank + 1)]), requires_grad=True)
        got = vocab_parallel_cross_entropy(local, targets, comm, -1, 0.1, reduction)
        got.backward()
        close(got.item(), want.item(), "loss")
        close(local.grad.numpy(), full.grad.numpy()[:, per * comm.rank : per * (comm.rank + 1)], "gradient")
        return True

    assert loopback.run(nranks, body) == [True] * nranks


def test_bad_loss_arguments_are_refused_by_name():
    def body(comm):
        logits = tensor(np.zeros((2, 3)))
        messages = []
        for kwargs in ({"reduction": "avg"}, {"label_smoothing": 1.5}, {"vocab_size": 4}):
            with pytest.raises(ValueError) as info:
                vocab_parallel_cross_entropy(logits, np.array([0, 1]), comm, **kwargs)
            messages.append(str(info.value).split(":")[0])
        return messages

    assert loopback.run(1, body) == [["reduction", "label_smoothing", "vocab_size"]]


@pytest.mark.parametrize("nranks", [1, 2, 4])
def test_a_split_block_keeps_its_dropout_and_drops_what_one_process_drops(nranks):
    nbcoll.manual_seed(6)
    block = nn.TransformerBlock(8, num_heads=4, mlp_ratio=2.0, causal=True, dropout=0.3)
    x = np.random.default_rng(7).standard_normal((2, 5, 8))
    nbcoll.manual_seed(8)
    want_x = tensor(x, requires_grad=True)
    want = block(want_x)
    (want**2).sum().backward()

    def body(comm):
        split = tensor_parallel_block(block, comm)
        assert split.training and split.resid_dropout.p == 0.3
        nbcoll.manual_seed(8)  # the same seeds, drawn in the same order, as the one process above
        got_x = tensor(x, requires_grad=True)
        got = split(got_x)
        (got**2).sum().backward()
        close(got.numpy(), want.numpy(), "output with dropout")
        close(got_x.grad.numpy(), want_x.grad.numpy(), "input gradient with dropout")
        return True

    assert loopback.run(nranks, body) == [True] * nranks
