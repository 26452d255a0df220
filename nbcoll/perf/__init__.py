"""``python -m nbcoll.perf``: measure a collective and print nccl-tests' table (run under mpiexec).

Example::

    mpiexec -n 4 python -m nbcoll.perf all_reduce -b 8 -e 8M -f 4 --backend numpy
    mpiexec -n 2 python -m nbcoll.perf all_gather -b 1K -e 1M -f 4 --algo all --plot all_gather.png

The pieces, one concern each: :mod:`.bandwidth` (sizes, algbw, busbw factors), :mod:`.exact` (inputs whose
results are exact, for ``#wrong``), :mod:`.cases` (a collective's buffers and check), :mod:`.sweep` (timing),
:mod:`.table` (the printed table), :mod:`.plot` and :mod:`.__main__` (the command line).
"""

from nbcoll.perf import bandwidth, exact, table
from nbcoll.perf.bandwidth import COLLECTIVES, bandwidths, bus_factor, parse_size, size_sweep
from nbcoll.perf.sweep import Options, run
from nbcoll.perf.table import Measurement, Row

__all__ = [
    "COLLECTIVES",
    "Measurement",
    "Options",
    "Row",
    "bandwidth",
    "bandwidths",
    "bus_factor",
    "exact",
    "parse_size",
    "run",
    "size_sweep",
    "table",
]
