"""Copies into memory a peer reads next with streaming stores, against ordinary ones, with MPI beside them.

A direct collective stages a plain (unregistered) input in its owner's window, and a ring copies every chunk into
the next rank's FIFO slot: in both, a peer reads the bytes next, and has read the same lines a round before. An
ordinary store must first take each such line back from the reader's cache; a streaming store writes the whole line
without it (:mod:`nbcoll.kernels.stream_copy`, ``NBCOLL_STREAM_SHARED_BYTES``). Two communicators of the same ranks
run the same collective on plain NumPy buffers, one that streams those copies from the first byte
(``NBCOLL_STREAM_SHARED_BYTES=1``) and one that never does (``0``), and MPI's own collective runs beside them, each
on its own buffers, interleaved repeat by repeat (``report.balanced_rounds``). The table gives the median time per
call of each and the ratios.

Run::

    python benchmarks/lab/stream_shared.py                      # 2 and 4 ranks, numpy backend, 64 KiB to 4 MiB
    python benchmarks/lab/stream_shared.py --ranks 2 --sizes 1M,4M --repeats 5

Writes ``stream_shared_<n>ranks.rst`` into ``--out`` (default ``benchmarks/lab/results``).
"""

from __future__ import annotations

import os
import sys

import benchmarks_path  # noqa: F401  (first: puts benchmarks/ on the path)
import report
from cross_memory import HERE, beside_mpi

COLLECTIVES = ("broadcast", "all_gather", "all_reduce", "broadcast ring", "all_reduce ring")
"""Direct (staged: plain inputs below ``NBCOLL_CMA_BYTES``) unless the ring is named."""
SETTINGS = {"streaming": {"stream_shared_bytes": 1}, "ordinary": {"stream_shared_bytes": 0}}
CAPTION = ("int32, plain (unregistered) buffers",
           "*streaming / ordinary* below 1: streaming stores are faster",
           [("streaming", "ordinary"), ("MPI", "streaming"), ("MPI", "ordinary")])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    def compare(args, world, sizes: list[int]) -> int:
        return beside_mpi(args, world, sizes, __file__, SETTINGS, COLLECTIVES, False, CAPTION)

    return report.same_run_main(__file__, __doc__.split("\n\n")[0], "64K,1M,4M", HERE / "results", compare, argv)


if __name__ == "__main__":
    os.environ.setdefault("NBCOLL_BACKEND", "numpy")
    sys.exit(main())
