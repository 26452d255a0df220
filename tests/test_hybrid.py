"""HybridLM under cp, sp and recomputation trains as one process does; the planner's memory per rank and its choice
under a memory limit for a long sequence."""

import dataclasses

import numpy as np
import pytest

import nbcoll
from nbcoll.comm import CommConfig, loopback
from nbcoll.parallel.hybrid import HybridLM
from nbcoll.parallel.plan import Layout, ModelSpec, default_rates, explain, layouts, plan, predict

SPEC = ModelSpec(layers=2, hidden=8, seq_len=12, batch=4, heads=2, vocab=8, bytes_per_value=8)
CONFIG = CommConfig(timeout=120, flight_recorder=1)


@pytest.fixture(autouse=True)
def numpy_float64():
    with nbcoll.use_backend("numpy"):
        previous = nbcoll.get_default_dtype()
        nbcoll.set_default_dtype(np.float64)
        yield
        nbcoll.set_default_dtype(previous)


def _batches(spec, steps=2):
    rng = np.random.default_rng(3)
    return [rng.integers(0, spec.vocab, (spec.batch, spec.seq_len)) for _ in range(steps)]


def _train(comm, spec, layout, state, batches):
    run = HybridLM(spec, comm, layout, lr=0.1, state=state)
    losses = [run.step(ids, np.roll(ids, -1, axis=1)) for ids in batches]
    trained = run.full_state_dict()
    run.destroy()
    return trained, losses


def _one_process(spec, batches):
    start = loopback.run(1, lambda comm: HybridLM(spec, comm, Layout(1, 1, 1, 1)).full_state_dict())[0]
    trained = loopback.run(1, lambda comm: _train(comm, spec, Layout(1, 1, 1, 1), start, batches)[0])[0]
    return start, trained


@pytest.mark.parametrize(
    "ranks, layout",
    [
        (2, Layout(1, 1, 1, 1, cp=2)),
        (3, Layout(1, 1, 1, 1, cp=3)),  # 12 positions in 6 zig-zag chunks of 2
        (4, Layout(1, 1, 2, 2, cp=2, recompute=True)),
        (4, Layout(1, 2, 1, 1, cp=2, sp=True)),
        (2, Layout(1, 2, 1, 1, sp=True, recompute=True)),
        (4, Layout(2, 1, 1, 1, cp=2, recompute=True)),
    ],
    ids=str,
)
def test_cp_sp_and_recomputation_train_as_one_process(ranks, layout):
    batches = _batches(SPEC)
    start, want = _one_process(SPEC, batches)
    outs = loopback.run(ranks, lambda comm: _train(comm, SPEC, layout, start, batches)[0], config=CONFIG)
    for got in outs:
        assert got and set(got) <= set(want)
        for name, value in got.items():
            np.testing.assert_allclose(value, want[name], rtol=1e-10, atol=1e-12, err_msg=name)


def test_layouts_add_cp_sp_and_recomputation_only_when_asked():
    plain = layouts(SPEC, 4)
    assert all(lay.cp == 1 and not lay.sp and not lay.recompute for lay in plain)
    more = layouts(SPEC, 4, long_sequences=True)
    assert set(plain) < set(more) and all(lay.ranks == 4 for lay in more)
    assert all(lay.tp > 1 for lay in more if lay.sp) and all(SPEC.seq_len % (2 * lay.cp) == 0 for lay in more)
    assert {lay.cp for lay in more} == {1, 2} and str(Layout(1, 2, 1, 1, cp=2, sp=True, recompute=True)) == (
        "dp=1 tp=2 pp=1 m=1 cp=2 sp recompute"
    )
    with pytest.raises(ValueError, match="cp=4"):
        loopback.run(4, lambda comm: HybridLM(SPEC, comm, Layout(1, 1, 1, 1, cp=4)), config=CONFIG)


def test_the_step_time_counts_the_ring_the_recomputation_and_sp():
    rates = default_rates()
    base = predict(SPEC, Layout(1, 2, 1, 1), rates)
    assert predict(SPEC, Layout(1, 2, 1, 1, sp=True), rates).parts["tp comm"] == pytest.approx(base.parts["tp comm"])
    assert predict(SPEC, Layout(1, 2, 1, 1, recompute=True), rates).parts["compute"] > base.parts["compute"]
    ring = predict(SPEC, Layout(1, 1, 1, 1, cp=2), rates)
    assert ring.parts["cp comm"] > 0 and ring.parts["dp comm"] > 0  # the hops; the cp ranks average gradients
    pairs = predict(SPEC, Layout(1, 1, 1, 1, cp=2), dataclasses.replace(rates, ring_overhead=1e-3))
    # 2 blocks, each attending 3 chunk pairs at its own step and 2 at the other one
    assert pairs.parts["cp comm"] - ring.parts["cp comm"] == pytest.approx(2 * 5 * 1e-3)


LONG = ModelSpec(layers=2, hidden=8, seq_len=64, batch=1, heads=2, vocab=8, bytes_per_value=8)
LIMIT = 230_000  # bytes per rank


def test_only_cp_with_recomputation_fits_a_long_sequence_and_the_chosen_layout_does():
    fitting = plan(LONG, 4, memory_limit=LIMIT, long_sequences=True)
    assert fitting and all(p.layout.cp > 1 and p.layout.recompute for p in fitting)
    assert "only cp > 1 with recomputation fits 0.2 MB" in explain(fitting, LIMIT)
    chosen = fitting[0].layout
    ids = _batches(LONG, 1)[0]

    def peak(comm):
        run = HybridLM(LONG, comm, chosen)
        run.step(ids, np.roll(ids, -1, axis=1))
        bytes_ = run.step_peak_bytes(ids, np.roll(ids, -1, axis=1))
        run.destroy()
        return bytes_

    measured = loopback.run(4, peak, config=CONFIG)
    assert 0 < max(measured) <= LIMIT, (chosen, measured)


def test_memory_stats_count_each_loopback_rank_on_its_own():
    def own(comm):
        comm.barrier()
        nbcoll.memory.reset_peak_stats()
        before = nbcoll.memory.stats(this_thread=True)
        kept = nbcoll.memory.zeros(1000 * (comm.rank + 1), np.uint8)
        comm.barrier()  # every rank's buffer is alive at once here
        now = nbcoll.memory.stats(this_thread=True)
        del kept
        return now.allocated_bytes - before.allocated_bytes, now.peak_bytes - before.allocated_bytes

    counted = loopback.run(3, own, config=CONFIG)
    # Each rank's own buffer, none of the other ranks' buffers; at the peak, the same few bytes of its barrier too.
    extra = {allocated - 1000 * (rank + 1) for rank, (allocated, _) in enumerate(counted)}
    assert len(extra) == 1 and 0 <= extra.pop() < 64 and all(0 <= p - a < 64 for a, p in counted)
