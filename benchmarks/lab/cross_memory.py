"""Plain inputs read by address (one copy, by the kernel) against staged through the window, with MPI beside them.

A buffer that is not registered (``comm.alloc``) is either staged (its owner copies each piece into its window,
the peers copy it out: two copies per hop) or, from ``NBCOLL_CMA_BYTES`` up, lent by its address, and each peer
copies its part straight out of the owner's process with ``process_vm_readv``
(:mod:`nbcoll.comm.transport.cross_memory`). Two communicators of the same ranks run the same direct all-to-all,
all-gather and broadcast on plain NumPy buffers, one that reads by address from the first byte
(``NBCOLL_CMA_BYTES=1``) and one that always stages (``0``), and MPI's own collective runs beside them, each on its
own buffers, interleaved repeat by repeat (``report.balanced_rounds``). The table gives the median time per call
of each and the ratios; a 2-rank broadcast stages either way
(:meth:`nbcoll.comm.protocol_direct.DirectProtocol.copy_send`).

Run::

    python benchmarks/lab/cross_memory.py                        # 2 and 4 ranks, numpy backend, 1 to 64 MiB
    python benchmarks/lab/cross_memory.py --ranks 4 --sizes 4M,16M --repeats 5

Writes ``cross_memory_<n>ranks.rst`` into ``--out`` (default ``benchmarks/lab/results``).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import benchmarks_path  # noqa: F401  (first: puts benchmarks/ on the path)
import numpy as np
import report

HERE = Path(__file__).resolve().parent
COLLECTIVES = ("all_to_all", "all_gather", "broadcast")
SETTINGS = {"by address": {"cma_bytes": 1}, "staged": {"cma_bytes": 0}}
CAPTION = ("int32, plain (unregistered) buffers, direct algorithm",
           "*staged / by address* above 1: reading by address is faster",
           [("staged", "by address"), ("MPI", "by address"), ("MPI", "staged")])  # fmt: skip


def plain(count: int) -> np.ndarray:
    """A plain (unregistered) buffer of ``count`` int32."""
    return np.zeros(count, np.int32)


def contender(world, comm, case: str, nbytes: int, alloc=plain):
    """One call on buffers of its own, its input from ``alloc`` (``comm`` None: MPI's), and a check that its result
    is exact. ``case``: a collective, with its algorithm after a space when it is not ``direct`` (``"all_reduce
    ring"``)."""
    n, r = world.Get_size(), world.Get_rank()
    collective, _, algo = case.partition(" ")
    algo = algo or "direct"
    count = max(n, nbytes // 4 // (n if collective == "all_gather" else 1)) // (n if collective == "all_to_all" else 1)
    if collective == "broadcast":  # in place, as MPI's Bcast
        want = (np.arange(count) % 1000).astype(np.int32)
        out = alloc(count)
        out[...] = want if r == 0 else 0
        mpi, ours = (lambda: world.Bcast(out, root=0)), (lambda: comm.broadcast(out, root=0, algo=algo))
    elif collective == "all_gather":
        src, out = alloc(count), np.zeros(count * n, np.int32)
        src[...] = np.arange(count) % 1000 + r
        want = np.concatenate([np.arange(count) % 1000 + p for p in range(n)])
        mpi, ours = (lambda: world.Allgather(src, out)), (lambda: comm.all_gather(src, out, algo=algo))
    elif collective == "all_reduce":
        src, out = alloc(count), np.zeros(count, np.int32)
        src[...] = np.arange(count) % 1000 + r
        want = (np.arange(count) % 1000 * n + n * (n - 1) // 2).astype(np.int32)
        mpi, ours = (lambda: world.Allreduce(src, out)), (lambda: comm.all_reduce(src, out, algo=algo))  # sum
    else:  # count elements per block
        src, out = alloc(count * n), np.zeros(count * n, np.int32)
        src[...] = np.arange(count * n) % 1000 + r
        want = np.concatenate([np.arange(r * count, (r + 1) * count) % 1000 + p for p in range(n)])
        mpi, ours = (lambda: world.Alltoall(src, out)), (lambda: comm.all_to_all(src, out, algo=algo))
    return (mpi if comm is None else ours), (lambda: np.array_equal(out, want))


def beside_mpi(args, world, sizes: list[int], script: str, settings: dict[str, dict], collectives: tuple[str, ...],
               registered: bool, caption: tuple[str, str, list]) -> int:  # fmt: skip
    """Two settings of the communicator and MPI at every collective and size, in one launch; rank 0 writes the
    table (``<script's name>_<n>ranks.rst``). 1 if a result was wrong.

    ``settings``: name -> the :class:`~nbcoll.comm.CommConfig` fields of a communicator of its own; every contender
    runs on buffers of its own, its input registered (``comm.alloc``, MPI's by the first communicator, as
    ``vs_mpi.py`` does) when ``registered``, else plain. ``caption``: the table's setup, how to read it, and its
    ratios, ``(numerator, denominator)`` pairs of names.
    """
    from nbcoll.comm import CommConfig, init

    base = CommConfig.from_env()
    comms = {name: init(world, dataclasses.replace(base, **fields)) for name, fields in settings.items()}
    contenders = {**comms, "MPI": None}

    def contenders_at(collective: str, nbytes: int):
        lent = []
        made = {}
        for name, comm in contenders.items():
            owner = comm or next(iter(comms.values()))

            def alloc(count, owner=owner):
                lent.append((owner, owner.alloc(count, np.int32)))
                return lent[-1][1]

            made[name] = contender(world, comm, collective, nbytes, alloc if registered else plain)
        return made, lambda: [owner.free(buffer) for owner, buffer in lent]

    times, wrong = report.balanced_samples(world, contenders_at, collectives, sizes, args.repeats)
    for comm in comms.values():
        comm.destroy()
    n, names = world.Get_size(), [*settings, "MPI"]
    setup, reading, ratios = caption
    title = f"{' or '.join(settings)}, {n} ranks"

    def table(command: str, wrong: int) -> str:
        return report.median_table(script, setup, reading, times, collectives, sizes, names, ratios, title, n, wrong,
                                   command)  # fmt: skip

    return report.publish_same_run(world, args, script, Path(script).stem, table, wrong)


def beside_mpi_main(script: str, doc: str, settings: dict[str, dict], collectives: tuple[str, ...],
                    registered: bool, caption: tuple[str, str, list], argv: list[str] | None) -> int:  # fmt: skip
    """The ``main`` of a script that compares two settings with :func:`beside_mpi` (its arguments), 1 to 64 MiB by
    default; ``doc``: the script's docstring, whose first paragraph describes it."""

    def compare(args, world, sizes: list[int]) -> int:
        return beside_mpi(args, world, sizes, script, settings, collectives, registered, caption)

    return report.same_run_main(script, doc.split("\n\n")[0], "1M,4M,16M,64M", HERE / "results", compare, argv)


def main(argv: list[str] | None = None) -> int:
    return beside_mpi_main(__file__, __doc__, SETTINGS, COLLECTIVES, False, CAPTION, argv)


if __name__ == "__main__":
    os.environ.setdefault("NBCOLL_BACKEND", "numpy")
    sys.exit(main())
