"""The calls one buffer passes through from ``Communicator.all_reduce`` to the combine kernel's launch.

Each rank runs one all-reduce with a profiler hook (``sys.setprofile``) that fires when the combine kernel's launch
function (``nbcoll.kernels.combine.fold_into``) is entered. At that moment the hook walks the stack from the launch
back to ``all_reduce`` and prints, as one JSON line per chain, the frames in between that run nbcoll's own code:
``[module, function]`` pairs, the entry and the launch included. Frames of other code (the standard library,
NumPy) are listed apart, so a test sees them too.

It does so twice: first on a communicator with every fast path off (``CommConfig.teaching()``), after which it runs
every collective on the LL, window and FIFO paths and prints which fast-path modules the process has imported
(``FASTPATH_MODULES``: none, it must be), then on one with the default settings.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

import nbcoll
from nbcoll.comm import CommConfig, init
from nbcoll.comm.fast_paths import MODULES

PACKAGE = os.path.dirname(os.path.abspath(nbcoll.__file__))
LAUNCH = ("nbcoll.kernels.combine", "fold_into")
ENTRY = ("nbcoll.comm.collectives", "all_reduce")


def _where(frame) -> tuple[str, str]:
    path = os.path.abspath(frame.f_code.co_filename)
    if not path.startswith(PACKAGE + os.sep):
        return "", frame.f_code.co_name
    module = "nbcoll." + os.path.relpath(path, PACKAGE)[: -len(".py")].replace(os.sep, ".")
    return module.removesuffix(".__init__"), frame.f_code.co_name


def main() -> None:
    for fastpath in (False, True):
        comm = init(config=CommConfig.from_env() if fastpath else CommConfig.teaching())
        for algo in ("ring", "tree", "direct", "halving_doubling"):
            for chain in chains_of(comm, algo):
                print("CHAIN " + json.dumps({"algo": algo, "fastpath": fastpath, **chain}), flush=True)
        if not fastpath:
            every_collective(comm)
            print("FASTPATH_MODULES " + json.dumps(sorted(m for m in MODULES if m in sys.modules)), flush=True)
        comm.destroy()


def every_collective(comm) -> None:
    """Every collective, twice on the same buffers, on the LL path (64 elements), the windows and the FIFOs."""
    n = comm.size
    for count in (64, 40_000):  # 160 KB per rank: beyond NBCOLL_LL_BYTES
        for algo in ("direct", "ring"):
            x = nbcoll.to_device(np.arange(count, dtype=np.float32) + comm.rank)
            blocks = nbcoll.to_device(np.arange(count * n, dtype=np.float32))
            for _ in range(2):
                comm.all_reduce(x, nbcoll.zeros(count), algo=algo)
                comm.broadcast(x, nbcoll.zeros(count), algo=algo)
                comm.all_gather(x, nbcoll.zeros(count * n), algo=algo)
                comm.reduce_scatter(blocks, nbcoll.zeros(count), algo=algo)
                comm.all_to_all(blocks, nbcoll.zeros(count * n), algo="direct" if algo == "direct" else None)
                comm.reduce(x, nbcoll.zeros(count), algo="ring")
    comm.barrier()


def chains_of(comm, algo: str) -> list[dict]:
    """Every stack, from the entry to the launch, seen while one all-reduce with ``algo`` runs."""
    x = nbcoll.to_device(np.arange(64, dtype=np.float32) + comm.rank)
    comm.all_reduce(x, algo=algo)  # connections and windows exist from here on
    chains: list[dict] = []

    def hook(frame, event, arg) -> None:
        if event != "call" or _where(frame) != LAUNCH:
            return
        ours, others, f = [], [], frame
        while f is not None:
            where = _where(f)
            if where[0]:
                ours.append(list(where))
            else:
                others.append(where[1])
            if where == ENTRY:
                break
            f = f.f_back
        chains.append({"ours": ours[::-1], "others": others[::-1], "complete": f is not None})

    x = nbcoll.to_device(np.arange(64, dtype=np.float32) + comm.rank)
    sys.setprofile(hook)
    try:
        comm.all_reduce(x, algo=algo)
    finally:
        sys.setprofile(None)
    expected = (np.arange(64) * comm.size + sum(range(comm.size))).astype(np.float32)
    assert np.array_equal(nbcoll.to_host(x), expected), f"{algo}: wrong sum"
    return chains


if __name__ == "__main__":
    main()
