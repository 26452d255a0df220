"""Time per training step of the digits MLP: nbcoll against the same MLP written in plain NumPy, in one run.

The model is tutorial 12's: 64 pixels -> 128 hidden units (ReLU) -> 10 scores, cross-entropy, Adam. The plain
NumPy version writes the forward pass, the backward pass by hand and Adam's update as whole-array expressions;
it starts from nbcoll's initial weights and sees the same batches, so both runs follow the same trajectory (the
table reports how far their parameters drifted apart, from rounding alone). The ratio is the price of nbcoll's
Tensor layer (graph recording, argument checks, one kernel launch per operation) over the bare arithmetic; on
``cuda`` nbcoll runs on the GPU and NumPy on the CPU.

One step is ``zero_grad``, forward, loss, ``backward``, ``optimizer.step()`` and ``loss.item()`` (which waits
for the device); the batches are on the device before the clock starts, as a prefetching loader leaves them.
The two sides alternate, a few steps each, round after round, so that both see the same machine load; the
table gives the median of the per-round means. BLAS runs on one thread (``OPENBLAS_NUM_THREADS=1`` unless set).

Run::

    NBCOLL_BACKEND=numpy python benchmarks/training.py
    python benchmarks/training.py                 # the process's backend: cuda on a GPU machine
    python benchmarks/training.py --tiny          # on the simulator: tiny sizes, proves the script runs

Writes ``training_<backend>.json`` and ``.rst`` into ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from report import environment, list_table, write_json  # noqa: E402

import nbcoll  # noqa: E402
from nbcoll import backend, nn, optim  # noqa: E402
from nbcoll.datasets import load_digits  # noqa: E402

HERE = Path(__file__).resolve().parent
SETTINGS = {
    "full": {"hidden": 128, "batches": (32, 256), "rounds": 21, "steps_per_round": 10, "warmup": 5},
    "tiny": {"hidden": 8, "batches": (8,), "rounds": 2, "steps_per_round": 1, "warmup": 1},
}
LR, BETAS, EPS = 3e-3, (0.9, 0.999), 1e-8


class NumpyMLP:
    """The same MLP and Adam, in plain NumPy: every gradient written out by hand."""

    def __init__(self, params: list[np.ndarray]) -> None:
        self.params = [p.copy() for p in params]  # w1 (H, 64), b1 (H,), w2 (10, H), b2 (10,)
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]
        self.t = 0

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        w1, b1, w2, b2 = self.params
        rows = np.arange(len(y))
        h = x @ w1.T + b1
        a = np.maximum(h, 0)
        z = a @ w2.T + b2
        z = z - z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        loss = -np.log(p[rows, y]).mean()
        dz = p
        dz[rows, y] -= 1
        dz /= len(y)
        da = dz @ w2
        dh = da * (h > 0)
        grads = [dh.T @ x, dh.sum(axis=0), dz.T @ a, dz.sum(axis=0)]
        self.t += 1
        beta1, beta2 = BETAS
        step_size = LR / (1 - beta1**self.t)
        root_bias2 = np.sqrt(1 - beta2**self.t)
        for param, grad, m, v in zip(self.params, grads, self.m, self.v, strict=True):
            m *= beta1
            m += (1 - beta1) * grad
            v *= beta2
            v += (1 - beta2) * grad * grad
            param -= step_size * m / (np.sqrt(v) / root_bias2 + EPS)
        return float(loss)


def run(hidden: int, batch: int, rounds: int, steps_per_round: int, warmup: int) -> dict:
    images, labels = load_digits()
    images /= 16.0
    rng = np.random.default_rng(0)
    total = warmup + rounds * steps_per_round
    picks = [rng.choice(len(images), batch, replace=False) for _ in range(total)]
    host_batches = [(images[i], labels[i]) for i in picks]
    device_batches = [(nbcoll.tensor(x), nbcoll.tensor(y)) for x, y in host_batches]

    nbcoll.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    reference = NumpyMLP([p.numpy() for p in model.parameters()])
    optimizer = optim.Adam(model.parameters(), lr=LR, betas=BETAS, eps=EPS)
    loss_fn = nn.CrossEntropyLoss()

    def nbcoll_step(k: int) -> float:
        x, y = device_batches[k]
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()

    def numpy_step(k: int) -> float:
        return reference.step(*host_batches[k])

    for k in range(warmup):
        nbcoll_step(k)
        numpy_step(k)
    ours, theirs = [], []
    for r in range(rounds):
        first = warmup + r * steps_per_round
        for step, times in ((nbcoll_step, ours), (numpy_step, theirs)):
            start = time.perf_counter()
            for k in range(first, first + steps_per_round):
                step(k)
            times.append((time.perf_counter() - start) / steps_per_round)
    drift = max(float(np.max(np.abs(p.numpy() - q))) for p, q in zip(model.parameters(), reference.params, strict=True))
    nbcoll_ms, numpy_ms = statistics.median(ours) * 1e3, statistics.median(theirs) * 1e3
    return {
        "batch": batch,
        "hidden": hidden,
        "steps": total,
        "nbcoll_ms": nbcoll_ms,
        "numpy_ms": numpy_ms,
        "ratio": nbcoll_ms / numpy_ms,
        "max_param_difference": drift,
    }


def format_table(rows: list[dict], backend_name: str) -> str:
    lines = [
        f"# digits MLP 64-{rows[0]['hidden']}-10, Adam; nbcoll on {backend_name!r} vs plain NumPy; median ms per step",
        f"#{'batch':>6}{'nbcoll (ms)':>13}{'NumPy (ms)':>12}{'ratio':>8}{'steps':>7}{'max |param diff|':>18}",
    ]
    for r in rows:
        lines.append(
            f"{r['batch']:>7}{r['nbcoll_ms']:13.3f}{r['numpy_ms']:12.3f}{r['ratio']:8.2f}{r['steps']:7d}"
            f"{r['max_param_difference']:18.2e}"
        )
    return "\n".join(lines)


def format_rst(rows: list[dict], env: dict, command: str) -> str:
    out = [
        f".. generated by benchmarks/training.py on {env['date']}; do not edit by hand",
        "",
        f"{env['backend']} backend, {env['date']} on ``{env['host']}`` ({env['machine']}); Python {env['python']}, "
        f"NumPy {env['numpy']}. Command: ``{command}``. Digits MLP 64-{rows[0]['hidden']}-10 with Adam; median "
        "milliseconds per training step, nbcoll and plain NumPy alternating in the same run.",
        "",
    ]
    header = ["batch", "nbcoll (ms)", "NumPy (ms)", "ratio", "max parameter difference"]
    out += list_table(
        header,
        [
            [
                str(r["batch"]),
                f"{r['nbcoll_ms']:.3f}",
                f"{r['numpy_ms']:.3f}",
                f"{r['ratio']:.2f}",
                f"{r['max_param_difference']:.1e}",
            ]
            for r in rows
        ],
    )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="time per training step: nbcoll against plain NumPy")
    p.add_argument("--tiny", action="store_true", help="tiny sizes (for the simulator: proves the script runs)")
    p.add_argument("--out", default=str(HERE / "results"), help="directory for the .json and .rst")
    args = p.parse_args(argv)
    if not args.tiny and backend.get_backend() == "sim":
        print(
            "training.py: the simulator runs ~150 us per thread; use --tiny, or NBCOLL_BACKEND=numpy", file=sys.stderr
        )
        return 2
    settings = SETTINGS["tiny" if args.tiny else "full"]
    rows = [
        run(settings["hidden"], batch, settings["rounds"], settings["steps_per_round"], settings["warmup"])
        for batch in settings["batches"]
    ]
    env = environment()
    print(format_table(rows, env["backend"]), flush=True)
    command = f"NBCOLL_BACKEND={env['backend']} python benchmarks/training.py" + (" --tiny" if args.tiny else "")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"training_{env['backend']}{'_tiny' if args.tiny else ''}"
    write_json(stem.with_suffix(".json"), {"env": env, "settings": settings, "results": rows})
    stem.with_suffix(".rst").write_text(format_rst(rows, env, command))
    print(f"# wrote {stem}.json, .rst")
    return 0


if __name__ == "__main__":
    sys.exit(main())
