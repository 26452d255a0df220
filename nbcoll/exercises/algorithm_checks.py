"""Checks of the algorithm exercises: the learner's generator of primitives runs as nbcoll's own algorithm on 2,
3 and 4 ranks, beside the reference solution, both traced.

What the learner sees: which cases pass; for the first wrong one, the first step (rank, step number) whose
primitive, peers or chunk differ from the reference's, and the first wrong element with what it holds; and the
trace diagrams of both runs, drawn by :mod:`nbcoll.comm.trace_view`.

The ranks are threads of the checking process (a loopback world, :mod:`nbcoll.comm.loopback`: the same
communicators, primitives and FIFOs as under ``mpiexec``, with no job to launch). They run on the ``numpy``
backend (the algorithm, not a kernel, is what is graded), with a small FIFO so that a buffer of a few dozen
elements takes several rounds, and a short timeout so that a chunk sent to the wrong neighbour ends in a clear
error, not a hang.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from nbcoll.exercises.report import Report

RANK_COUNTS = (2, 3, 4)
SETTINGS = {"buffsize": 256, "steps": 8, "timeout": 4.0, "nchannels": 1}
"""The ranks' communicator settings: 32-byte chunks (4 x int64), 4 s before a wait that makes no progress fails,
and one channel: the exercises write the algorithm of one channel, which sees the whole buffer."""

COLLECTIVES = {"ring_all_reduce": ("all_reduce", "ring"), "tree_broadcast": ("broadcast", "tree")}
COUNTS = (10, 21, 1)
ELEMENT_STEP = 10_000
"""All-reduce inputs: element i of rank r is ``10**r + ELEMENT_STEP * i`` (at most 4 ranks, so 4 low digits)."""


def _cases(exercise: str, nranks: int) -> list[tuple[str, dict]]:
    if exercise == "ring_all_reduce":
        return [(f"{nranks} ranks, {count} elements", {"count": count}) for count in COUNTS]
    roots = sorted({0, 1, nranks - 1})
    return [
        (f"{nranks} ranks, root {root}, {count} elements", {"count": count, "root": root})
        for root in roots
        for count in (10, 1)
    ]


# -------------------------------------------------------------------------------------------------------------
# The ranks' side: the reference, then each learner's file, on 2, 3 and 4 ranks that are threads of this process.


def run_ranks(
    exercise: str, paths: list[str], trace_root: str, begin: Callable[[str], None] | None = None
) -> list[list[dict]]:
    """Run the reference, then each learner's file, on 2, 3 and 4 ranks; ``[rank][file]``: what each rank saw.

    A file stops at the first rank count it fails on. ``begin(case)`` hears each learner's case start on rank 0.
    """
    from nbcoll import use_backend
    from nbcoll.exercises import catalog

    entry = catalog.get(exercise).entry
    reference = getattr(catalog.load_learner(catalog.get(exercise).solution), entry)
    learners = [getattr(catalog.load_learner(path), entry) for path in paths]
    results = [[{"cases": [], "wrong": None, "error": None} for _ in paths] for _ in range(max(RANK_COUNTS))]
    active = [True] * len(paths)
    with use_backend("numpy"):
        for nranks in RANK_COUNTS:
            _run_cases(exercise, nranks, reference, os.path.join(trace_root, "reference"), None)
            for k, function in enumerate(learners):
                if active[k]:
                    trace = os.path.join(trace_root, str(k))
                    mine = [results[rank][k] for rank in range(nranks)]
                    active[k] = not any(_run_cases(exercise, nranks, function, trace, mine, begin))
    return results


def _run_cases(
    exercise: str,
    nranks: int,
    function: Any,
    trace: str,
    results: list[dict] | None,
    begin: Callable[[str], None] | None = None,
) -> list[int]:
    """Every case of ``nranks`` with ``function`` as the algorithm, on each rank of a loopback world; per rank,
    1 if it failed. ``results`` (one per rank) is ``None`` for the reference."""
    from nbcoll.comm import CommConfig, algorithms, loopback

    collective, algo = COLLECTIVES[exercise]
    original = algorithms.ALGORITHMS[collective][algo]
    algorithms.ALGORITHMS[collective][algo] = function  # for every rank: they are threads of this process
    config = CommConfig(**SETTINGS, trace=os.path.join(trace, f"{nranks}ranks"))
    try:
        with loopback(nranks, config) as world:
            return world.run(lambda comm: _run_rank_cases(comm, exercise, nranks, results, begin))
    finally:
        algorithms.ALGORITHMS[collective][algo] = original


def _run_rank_cases(
    comm: Any, exercise: str, nranks: int, results: list[dict] | None, begin: Callable[[str], None] | None
) -> int:
    """One rank's part of :func:`_run_cases`: 1 if a case failed here (a learner's error is recorded, not raised)."""
    mine = None if results is None else results[comm.rank]
    seq, name = 0, "start"
    try:
        for name, case in _cases(exercise, nranks):
            seq += 1
            if mine is not None and begin is not None and comm.rank == 0:
                begin(name)
            wrong = _run_case(comm, exercise, case)
            if mine is None:
                if wrong is not None:
                    raise AssertionError(f"the reference solution fails {name}: {wrong}")
                continue
            mine["cases"].append([name, wrong is None, nranks, seq])
            if wrong is not None:
                mine["wrong"] = {"case": name, "seq": seq, "nranks": nranks, **wrong}
                return 1
    # The learner's algorithm failed on this rank (or called sys.exit): report it, let the others go on.
    except (Exception, SystemExit) as exc:
        if mine is None:
            raise
        mine["error"] = {"case": name, "seq": seq, "nranks": nranks, "text": f"{type(exc).__name__}: {exc}"}
        mine["cases"].append([name, False, nranks, seq])
        return 1
    return 0


def _run_case(comm: Any, exercise: str, case: dict) -> dict | None:
    count, rank = case["count"], comm.rank
    if exercise == "ring_all_reduce":
        # Element i of rank r is 10**r + 10000 i: the low digits of a sum say which ranks' parts it holds, the
        # high ones catch a block added at the wrong place.
        index = np.arange(count, dtype=np.int64) * ELEMENT_STEP
        buf = index + 10**rank
        comm.all_reduce(buf, algo="ring")
        expected = index * comm.size + sum(10**r for r in range(comm.size))
    else:
        root = case["root"]
        truth = np.arange(1, count + 1, dtype=np.int64) * 10 + root
        buf = truth.copy() if rank == root else np.full(count, -1, np.int64)
        comm.broadcast(buf, root=root, algo="tree")
        expected = truth
    bad = np.flatnonzero(buf != expected)
    if bad.size == 0:
        return None
    i = int(bad[0])
    return {"rank": rank, "element": i, "expected": int(expected[i]), "got": int(buf[i]), "count": int(bad.size)}


# -------------------------------------------------------------------------------------------------------------
# The checker's side.


def check_ring_all_reduce(report: Report, path: str | Path, trace_dir: str | Path | None) -> None:
    check_files("ring_all_reduce", [(report, path)], trace_dir)


def check_tree_broadcast(report: Report, path: str | Path, trace_dir: str | Path | None) -> None:
    check_files("tree_broadcast", [(report, path)], trace_dir)


def case_names(exercise: str) -> list[str]:
    """Every case of ``exercise``, on 2, 3 and 4 ranks, in the order they run."""
    return [name for nranks in RANK_COUNTS for name, _ in _cases(exercise, nranks)]


def check_files(exercise: str, files: list[tuple[Report, str | Path]], trace_dir: str | Path | None) -> None:
    """Check several learners' files, filling each one's report (one file's report hears each case begin)."""
    from nbcoll.comm import CommError

    begin = files[0][0].begin if len(files) == 1 else None
    for report, _ in files:
        report.plan(case_names(exercise))
    with tempfile.TemporaryDirectory(prefix="nbcoll_exercise_") as trace_root:
        try:
            returns = run_ranks(exercise, [str(Path(path).resolve()) for _, path in files], trace_root, begin)
        except CommError as exc:  # a learner's generator that never returns: its rank's thread is left behind
            for report, _ in files:
                report.fail("run", f"a rank did not finish: {exc}")
            return
        for k, (report, _) in enumerate(files):
            mine = [ret[k] for ret in returns]
            _record_cases(report, mine)
            failure = report.first_failure
            nranks, seq = _failing_run(mine) if failure else (max(RANK_COUNTS), None)
            root = Path(trace_root)
            if failure is not None:
                failure.detail = _explain(exercise, mine, root, root / str(k), nranks, seq)
            if trace_dir is not None:
                suffix = "" if len(files) == 1 else f"_{k}"
                report.notes += _draw(exercise, root, root / str(k), nranks, seq, Path(trace_dir), suffix)


def _record_cases(report: Report, returns: list[dict]) -> None:
    """One line per case, in the order they ran, up to the first case that failed on any rank (after it, the
    ranks no longer agree on what runs)."""
    failed_at = _failing_run(returns) if any(r["wrong"] or r["error"] for r in returns) else None
    outcome: dict[tuple[int, int], tuple[str, bool]] = {}
    for ret in returns:
        for name, ok, nranks, seq in ret["cases"]:
            if failed_at is None or (nranks, seq) <= failed_at:
                previous = outcome.get((nranks, seq), (name, True))[1]
                outcome[(nranks, seq)] = (name, previous and ok and (nranks, seq) != failed_at)
    for _, (name, ok) in sorted(outcome.items()):
        report.add(name, ok)
    if not outcome:
        report.fail("run", "no case ran")


def _failing_run(returns: list[dict]) -> tuple[int, int]:
    """The rank count and case number where this file first failed (the earliest any rank saw)."""
    seen = [(r[kind]["nranks"], r[kind]["seq"]) for r in returns for kind in ("wrong", "error") if r[kind]]
    return min(seen) if seen else (max(RANK_COUNTS), 1)


def _explain(exercise: str, returns: list[dict], reference: Path, yours: Path, nranks: int, seq: int) -> str:
    lines = []
    errors = [
        ret["error"]
        for ret in returns
        if ret["error"] and (ret["error"]["nranks"], ret["error"]["seq"]) == (nranks, seq)
    ]
    for error in errors[:2]:
        text = " ".join(line.strip() for line in error["text"].splitlines()[:2])
        lines.append(f"a rank failed in {error['case']}: {text[:500]}")
    wrongs = [
        ret["wrong"]
        for ret in returns
        if ret["wrong"] and (ret["wrong"]["nranks"], ret["wrong"]["seq"]) == (nranks, seq)
    ]
    wrong = wrongs[0] if wrongs else None
    if wrong and not errors:
        lines.append(
            f"rank {wrong['rank']}, element {wrong['element']} of {wrong['case']}: expected {wrong['expected']}, "
            f"got {wrong['got']} ({wrong['count']} elements wrong on that rank)"
        )
        if exercise == "ring_all_reduce":
            lines.append(_parts_held(wrong["got"], wrong["expected"], nranks))
        elif wrong["got"] == -1:
            lines.append("that element never arrived: the rank was never sent it")
    lines.append(_first_divergence(reference / "reference", yours, nranks, seq))
    if any("NotImplementedError" in e["text"] for e in errors):
        lines = [f"{COLLECTIVES[exercise][0]} is not written yet: it raises NotImplementedError"]
    if exercise == "tree_broadcast" and " root 0," not in _case_name(returns, nranks, seq) and seq > 2:
        lines.append(
            "hint: the cases with root 0 pass and this one does not: count positions from the root, "
            "p = (rank - root) mod n, and add root back (mod n) when turning a parent's or child's position into a rank"
        )
    if any(e["text"].startswith("SystemExit") for e in errors):
        lines.append(
            "hint: the algorithm called sys.exit() (or raise SystemExit), which ends a rank, not the collective: "
            "a generator that is done returns"
        )
    if any("Timeout" in e["text"] for e in errors):
        lines.append(
            "hint: a rank waited for a chunk that never came, or for a slot that was never freed: a chunk went "
            "to the wrong neighbour, or one rank yields a step its peer does not expect"
        )
    return "\n".join(lines)


def _case_name(returns: list[dict], nranks: int, seq: int) -> str:
    for ret in returns:
        for name, _, n, s in ret["cases"]:
            if (n, s) == (nranks, seq):
                return name
    return ""


def _parts_held(value: int, expected: int, nranks: int) -> str:
    """Rank r contributes 10**r (plus 10000 i), so the low digits of a sum say how often each rank's part was added."""
    if value // ELEMENT_STEP != expected // ELEMENT_STEP and value % ELEMENT_STEP == expected % ELEMENT_STEP:
        return "every rank's part is there, but from other elements: a block was added or copied at the wrong place"
    digits = [(value % ELEMENT_STEP // 10**r) % 10 for r in range(nranks)]
    missing = [r for r, d in enumerate(digits) if d == 0]
    twice = [r for r, d in enumerate(digits) if d > 1]
    held = [r for r, d in enumerate(digits) if d]
    text = f"rank r adds 10**r (+ 10000 i) to element i, so {value} holds the parts of ranks {held}"
    if missing:
        text += f"; missing: {missing}"
    if twice:
        text += f"; added more than once: {twice}"
    return text


def _load(trace: Path, nranks: int, seq: int) -> dict[int, list[dict]]:
    steps: dict[int, list[dict]] = {r: [] for r in range(nranks)}
    directory = trace / f"{nranks}ranks"
    for rank in range(nranks):
        path = directory / f"rank{rank}.jsonl"
        if path.is_file():
            for line in path.read_text().splitlines():
                record = json.loads(line)
                if record["seq"] == seq:
                    steps[rank].append(record)
    return steps


def _describe(record: dict) -> str:
    span = record["span"] or [0, 0]
    frm = f" from rank {','.join(map(str, record['recv']))}" if record["recv"] else ""
    to = f" to rank {','.join(map(str, record['send']))}" if record["send"] else ""
    return f"{record['primitive']} of elements [{span[0]}, {span[1]}){frm}{to}"


def _first_divergence(reference_trace: Path, your_trace: Path, nranks: int, seq: int) -> str:
    """The first step, in step order, at which some rank's primitive, peers or chunk differ from the reference."""
    yours, reference = _load(your_trace, nranks, seq), _load(reference_trace, nranks, seq)
    longest = max((len(v) for v in [*yours.values(), *reference.values()]), default=0)
    key = ("primitive", "recv", "send", "span")
    for step in range(longest):
        for rank in range(nranks):
            mine = yours[rank][step] if step < len(yours[rank]) else None
            ref = reference[rank][step] if step < len(reference[rank]) else None
            if mine is not None and ref is not None and all(mine[k] == ref[k] for k in key):
                continue
            if mine is None and ref is None:
                continue
            if mine is None:
                return (
                    f"first wrong step: rank {rank}, step {step}: your run has no such step on rank {rank}; "
                    f"the reference does {_describe(ref)}"
                )
            if ref is None:
                return (
                    f"first wrong step: rank {rank}, step {step}: yours does {_describe(mine)}; "
                    f"the reference has no step {step} on rank {rank}"
                )
            return (
                f"first wrong step: rank {rank}, step {step}:\n  yours:     {_describe(mine)}\n"
                f"  reference: {_describe(ref)}"
            )
    return "every step matches the reference's (primitive, peers and chunk); the data is what differs"


def _draw(
    exercise: str, root: Path, yours: Path, nranks: int, seq: int | None, trace_dir: Path, suffix: str
) -> list[str]:
    from nbcoll.comm import trace_view

    trace_dir.mkdir(parents=True, exist_ok=True)
    notes = []
    for variant, trace in (("yours", yours), ("reference", root / "reference")):
        output = trace_dir / f"{exercise}_{variant}{suffix}.png"
        whose = "your" if variant == "yours" else "the reference"
        directory = trace / f"{nranks}ranks"
        if not any(directory.glob("rank*.jsonl")):
            notes.append(f"no trace diagram of {whose} run: it ran no step")
            continue
        try:
            try:
                trace_view.draw(directory, output, seq=seq or 1)
            except LookupError:  # the case never started on any rank: draw every case that did
                trace_view.draw(directory, output)
            notes.append(f"trace diagram of {whose} run on {nranks} ranks: {output}")
        except Exception as exc:  # no matplotlib, say: the check itself stands
            notes.append(f"no trace diagram of {whose} run: {type(exc).__name__}: {exc}")
    return notes
