"""Puts ``benchmarks/`` on the import path, so that a script of this folder finds the helpers it shares with the
headline benchmarks (``ranks.py``, ``report.py``, and ``vs_mpi.py``'s buffers and calls).

A lab script imports it first::

    import benchmarks_path  # noqa: F401  (before report, ranks and vs_mpi)
"""

import sys
from pathlib import Path

BENCHMARKS = str(Path(__file__).resolve().parent.parent)
if BENCHMARKS not in sys.path:
    sys.path.insert(1, BENCHMARKS)  # after the script's own folder, whose modules (cross_memory) come first
