"""A one-shot broadcast or all-gather in two piece sizes, in the same launch.

A direct broadcast or all-gather over the windows goes in rounds, one piece each (the broadcast's
:data:`nbcoll.comm.algorithms.direct.BROADCAST_PIECE_BYTES` at two ranks and
:data:`~nbcoll.comm.algorithms.direct.MANY_RANKS_BROADCAST_PIECE_BYTES` from three on, the all-gather's
:data:`~nbcoll.comm.algorithms.direct.GATHER_PIECE_BYTES`); the sizes compared are the one it had before and the
one it has now (:func:`pieces_of`).
With plain buffers a rank stages each piece in its window while its readers copy the one before; with registered
ones (``comm.alloc``) the readers copy from the owner's own memory (and a broadcast root writes a share of each piece
into every registered output). Both piece sizes run the same collective on one communicator, each on buffers of
its own (so each keeps its own plan), alternated in ABBA order, repeat by repeat; the table gives the median time
per call of each and their ratio. Every call's result is checked against exact integers.

Run::

    python benchmarks/lab/one_shot_pieces.py                        # broadcast, 2 and 4 ranks, numpy, 1 to 64 MiB
    python benchmarks/lab/one_shot_pieces.py --collective all_gather --ranks 2 --sizes 4M,64M --repeats 5

Writes ``<collective>_pieces_<n>ranks.rst`` into ``--out`` (default ``benchmarks/lab/results``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import benchmarks_path  # noqa: F401  (first: puts benchmarks/ on the path)
import numpy as np
import report
from ranks import sample

HERE = Path(__file__).resolve().parent


def pieces_of(collective: str, nranks: int) -> tuple[str, tuple[int, int]]:
    """The name in :mod:`nbcoll.comm.algorithms.direct` that sets the collective's pieces on ``nranks``, and the
    two sizes it compares there: the one it had before and the one it has now."""
    if collective == "all_gather":
        return "GATHER_PIECE_BYTES", (1 << 20, 2 << 20)
    if nranks <= 2:
        return "BROADCAST_PIECE_BYTES", (512 << 10, 1 << 20)
    return "MANY_RANKS_BROADCAST_PIECE_BYTES", (1 << 20, 4 << 20)


def contender(comm, collective: str, nbytes: int, registered: bool, piece: int):
    """The collective planned with pieces of ``piece`` bytes on buffers of its own (``nbytes``: the broadcast's
    buffer, the all-gather's output); a check that its result is exact; the buffers to free."""
    from nbcoll.comm.algorithms import direct

    n, rank = comm.size, comm.rank
    count = max(1, nbytes // 4 // (n if collective == "all_gather" else 1))
    values = (np.arange(count) % 1000).astype(np.int32)
    buf = comm.alloc(count, np.int32) if registered else np.empty(count, np.int32)
    if collective == "broadcast":
        buf[...] = values if rank == 0 else 0
        out, expected = buf, values
    else:
        buf[...] = values + rank
        out, expected = np.zeros(n * count, np.int32), np.concatenate([values + q for q in range(n)])

    def call() -> None:  # the plan reads the size; later calls replay it, and a new plan would read it again
        setattr(direct, pieces_of(collective, n)[0], piece)
        if collective == "broadcast":
            comm.broadcast(buf, root=0, algo="direct")
        else:
            comm.all_gather(buf, out, algo="direct")

    windows = comm.engine.direct_windows()
    before = windows.rounds
    call()
    rounds = -(-count // direct.piece_elems(4, windows.nbytes, piece))
    if windows.rounds - before != rounds:
        raise RuntimeError(f"{nbytes} B in pieces of {piece} B took {windows.rounds - before} rounds, not {rounds}")
    return call, (lambda: np.array_equal(out, expected)), buf if registered else None


def measure(comm, world, collective: str, sizes: list[int], repeats: int) -> tuple[dict, int]:
    """(registered, nbytes, piece) -> seconds per call of each repeat; and how many results differ."""
    times: dict[tuple, list[float]] = {}
    wrong, (_, pieces) = 0, pieces_of(collective, comm.size)
    for registered in (True, False):
        for nbytes in sizes:
            made = {piece: contender(comm, collective, nbytes, registered, piece) for piece in pieces}
            calls = max(1, min(20, (16 << 20) // nbytes))
            for call, _, _ in made.values():  # warm-up: first touch of pages
                call()
            for k in range(repeats):
                for piece in pieces if k % 2 == 0 else pieces[::-1]:
                    times.setdefault((registered, nbytes, piece), []).append(sample(world, made[piece][0], calls))
            for _, exact, lent in made.values():
                wrong += not exact()
                if lent is not None:
                    comm.free(lent)
    return times, wrong


def table(times: dict, collective: str, sizes: list[int], nranks: int, wrong: int, command: str) -> str:
    from nbcoll.perf.bandwidth import format_size  # here: nbcoll picks its backend when first imported

    _, pieces = pieces_of(collective, nranks)
    small, large = (format_size(piece) for piece in pieces)
    what = "direct broadcast from rank 0" if collective == "broadcast" else "direct all-gather (size: its output)"
    reading = (f"Median time per call (us) over ABBA-interleaved repeats; ratio = the time with {large} pieces "
               f"over the time with {small} (below 1: {large} is faster); results that differ from the exact ones: "
               f"{wrong}. Command: ``{command}``.")  # fmt: skip
    lines = report.same_run_caption(__file__, nranks, f"int32, {what}", reading)
    rows = []
    for registered in (True, False):
        for nbytes in sizes:
            t_small, t_large = (float(np.median(times[(registered, nbytes, piece)])) for piece in pieces)
            rows.append(["registered" if registered else "plain", str(nbytes),
                         f"{t_small * 1e6:.0f}", f"{t_large * 1e6:.0f}", f"{t_large / t_small:.2f}"])  # fmt: skip
    header = ["buffers", "size (B)", f"pieces of {small}", f"pieces of {large}", "ratio"]
    lines += report.list_table(header, rows, f"direct {collective}, two piece sizes, {nranks} ranks")
    return "\n".join(lines) + "\n"


def compare(args, world, sizes: list[int]) -> int:
    """Both piece sizes at every size, in one launch; rank 0 writes the table. 1 if a result was wrong."""
    from nbcoll.comm import init

    n, comm = world.Get_size(), init(world)
    times, wrong = measure(comm, world, args.collective, sizes, args.repeats)
    comm.destroy()
    stem, flags = f"{args.collective}_pieces", f"--collective {args.collective}"
    return report.publish_same_run(
        world,
        args,
        __file__,
        stem,
        lambda command, wrong: table(times, args.collective, sizes, n, wrong, command),
        wrong,
        flags,
    )


def options(parser) -> None:
    parser.add_argument("--collective", choices=["all_gather", "broadcast"], default="broadcast")


def main(argv: list[str] | None = None) -> int:
    description = __doc__.split("\n\n")[0]
    return report.same_run_main(__file__, description, "1M,4M,16M,64M", HERE / "results", compare, argv, options)


if __name__ == "__main__":
    os.environ.setdefault("NBCOLL_BACKEND", "numpy")
    sys.exit(main())
