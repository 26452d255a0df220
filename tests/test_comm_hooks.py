"""DDP communication hooks and mixed precision: the default hook is plain DDP, float16 and bfloat16 give a rounded
mean at half the bytes, and a MixedPrecision policy trains as one process applying the same casts, on 1 to 4
loopback ranks."""

import numpy as np
import pytest

import nbcoll
from nbcoll import nn, optim
from nbcoll.comm import CommConfig, loopback
from nbcoll.parallel import (
    DistributedDataParallel,
    MixedPrecision,
    allreduce_hook,
    bf16_compress_hook,
    fp16_compress_hook,
)
from nbcoll.parallel.buckets import Bucket

RING = CommConfig(algo="ring")  # one algorithm for every size: bytes on the wire proportional to the elements
STEPS = 2


@pytest.fixture(autouse=True)
def numpy_float64():
    with nbcoll.use_backend("numpy"):
        nbcoll.set_default_dtype(np.float64)
        try:
            yield
        finally:
            nbcoll.set_default_dtype(np.float32)


def make_model():
    nbcoll.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))


def shards(nranks):
    """Uneven shards of a global batch of 3n + 2 rows (rank r gets 3 + (r < 2) rows)."""
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal((3 * nranks + 2, 5)), rng.standard_normal((3 * nranks + 2, 3))
    bounds = np.cumsum([0] + [3 + (r < 2) for r in range(nranks)])
    return [(x[a:b], y[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def train_ddp(comm, hook=None, policy=None):
    """STEPS steps of SGD on this rank's shard; the parameters after them and the bytes backward sent."""
    model = DistributedDataParallel(make_model(), comm, bucket_cap_mb=1e-4, mixed_precision=policy)
    if hook is not None:
        model.register_comm_hook(None, hook)
    optimizer = optim.SGD(model.parameters(), lr=0.1)
    x, y = (a.astype(nbcoll.get_default_dtype()) for a in shards(comm.size)[comm.rank])
    comm.reset_counters()
    for _ in range(STEPS):
        optimizer.zero_grad()
        out = model(nbcoll.tensor(x))
        ((out - nbcoll.tensor(y).astype(out.dtype)) ** 2).mean().backward()
        optimizer.step()
    return [p.numpy() for p in model.parameters()], comm.counters.bytes_sent, [b.flat.dtype for b in model.buckets]


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_allreduce_hook_is_plain_ddp_bit_for_bit(nranks):
    plain = loopback.run(nranks, train_ddp)
    hooked = loopback.run(nranks, train_ddp, allreduce_hook)
    for (want, _, _), (got, _, _) in zip(plain, hooked, strict=True):
        for w, g in zip(want, got, strict=True):
            np.testing.assert_array_equal(g, w)


def hook_on(comm, values, hook):
    bucket = Bucket(0, [], [], [], nbcoll.to_device(values[comm.rank].copy()), comm=comm, last=True)
    return nbcoll.to_host(hook(None, bucket).wait())


HOOKS = [(fp16_compress_hook, np.float16), (bf16_compress_hook, nbcoll.bfloat16)]


@pytest.mark.parametrize("hook, dtype", HOOKS)
@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_compress_hooks_give_the_rounded_mean_cast_back(nranks, hook, dtype):
    rng = np.random.default_rng(nranks)
    if nranks <= 2:  # any values: one addition at most, whatever the order
        values = rng.standard_normal((nranks, 11)).astype(np.float32) * 3
    else:  # values whose quotients and low-precision sums are exact, so the ring's order cannot matter
        values = (nranks * rng.integers(-64, 64, (nranks, 11)) / 64).astype(np.float32)
    quotients = [(v / np.float32(nranks)).astype(dtype) for v in values]
    total = quotients[0].astype(np.float32)
    for q in quotients[1:]:  # each sum in float32, rounded back once, as the collectives add
        total = (total + q.astype(np.float32)).astype(dtype).astype(np.float32)
    for got in loopback.run(nranks, hook_on, values, hook):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, total)
        np.testing.assert_allclose(got, values.mean(axis=0), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("hook, dtype", HOOKS)
@pytest.mark.parametrize("nranks", [2, 3])
def test_compress_hooks_train_near_plain_ddp_with_half_the_bytes(nranks, hook, dtype):
    nbcoll.set_default_dtype(np.float32)  # float32 buckets: 16-bit values are half of them
    plain = loopback.run(nranks, train_ddp, config=RING)
    half = loopback.run(nranks, train_ddp, hook, config=RING)
    assert sum(b for _, b, _ in plain) == 2 * sum(b for _, b, _ in half) > 0
    for (want, _, _), (got, _, _) in zip(plain, half, strict=True):
        for w, g in zip(want, got, strict=True):
            np.testing.assert_allclose(g, w, rtol=0, atol=2e-3 if dtype == np.float16 else 1e-2)


def test_a_hook_registered_twice_or_not_callable_is_refused():
    def check(comm):
        model = DistributedDataParallel(make_model(), comm)
        with pytest.raises(TypeError, match="hook: expected a callable"):
            model.register_comm_hook(None, 3)
        model.register_comm_hook(None, allreduce_hook)
        with pytest.raises(RuntimeError, match="already registered"):
            model.register_comm_hook(None, allreduce_hook)
        late = DistributedDataParallel(make_model(), comm)
        late(nbcoll.tensor(np.ones((2, 5)))).sum().backward()
        with pytest.raises(RuntimeError, match="before the first backward"):
            late.register_comm_hook(None, allreduce_hook)
        with pytest.raises(TypeError, match="mixed_precision: expected a MixedPrecision"):
            DistributedDataParallel(make_model(), comm, mixed_precision=np.float16)

    loopback.run(1, check)


# -- mixed precision -----------------------------------------------------------------------------------------------


def reference(nranks, policy):
    """One process: each shard's gradient through float copies of the masters, cast, averaged, cast back."""
    model = make_model()
    masters = dict(model.named_parameters())
    low, reduce = policy.param_dtype, np.dtype(policy.reduce_dtype or np.float64)
    for _ in range(STEPS):
        grads = []
        for x, y in shards(nranks):
            copies = {n: p.astype(low) for n, p in masters.items()}
            out = nn.functional_call(model, copies, nbcoll.tensor(x).astype(low))
            ((out - nbcoll.tensor(y).astype(low)) ** 2).mean().backward()
            grads.append({n: p.grad.numpy().astype(reduce) for n, p in masters.items()})
            for p in masters.values():
                p.grad = None
        for n, p in masters.items():
            total = grads[0][n]
            for g in grads[1:]:
                total = total + g[n]
            mean = (total / reduce.type(nranks) if nranks > 1 else total).astype(np.float64)
            p.data = nbcoll.to_device(p.numpy() - 0.1 * mean)
    return [p.numpy() for p in model.parameters()]


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_mixed_precision_trains_as_one_process_applying_the_same_casts(nranks):
    policy = MixedPrecision(param_dtype=np.float32, reduce_dtype=np.float32)
    want = reference(nranks, policy)
    for got, _, dtypes in loopback.run(nranks, train_ddp, None, policy):
        assert set(dtypes) == {np.dtype(np.float32)}  # the buckets travel in reduce_dtype
        for w, g in zip(want, got, strict=True):
            assert g.dtype == np.float64  # the masters keep their dtype
            if nranks <= 2:  # float32 sums of two terms: the same whatever the order
                np.testing.assert_array_equal(g, w)
            else:
                np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
    # reduce_dtype None: float32 gradients averaged in the masters' float64 (exact sums of few float32 values)
    policy = MixedPrecision(param_dtype=np.float32)
    want = reference(nranks, policy)
    for got, _, dtypes in loopback.run(nranks, train_ddp, None, policy):
        assert set(dtypes) == {np.dtype(np.float64)}
        for w, g in zip(want, got, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_an_empty_policy_is_no_policy_exactly(nranks):
    plain = loopback.run(nranks, train_ddp)
    empty = loopback.run(nranks, train_ddp, None, MixedPrecision())
    for (want, _, _), (got, _, _) in zip(plain, empty, strict=True):
        for w, g in zip(want, got, strict=True):
            np.testing.assert_array_equal(g, w)


def test_buffers_are_cast_to_buffer_dtype_once():
    def check(comm):
        module = make_model()
        module.register_buffer("scale", nbcoll.tensor([2.0, 3.0]))
        model = DistributedDataParallel(module, comm, mixed_precision=MixedPrecision(buffer_dtype="float32"))
        return model.module.scale.dtype, model.module[0].weight.dtype

    assert loopback.run(1, check) == [(np.dtype(np.float32), np.dtype(np.float64))]
