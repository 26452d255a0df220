"""How well the tuner's cost model predicts: measured against predicted time for every algorithm and size, and
whether the algorithm the tuner would choose is the one that was fastest.

The tuner (:mod:`nbcoll.comm.tuner`) predicts ``steps x alpha + bytes / beta`` with the calibrated ``alpha`` and
``beta`` of this machine and backend (``python -m nbcoll calibrate``), or its defaults. For each collective with
more than one algorithm, each size and each algorithm this script takes the median measured time (the slowest
rank's, over repeats that run the algorithms in orders where each follows each other about equally often,
``report.balanced_rounds``), the prediction from ``comm.estimate``, and their error; per size it names the tuner's
choice (the lowest prediction), the fastest measured algorithm, and the time lost when they differ.

Run::

    python benchmarks/model_fit.py                  # launches itself on 4 ranks, numpy backend
    mpiexec -n 2 python benchmarks/model_fit.py
    python benchmarks/model_fit.py --quick          # small sizes, one rank count: a smoke test
    python benchmarks/model_fit.py --rescore benchmarks/results/model_fit_2ranks.json

Writes ``model_fit_<n>ranks.json`` and ``.rst`` into ``--out`` (default ``benchmarks/results``).

``--rescore`` judges the current model against the times an earlier run stored (one node, numpy backend, default
``NBCOLL_BUFFSIZE`` and ``NBCOLL_STEPS``), without measuring: a change of the model can be checked against times
taken on a quiet machine, on a machine that is not quiet now.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import numpy as np
from ranks import environment, interleaved_samples, run_on_ranks
from report import list_table, write_json
from vs_mpi import HERE, buffers, nbcoll_call

COLLECTIVES = ("all_reduce", "broadcast", "all_gather")
"""The collectives with a choice of algorithm (reduce has the same two as broadcast)."""
FULL_SIZES = [64, 4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20]
QUICK_SIZES = [64, 16 << 10]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="two small sizes, two repeats")
    p.add_argument("--ranks", default="4", help="rank counts to launch when not under mpiexec (default 4)")
    p.add_argument("--repeats", type=int, default=None, help="timed samples per size and algorithm (default 5)")
    p.add_argument("--out", default=str(HERE / "results"), help="directory for the .json and .rst")
    p.add_argument("--rescore", metavar="JSON", help="predict the times stored in JSON with today's defaults (no run)")
    p.add_argument("--fit", metavar="JSON", nargs="+", help="fit the model to these runs' times together (no run)")
    p.add_argument(
        "--calibrate",
        action="store_true",
        help="first run the tuner's calibration (into OUT/tuner_calibration.json) and judge the calibrated model; "
        "without it the model is the tuner's defaults",
    )
    return p.parse_args(argv)


def fit_one(world, comm, collective: str, nbytes: int, repeats: int) -> dict:
    """Measured and predicted seconds of every algorithm of ``collective`` at one size, and the tuner's choice."""
    from nbcoll.comm.algorithms import ALGORITHMS
    from nbcoll.comm.calibrate import calls_per_sample
    from nbcoll.perf import bandwidth

    f32 = np.dtype(np.float32)
    count = bandwidth.block_count(collective, nbytes, f32, comm.size)
    block_bytes = count * f32.itemsize  # what the tuner is given: the per-rank block, or the whole buffer
    send, recv = buffers(collective, count, comm.rank, comm.size)
    calls = {algo: nbcoll_call(comm, collective, algo, send, recv) for algo in ALGORITHMS[collective]}
    for call in calls.values():
        call()
    inner = calls_per_sample(nbytes)
    samples, _ = interleaved_samples(world, calls, repeats, inner)
    measured = {algo: statistics.median(s) for algo, s in samples.items()}
    predicted = {algo: comm.estimate(collective, block_bytes, algo=algo) for algo in calls}
    choice = min(calls, key=lambda a: predicted[a])  # the tuner's rule: lowest estimate, ties to the first
    fastest = min(calls, key=lambda a: measured[a])
    return {
        "collective": collective,
        "block_bytes": block_bytes,
        "nbytes": bandwidth.total_bytes(collective, count, f32, comm.size),
        "measured": measured,
        "predicted": predicted,
        "error": {a: (predicted[a] - measured[a]) / measured[a] for a in calls},
        "choice": choice,
        "fastest": fastest,
        "choice_is_fastest": choice == fastest,
        "lost": measured[choice] / measured[fastest] - 1,
    }


def summary(rows: list[dict]) -> dict:
    errors = [abs(e) for r in rows for e in r["error"].values()]
    return {
        "cases": len(rows),
        "median_abs_error": statistics.median(errors),
        "choice_accuracy": sum(r["choice_is_fastest"] for r in rows) / len(rows),
        "choice_within_10pct": sum(r["lost"] <= 0.10 for r in rows) / len(rows),
        "median_time_lost": statistics.median(r["lost"] for r in rows),
        "worst_time_lost": max(r["lost"] for r in rows),
    }


def refit(rows: list[dict], nranks: int, chunk_bytes: int, window_bytes: int) -> dict:
    """The model's form fitted to these very measurements (:func:`nbcoll.comm.tuner.fit`): how well its terms can
    explain the times at all, apart from how well a calibration taken at another moment sets its parameters."""
    from nbcoll.comm import tuner

    cases = [(r, a) for r in rows for a in r["measured"]]
    ll_bytes = int(os.environ.get("NBCOLL_LL_BYTES", 1 << 16)) if window_bytes else 0
    channels = int(os.environ.get("NBCOLL_NCHANNELS", 2))
    terms = [
        tuner.cost_terms(r["collective"], a, r["block_bytes"], nranks, chunk_bytes, window_bytes, channels, ll_bytes)
        for r, a in cases
    ]
    again = [tuner.replayed(r["collective"], a, nranks, window_bytes) for r, a in cases]
    model = tuner.fit([t[0] for t in terms], [t[1] for t in terms], [r["measured"][a] for r, a in cases], again)
    model.window_bytes, model.ll_bytes, model.channels = window_bytes, ll_bytes, channels
    errors, lost = [], []
    for r in rows:
        predicted = {
            a: tuner.estimate(r["collective"], a, r["block_bytes"], nranks, chunk_bytes, model) for a in r["measured"]
        }
        errors += [abs(predicted[a] / r["measured"][a] - 1) for a in predicted]
        choice = min(predicted, key=lambda a: predicted[a])
        lost.append(r["measured"][choice] / min(r["measured"].values()) - 1)
    return {
        "alpha": model.alpha,
        "beta": model.beta,
        "gamma": model.gamma,
        "gamma_replay": model.gamma_replay if model.gamma_replay is not None else model.gamma,
        "median_abs_error": statistics.median(errors),
        "choice_within_10pct": sum(x <= 0.10 for x in lost) / len(lost),
    }


def format_table(rows: list[dict], nranks: int) -> str:
    lines = [f"# {rows[0]['collective']}, {nranks} ranks: measured / predicted us (error)"]
    for r in rows:
        cells = "  ".join(
            f"{a}: {r['measured'][a] * 1e6:.0f}/{r['predicted'][a] * 1e6:.0f} ({r['error'][a]:+.0%})"
            for a in r["measured"]
        )
        verdict = "ok" if r["choice_is_fastest"] else f"fastest {r['fastest']}, {r['lost']:+.0%} time"
        lines.append(f"{r['nbytes']:>10} B  {cells}  | tuner: {r['choice']} ({verdict})")
    return "\n".join(lines)


def format_rst(all_rows: dict[str, list[dict]], totals: dict, env: dict, nranks: int, model: str, command: str) -> str:
    out = [
        f".. generated by benchmarks/model_fit.py on {env['date']}; do not edit by hand",
        "",
        f"**{nranks} ranks**, {env['backend']} backend, float32; {env['date']} on ``{env['host']}`` "
        f"({env['machine']}). Cost model: {model}. Command: ``python benchmarks/model_fit.py{command}``"
        f"{'' if '--rescore' in command else f' (``mpiexec -n {nranks}``)'}. Over {totals['cases']} cases: median "
        "absolute error "
        f"{totals['median_abs_error']:.0%}, the tuner's choice was the fastest in {totals['choice_accuracy']:.0%} "
        f"of them and within 10% of the fastest in {totals['choice_within_10pct']:.0%}, median time lost to its "
        f"choice {totals['median_time_lost']:.0%} (worst {totals['worst_time_lost']:.0%}). "
        f"{refit_sentence(totals['refit'])}",
        "",
    ]
    for collective, rows in all_rows.items():
        algos = list(rows[0]["measured"])
        header = ["size (B)", *algos, "tuner's choice", "fastest"]
        cells = []
        for r in rows:
            times = [
                f"{r['measured'][a] * 1e6:.0f} / {r['predicted'][a] * 1e6:.0f} ({r['error'][a]:+.0%})" for a in algos
            ]
            lost = "" if r["choice_is_fastest"] else f" ({r['lost']:+.0%} time)"
            cells.append([str(r["nbytes"]), *times, f"{r['choice']}{lost}", r["fastest"]])
        out += list_table(header, cells, f"{collective}, {nranks} ranks: measured / predicted time in us (error)")
        out.append("")
    return "\n".join(out)


def refit_sentence(fitted: dict) -> str:
    return (
        f"Fitted to these measurements themselves (gamma {fitted['gamma'] * 1e6:.0f} us, replayed "
        f"{fitted.get('gamma_replay', fitted['gamma']) * 1e6:.0f} us, alpha "
        f"{fitted['alpha'] * 1e6:.0f} us, beta {fitted['beta'] / 1e9:.2f} GB/s), the model's median error is "
        f"{fitted['median_abs_error']:.0%} and its choice within 10% of the fastest in "
        f"{fitted['choice_within_10pct']:.0%} of the sizes."
    )


def run_rank(args: argparse.Namespace) -> int:
    from mpi4py import MPI

    from nbcoll.comm import calibrate, init, tuner

    world = MPI.COMM_WORLD
    out = Path(args.out)
    if args.calibrate:
        out.mkdir(parents=True, exist_ok=True)
        os.environ["NBCOLL_TUNER_FILE"] = str(out / "tuner_calibration.json")
        calibrate.main()
    else:
        os.environ["NBCOLL_TUNER_FILE"] = str(out / "no_calibration.json")  # not written: the defaults apply
    comm = init(world)
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    repeats = args.repeats or (2 if args.quick else 5)
    all_rows = {}
    for collective in COLLECTIVES:
        all_rows[collective] = [fit_one(world, comm, collective, size, repeats) for size in sizes]
        if comm.rank == 0:
            print(format_table(all_rows[collective], comm.size), flush=True)
    if comm.rank == 0:
        totals = summary([r for rows in all_rows.values() for r in rows])
        local = all(comm.transport_to(p) == "ipc" for p in range(comm.size) if p != comm.rank)
        window_bytes = comm.config.buffsize if local else 0  # the direct algorithms' windows, as the tuner counts
        totals["refit"] = refit(
            [r for rows in all_rows.values() for r in rows], comm.size, comm.config.chunk_bytes, window_bytes
        )
        model = (
            "calibrated on this machine just before" if tuner.calibration_file().exists() else "the tuner's defaults"
        )
        print(
            f"# {totals['cases']} cases: median |error| {totals['median_abs_error']:.0%}; tuner's choice fastest in "
            f"{totals['choice_accuracy']:.0%}, within 10% of it in {totals['choice_within_10pct']:.0%}; median time "
            f"lost {totals['median_time_lost']:.0%}, worst {totals['worst_time_lost']:.0%} (model: {model})\n"
            f"# {refit_sentence(totals['refit'])}"
        )
        env = environment()
        out.mkdir(parents=True, exist_ok=True)
        stem = (
            out / f"model_fit_{comm.size}ranks{'_calibrated' if args.calibrate else ''}{'_quick' if args.quick else ''}"
        )
        report = {"env": env, "nranks": comm.size, "model": model, "summary": totals, "results": all_rows}
        write_json(stem.with_suffix(".json"), report)
        stem.with_suffix(".rst").write_text(
            format_rst(all_rows, totals, env, comm.size, model, " --calibrate" if args.calibrate else "")
        )
        print(f"# wrote {stem}.json, .rst", flush=True)
    comm.destroy()
    return 0


def stored_run(path: str) -> tuple[dict, list[dict]]:
    """An earlier run's report and its rows (one per collective and size), as :func:`run_rank` stored them."""
    stored = json.loads(Path(path).read_text())
    n = stored["nranks"]
    rows = [r for rows in stored["results"].values() for r in rows]
    for r in rows:
        r.setdefault("block_bytes", r["nbytes"] // n if r["collective"] == "all_gather" else r["nbytes"])
    return stored, rows


def one_node_model(alpha: float, beta: float, gamma: float, gamma_replay: float | None):
    """A :class:`~nbcoll.comm.tuner.LinkModel` as one node's communicator with the default settings sets it up:
    the direct algorithms read through windows, LL lines when small, two channels."""
    from nbcoll.comm import tuner
    from nbcoll.comm.config import CommConfig

    config = CommConfig()
    return tuner.LinkModel(alpha, beta, gamma, gamma_replay, config.buffsize, config.nchannels, config.ll_bytes)


def score(rows: list[dict], nranks: int, model) -> dict:
    """Predict every row's times with ``model`` (a ``LinkModel``); each row's errors, choice and time lost, and
    their :func:`summary`."""
    from nbcoll.comm import tuner
    from nbcoll.comm.config import CommConfig

    chunk_bytes = CommConfig().chunk_bytes
    for r in rows:
        r["predicted"] = {
            a: tuner.estimate(r["collective"], a, r["block_bytes"], nranks, chunk_bytes, model) for a in r["measured"]
        }
        r["error"] = {a: r["predicted"][a] / r["measured"][a] - 1 for a in r["measured"]}
        r["choice"] = min(r["predicted"], key=lambda a: r["predicted"][a])
        r["fastest"] = min(r["measured"], key=lambda a: r["measured"][a])
        r["choice_is_fastest"] = r["choice"] == r["fastest"]
        r["lost"] = r["measured"][r["choice"]] / r["measured"][r["fastest"]] - 1
    return summary(rows)


def default_model():
    """The tuner's ``numpy`` defaults for one node."""
    from nbcoll.comm import tuner

    fallback = tuner.slowest(tuner.default_models("numpy"), {"ipc"})
    return one_node_model(fallback.alpha, fallback.beta, fallback.gamma, fallback.gamma_replay)


def fit_runs(paths: list[str]) -> int:
    """The model's form fitted to the times of several earlier runs together, as the tuner's ``numpy`` defaults
    are, and how well that fit and today's defaults predict each run."""
    from nbcoll.comm.config import CommConfig

    runs = [stored_run(path) for path in paths]
    counts = {stored["nranks"] for stored, _ in runs}
    if len(counts) != 1:
        raise SystemExit(f"--fit: the runs must be of one rank count, got {sorted(counts)}")
    n, config = counts.pop(), CommConfig()
    fitted = refit([r for _, rows in runs for r in rows], n, config.chunk_bytes, config.buffsize)
    model = one_node_model(fitted["alpha"], fitted["beta"], fitted["gamma"], fitted["gamma_replay"])
    defaults = default_model()
    print("# run: median |error|, choice within 10% of the fastest; with today's defaults, then with the fit")
    for path, (_, rows) in zip(paths, runs, strict=True):
        today, fit = score(rows, n, defaults), score(rows, n, model)
        print(f"{Path(path).name}: {today['median_abs_error']:.0%}, {today['choice_within_10pct']:.0%}; "
              f"{fit['median_abs_error']:.0%}, {fit['choice_within_10pct']:.0%}")  # fmt: skip
    print(f"# {len(runs)} runs together: {refit_sentence(fitted)}")
    return 0


def rescore(path: str, out: Path) -> int:
    """Today's default model against the measured times of an earlier run: errors, choices and the refit."""
    from nbcoll.comm.config import CommConfig

    stored, rows = stored_run(path)
    out.mkdir(parents=True, exist_ok=True)
    n, config, model = stored["nranks"], CommConfig(), default_model()
    totals = score(rows, n, model)
    for part in stored["results"].values():
        print(format_table(part, n))
    totals["refit"] = refit(rows, n, config.chunk_bytes, config.buffsize)
    print(
        f"# times of {stored['env']['date']}, {n} ranks, today's defaults (gamma {model.gamma * 1e6:.0f} us, replayed "
        f"{(model.gamma_replay or model.gamma) * 1e6:.0f} us, alpha "
        f"{model.alpha * 1e6:.0f} us, beta {model.beta / 1e9:.2f} GB/s): median |error| "
        f"{totals['median_abs_error']:.0%}; choice fastest in {totals['choice_accuracy']:.0%}, within 10% of it in "
        f"{totals['choice_within_10pct']:.0%}; median time lost {totals['median_time_lost']:.0%}, worst "
        f"{totals['worst_time_lost']:.0%}\n# {refit_sentence(totals['refit'])}"
    )
    stem = out / f"{Path(path).stem}_rescored"
    described = (
        f"today's defaults (gamma {model.gamma * 1e6:.0f} us, replayed {(model.gamma_replay or model.gamma) * 1e6:.0f} "
        f"us, alpha {model.alpha * 1e6:.0f} us, beta "
        f"{model.beta / 1e9:.2f} GB/s) against the times measured then"
    )
    where = Path(path).resolve()
    shown = where.relative_to(HERE.parent) if where.is_relative_to(HERE.parent) else where.name  # no machine's path
    command = f" --rescore {shown}"
    stem.with_suffix(".rst").write_text(format_rst(stored["results"], totals, stored["env"], n, described, command))
    print(f"# wrote {stem}.rst")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.rescore:
        return rescore(args.rescore, Path(args.out))
    if args.fit:
        return fit_runs(args.fit)
    return run_on_ranks(__file__, run_rank, args, argv)


if __name__ == "__main__":
    os.environ.setdefault("NBCOLL_BACKEND", "numpy")
    sys.exit(main())
