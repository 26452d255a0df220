"""Copies into a large output with streaming stores, against ordinary ones, with MPI beside them.

On the ``numpy`` backend a direct all-gather, broadcast or all-to-all whose output is at least
``NBCOLL_STREAM_BYTES`` copies into it with streaming stores, which write around the caches and skip the read
for ownership (:mod:`nbcoll.kernels.stream_copy`). Two communicators of the same ranks run the same collective on
registered inputs (``comm.alloc``, as ``vs_mpi.py`` does), one that streams every output (``NBCOLL_STREAM_BYTES=1``)
and one that never does (``0``), and MPI's own collective runs beside them, each on its own buffers, in rotated
order, repeat by repeat. The table gives the median time per call of each and the ratios.

Run::

    python benchmarks/stream_copy.py                        # 2 and 4 ranks, numpy backend, 1 to 64 MiB
    python benchmarks/stream_copy.py --ranks 2 --sizes 4M,8M,16M --repeats 5

Writes ``stream_copy_<n>ranks.rst`` into ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import numpy as np
import report
from cross_memory import contender

HERE = Path(__file__).resolve().parent
COLLECTIVES = ("all_gather", "broadcast", "all_to_all")
NAMES = ("streaming", "ordinary", "MPI")


def table(times: dict, sizes: list[int], nranks: int, wrong: int, command: str) -> str:
    ratios = [("streaming", "ordinary"), ("MPI", "streaming"), ("MPI", "ordinary")]
    title = f"copies into the output with streaming or ordinary stores, {nranks} ranks"
    setup = "int32, registered inputs, direct algorithm"
    reading = "*streaming / ordinary* below 1: streaming stores are faster"
    return report.median_table(__file__, setup, reading, times, COLLECTIVES, sizes, NAMES, ratios, title, nranks,
                               wrong, command)  # fmt: skip


def compare(args, world, sizes: list[int]) -> int:
    """Both ways and MPI at every size, in one launch; rank 0 writes the table. 1 if a result was wrong."""
    from nbcoll.comm import CommConfig, init

    base = CommConfig.from_env()
    configs = {"streaming": dataclasses.replace(base, stream_bytes=1),
               "ordinary": dataclasses.replace(base, stream_bytes=0)}  # fmt: skip
    comms = {name: init(world, config) for name, config in configs.items()}
    contenders = {**comms, "MPI": None}

    def contenders_at(collective: str, nbytes: int):
        """Each contender on buffers of its own, its input registered (MPI's by the first communicator, as
        ``vs_mpi.py`` does), and what frees them."""
        lent = []
        made = {}
        for name, comm in contenders.items():
            owner = comm or comms["streaming"]

            def alloc(count, owner=owner):
                lent.append((owner, owner.alloc(count, np.int32)))
                return lent[-1][1]

            made[name] = contender(world, comm, collective, nbytes, alloc)
        return made, lambda: [owner.free(buffer) for owner, buffer in lent]

    times, wrong = report.rotated_samples(world, contenders_at, COLLECTIVES, sizes, args.repeats)
    for comm in comms.values():
        comm.destroy()
    n = world.Get_size()
    return report.publish_same_run(
        world, args, __file__, "stream_copy", lambda command, wrong: table(times, sizes, n, wrong, command), wrong
    )


def main(argv: list[str] | None = None) -> int:
    description = __doc__.split("\n\n")[0]
    return report.same_run_main(__file__, description, "1M,4M,16M,64M", HERE / "results", compare, argv)


if __name__ == "__main__":
    os.environ.setdefault("NBCOLL_BACKEND", "numpy")
    sys.exit(main())
