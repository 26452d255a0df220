"""Every differentiable collective: forward against NumPy built from all ranks' inputs, then gradcheck across ranks.

``mpiexec -n 3 python parallel_functional.py [--rows 2]``, or :func:`check_all` on each rank of a loopback world:
rank ``r``'s input is known to every rank (a seeded generator per rank), so each rank checks its own result
exactly; the gradients are checked with :func:`nbcoll.parallel.gradcheck.gradcheck_ranks` in float64.
"""

from __future__ import annotations

import argparse

import numpy as np

import nbcoll
from nbcoll.parallel import functional as F
from nbcoll.parallel.gradcheck import gradcheck_ranks


def rank_input(rank: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng([7, rank]).standard_normal(shape)


def expected(name: str, xs: list[np.ndarray], rank: int, root: int, op: str) -> np.ndarray:
    """The forward result on ``rank`` from every rank's input ``xs``."""
    n = len(xs)
    total = sum(xs) / (n if op == "avg" else 1)

    def blocks(s: int) -> list[np.ndarray]:  # rank s's input in n blocks along dim 0
        return np.split(xs[s], n)

    return {
        "all_reduce": lambda: total,
        "broadcast": lambda: xs[root],
        "reduce": lambda: total if rank == root else np.zeros_like(xs[0]),
        "all_gather": lambda: np.concatenate(xs),
        "reduce_scatter": lambda: np.split(total, n)[rank],
        "scatter": lambda: blocks(root)[rank],
        "gather": lambda: np.concatenate(xs) if rank == root else np.zeros((n * len(xs[0]),) + xs[0].shape[1:]),
        "all_to_all": lambda: np.concatenate([blocks(s)[rank] for s in range(n)]),
    }[name]()


def cases(n: int) -> list[tuple[str, dict]]:
    last = n - 1
    return [
        ("all_reduce", {"op": "sum"}),
        ("all_reduce", {"op": "avg"}),
        ("broadcast", {"root": last}),
        ("reduce", {"op": "sum", "root": last}),
        ("reduce", {"op": "avg", "root": 0}),
        ("all_gather", {}),
        ("reduce_scatter", {"op": "sum"}),
        ("reduce_scatter", {"op": "avg"}),
        ("scatter", {"root": last}),
        ("gather", {"root": last}),
        ("all_to_all", {}),
    ]


def check_all(comm, rows: int = 1, cols: int = 2, only: str = "") -> str:
    """Every case on ``comm`` (under mpiexec, or on each rank of a loopback world); returns the line a rank prints."""
    n, r = comm.size, comm.rank
    checked = []
    for name, kwargs in cases(n):
        if only and name not in only.split(","):
            continue
        blocked = name in ("reduce_scatter", "scatter", "all_to_all")
        shape = ((n if blocked else 1) * rows, cols)
        xs = [rank_input(s, shape) for s in range(n)]
        fn = getattr(F, name)
        with nbcoll.no_grad():
            y = fn(nbcoll.tensor(xs[r], dtype=np.float64), comm, **kwargs).numpy()
        want = expected(name, xs, r, kwargs.get("root", 0), kwargs.get("op", "sum"))
        np.testing.assert_allclose(y, want, rtol=1e-14, atol=1e-14, err_msg=f"{name} {kwargs} forward, rank {r}")
        # x * x before the collective and a product after: the chain rule runs through the dual collective.
        x = nbcoll.tensor(xs[r], dtype=np.float64, requires_grad=True)
        gradcheck_ranks(lambda x, fn=fn, kwargs=kwargs: fn(x * x, comm, **kwargs) * 1.5, [x], comm)
        checked.append(f"{name}{kwargs}")
    # A non-contiguous input (a transposed view) is copied before it is sent.
    x = nbcoll.tensor(rank_input(r, (cols, n)), dtype=np.float64, requires_grad=True)
    gradcheck_ranks(lambda x: F.all_to_all(x.transpose(), comm), [x], comm)
    for bad, message in [
        (lambda: F.all_reduce(nbcoll.tensor(np.ones(2)), comm, op="max"), "op"),
        (lambda: F.reduce_scatter(nbcoll.tensor(np.ones(n + 1)), comm), "dim 0"),
        (lambda: F.broadcast(nbcoll.tensor(np.ones(2)), comm, root=n), "root"),
        (lambda: F.all_gather(np.ones(2), comm), "Tensor"),
    ]:
        try:
            bad()
        except (TypeError, ValueError) as exc:
            assert message in str(exc), exc
        else:
            raise AssertionError(f"no error for bad use ({message})")
    return f"rank {r}: differentiable collectives ok: {len(checked)} cases"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1, help="rows per rank's block (dim 0)")
    parser.add_argument("--cols", type=int, default=2)
    parser.add_argument("--only", default="", help="comma-separated collectives to check (default: all)")
    args = parser.parse_args()
    comm = nbcoll.init()
    print(check_all(comm, args.rows, args.cols, args.only))
    comm.destroy()


if __name__ == "__main__":
    main()
