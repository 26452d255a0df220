"""The two ways bytes move between ranks: ``ipc`` (shared memory on one machine) and ``mpi`` (between nodes)."""
