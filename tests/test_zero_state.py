"""ZeroRedundancyOptimizer checkpoints and schedules, on loopback ranks (threads of this process).

A ZeRO run saved after K steps (``consolidate_state_dict`` + ``state_dict``, through ``nbcoll.save``) and resumed in
a fresh model and optimizer must continue bit for bit as the uninterrupted run, on 1 to 4 ranks (43 parameters:
uneven shards on 2, 3 and 4). The whole state has a plain optimizer's layout, so it moves both ways between the two.
"""

import threading

import numpy as np
import pytest

import nbcoll
from nbcoll import nn, optim
from nbcoll.comm import loopback
from nbcoll.parallel import DistributedDataParallel, ZeroRedundancyOptimizer

K = 2
ROWS = 6  # rows of each global batch; split unevenly over 4 ranks


@pytest.fixture(autouse=True)
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


SEEDING = threading.Lock()  # the ranks are threads, and the random generator is the process's


def make_model(seed: int) -> nn.Module:
    """5 -> 5 (no bias) -> 3 in float64: 43 parameters, which no rank count from 2 to 4 divides."""
    with SEEDING:
        nbcoll.manual_seed(seed)
        first = nn.Linear(5, 5, bias=False, dtype=np.float64)
        return nn.Sequential(first, nn.Tanh(), nn.Linear(5, 3, dtype=np.float64))


def build(comm, stage: int, seed: int, optimizer_class=optim.Adam, **kwargs):
    model = make_model(seed)
    wrapped = DistributedDataParallel(model, comm) if stage == 1 else model  # stage 1 averages in DDP
    zero = ZeroRedundancyOptimizer(wrapped.parameters(), optimizer_class, comm, stage=stage, **kwargs)
    return model, wrapped, zero


def train(wrapped, optimizer, comm, first: int, count: int, scheduler=None) -> None:
    """Steps ``first, first + 1, ...`` on the same global batches whatever the rank count."""
    for step in range(first, first + count):
        rng = np.random.default_rng([7, step])
        x, y = rng.standard_normal((ROWS, 5)), rng.standard_normal((ROWS, 3))
        rows = np.array_split(np.arange(ROWS), comm.size)[comm.rank] if comm is not None else np.arange(ROWS)
        scale = (comm.size if comm is not None else 1) / ROWS  # averaged over ranks: the global mean
        optimizer.zero_grad()
        loss = nn.MSELoss(reduction="sum")(wrapped(nbcoll.tensor(x[rows])), nbcoll.tensor(y[rows])) * scale
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()


def parameters(model) -> dict:
    return {name: p.numpy().copy() for name, p in model.named_parameters()}


@pytest.mark.parametrize("stage", [1, 2])
@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_a_zero_run_saved_and_resumed_equals_the_uninterrupted_run(tmp_path, nranks, stage):
    path = tmp_path / "ckpt.npz"

    def body(comm):
        model, wrapped, zero = build(comm, stage, seed=0, lr=0.05)
        train(wrapped, zero, comm, 0, K)
        zero.consolidate_state_dict(to=0)
        if comm.rank == 0:
            nbcoll.save({"model": model.state_dict(), "optimizer": zero.state_dict()}, path)
        comm.barrier()
        train(wrapped, zero, comm, K, K)
        resumed, resumed_wrapped, resumed_zero = build(comm, stage, seed=1, lr=0.5)  # other values, other lr
        saved = nbcoll.load(path)
        resumed.load_state_dict(saved["model"])  # copies into the parameters, which live in ZeRO's flat buffer
        resumed_zero.load_state_dict(saved["optimizer"])
        train(resumed_wrapped, resumed_zero, comm, K, K)
        return parameters(model), parameters(resumed)

    for uninterrupted, resumed in loopback.run(nranks, body):
        for name, value in uninterrupted.items():
            assert np.array_equal(resumed[name], value), f"{nranks} ranks, stage {stage}: {name} differs"


def test_the_whole_state_has_a_plain_optimizers_layout_both_ways():
    def body(comm):
        model, _, zero = build(comm, 2, seed=0, lr=0.05)
        train(model, zero, comm, 0, K)
        zero.consolidate_state_dict(to=2)  # not rank 0: any rank can receive it
        if comm.rank != 2:
            with pytest.raises(RuntimeError, match=rf"state_dict: rank {comm.rank} holds no consolidated state"):
                zero.state_dict()
            return None
        whole = zero.state_dict()
        plain = optim.Adam(make_model(0).parameters(), lr=1.0)
        plain.load_state_dict(whole)
        assert plain.param_groups[0]["lr"] == 0.05
        return whole, plain.state_dict()

    whole, again = loopback.run(3, body)[2]
    shapes = [(5, 5), (3, 5), (3,)]
    assert [whole["state"][i]["exp_avg"].shape for i in range(3)] == shapes
    assert whole["state"][0]["step"] == K and whole["param_groups"][0]["params"] == [0, 1, 2]
    assert_same_state(whole, again)

    def from_plain(comm):  # a plain optimizer's state, loaded on 2 ranks, comes back the same
        _, _, zero = build(comm, 2, seed=0, lr=0.3)
        zero.load_state_dict(again)
        zero.consolidate_state_dict(to=0)
        return zero.state_dict() if comm.rank == 0 else None

    assert_same_state(loopback.run(2, from_plain)[0], again)


def assert_same_state(a: dict, b: dict) -> None:
    assert a["param_groups"] == b["param_groups"] and a["state"].keys() == b["state"].keys()
    for key, entries in a["state"].items():
        assert entries.keys() == b["state"][key].keys()
        for name, value in entries.items():
            assert np.array_equal(value, b["state"][key][name]), f"state[{key}][{name!r}]"


def test_bad_state_dicts_and_ranks_are_named():
    def body(comm):
        _, _, zero = build(comm, 2, seed=0)
        with pytest.raises(ValueError, match=r"to: expected a rank in \[0, 2\), got 2"):
            zero.consolidate_state_dict(to=2)
        with pytest.raises(ValueError, match="expected one parameter group of 3 parameters"):
            zero.load_state_dict({"state": {}, "param_groups": [{"lr": 0.1, "params": [0, 1]}]})
        bad = {"state": {0: {"exp_avg": np.zeros(7)}}, "param_groups": [{"lr": 0.1, "params": [0, 1, 2]}]}
        with pytest.raises(ValueError, match=r"state\[0\]\['exp_avg'\]: expected shape \(5, 5\)"):
            zero.load_state_dict(bad)
        with pytest.raises(ValueError, match="state_dict: expected a dict"):
            zero.load_state_dict([])

    loopback.run(2, body)


def test_a_scheduler_steps_a_zero_optimizer_like_a_plain_one():
    def body(comm):
        model, _, zero = build(comm, 2, seed=0, optimizer_class=optim.SGD, lr=0.4, momentum=0.9)
        scheduler = optim.StepLR(zero, step_size=1, gamma=0.5)
        train(model, zero, comm, 0, 3, scheduler)
        return zero.optimizer.param_groups[0]["lr"], parameters(model)

    reference = make_model(0)
    plain = optim.SGD(reference.parameters(), lr=0.4, momentum=0.9)
    train(reference, plain, None, 0, 3, optim.StepLR(plain, step_size=1, gamma=0.5))
    for lr, got in loopback.run(2, body):
        assert lr == 0.4 * 0.5**3 == plain.param_groups[0]["lr"]  # the inner optimizer's rate was scheduled
        for name, value in parameters(reference).items():  # the ranks add in another order: rounding only
            np.testing.assert_allclose(got[name], value, rtol=1e-12, atol=1e-14, err_msg=name)
