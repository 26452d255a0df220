"""Copies into a large output with streaming stores, against ordinary ones, with MPI beside them.

On the ``numpy`` backend a direct all-gather, broadcast or all-to-all whose output is at least
``NBCOLL_STREAM_BYTES`` copies into it with streaming stores, which write around the caches and skip the read
for ownership (:mod:`nbcoll.kernels.stream_copy`). Two communicators of the same ranks run the same collective on
registered inputs (``comm.alloc``, as ``vs_mpi.py`` does), one that streams every output (``NBCOLL_STREAM_BYTES=1``)
and one that never does (``0``), and MPI's own collective runs beside them, each on its own buffers, interleaved
repeat by repeat (``report.balanced_rounds``). The table gives the median time per call of each and the ratios.

Run::

    python benchmarks/lab/stream_copy.py                        # 2 and 4 ranks, numpy backend, 1 to 64 MiB
    python benchmarks/lab/stream_copy.py --ranks 2 --sizes 4M,8M,16M --repeats 5

Writes ``stream_copy_<n>ranks.rst`` into ``--out`` (default ``benchmarks/lab/results``).
"""

from __future__ import annotations

import os
import sys

import benchmarks_path  # noqa: F401  (first: puts benchmarks/ on the path)
from cross_memory import beside_mpi_main

COLLECTIVES = ("all_gather", "broadcast", "all_to_all")
SETTINGS = {"streaming": {"stream_bytes": 1}, "ordinary": {"stream_bytes": 0}}
CAPTION = ("int32, registered inputs, direct algorithm",
           "*streaming / ordinary* below 1: streaming stores are faster",
           [("streaming", "ordinary"), ("MPI", "streaming"), ("MPI", "ordinary")])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    return beside_mpi_main(__file__, __doc__, SETTINGS, COLLECTIVES, True, CAPTION, argv)


if __name__ == "__main__":
    os.environ.setdefault("NBCOLL_BACKEND", "numpy")
    sys.exit(main())
