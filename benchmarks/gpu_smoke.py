"""The first minute on a GPU: one kernel against its NumPy reference, then one all-reduce over CUDA IPC.

Run on 2 ranks (it re-launches itself)::

    NBCOLL_BACKEND=cuda python benchmarks/gpu_smoke.py --out OUTDIR

Each rank checks an elementwise kernel exactly (int32, a size that is not a multiple of the block size), then
the ranks all-reduce with the ipc transport and check every element. Rank 0 writes ``smoke.json`` into
``--out`` after each check, so a failure or a timeout still leaves what passed. Exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import nbcoll.launch

nbcoll.launch.relaunch(2, env={"NBCOLL_TRANSPORT": "ipc"}, timeout=50)

import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import nbcoll  # noqa: E402
from nbcoll import backend, device  # noqa: E402
from nbcoll.kernels import elementwise  # noqa: E402

COUNT = (1 << 20) + 7


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".", help="directory for smoke.json")
    parser.add_argument("--count", type=int, default=COUNT, help="elements per check (default 2**20 + 7)")
    args = parser.parse_args()
    report: dict = {"backend": nbcoll.get_backend(), "count": args.count, "checks": {}}
    path = Path(args.out) / "smoke.json"

    def record(name: str, ok: bool, **figures) -> None:
        report["checks"][name] = {"ok": ok, **figures}
        print(f"rank {rank}: {name} {'ok' if ok else 'FAILED'} {figures}", flush=True)
        if rank == 0:
            path.write_text(json.dumps(report, indent=2))

    rank = MPI.COMM_WORLD.rank
    report["gpu"] = backend.select_device()
    host = (np.arange(args.count, dtype=np.int64) % 1000 - 500).astype(np.int32)
    started = time.perf_counter()
    out = nbcoll.zeros(args.count, np.int32)
    elementwise.binary("add", nbcoll.to_device(host), nbcoll.to_device(host), out)
    kernel_ok = bool(np.array_equal(nbcoll.to_host(out), host * 2))
    record("kernel", kernel_ok, seconds=round(time.perf_counter() - started, 3))

    comm = nbcoll.init()
    report["nranks"], report["transport"] = comm.size, comm.transport_to((rank + 1) % comm.size)
    report["gpu_of_each_rank"] = MPI.COMM_WORLD.allgather(device.selected())
    x = nbcoll.to_device(host + rank)
    started = time.perf_counter()
    comm.all_reduce(x)
    nbcoll.synchronize()
    seconds = time.perf_counter() - started
    expected = host * comm.size + sum(range(comm.size))
    reduce_ok = bool(np.array_equal(nbcoll.to_host(x), expected))
    record("all_reduce", reduce_ok, seconds=round(seconds, 4), bytes=int(host.nbytes))
    comm.destroy()
    return 0 if kernel_ok and reduce_ok else 1


if __name__ == "__main__":
    sys.exit(main())
