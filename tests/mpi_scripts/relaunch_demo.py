"""A tutorial-style script: started with plain python, it re-runs itself on N ranks (argv[1])."""

import sys

import nbcoll.launch

nbcoll.launch.relaunch(int(sys.argv[1]))

from mpi4py import MPI  # noqa: E402  (imported on the ranks only, after the re-launch)

comm = MPI.COMM_WORLD
print(f"first line of rank {comm.rank}")
print(f"second line of rank {comm.rank}", flush=True)
comm.Barrier()  # every rank has printed before the last one exits with an error and mpiexec stops the others
exit_code = int(sys.argv[2]) if len(sys.argv) > 2 else 0
if comm.rank == comm.size - 1:
    sys.exit(exit_code)
