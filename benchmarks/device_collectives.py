"""Device collectives: a whole collective in one kernel (the one-GPU world of
:mod:`nbcoll.comm.algorithms.ring_device`), beside the host-driven path and the device copy ceiling, in one run.

For each rank count (2 and 4 by default) and size ``S`` (the bytes of one rank's buffer, 8 B to 256 MiB), it
prints nccl-tests' table of the device collective (time, algbw, busbw, ``#wrong``, out-of-place and in-place),
then the same sizes side by side:

- the device path: the collective's kernel, launched back to back on the stream, the status read at the end;
- the host path: nbcoll's host-driven ring (``algo="ring"``): on ``cuda`` one process per rank on the one GPU over
  CUDA IPC (``nbcoll.perf`` under ``nbcoll.launch``); elsewhere the in-process world of threads
  (:mod:`nbcoll.comm.loopback`, on ``numpy``);
- the copy ceiling: one device-to-device copy of the same bytes (every rank's buffer, ``n x S``), counted as
  ``2 n S`` bytes (read and written);
- the fraction of that ceiling the collective's own bytes reach. The ring all-reduce of ``n >= 2`` ranks moves
  ``(6n - 4) / n x S`` bytes per rank: its ``2n - 1`` primitives a round each touch one block of ``S / n`` --
  ``send`` reads local, writes a slot (2); each of the ``n - 2`` ``recv_reduce_send`` reads a slot and local,
  writes a slot (3); ``recv_reduce_copy_send`` reads a slot and local, writes out and a slot (4); each of the
  ``n - 2`` ``recv_copy_send`` reads a slot, writes out and a slot (3); ``recv`` reads a slot, writes out (2):
  ``2 + 3(n-2) + 4 + 3(n-2) + 2 = 6n - 4`` blocks. All ranks share the GPU, so the world moves ``(6n - 4) S``
  bytes a call, and ``fraction = (6n - 4) S / time / copy rate``. (A world of one rank is a copy: ``2 S``.)

Targets, printed beside the figures: the largest all-reduce at >= 50% of the copy ceiling, and an 8 B all-reduce
in <= 20 us.

Timing: CUDA events on a GPU around up to ``--iters`` calls back to back, as many as fit in 50 ms (the host clock
and a synchronize elsewhere), warm-up calls first, the median of ``--repeats`` samples. ``#wrong`` counts the
elements of every rank's output that differ from the exact all-reduce (inputs of small whole numbers,
:mod:`nbcoll.perf.exact`), checked on a call of its own before the timed ones.

Another device collective is one more :class:`DeviceCollective` in :data:`COLLECTIVES` (its kernel's launch, the
bytes it moves and the host path's name for it).

Run::

    python benchmarks/device_collectives.py                 # on a GPU: 2 and 4 ranks, 8 B to 256 MiB
    python benchmarks/device_collectives.py --dry-run       # the simulator (the default there): tiny sizes

Writes ``device_collectives_<backend>[_dry].json`` and ``.txt`` (the printed tables) into ``--out``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from report import environment, write_json

from nbcoll import backend
from nbcoll.comm.algorithms import ring_device as rd
from nbcoll.comm.device import ring_launch
from nbcoll.perf import bandwidths, exact, size_sweep
from nbcoll.perf.table import Measurement, Row, footer, header, row

HERE = Path(__file__).resolve().parent
DTYPE = np.dtype(np.float32)
TARGET_FRACTION = 0.5  # of the copy ceiling, at the largest size
TARGET_SMALL_US = 20.0  # an 8 B all-reduce
SAMPLE_SECONDS = 0.05  # calls back to back in one timed sample, at most ``--iters``


@dataclass
class Options:
    ranks: list[int]
    sizes: list[int]
    repeats: int
    warmup: int
    iters: int
    slot_elems: int
    steps: int
    channels: int  # 0: chosen by size
    host: str  # "ipc", "loopback" or "none"


@dataclass
class Line:
    """One size of one rank count: the device path, the host path and the copy beside it."""

    nbytes: int
    device: Row
    host: Measurement | None
    copy_seconds: float
    copy_GBps: float
    moved_GBps: float
    fraction: float
    channels: int


@dataclass
class DeviceCollective:
    """What the benchmark needs of a device collective: how to set it up at ``(nranks, count)`` and how many bytes
    the world moves a call."""

    name: str  # nbcoll's method name, also nccl-tests' busbw factor and the host path's collective
    setup: Callable[[int, int, int, Options], tuple[Callable[[Any, Any], None], Callable[[], None]]]
    moved_bytes: Callable[[int, int], int]  # (nranks, S) -> bytes read and written by the world, one call


def _ring_setup(nranks: int, count: int, channels: int, options: Options):
    """``(launch(local, out), finish())``: launch enqueues one all-reduce, finish synchronizes and raises for a
    rank that did not complete."""
    ring = rd.DeviceRing(nranks, slot_elems=options.slot_elems, steps=options.steps, nchannels=channels)
    status = ring_launch.new_status(ring)

    def launch(local: Any, out: Any) -> None:
        ring_launch.enqueue(ring, local, out, status)

    def finish() -> None:
        rd.raise_for_status(status.copy_to_host())

    return launch, finish


def _ring_moved(nranks: int, nbytes: int) -> int:
    return 2 * nbytes if nranks == 1 else (6 * nranks - 4) * nbytes


COLLECTIVES = {"all_reduce": DeviceCollective("all_reduce", _ring_setup, _ring_moved)}


def _on_gpu() -> bool:
    return backend.device_backend() == "cuda"


def _synchronize() -> None:
    from numba import cuda

    if _on_gpu():
        cuda.synchronize()


def seconds_per_call(call: Callable[[], Any], options: Options) -> float:
    """Median over ``repeats`` samples of up to ``iters`` calls back to back, per call, after ``warmup`` calls.

    A sample holds as many calls as fit in :data:`SAMPLE_SECONDS` (one at least, ``iters`` at most, judged from one
    call timed after the warm-up), so that a slow size cannot take the run past its time limit."""
    from numba import cuda

    for _ in range(options.warmup):
        call()
    _synchronize()
    t0 = time.perf_counter()
    call()
    _synchronize()
    iters = max(1, min(options.iters, int(SAMPLE_SECONDS / max(time.perf_counter() - t0, 1e-9))))
    samples = []
    for _ in range(options.repeats):
        if _on_gpu():
            start, end = cuda.event(timing=True), cuda.event(timing=True)
            start.record()
            for _ in range(iters):
                call()
            end.record()
            end.synchronize()
            samples.append(cuda.event_elapsed_time(start, end) / 1e3)
        else:
            t0 = time.perf_counter()
            for _ in range(iters):
                call()
            _synchronize()
            samples.append(time.perf_counter() - t0)
    return statistics.median(samples) / iters


def channels_for(nbytes: int, options: Options) -> int:
    """``--channels``, or one channel a MiB up to one a multiprocessor (small sizes: one block, least latency)."""
    if options.channels:
        return options.channels
    if not _on_gpu():
        return 1
    from numba import cuda

    return max(1, min(nbytes >> 20, cuda.get_current_device().MULTIPROCESSOR_COUNT))


def _inputs(nranks: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Every rank's exact input, one row each, and the exact all-reduce every row must end as."""
    local = np.stack([exact.rank_input(r, "sum", DTYPE, 0, count) for r in range(nranks)])
    expected = np.broadcast_to(exact.reduced_values("sum", DTYPE, nranks, 0, count), local.shape)
    return local, expected


def measure_device(collective: DeviceCollective, nranks: int, nbytes: int, options: Options) -> Line:
    """The device path at one size: out-of-place and in-place, each checked once then timed; and the copy."""
    from numba import cuda

    count = nbytes // DTYPE.itemsize
    channels = channels_for(nbytes, options)
    launch, finish = collective.setup(nranks, count, channels, options)
    host_local, expected = _inputs(nranks, count)
    local, out = cuda.to_device(host_local), cuda.device_array_like(host_local)
    timed = []
    for in_place in (False, True):
        target = local if in_place else out
        launch(local, target)  # the checked call, on fresh inputs
        finish()
        wrong = exact.count_wrong(target.copy_to_host(), expected)
        seconds = seconds_per_call(lambda t=target: launch(local, t), options)
        finish()  # every timed call completed too
        local.copy_to_device(host_local)  # in place grew the inputs: the next check starts fresh
        algbw, busbw = bandwidths(collective.name, nbytes, seconds, nranks)
        timed.append(Measurement(seconds, algbw, busbw, wrong))
    copy_seconds = seconds_per_call(lambda: out.copy_to_device(local), options)
    copy_rate = 2 * nranks * nbytes / copy_seconds / 1e9
    moved = collective.moved_bytes(nranks, nbytes) / timed[0].seconds / 1e9
    device = Row(collective.name, "ring (device)", nbytes, count, DTYPE.name, "sum", -1, *timed)
    return Line(nbytes, device, None, copy_seconds, copy_rate, moved, moved / copy_rate, channels)


def host_loopback(collective: str, nranks: int, sizes: list[int], options: Options) -> dict[int, Measurement]:
    """The host-driven ring in the in-process world (threads, ``numpy``): rank 0's time a call, and ``#wrong``."""
    import nbcoll
    from nbcoll.comm import loopback

    def sweep(comm):
        times = {}
        for nbytes in sizes:
            mine = exact.rank_input(comm.rank, "sum", DTYPE, 0, nbytes // DTYPE.itemsize)
            expected = exact.reduced_values("sum", DTYPE, comm.size, 0, mine.size)
            x = mine.copy()
            getattr(comm, collective)(x, algo="ring")
            wrong = exact.count_wrong(x, expected)
            samples = []
            for _ in range(options.warmup):
                getattr(comm, collective)(x, algo="ring")
            for _ in range(options.repeats):
                t0 = time.perf_counter()
                for _ in range(options.iters):
                    getattr(comm, collective)(x, algo="ring")
                samples.append((time.perf_counter() - t0) / options.iters)
            times[nbytes] = (statistics.median(samples), wrong)
        return times

    with nbcoll.use_backend("numpy"):
        per_rank = loopback.run(nranks, sweep)
    out = {}
    for nbytes in sizes:
        seconds = per_rank[0][nbytes][0]
        algbw, busbw = bandwidths(collective, nbytes, seconds, nranks)
        out[nbytes] = Measurement(seconds, algbw, busbw, sum(rank[nbytes][1] for rank in per_rank))
    return out


def host_ipc(collective: str, nranks: int, sizes: list[int], options: Options, out: Path) -> dict[int, Measurement]:
    """The host-driven ring over CUDA IPC, one process per rank on this GPU: ``nbcoll.perf`` under mpiexec."""
    import json

    from nbcoll.launch import launch

    report = out / f"host_ring_{collective}_{nranks}ranks.json"
    factor = sizes[1] // sizes[0] if len(sizes) > 1 else 2
    # Three calls a size, one of them warm-up: at 1-2 GB/s the host path's 256 MiB takes a fraction of a second.
    args = [collective, "-b", str(min(sizes)), "-e", str(max(sizes)), "-f", str(factor), "-n", "2", "-w", "1",
            "--algo", "ring", "--transport", "ipc", "-J", str(report)]  # fmt: skip
    done = launch(nranks, str(HERE.parent / "nbcoll" / "perf" / "__main__.py"), args=args,
                  env={"NBCOLL_BACKEND": "cuda"}, timeout=600)  # fmt: skip
    if not done.ok:
        print(f"# host path on {nranks} ranks failed: {done.report()[-500:]}", flush=True)
    rows = json.loads(report.read_text())["rows"] if report.exists() else []
    return {r["nbytes"]: Measurement(**r["out_of_place"]) for r in rows}


def comparison(nranks: int, lines: list[Line], host: str) -> str:
    """The sizes side by side: device and host time and busbw, the copy ceiling, the fraction of it reached."""
    out = [
        f"# {nranks} ranks, out-of-place: device ring against the host-driven ring ({host}) and a device copy",
        f"#{'size':>11}{'device':>10}{'host':>11}{'copy':>10}{'device':>9}{'host':>9}{'copy':>10}{'moved':>10}"
        f"{'of copy':>9}{'ch':>5}",
        f"#{'(B)':>11}{'(us)':>10}{'(us)':>11}{'(us)':>10}{'busbw':>9}{'busbw':>9}{'(GB/s)':>10}{'(GB/s)':>10}"
        f"{'':>9}{'':>5}",
    ]
    for line in lines:
        d, h = line.device.out_of_place, line.host
        host_us, host_bus = (f"{h.seconds * 1e6:11.2f}", f"{h.busbw:9.2f}") if h else (f"{'-':>11}", f"{'-':>9}")
        out.append(
            f"{line.nbytes:12d}{d.seconds * 1e6:10.2f}{host_us}{line.copy_seconds * 1e6:10.2f}{d.busbw:9.2f}"
            f"{host_bus}{line.copy_GBps:10.2f}{line.moved_GBps:10.2f}{100 * line.fraction:8.1f}%{line.channels:5d}"
        )
    return "\n".join(out)


def targets(results: dict[int, list[Line]]) -> list[str]:
    """Whether each rank count reached the targets: the largest size's fraction, the 8 B time (on a GPU only: the
    simulator's times measure Python threads)."""
    out = []
    judged = "reached" if _on_gpu() else "no verdict off a GPU"
    for nranks, lines in results.items():
        largest = max(lines, key=lambda line: line.nbytes)
        verdict = judged if largest.fraction >= TARGET_FRACTION or not _on_gpu() else "not reached"
        out.append(f"# target, {nranks} ranks: {largest.nbytes} B at >= {100 * TARGET_FRACTION:.0f}% of the copy "
                   f"ceiling: {100 * largest.fraction:.1f}% -> {verdict}")  # fmt: skip
        small = [line for line in lines if line.nbytes == 8]
        if small:
            us = small[0].device.out_of_place.seconds * 1e6
            verdict = judged if us <= TARGET_SMALL_US or not _on_gpu() else "not reached"
            out.append(f"# target, {nranks} ranks: 8 B in <= {TARGET_SMALL_US:.0f} us: {us:.2f} us -> {verdict}")
    return out


@dataclass
class Run:
    env: dict
    options: dict
    complete: bool = False
    results: dict[str, list[dict]] = field(default_factory=dict)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="device collectives beside the host path and the copy ceiling")
    p.add_argument("--dry-run", action="store_true", help="tiny sizes (the default on the simulator)")
    p.add_argument("--collective", default="all_reduce", choices=sorted(COLLECTIVES))
    p.add_argument("--ranks", default="2,4", help="rank counts of the one-GPU world (default 2,4)")
    p.add_argument("-b", "--minbytes", default=None, help="smallest size (default 8)")
    p.add_argument("-e", "--maxbytes", default=None, help="largest size (default 256M; 64 in a dry run)")
    p.add_argument("-f", "--stepfactor", type=int, default=None, help="size factor (default 32; 8 in a dry run)")
    p.add_argument("--repeats", type=int, default=None, help="timed samples, the median kept (default 7)")
    p.add_argument("--iters", type=int, default=None, help="calls back to back in a sample (default 20)")
    p.add_argument("--slot-elems", type=int, default=None, help="elements of a FIFO slot (default 16384)")
    p.add_argument("--channels", type=int, default=0, help="blocks (default: one a MiB, up to one an SM)")
    p.add_argument("--host", choices=("auto", "ipc", "loopback", "none"), default="auto",
                   help="the host path: ipc on cuda, loopback elsewhere (auto)")  # fmt: skip
    p.add_argument("--out", default=str(HERE / "results"), help="directory for the .json and .txt")
    args = p.parse_args(argv)
    dry = args.dry_run or not _on_gpu()
    from nbcoll.perf import parse_size

    sizes = size_sweep(parse_size(args.minbytes or 8), parse_size(args.maxbytes or ("64" if dry else "256M")),
                       args.stepfactor or (8 if dry else 32))  # fmt: skip
    host = args.host if args.host != "auto" else ("ipc" if _on_gpu() else "loopback")
    options = Options(
        ranks=[int(n) for n in args.ranks.split(",")], sizes=sizes, repeats=args.repeats or (1 if dry else 7),
        warmup=1 if dry else 3, iters=args.iters or (1 if dry else 20),
        slot_elems=args.slot_elems or (4 if dry else 16384), steps=2 if dry else 8, channels=args.channels, host=host,
    )  # fmt: skip
    import numba

    env = environment(numba=numba.__version__)
    env["device_backend"] = backend.device_backend()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"device_collectives_{env['device_backend']}{'_dry' if dry else ''}"
    collective = COLLECTIVES[args.collective]
    run, printed, results = Run(env, asdict(options)), [], {}
    for nranks in options.ranks:
        lines = []
        for nbytes in sizes:  # the device path first: a run cut at its time limit keeps what it is about
            lines.append(measure_device(collective, nranks, nbytes, options))
            run.results[str(nranks)] = [asdict(done) for done in lines]
            write_json(stem.with_suffix(".json"), asdict(run))  # rewritten after every size
        if host == "ipc":
            host_times = host_ipc(collective.name, nranks, sizes, options, out)
        elif host == "loopback":
            host_times = host_loopback(collective.name, nranks, sizes, options)
        else:
            host_times = {}
        for line in lines:
            line.host = host_times.get(line.nbytes)
        run.results[str(nranks)] = [asdict(done) for done in lines]
        write_json(stem.with_suffix(".json"), asdict(run))
        results[nranks] = lines
        rows = [line.device for line in lines]
        table = [f"# {collective.name}, device ring, {nranks} ranks of a one-GPU world on {env['device_backend']}",
                 header(), *(row(r) for r in rows), footer(rows), comparison(nranks, lines, host)]  # fmt: skip
        printed += table
        print("\n".join(table), flush=True)
    reached = targets(results)
    printed += reached
    print("\n".join(reached), flush=True)
    run.complete = True
    write_json(stem.with_suffix(".json"), asdict(run))
    stem.with_suffix(".txt").write_text("\n".join(printed) + "\n")
    print(f"# wrote {stem}.json, .txt")
    wrong = sum(m.wrong or 0 for lines in results.values() for line in lines for m in (line.device.out_of_place,
                line.device.in_place) if m)  # fmt: skip
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
