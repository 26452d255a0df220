"""Sharded checkpoints of a fully sharded model: bit-exact resume, and loading onto another rank count.

``mpiexec -n 4 python parallel_checkpoint.py save DIR/a``: trains K steps, checkpoints, trains K more; a fresh model
loaded from the checkpoint and trained K steps must give bit-identical parameters. It then checkpoints into
``DIR/a`` with ``expected.npz`` (the whole parameters) and ``next.npz`` (after one more step on these ranks).
``mpiexec -n 2 python parallel_checkpoint.py load DIR/a DIR/b``: loads ``DIR/a`` onto this rank count, checks the
whole parameters bit for bit, takes the next step (the optimizer state was re-sharded too) and compares it with
``next.npz``, then writes ``DIR/b`` the same way for a next rank count.
"""

from __future__ import annotations

import sys

import numpy as np
from parallel_ddp import PER_RANK, global_batch, make_model

import nbcoll
from nbcoll import nn, optim
from nbcoll.parallel import fully_shard, gathered_parameters
from nbcoll.parallel.checkpoint import load_sharded, save_sharded

K = 2
HIDDEN = 5  # 5 rows: uneven shards on 2, 3 and 4 ranks


def build(comm):
    model = fully_shard(make_model(0, HIDDEN), comm)
    return model, optim.Adam(model.parameters(), lr=0.01)


def steps(model, optimizer, comm, first: int, count: int) -> None:
    """Steps ``first, first + 1, ...`` on the same global batches whatever the rank count (4 rows each)."""
    n, r = comm.size, comm.rank
    for step in range(first, first + count):
        x, y = global_batch(step, 0, 4 // PER_RANK)
        rows = np.array_split(np.arange(len(x)), n)[r]
        optimizer.zero_grad()
        loss = nn.MSELoss(reduction="sum")(model(nbcoll.tensor(x[rows])), nbcoll.tensor(y[rows])) * (n / len(x))
        loss.backward()  # the average over ranks of these is the mean over the global batch, even for uneven rows
        optimizer.step()


def checkpoint(model, optimizer, comm, directory: str, step: int) -> None:
    """Write the checkpoint, its whole parameters, and the whole parameters one step later (then step back)."""
    save_sharded(model, optimizer, directory, comm)
    now = gathered_parameters(model)
    steps(model, optimizer, comm, step, 1)
    later = gathered_parameters(model)
    if comm.rank == 0:
        nbcoll.save(now, f"{directory}/expected.npz")
        nbcoll.save(later, f"{directory}/next.npz")
    comm.barrier()


def main() -> None:
    mode, source = sys.argv[1], sys.argv[2]
    comm = nbcoll.init()
    model, optimizer = build(comm)
    if mode == "save":
        steps(model, optimizer, comm, 0, K)
        save_sharded(model, optimizer, f"{source}/resume", comm)
        steps(model, optimizer, comm, K, K)
        uninterrupted = gathered_parameters(model)
        resumed, resumed_optimizer = build(comm)
        load_sharded(resumed, resumed_optimizer, f"{source}/resume", comm)
        steps(resumed, resumed_optimizer, comm, K, K)
        for name, value in gathered_parameters(resumed).items():
            assert np.array_equal(value, uninterrupted[name]), f"rank {comm.rank}: {name} differs after resuming"
        checkpoint(model, optimizer, comm, source, 2 * K)
        print(f"rank {comm.rank}: resumed bit-exact after {K} + {K} steps on {comm.size} ranks")
    else:
        load_sharded(model, optimizer, source, comm)
        expected, later = nbcoll.load(f"{source}/expected.npz"), nbcoll.load(f"{source}/next.npz")
        for name, value in gathered_parameters(model).items():
            assert np.array_equal(value, expected[name]), f"rank {comm.rank}: {name} differs after re-sharding"
        if len(sys.argv) > 3:
            checkpoint(model, optimizer, comm, sys.argv[3], 2 * K)  # takes the next step too
        else:
            steps(model, optimizer, comm, 2 * K, 1)
        for name, value in gathered_parameters(model).items():  # other rank counts add in other orders
            error = np.max(np.abs(value - later[name])) / np.max(np.abs(later[name]))
            assert error < 1e-12, f"rank {comm.rank}: {name} differs by {error:.1e} one step after re-sharding"
        print(f"rank {comm.rank}: loaded on {comm.size} ranks: the same parameters, and the same next step")
    comm.destroy()


if __name__ == "__main__":
    main()
