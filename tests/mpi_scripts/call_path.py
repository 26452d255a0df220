"""The calls one buffer passes through from ``Communicator.all_reduce`` to the combine kernel's launch.

Each rank runs one all-reduce with a profiler hook (``sys.setprofile``) that fires when the combine kernel's launch
function (``nbcoll.kernels.combine.fold_into``) is entered. At that moment the hook walks the stack from the launch
back to ``all_reduce`` and prints, as one JSON line per chain, the frames in between that run nbcoll's own code:
``[module, function]`` pairs, the entry and the launch included. Frames of other code (the standard library,
NumPy) are listed apart, so a test sees them too.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

import nbcoll
from nbcoll.comm import init

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
    comm = init()
    for algo in ("ring", "tree", "direct", "halving_doubling"):
        for chain in chains_of(comm, algo):
            print("CHAIN " + json.dumps({"algo": algo, **chain}), flush=True)
    comm.destroy()


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
