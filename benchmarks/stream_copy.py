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

import os
import sys
from pathlib import Path

import report
from cross_memory import beside_mpi

HERE = Path(__file__).resolve().parent
COLLECTIVES = ("all_gather", "broadcast", "all_to_all")


def compare(args, world, sizes: list[int]) -> int:
    """Both ways and MPI at every size, in one launch; rank 0 writes the table. 1 if a result was wrong."""
    caption = ("int32, registered inputs, direct algorithm",
               "*streaming / ordinary* below 1: streaming stores are faster",
               [("streaming", "ordinary"), ("MPI", "streaming"), ("MPI", "ordinary")])  # fmt: skip
    settings = {"streaming": {"stream_bytes": 1}, "ordinary": {"stream_bytes": 0}}
    return beside_mpi(args, world, sizes, __file__, "stream_copy", settings, COLLECTIVES, True, caption)


def main(argv: list[str] | None = None) -> int:
    description = __doc__.split("\n\n")[0]
    return report.same_run_main(__file__, description, "1M,4M,16M,64M", HERE / "results", compare, argv)


if __name__ == "__main__":
    os.environ.setdefault("NBCOLL_BACKEND", "numpy")
    sys.exit(main())
