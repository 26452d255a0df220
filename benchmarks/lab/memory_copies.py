"""What a large collective is up against: the speed of one copy, and what a second process copying beside it buys.

From a few MiB up, every collective here is copies between processes of one machine, and a copy runs at the
memory's speed, not the core's. This script times, in one run and interleaved repeat by repeat:

* one process copying ``S`` bytes with ``numpy.copyto``: private memory, shared memory (``/dev/shm``, what the
  ranks map), and shared memory in chunks of 1 MiB (a direct round);
* two processes each copying half of ``S`` between the same shared buffers at the same moment, against one
  process copying all of it: what a broadcast gains when its root writes a share into the readers' outputs
  (:mod:`nbcoll.comm.window_step`, ``WriteShares``).

Run::

    python benchmarks/lab/memory_copies.py                       # 4, 16 and 64 MiB, 9 repeats
    python benchmarks/lab/memory_copies.py --sizes 1 --repeats 3

Writes ``memory_copies.json`` and ``.rst`` into ``--out`` (default ``benchmarks/lab/results``).
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from multiprocessing import shared_memory
from pathlib import Path

import benchmarks_path  # noqa: F401  (first: puts benchmarks/ on the path)
import numpy as np
import report

HERE = Path(__file__).resolve().parent

CHUNK = 1 << 20


def copy_seconds(dst: np.ndarray, src: np.ndarray, chunk: int = 0) -> float:
    """Seconds of one ``dst[...] = src``, whole or ``chunk`` bytes at a time."""
    start = time.perf_counter()
    if chunk:
        for lo in range(0, src.size, chunk):
            np.copyto(dst[lo : lo + chunk], src[lo : lo + chunk])
    else:
        np.copyto(dst, src)
    return time.perf_counter() - start


def _copy_half(names: tuple[str, str], nbytes: int, part: int, repeats: int, barrier, cue, results) -> None:
    """One of two processes: at every repeat, copy its half of the shared source into the shared destination.

    Both wait at ``barrier`` (blocking, so they leave the cores to the single-process copies), then spin until
    ``cue`` holds the repeat's number, so that the two copies start within microseconds of each other.
    """
    src_mem, dst_mem = (shared_memory.SharedMemory(name=name) for name in names)
    src, dst = (np.ndarray(nbytes, np.uint8, memory.buf) for memory in (src_mem, dst_mem))
    lo, hi = part * nbytes // 2, (part + 1) * nbytes // 2
    for repeat in range(1, repeats + 1):
        barrier.wait()
        while cue.value != repeat:
            pass
        results.put(copy_seconds(dst[lo:hi], src[lo:hi]))
    del src, dst
    src_mem.close()
    dst_mem.close()


def measure(nbytes: int, repeats: int) -> dict:
    """Median seconds of each way to copy ``nbytes``, interleaved repeat by repeat."""
    shared = [shared_memory.SharedMemory(create=True, size=nbytes) for _ in range(2)]
    try:
        src, dst = (np.ndarray(nbytes, np.uint8, memory.buf) for memory in shared)
        src[:], dst[:] = 1, 0  # every page touched before any timing
        private_src, private_dst = np.ones(nbytes, np.uint8), np.zeros(nbytes, np.uint8)
        barrier, cue, results = (
            multiprocessing.Barrier(3),
            multiprocessing.Value("q", 0, lock=False),
            multiprocessing.Queue(),
        )
        names = (shared[0].name, shared[1].name)
        args = (names, nbytes, 0, repeats, barrier, cue, results)
        pair = [multiprocessing.Process(target=_copy_half, args=(*args[:2], k, *args[3:])) for k in (0, 1)]
        for process in pair:
            process.start()
        times: dict[str, list[float]] = {"private": [], "shared": [], "shared_chunks": [], "two_halves": []}
        for repeat in range(1, repeats + 1):
            barrier.wait()
            time.sleep(0.002)  # both copiers are spinning on the cue by now
            cue.value = repeat
            times["two_halves"].append(max(results.get(), results.get()))  # the pair is done when both are
            times["private"].append(copy_seconds(private_dst, private_src))
            times["shared"].append(copy_seconds(dst, src))
            times["shared_chunks"].append(copy_seconds(dst, src, CHUNK))
        for process in pair:
            process.join()
        del src, dst
    finally:
        for memory in shared:
            memory.close()
            memory.unlink()
    return {"nbytes": nbytes, "seconds": {name: statistics.median(t) for name, t in times.items()}}


def table(rows: list[dict]) -> list[str]:
    header = ["size", "private (ms)", "shared (ms)", "shared, 1 MiB chunks (ms)", "two processes, half each (ms)",
              "one / two"]  # fmt: skip
    cells = []
    for row in rows:
        s = row["seconds"]
        ms = [f"{s[name] * 1e3:.2f}" for name in ("private", "shared", "shared_chunks", "two_halves")]
        cells.append([f"{row['nbytes'] >> 20} MiB", *ms, f"{s['shared'] / s['two_halves']:.2f}x"])
    return report.list_table(header, cells)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4,16,64", help="comma-separated sizes in MiB")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    args = parser.parse_args()
    rows = [measure(int(mib) << 20, args.repeats) for mib in args.sizes.split(",")]
    env = report.environment()
    command = "python benchmarks/lab/memory_copies.py" + ("" if args.sizes == "4,16,64" else f" --sizes {args.sizes}")
    args.out.mkdir(parents=True, exist_ok=True)
    report.write_json(args.out / "memory_copies.json", {"env": env, "command": command, "results": rows})
    head = (f"{env['date']} on ``{env['host']}`` ({env['machine']}), NumPy {env['numpy']}; median of "
            f"{args.repeats} interleaved repeats. Command: ``{command}``. *one / two*: one process copying all of "
            "the shared buffer over two copying half each, started together (the slower half's time).")  # fmt: skip
    lines = [head, "", *table(rows)]
    (args.out / "memory_copies.rst").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
