"""Kernel benchmarks: GB/s (GFLOP/s for matmul) of nbcoll's kernels, and the share of a ceiling measured in
the same run.

The ceilings: a large copy for bandwidth (on a GPU the faster of the driver's device-to-device copy and CuPy's,
when CuPy is installed; ``numpy.copyto`` on the CPU) and the vendor library's matmul (CuPy, that is cuBLAS, on a
GPU when CuPy is installed; NumPy's BLAS on the CPU).
On the ``numpy`` backend every kernel is also compared with the plain NumPy expression it stands for, so the
cost of nbcoll's argument checks and dispatch shows.

Timing: CUDA events on a GPU, the host clock elsewhere; warm-up calls first, then the median of repeats.
Arrays are larger than the caches (64 MiB per operand on the CPU, 256 MiB on a GPU).

Run::

    python benchmarks/kernels.py                         # the process's backend (cuda on a GPU machine)
    NBCOLL_BACKEND=numpy python benchmarks/kernels.py    # the NumPy references against plain NumPy
    python benchmarks/kernels.py --tiny                  # on the simulator: tiny sizes, proves the script runs

Writes ``kernels_<backend>.json`` and ``.rst`` into ``--out`` (default ``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from report import environment, list_table, write_json

from nbcoll import backend, memory
from nbcoll.kernels import combine, copy, elementwise, matmul, reduction, softmax, transpose

HERE = Path(__file__).resolve().parent


@dataclass
class Sizes:
    elements: int  # of every 1-D operand
    rows: int  # softmax and transpose: rows x cols
    cols: int
    matmul: int  # square matmul side
    repeats: int
    warmup: int


SIZES = {
    "cpu": Sizes(elements=16 << 20, rows=4096, cols=4096, matmul=1024, repeats=7, warmup=2),
    "gpu": Sizes(elements=64 << 20, rows=8192, cols=8192, matmul=4096, repeats=20, warmup=3),
    "tiny": Sizes(elements=300, rows=4, cols=32, matmul=16, repeats=2, warmup=1),
}


@dataclass
class Result:
    kernel: str
    what: str  # "GB/s" or "GFLOP/s"
    rate: float
    ceiling: float
    percent: float
    numpy_rate: float | None  # plain NumPy's rate for the same work (numpy backend only)
    seconds: float


def _synchronize() -> None:
    if backend.get_backend() == "cuda":
        backend.cuda().synchronize()


def median_seconds(run: Callable[[], Any], repeats: int, warmup: int) -> float:
    """Median seconds of one call: CUDA events on a GPU, the host clock elsewhere (the simulator has no events)."""
    for _ in range(warmup):
        run()
    samples = []
    if backend.get_backend() == "cuda":
        cuda = backend.cuda()
        for _ in range(repeats):
            start, end = cuda.event(timing=True), cuda.event(timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            samples.append(cuda.event_elapsed_time(start, end) / 1e3)
    else:
        for _ in range(repeats):
            _synchronize()
            t0 = time.perf_counter()
            run()
            _synchronize()
            samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _vendor_matmul(a_host: np.ndarray, b_host: np.ndarray) -> Callable[[], Any] | None:
    """The library matmul of this backend: CuPy (cuBLAS) on cuda, NumPy (BLAS) elsewhere; None if absent."""
    if backend.get_backend() != "cuda":
        return lambda: a_host @ b_host
    try:
        import cupy
    except ImportError:
        return None
    a, b = cupy.asarray(a_host), cupy.asarray(b_host)
    return lambda: a @ b


def _platform_copies(x: Any, out: Any) -> list[Callable[[], Any]]:
    """The copies the bandwidth ceiling is the fastest of: the platform's own, not kernels of ours.

    On a GPU, the driver's device-to-device copy and, where CuPy is installed, CuPy's copy kernel: the driver's
    copy alone ran slower than a plain kernel of ours on an H200, which put kernels above 100% of it.
    """
    if isinstance(x, np.ndarray):
        return [lambda: np.copyto(out, x)]
    copies = [lambda: out.copy_to_device(x)]
    try:
        import cupy
    except ImportError:
        return copies
    cupy_x, cupy_out = cupy.asarray(x), cupy.asarray(out)  # the same memory, through __cuda_array_interface__
    return [*copies, lambda: cupy.copyto(cupy_out, cupy_x)]


def benchmark(sizes: Sizes, on_result: Callable[[list[Result], dict], None] | None = None) -> tuple[list[Result], dict]:
    """Time every kernel; ``on_result(results so far, ceilings)`` is called after each one."""
    rng = np.random.default_rng(0)
    f32 = np.float32
    n, rows, cols, m = sizes.elements, sizes.rows, sizes.cols, sizes.matmul
    host_a = rng.standard_normal(n).astype(f32)
    host_b = rng.standard_normal(n).astype(f32)
    a, b, out = memory.to_device(host_a), memory.to_device(host_b), memory.empty(n, f32)
    host_2d = rng.standard_normal((rows, cols)).astype(f32)
    x2d = memory.to_device(host_2d)
    host_ma = rng.standard_normal((m, m)).astype(f32)
    host_mb = rng.standard_normal((m, m)).astype(f32)
    ma, mb = memory.to_device(host_ma), memory.to_device(host_mb)
    item = 4
    on_numpy = backend.get_backend() == "numpy"

    def time_it(run):
        return median_seconds(run, sizes.repeats, sizes.warmup)

    copy_seconds = min(time_it(run) for run in _platform_copies(a, out))
    copy_rate = 2 * n * item / copy_seconds / 1e9
    vendor = _vendor_matmul(host_ma, host_mb)
    vendor_rate = 2 * m**3 / time_it(vendor) / 1e9 if vendor is not None else float("nan")
    ceilings = {
        "copy GB/s": copy_rate,
        "library matmul GFLOP/s": vendor_rate,
        "library": "CuPy (cuBLAS)" if backend.get_backend() == "cuda" else "NumPy (BLAS)",
    }

    def softmax_numpy():
        e = np.exp(host_2d - host_2d.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    cases = [
        # name, nbcoll call, plain NumPy call, bytes or flops, unit
        ("elementwise relu", lambda: elementwise.unary("relu", a, out), lambda: np.maximum(host_a, 0, out=host_b),
         2 * n * item, "GB/s"),
        ("elementwise add", lambda: elementwise.binary("add", a, b, out), lambda: np.add(host_a, host_b, out=host_b),
         3 * n * item, "GB/s"),
        ("combine sum", lambda: combine.combine("sum", out, a), lambda: np.add(host_b, host_a, out=host_b),
         3 * n * item, "GB/s"),
        ("copy", lambda: copy.copy(out, a), lambda: np.copyto(host_b, host_a), 2 * n * item, "GB/s"),
        ("reduction sum", lambda: reduction.reduce_all("sum", a), lambda: host_a.sum(), n * item, "GB/s"),
        ("softmax rows", lambda: softmax.softmax(x2d), softmax_numpy, 2 * rows * cols * item, "GB/s"),
        ("transpose 2-D", lambda: transpose.permute(x2d, (1, 0)), lambda: np.ascontiguousarray(host_2d.T),
         2 * rows * cols * item, "GB/s"),
        ("matmul", lambda: matmul.matmul(ma, mb), lambda: host_ma @ host_mb, 2 * m**3, "GFLOP/s"),
    ]  # fmt: skip
    results = []
    for name, ours, plain, work, unit in cases:
        seconds = time_it(ours)
        rate = work / seconds / 1e9
        ceiling = vendor_rate if unit == "GFLOP/s" else copy_rate
        numpy_rate = work / time_it(plain) / 1e9 if on_numpy else None
        results.append(Result(name, unit, rate, ceiling, 100 * rate / ceiling, numpy_rate, seconds))
        if on_result is not None:
            on_result(results, ceilings)
    return results, ceilings


def format_table(results: list[Result], ceilings: dict) -> str:
    lines = [
        f"# backend {backend.get_backend()}: copy ceiling {ceilings['copy GB/s']:.2f} GB/s, "
        f"{ceilings['library']} matmul {ceilings['library matmul GFLOP/s']:.2f} GFLOP/s",
        f"#{'kernel':<19}{'rate':>12}{'unit':>9}{'% ceiling':>11}{'plain NumPy':>13}{'median (ms)':>13}",
    ]
    for r in results:
        plain = f"{r.numpy_rate:13.4g}" if r.numpy_rate is not None else f"{'-':>13}"
        lines.append(f"{r.kernel:<20}{r.rate:12.4g}{r.what:>9}{r.percent:10.1f}%{plain}{r.seconds * 1e3:13.3f}")
    return "\n".join(lines)


def format_rst(results: list[Result], ceilings: dict, env: dict, command: str) -> str:
    out = [
        f".. generated by benchmarks/kernels.py on {env['date']}; do not edit by hand",
        "",
        f"{env['backend']} backend, {env['date']} on ``{env['host']}`` ({env['machine']}); Python {env['python']}, "
        f"NumPy {env['numpy']}, Numba {env['numba']}. Command: ``{command}``. Ceilings measured in the same run: "
        f"copy {ceilings['copy GB/s']:.2f} GB/s, {ceilings['library']} matmul "
        f"{ceilings['library matmul GFLOP/s']:.2f} GFLOP/s.",
        "",
    ]
    header = ["kernel", "rate", "% of ceiling", "plain NumPy", "median (ms)"]
    rows = [
        [
            r.kernel,
            f"{r.rate:.4g} {r.what}",
            f"{r.percent:.1f}",
            f"{r.numpy_rate:.4g} {r.what}" if r.numpy_rate is not None else "-",
            f"{r.seconds * 1e3:.3f}",
        ]
        for r in results
    ]
    out += list_table(header, rows)
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="nbcoll kernel benchmarks")
    p.add_argument("--tiny", action="store_true", help="tiny sizes (for the simulator: proves the script runs)")
    p.add_argument("--out", default=str(HERE / "results"), help="directory for the .json and .rst")
    args = p.parse_args(argv)
    kind = "tiny" if args.tiny else "gpu" if backend.get_backend() == "cuda" else "cpu"
    if kind == "cpu" and backend.get_backend() == "sim":
        print("kernels.py: the simulator runs ~150 us per thread; use --tiny, or NBCOLL_BACKEND=numpy", file=sys.stderr)
        return 2
    import numba

    env = environment(numba=numba.__version__)
    command = f"NBCOLL_BACKEND={env['backend']} python benchmarks/kernels.py" + (" --tiny" if args.tiny else "")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"kernels_{env['backend']}{'_tiny' if args.tiny else ''}"

    def save(results: list[Result], ceilings: dict, complete: bool = False) -> None:
        """Rewritten after every kernel, so that a run stopped early still leaves what it measured."""
        if not complete:
            r = results[-1]
            print(f"# {r.kernel}: {r.rate:.4g} {r.what}, {r.percent:.1f}% of the ceiling", flush=True)
        report = {"env": env, "sizes": asdict(SIZES[kind]), "ceilings": ceilings, "complete": complete}
        report["results"] = [asdict(r) for r in results]
        write_json(stem.with_suffix(".json"), report)

    results, ceilings = benchmark(SIZES[kind], on_result=save)
    print(format_table(results, ceilings), flush=True)
    save(results, ceilings, complete=True)
    stem.with_suffix(".rst").write_text(format_rst(results, ceilings, env, command))
    print(f"# wrote {stem}.json, .rst")
    return 0


if __name__ == "__main__":
    sys.exit(main())
