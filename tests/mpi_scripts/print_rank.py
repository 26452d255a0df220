"""Each rank prints one line; options make one rank fail or hang, to test how failures are reported."""

import argparse
import sys
import time

from mpi4py import MPI

parser = argparse.ArgumentParser()
parser.add_argument("--fail-rank", type=int, default=-1)
parser.add_argument("--hang-rank", type=int, default=-1)
parser.add_argument("--marker", default="", help="a unique word, so a test can find every process of this job")
options = parser.parse_args()

comm = MPI.COMM_WORLD
print(f"rank {comm.rank} of {comm.size}", flush=True)
print(f"rank {comm.rank} says something on stderr", file=sys.stderr, flush=True)
comm.Barrier()
if comm.rank == options.fail_rank:
    print(f"rank {comm.rank} fails on purpose", flush=True)
    sys.exit(3)
if comm.rank == options.hang_rank:
    print(f"rank {comm.rank} hangs on purpose", flush=True)
    while True:
        time.sleep(1)
