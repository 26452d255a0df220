"""Post-local SGD: period 1 is DDP with SGD; period 4 is independent steps averaged on schedule, on 1 to 4 ranks."""

import numpy as np
import pytest

import nbcoll
from nbcoll import nn, optim
from nbcoll.comm import loopback
from nbcoll.parallel import (
    DistributedDataParallel,
    PeriodicModelAverager,
    PostLocalSGDOptimizer,
    PostLocalSGDState,
    post_localSGD_hook,
)

STEPS, WARMUP = 9, 2


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


def batch(step, rank):
    """Rank ``rank``'s batch at ``step``: 3 + (rank < 2) rows, a different batch every step."""
    rng = np.random.default_rng(100 * step + rank)
    rows = 3 + (rank < 2)
    return rng.standard_normal((rows, 5)), rng.standard_normal((rows, 3))


def loss_of(model, x, y):
    return ((model(nbcoll.tensor(x)) - nbcoll.tensor(y)) ** 2).mean()


def train(comm, period, momentum, local):
    """STEPS steps: DDP with SGD (local False), or post-local SGD with the given period."""
    model = DistributedDataParallel(make_model(), comm, bucket_cap_mb=1e-4)
    optimizer = optim.SGD(model.parameters(), lr=0.1, momentum=momentum)
    sent_after_warmup = []
    if local:
        model.register_comm_hook(PostLocalSGDState(comm, None, start_localSGD_iter=WARMUP), post_localSGD_hook)
        optimizer = PostLocalSGDOptimizer(optimizer, PeriodicModelAverager(period, WARMUP, comm))
    for step in range(STEPS):
        optimizer.zero_grad()
        comm.reset_counters()
        loss_of(model, *batch(step, comm.rank)).backward()
        if step >= WARMUP:
            sent_after_warmup.append(comm.counters.bytes_sent)
        optimizer.step()
    return [p.numpy() for p in model.parameters()], sent_after_warmup


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_period_1_is_ddp_with_sgd(nranks, momentum):
    ddp = loopback.run(nranks, train, 1, momentum, False)
    local = loopback.run(nranks, train, 1, momentum, True)
    for (want, _), (got, sent) in zip(ddp, local, strict=True):
        assert sent == [0] * (STEPS - WARMUP)  # backward sends nothing once local SGD starts
        for w, g in zip(want, got, strict=True):
            if nranks == 1:
                np.testing.assert_array_equal(g, w)
            else:  # the mean of the steps against the step of the mean: equal up to rounding
                np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-15)


def reference(nranks, period, momentum):
    """One process, one model per rank: mean gradients for WARMUP steps, then own steps, averaged when due."""
    models = [make_model() for _ in range(nranks)]
    optimizers = [optim.SGD(m.parameters(), lr=0.1, momentum=momentum) for m in models]
    for step in range(STEPS):
        for rank, (model, optimizer) in enumerate(zip(models, optimizers, strict=True)):
            optimizer.zero_grad()
            loss_of(model, *batch(step, rank)).backward()
        if step < WARMUP:  # DDP: every replica steps with the mean gradient
            groups = zip(*(m.parameters() for m in models), strict=True)
            for params in groups:
                mean = sum(p.grad.numpy() for p in params) / nranks
                for p in params:
                    p.grad = nbcoll.tensor(mean)
        for optimizer in optimizers:
            optimizer.step()
        if step >= WARMUP and (step - WARMUP) % period == 0:
            for params in zip(*(m.parameters() for m in models), strict=True):
                mean = sum(p.numpy() for p in params) / nranks
                for p in params:
                    p.data = nbcoll.to_device(mean)
    return [[p.numpy() for p in m.parameters()] for m in models]


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_period_4_is_independent_steps_averaged_every_4_after_the_warm_up(nranks):
    want = reference(nranks, 4, 0.9)
    got = loopback.run(nranks, train, 4, 0.9, True)
    # STEPS - 1 = 8 is not a multiple of 4 past WARMUP: the replicas end apart, each matching its reference.
    if nranks > 1:
        assert not np.allclose(got[0][0][0], got[1][0][0])
    for rank in range(nranks):
        for w, g in zip(want[rank], got[rank][0], strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-15)


def test_state_dict_carries_the_averagers_step_and_bad_settings_are_named():
    def check(comm):
        model = make_model()
        wrapped = PostLocalSGDOptimizer(optim.SGD(model.parameters(), lr=0.1), PeriodicModelAverager(4, 1, comm))
        wrapped.step()
        state = wrapped.state_dict()
        resumed = PostLocalSGDOptimizer(optim.SGD(model.parameters(), lr=0.1), PeriodicModelAverager(4, 1, comm))
        resumed.load_state_dict(state)
        assert resumed.averager.step == 1 and resumed.param_groups[0]["lr"] == 0.1
        with pytest.raises(ValueError, match="period: expected a positive integer"):
            PeriodicModelAverager(0, 0, comm)
        with pytest.raises(ValueError, match="process_group"):
            PeriodicModelAverager(2)
        with pytest.raises(ValueError, match="start_localSGD_iter"):
            PostLocalSGDState(comm, None, -1)
        with pytest.raises(TypeError, match="averager"):
            PostLocalSGDOptimizer(wrapped.optim, None)

    loopback.run(1, check)
