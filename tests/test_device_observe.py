"""What the device collectives show of themselves: their trace spans, ``nbcoll info``'s protocol line, the
settings check at communicator creation, and the one standing watch of a communicator's kernels."""

import json
import threading
import time
import warnings

import numpy as np
import pytest

import nbcoll
from nbcoll import info
from nbcoll.comm import CommConfig, trace, trace_view
from nbcoll.comm import device_collective as dc
from nbcoll.comm.communicator import Communicator
from nbcoll.comm.device import prims as dp
from nbcoll.comm.inprocess import Fabric, ThreadComm

WATCH_THREAD = "nbcoll-device-watch"


@pytest.fixture(autouse=True)
def host_arrays():
    with nbcoll.use_backend("numpy"):  # NumPy arrays in; the kernels still run on this process's simulator
        yield


def one_rank(**settings):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the single-rank warning of nbcoll.init()
        return nbcoll.init(config=CommConfig(buffsize=64, steps=2, nchannels=2, **settings))


def watch_threads():
    return [t for t in threading.enumerate() if t.name == WATCH_THREAD]


# -- traces -------------------------------------------------------------------------------------------------------


def test_a_traced_device_all_reduce_writes_one_kernel_span_with_its_status(tmp_path):
    comm = one_rank(trace=str(tmp_path))
    try:
        comm.all_reduce(np.arange(5, dtype=np.int32), proto="device")
        comm.all_reduce(np.arange(5, dtype=np.int32))  # the host path: its steps stay as they were
    finally:
        comm.destroy()
    records = [json.loads(line) for line in (tmp_path / "rank0.jsonl").read_text().splitlines()]
    kernel = [rec for rec in records if rec.get("proto") == "device"]
    assert len(kernel) == 1, records
    (rec,) = kernel
    assert rec["primitive"] == trace.DEVICE_KERNEL and rec["kernel"] == "ring_rank_all_reduce_kernel"
    assert [rec[key] for key in ("rank", "seq", "collective", "algo", "outcome")] == [0, 1, "all_reduce", "ring", "ok"]
    assert rec["span"] == [0, 5] and rec["bytes"] == 20 and rec["send"] == rec["recv"] == []
    assert rec["status"] == [[dp.OK, 0], [dp.OK, 0]]  # one rank: each channel copies, no step
    assert 0 < rec["t0"] <= rec["t1"] <= time.time()
    assert all(r["seq"] == 2 for r in records if r is not rec)


def kernel_spans(directory, nranks, failed_rank=None):
    for rank in range(nranks):
        tracer = trace.Tracer(directory / f"rank{rank}.jsonl", rank)
        outcome = "CommTimeoutError" if rank == failed_rank else "ok"
        status = [[dp.ABORTED_RECV if rank == failed_rank else dp.OK, 6], [dp.OK, 6]]
        tracer.kernel(seq=1, collective="all_reduce", algo="ring", kernel="ring_rank_all_reduce_kernel", t0=10.0,
                      t1=10.5 + rank, status=status, nbytes=64, span=(0, 16), outcome=outcome)  # fmt: skip
        tracer.close()


def test_the_view_draws_one_device_span_per_rank_labelled_as_a_kernel(tmp_path, monkeypatch):
    kernel_spans(tmp_path, 3, failed_rank=2)
    records = trace.load(tmp_path)
    assert trace_view.columns(records) == {id(rec): 0 for rec in records}  # side by side: nothing waits on arrows
    texts = [trace_view.box_text(rec, several_channels=False) for rec in records]
    assert texts[0] == "device kernel\nsteps 6, 6" and texts[2].endswith("CommTimeoutError")
    import matplotlib.axes

    drawn, real_text = [], matplotlib.axes.Axes.text

    def text(ax, x, y, s, **kwargs):
        drawn.append(s)
        return real_text(ax, x, y, s, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "text", text)
    for use_time in (False, True):
        out = trace_view.draw(tmp_path, tmp_path / f"device{use_time}.png", use_time=use_time)
        assert out.stat().st_size > 0
    assert sum("device kernel" in text for text in drawn) == 3  # the step view labels every rank's span


# -- nbcoll info --------------------------------------------------------------------------------------------------


SIM = {"backend_name": "sim", "device_backend": "sim"}
CUDA = {"backend_name": "cuda", "device_backend": "cuda", "gpus": 2}
DEVICE = {"NBCOLL_PROTO": "device"}


@pytest.mark.parametrize(
    ("env", "kwargs", "expected"),
    [
        ({}, SIM, "host-driven (NBCOLL_PROTO=device runs"),
        ({"NBCOLL_PROTO": "host"}, CUDA, "host-driven (NBCOLL_PROTO=device runs"),
        (DEVICE, SIM, "device kernels (NBCOLL_PROTO=device) on the CUDA simulator: no GPU here; ranks that are "
         "threads of one process stay host-driven"),
        (DEVICE, {**CUDA, "mps": False}, "device kernels (NBCOLL_PROTO=device) on 2 GPU(s); host-driven where ranks "
         "share a GPU (no MPS) or are threads of one process"),
        (DEVICE, {**CUDA, "mps": True}, "2 GPU(s), MPS running; host-driven where ranks are threads of one process"),
        (DEVICE, {**CUDA, "gpus": 0}, "no GPU is usable"),
        (DEVICE, {**CUDA, "backend_name": "numpy"}, "host-driven: the numpy backend's buffers are host memory"),
        ({"NBCOLL_PROTO": "gpu"}, SIM, "NBCOLL_PROTO: expected one of host, device, got 'gpu'"),
    ],
)  # fmt: skip
def test_info_says_which_protocol_collectives_run_and_why_device_falls_back(env, kwargs, expected):
    line = info.collective_protocol(env, **kwargs)
    assert expected in line and "\n" not in line and len(line) < 160, line


def test_info_reports_the_protocol_of_this_process(monkeypatch):
    monkeypatch.setenv("NBCOLL_PROTO", "device")
    report = info.collect()
    assert report["collectives"].startswith("device kernels (NBCOLL_PROTO=device) on the CUDA simulator")
    assert "collectives:" in info.format_report(report)


# -- the settings every rank must share ---------------------------------------------------------------------------


def create_each(configs, timeout=10.0):
    """Build one communicator per config, each rank a thread over one in-process fabric (bootstrap runs as under
    mpiexec); what each rank's creation raised, or its communicator."""
    fabric = Fabric(len(configs), timeout)
    outcome = [None] * len(configs)

    def create(rank):
        try:
            outcome[rank] = Communicator(ThreadComm(fabric, ("world",), rank, len(configs)), configs[rank])
        except Exception as exc:
            outcome[rank] = exc

    threads = [threading.Thread(target=create, args=(rank,)) for rank in range(len(configs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5)
    for made in outcome:
        if isinstance(made, Communicator):
            made.destroy()
    return outcome


def test_ranks_that_disagree_on_nbcoll_proto_fail_at_creation_naming_it():
    base = {"timeout": 10.0, "buffsize": 256, "steps": 4}
    outcome = create_each([CommConfig(proto="device", **base), CommConfig(**base), CommConfig(proto="device", **base)])
    for rank, error in enumerate(outcome):
        assert isinstance(error, ValueError), (rank, error)
        assert str(error) == (
            "NBCOLL_PROTO: every rank must use the same settings, got rank 0: device; rank 1: host; rank 2: device"
        )
    unset, host = create_each([CommConfig(**base), CommConfig(proto="host", **base)])  # unset is host: they agree
    assert isinstance(unset, Communicator) and isinstance(host, Communicator)


def test_a_settings_mismatch_names_only_the_settings_that_differ():
    outcome = create_each([CommConfig(steps=steps, buffsize=256, timeout=10.0) for steps in (4, 8)])
    assert all(isinstance(e, ValueError) for e in outcome), outcome
    assert str(outcome[0]) == "NBCOLL_STEPS: every rank must use the same settings, got rank 0: 4; rank 1: 8"


# -- one standing watch per communicator ---------------------------------------------------------------------------


def test_device_calls_share_one_watch_thread_until_the_communicator_is_destroyed(monkeypatch):
    started = []
    real_start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda t: (started.append(t.name), real_start(t))[1])
    before = set(watch_threads())
    comm = one_rank()
    try:
        for _ in range(3):
            comm.all_reduce(np.ones(4, np.float32), proto="device")
        assert started.count(WATCH_THREAD) == 1, started
        (watch,) = set(watch_threads()) - before
        assert watch.is_alive()
    finally:
        comm.destroy()
    assert not watch.is_alive()


def test_the_standing_watch_ends_once_its_communicator_is_aborted():
    comm = one_rank()
    try:
        before = set(watch_threads())
        comm.all_reduce(np.ones(4, np.float32), proto="device")
        (watch,) = set(watch_threads()) - before
        comm.abort()
        watch.join(dc.IDLE_CHECK_INTERVAL + 2.0)
        assert not watch.is_alive()
    finally:
        comm.destroy()


def test_one_watch_serves_launch_after_launch_and_each_gets_its_own_reason():
    abort = np.zeros(1, np.int32)
    ticks = iter(range(10**6))
    moving = {"on": False}
    watch = dc.KernelWatch(abort, 0.05, lambda: next(ticks) if moving["on"] else 0, lambda: None, {})
    try:
        with watch:
            time.sleep(0.3)  # a kernel that never moves
        assert watch.reason == ("timeout", None) and abort[0] == 1
        abort[0], moving["on"] = 0, True
        with watch:
            time.sleep(0.3)  # one that keeps moving: the last launch's reason is gone
        assert watch.reason is None and abort[0] == 0
        moving["on"] = False
        with watch:
            pass  # a launch shorter than the timeout is never stopped, nor is the idle time after it
        time.sleep(0.2)
        assert watch.reason is None and abort[0] == 0
    finally:
        watch.stop()
    assert not watch.alive
