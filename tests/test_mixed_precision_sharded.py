"""ZeRO stage 2 and fully_shard with a MixedPrecision policy, on 1-4 loopback ranks: float32 masters, forward and
backward in float16, gradients averaged in reduce_dtype. Each run equals, bit for bit, one process that makes the same
casts, written out below; MixedPrecision() equals no policy."""

import numpy as np
import pytest

import nbcoll
import nbcoll.functional as F
from nbcoll import nn
from nbcoll.comm import loopback
from nbcoll.parallel import MixedPrecision, ZeroRedundancyOptimizer, fully_shard, gathered_parameters

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
LOCAL_BATCH, STEPS, LR = 3, 3, 0.1


@pytest.fixture(autouse=True)
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


def make_model():
    nbcoll.manual_seed(11)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))  # 7 and 3 rows: uneven shards


def batches(nranks):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((STEPS, nranks * LOCAL_BATCH, 5)).astype(np.float32)
    y = rng.standard_normal((STEPS, nranks * LOCAL_BATCH, 3)).astype(np.float32)
    return x, y


def local_loss(out, y):
    return F.mse_loss(out.astype(F32), nbcoll.tensor(y))


def reference(nranks, param_dtype, reduce_dtype):
    """One process, the same casts: each rank's gradient from float16 copies of the masters, cast to
    reduce_dtype, averaged over the ranks, cast back to float32, one SGD step on the float32 masters."""
    masters = [p.numpy().copy() for p in make_model().parameters()]
    xs, ys = batches(nranks)
    for x, y in zip(xs, ys, strict=True):
        total = [np.zeros(m.shape, reduce_dtype) for m in masters]
        for r in range(nranks):
            w1, b1, w2, b2 = (nbcoll.tensor(m.astype(param_dtype), requires_grad=True) for m in masters)
            rows = slice(r * LOCAL_BATCH, (r + 1) * LOCAL_BATCH)
            h = (nbcoll.tensor(x[rows]).astype(param_dtype) @ w1.T + b1).tanh()
            local_loss(h @ w2.T + b2, y[rows]).backward()
            for k, p in enumerate((w1, b1, w2, b2)):
                total[k] = total[k] + p.grad.numpy().astype(reduce_dtype)
        for m, g in zip(masters, total, strict=True):
            m -= np.float32(LR) * (g / reduce_dtype.type(nranks)).astype(np.float32)
    return masters


def train_zero(comm, policy):
    model = make_model()
    optimizer = ZeroRedundancyOptimizer(
        model.parameters(), nbcoll.optim.SGD, comm, stage=2, mixed_precision=policy, lr=LR
    )
    compute = optimizer.param_dtype
    xs, ys = batches(comm.size)
    rows = slice(comm.rank * LOCAL_BATCH, (comm.rank + 1) * LOCAL_BATCH)
    for x, y in zip(xs, ys, strict=True):
        optimizer.zero_grad()
        local_loss(model(nbcoll.tensor(x[rows]).astype(compute)), y[rows]).backward()
        assert all(p.grad.dtype == compute for p in model.parameters())
        optimizer.step()
    assert optimizer.shard.dtype == F32 and optimizer.optimizer.param_groups[0]["params"][0] is optimizer.shard
    start, stop = optimizer.shard_range
    whole = nbcoll.zeros(optimizer.flat.size, F32)
    comm.all_gather(optimizer.flat[start:stop], whole)  # every rank's stepped master shard: the masters, whole
    masters = nbcoll.to_host(whole)
    params = [p.numpy() for p in model.parameters()]
    return [masters[o : o + p.size].reshape(p.shape) for o, p in zip(optimizer.offsets, params, strict=True)], params


def train_fsdp(comm, policy):
    model = fully_shard(make_model(), comm, mixed_precision=policy)
    optimizer = nbcoll.optim.SGD(model.parameters(), lr=LR)
    xs, ys = batches(comm.size)
    rows = slice(comm.rank * LOCAL_BATCH, (comm.rank + 1) * LOCAL_BATCH)
    for x, y in zip(xs, ys, strict=True):
        optimizer.zero_grad()
        out = model(nbcoll.tensor(x[rows]))
        local_loss(out, y[rows]).backward()
        assert all(p.dtype == F32 and p.grad.dtype == F32 for p in model.parameters())  # shards: the masters
        optimizer.step()
    whole = gathered_parameters(model)
    return [whole[name] for name in ("0.weight", "0.bias", "2.weight", "2.bias")], out.dtype


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
@pytest.mark.parametrize("reduce_dtype", [np.float32, np.float16])
def test_zero_stage_2_in_float16_equals_one_process_making_the_same_casts(nranks, reduce_dtype):
    policy = MixedPrecision(param_dtype=np.float16, reduce_dtype=reduce_dtype)
    want = reference(nranks, F16, np.dtype(reduce_dtype))
    for masters, params in loopback.run(nranks, train_zero, policy):
        for got, ref, param in zip(masters, want, params, strict=True):
            np.testing.assert_array_equal(got, ref)
            assert param.dtype == F16  # the model's copy, all-gathered from the stepped master shards
            np.testing.assert_array_equal(param, got.astype(np.float16))


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
@pytest.mark.parametrize("reduce_dtype", [np.float32, None])
def test_fully_shard_in_float16_equals_one_process_making_the_same_casts(nranks, reduce_dtype):
    policy = MixedPrecision(param_dtype=np.float16, reduce_dtype=reduce_dtype)
    want = reference(nranks, F16, np.dtype(reduce_dtype or np.float16))  # None: reduced in param_dtype, as FSDP
    for masters, out_dtype in loopback.run(nranks, train_fsdp, policy):
        assert out_dtype == F16
        for got, ref in zip(masters, want, strict=True):
            assert got.dtype == F32
            np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("nranks", [1, 3])
def test_an_empty_policy_is_no_policy_bit_for_bit(nranks):
    for train in (train_zero, train_fsdp):
        plain, empty = loopback.run(nranks, train, None), loopback.run(nranks, train, MixedPrecision())
        for (a, _), (b, _) in zip(plain, empty, strict=True):
            for x, y in zip(a, b, strict=True):
                assert x.dtype == F32
                np.testing.assert_array_equal(x, y)
    want = reference(nranks, F32, F32)  # and without casts the same reference holds in float32
    for masters, _ in loopback.run(nranks, train_fsdp, None):
        for got, ref in zip(masters, want, strict=True):
            np.testing.assert_array_equal(got, ref)


def test_a_policy_that_is_not_one_is_refused():
    def body(comm):
        with pytest.raises(TypeError, match="mixed_precision: expected a MixedPrecision"):
            fully_shard(make_model(), comm, mixed_precision=np.float16)
        with pytest.raises(TypeError, match="mixed_precision: expected a MixedPrecision"):
            ZeroRedundancyOptimizer(make_model().parameters(), nbcoll.optim.SGD, comm, mixed_precision="fp16", lr=1)

    loopback.run(1, body)
