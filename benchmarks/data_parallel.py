"""Step time of data-parallel training: DDP with and without overlap, bucket sizes, ZeRO-1/2 and fully_shard.

Every rank trains the same MLP (float32, Adam) on its own rows of a global batch, one configuration after the
other, interleaved repeat by repeat so that all see the same machine noise; a sample is the slowest rank's time
of a few steps, and the table keeps the median. Rank 0 also times one process training on the whole global
batch alone (no communication) while the other ranks wait, which is what the ratio column compares against:
below 1, the ranks together finish the global batch faster than one process would.

    single process   the whole global batch, no communication
    ddp, no overlap  one bucket holding every gradient: its all-reduce starts after backward's last gradient
    ddp, B MiB       buckets of B MiB, each averaged as soon as its gradients are in
    zero-1, zero-2   ZeroRedundancyOptimizer (stage 1 under DDP with 25 MiB buckets; stage 2 alone)
    fully_shard      ZeRO-3: parameters gathered per layer, gradients reduce-scattered

Run::

    python benchmarks/data_parallel.py               # launches itself on 2 and then 4 ranks, numpy backend
    python benchmarks/data_parallel.py --quick       # a small model and two repeats: a smoke test

Writes ``data_parallel_<n>ranks.json``, ``.rst`` and ``.png`` into ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from ranks import environment, run_on_ranks
from report import list_table, write_json
from vs_mpi import HERE

BUCKETS_MB = (0.1, 1.0, 4.0, 25.0)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a small model and two repeats (a smoke test)")
    p.add_argument("--ranks", default="2,4", help="rank counts to launch when not under mpiexec (default 2,4)")
    p.add_argument("--repeats", type=int, default=None, help="timed samples per configuration (default 5)")
    p.add_argument("--out", default=str(HERE / "results"), help="directory for the .json, .rst and .png")
    p.add_argument("--no-plot", action="store_true", help="skip the plot (no matplotlib needed)")
    return p.parse_args(argv)


def build(name: str, comm, widths: tuple[int, ...]):
    """The model, its optimizer and the rows it trains on, for one configuration."""
    import nbcoll
    from nbcoll import nn, optim
    from nbcoll.parallel import DistributedDataParallel, ZeroRedundancyOptimizer, fully_shard

    nbcoll.manual_seed(0)
    layers = []
    for a, b in zip(widths[:-1], widths[1:], strict=True):
        layers += [nn.Linear(a, b), nn.Tanh()]
    model = nn.Sequential(*layers[:-1])
    if name == "single process":
        return model, optim.Adam(model.parameters(), lr=1e-3), True
    if name == "ddp, no overlap":
        model = DistributedDataParallel(model, comm, bucket_cap_mb=1e6)
    elif name.startswith("ddp, "):
        model = DistributedDataParallel(model, comm, bucket_cap_mb=float(name.split()[1]))
    elif name == "zero-1":
        model = DistributedDataParallel(model, comm)
        return model, ZeroRedundancyOptimizer(model.parameters(), optim.Adam, comm, stage=1, lr=1e-3), False
    elif name == "zero-2":
        return model, ZeroRedundancyOptimizer(model.parameters(), optim.Adam, comm, stage=2, lr=1e-3), False
    elif name == "fully_shard":
        model = fully_shard(model, comm)
    return model, optim.Adam(model.parameters(), lr=1e-3), False


def run_rank(args: argparse.Namespace) -> int:
    import nbcoll
    from nbcoll import nn

    comm = nbcoll.init()
    n, r = comm.size, comm.rank
    widths = (64, 128, 128, 16) if args.quick else (256, 1024, 1024, 256)
    rows, steps, repeats = (8, 1, args.repeats or 2) if args.quick else (32, 3, args.repeats or 5)
    names = ["single process", "ddp, no overlap"] + [f"ddp, {b:g} MiB" for b in BUCKETS_MB]
    names += ["zero-1", "zero-2", "fully_shard"]
    setups = {name: build(name, comm, widths) for name in names}
    rng = np.random.default_rng(0)
    x_all = nbcoll.tensor(rng.standard_normal((n * rows, widths[0])), dtype=np.float32)
    y_all = nbcoll.tensor(rng.standard_normal((n * rows, widths[-1])), dtype=np.float32)
    x_mine = nbcoll.tensor(x_all.numpy()[r * rows : (r + 1) * rows])
    y_mine = nbcoll.tensor(y_all.numpy()[r * rows : (r + 1) * rows])
    samples: dict[str, list[float]] = {name: [] for name in names}
    for repeat in range(repeats + 1):  # the first round warms up
        for name in names:
            model, optimizer, alone = setups[name]
            x, y = (x_all, y_all) if alone else (x_mine, y_mine)
            comm.barrier()
            start = time.perf_counter()
            for _ in range(steps if r == 0 or not alone else 0):  # one process: rank 0, the others wait
                optimizer.zero_grad()
                nn.MSELoss()(model(x), y).backward()
                optimizer.step()
            elapsed = np.array([(time.perf_counter() - start) / steps])
            slowest = nbcoll.to_device(elapsed)
            comm.all_reduce(slowest, op="max")
            if repeat:
                samples[name].append(float(nbcoll.to_host(slowest)[0]))
    params = sum(p.size for p in setups["single process"][0].parameters())
    table = [{"config": name, "ms": 1e3 * statistics.median(samples[name])} for name in names]
    for row in table:
        row["ratio"] = row["ms"] / table[0]["ms"]
    if r == 0:
        write(args, table, n, params, rows)
    comm.destroy()
    return 0


def write(args: argparse.Namespace, table: list[dict], n: int, params: int, rows: int) -> None:
    what = f"{params} float32 parameters, Adam, {rows} rows per rank ({n * rows} in the global batch)"
    lines = [f"# {n} ranks: {what}", f"# {'configuration':<18} {'step (ms)':>10} {'/ one process':>14}"]
    lines += [f"  {row['config']:<18} {row['ms']:>10.2f} {row['ratio']:>14.2f}" for row in table]
    print("\n".join(lines), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"data_parallel_{n}ranks{'_quick' if args.quick else ''}"
    env = environment()
    command = "python benchmarks/data_parallel.py" + (" --quick" if args.quick else "") + f"  (mpiexec -n {n})"
    write_json(stem.with_suffix(".json"), {"env": env, "nranks": n, "what": what, "results": table}, indent=None)
    rst = [f".. generated by {command}", "", f"{n} ranks, {what}.", ""]
    cells = [[row["config"], f"{row['ms']:.2f}", f"{row['ratio']:.2f}"] for row in table]
    rst += list_table(["configuration", "step (ms)", "/ one process"], cells)
    stem.with_suffix(".rst").write_text("\n".join(rst) + "\n")
    if not args.no_plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, axes = plt.subplots(figsize=(7, 3.5))
        axes.barh([row["config"] for row in table][::-1], [row["ms"] for row in table][::-1])
        axes.set_xlabel("ms per step (slowest rank, median)")
        axes.set_title(f"{n} ranks, {params} parameters")
        figure.tight_layout()
        figure.savefig(stem.with_suffix(".png"), dpi=100)
        plt.close(figure)
    print(f"# wrote {stem}.json, .rst{'' if args.no_plot else ', .png'}", flush=True)


def main(argv: list[str] | None = None) -> int:
    return run_on_ranks(__file__, run_rank, parse_args(argv), argv)


if __name__ == "__main__":
    os.environ.setdefault("NBCOLL_BACKEND", "numpy")
    sys.exit(main())
