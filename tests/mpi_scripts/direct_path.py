"""Direct collectives on registered and plain buffers: exact results, and each byte copied once per hop.

Every case runs on every rank of one communicator; :func:`check_rank` returns what went wrong on this rank. The
loopback tests call it on threads; under ``mpiexec`` (ipc transport, ``/dev/shm``) run it as a script::

    NBCOLL_BUFFSIZE=256 mpiexec -n 3 python direct_path.py
"""

from __future__ import annotations

import os

import numpy as np

import nbcoll

CASES = [(coll, count, registered) for coll in ("all_gather", "broadcast", "all_to_all", "all_reduce", "reduce_scatter")
         for count in (0, 1, 37) for registered in (True, False)]  # fmt: skip
CASES += [("broadcast", count, "both") for count in (0, 1, 37)]
"""(collective, elements per block, registered input; "both": the output too, so that the root writes into it)."""
FIFO_ALGO = {"all_gather": "ring", "broadcast": "ring", "all_to_all": "pairwise", "all_reduce": "ring",
             "reduce_scatter": "ring"}  # fmt: skip


def _inputs(comm, coll: str, count: int, registered: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """This rank's input (registered or not), its output, and the expected output, exact in int64."""
    n, r = comm.size, comm.rank
    size_in = count * n if coll in ("all_to_all", "reduce_scatter") else count
    size_out = count * n if coll in ("all_gather", "all_to_all") else count
    x = comm.alloc(size_in, np.int64) if registered else nbcoll.zeros(size_in, np.int64)
    x[:] = np.arange(size_in, dtype=np.int64) + 1000 * r
    if coll == "all_gather":
        expected = np.concatenate([np.arange(count) + 1000 * p for p in range(n)])
    elif coll == "broadcast":
        expected = np.arange(count) + 1000 * (n - 1)
    elif coll == "all_to_all":
        expected = np.concatenate([np.arange(r * count, (r + 1) * count) + 1000 * p for p in range(n)])
    elif coll == "reduce_scatter":
        expected = sum(np.arange(r * count, (r + 1) * count) + 1000 * p for p in range(n))
    else:
        expected = sum(np.arange(count) + 1000 * p for p in range(n))
    y = comm.alloc(size_out, np.int64) if registered == "both" else nbcoll.zeros(size_out, np.int64)
    y[:] = 0
    return x, y, np.asarray(expected, np.int64)


def _run(comm, coll: str, algo: str, x: np.ndarray, y: np.ndarray) -> None:
    if coll == "broadcast":
        comm.broadcast(x, y, root=comm.size - 1, algo=algo)
    else:
        getattr(comm, coll)(x, y, algo=algo)


def _copies_per_hop(comm) -> tuple[float, int]:
    """(bytes copied per byte received, over every rank together; bytes copied within this rank).

    A hop is charged at each end that copies: the sender into a FIFO slot, the receiver out of it, or only the
    receiver when it reads the sender's buffer in place. So every rank's counters are summed.
    """
    c = comm.counters
    peers = [p for p in c.peers if p != comm.rank]
    counts = [sum(c[p].bytes_copied for p in peers), sum(c[p].bytes_received for p in peers)]
    totals = nbcoll.to_device(np.array(counts, np.int64))
    comm.all_reduce(totals, algo="ring")
    totals = nbcoll.to_host(totals)
    return (int(totals[0]) / int(totals[1]) if totals[1] else 0.0), c[comm.rank].bytes_copied


def _root_share(count: int, n: int, per_round: int) -> int:
    """Elements of a broadcast the root writes into each registered output: the last 1/n of every round's chunk."""
    return sum((min(lo + per_round, count) - lo) // n for lo in range(0, count, per_round))


def _lent_by_address(comm, coll: str, x: np.ndarray) -> bool:
    """Whether this rank's plain input goes to its peers by its address (``NBCOLL_CMA_BYTES``), not staged."""
    windows = comm.engine.direct_windows()
    if windows is None or windows.pids is None or coll in ("all_reduce", "reduce_scatter"):
        return False
    if coll == "broadcast" and (comm.rank != comm.size - 1 or comm.size < 3):
        return False
    return 0 < comm.config.cma_bytes <= x.nbytes


def check_rank(comm) -> list[str]:
    """Run every case, direct and through FIFOs; the problems seen on this rank (empty when all is well)."""
    from nbcoll.comm.algorithms import direct

    problems = []
    n, r = comm.size, comm.rank
    for coll, count, registered in CASES:
        for algo in ("direct", FIFO_ALGO[coll]):
            x, y, expected = _inputs(comm, coll, count, registered)
            comm.reset_counters()
            _run(comm, coll, algo, x, y)
            x[:] = -1  # the collective has returned: no peer may still read it
            written = sum(comm.counters[p].bytes_copied for p in comm.counters.peers if p != r)
            per_hop, own = _copies_per_hop(comm)
            name = f"{coll} {algo} count={count} {({True: 'registered', False: 'plain'}).get(registered, registered)}"
            got = nbcoll.to_host(y)
            if not np.array_equal(got, expected):
                problems.append(f"{name}: wrong result {got[:8]} != {expected[:8]}")
            if n > 1 and count and coll not in ("all_reduce", "reduce_scatter"):  # a fold reads its peers' bytes
                want = 1.0 if algo == "direct" else 2.0
                if per_hop != want:
                    problems.append(f"{name}: {per_hop} copies per byte and hop, expected {want}")
            if algo == "direct" and (registered or _lent_by_address(comm, coll, x)) and n > 1 and count:
                folds = coll in ("all_reduce", "reduce_scatter")
                own_block = 0 if folds or (coll == "broadcast" and r != n - 1) else count * 8
                if own != own_block:  # nothing staged: only this rank's own block is copied within it
                    problems.append(f"{name}: {own} bytes copied within the rank, expected {own_block}")
            if algo == "direct" and registered == "both" and r == n - 1:
                half_window = direct.window_bytes(comm.config.buffsize, n) // 16  # int64 in a round
                want = (n - 1) * 8 * _root_share(count, n, half_window)
                if written != want:  # the root wrote its share of every chunk into each reader's output
                    problems.append(f"{name}: the root wrote {written} bytes into its readers, expected {want}")
            if registered:
                comm.free(x)
            if registered == "both":
                comm.free(y)
            comm.barrier()
    return problems


def main() -> int:
    from nbcoll.comm import init

    comm = init()
    print(f"pid={os.getpid()}", flush=True)
    problems = check_rank(comm)
    windows = comm.engine.direct_windows()
    print(f"read by address: {windows is not None and windows.pids is not None}", flush=True)
    per_hop = []
    for registered in (True, False):
        x, y, _ = _inputs(comm, "all_gather", 1 << 12, registered)
        for algo in ("direct", "ring"):
            comm.reset_counters()
            comm.all_gather(x, y, algo=algo)
            per_hop.append(f"{algo}{'/registered' if registered else ''} {_copies_per_hop(comm)[0]:.1f}")
        if registered:
            comm.free(x)
    comm.destroy()
    print("copies per byte and hop (all-gather): " + ", ".join(per_hop), flush=True)
    print("\n".join(problems) if problems else "direct path ok", flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
