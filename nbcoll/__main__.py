"""The ``nbcoll`` command line: ``python -m nbcoll <subcommand>`` (or ``nbcoll <subcommand>``).

Example::

    python -m nbcoll info           # backend, device and library versions
    python -m nbcoll info --json    # the same, as JSON

A subcommand is one function that takes the parsed arguments and returns the exit status, registered with
:func:`subcommand`; its options, if any, are declared by a second small function::

    def _trace_arguments(parser):
        parser.add_argument("file")

    @subcommand("trace", "print a trace file", arguments=_trace_arguments)
    def trace(args):
        ...
        return 0
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass
class Subcommand:
    """One subcommand: its name, its one-line help, how to declare its options, and what it runs."""

    name: str
    help: str
    run: Callable[[argparse.Namespace], int]
    arguments: Callable[[argparse.ArgumentParser], None] | None = None
    passthrough: bool = False  # every argument goes to ``run`` unparsed (a tool with a command line of its own)


class UsageError(Exception):
    """A mistake in how a subcommand was called: reported as one line, ``nbcoll <subcommand>: error: ...``."""


SUBCOMMANDS: dict[str, Subcommand] = {}


def _at_least(kind: Callable[[str], float], least: float, what: str, strictly: bool = False) -> Callable[[str], float]:
    """An argparse ``type=``: the option's text read as ``kind``, a finite number ``>= least`` (``> least`` if
    ``strictly``); anything else is a usage error that says so, ``argument --hidden: expected an integer >= 1``."""
    relation = ">" if strictly else ">="

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and (value > least if strictly else value >= least)):
            raise argparse.ArgumentTypeError(f"expected {what} {relation} {least:g}, got {text!r}")
        return value

    return parse


_COUNT = _at_least(int, 1, "an integer")


def subcommand(
    name: str,
    help: str,
    arguments: Callable[[argparse.ArgumentParser], None] | None = None,
    passthrough: bool = False,
) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    """Decorator: ``run(args) -> int`` becomes the subcommand ``name``; ``arguments(parser)`` adds options."""

    def decorate(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        if name in SUBCOMMANDS:
            raise ValueError(f"subcommand(name): {name!r} is defined twice")
        SUBCOMMANDS[name] = Subcommand(name, help, run, arguments, passthrough)
        return run

    return decorate


# ------------------------------------------------------------------------------------------------------------
# Subcommands. Each imports what it needs inside, so that one subcommand's dependencies never slow another.


def _info_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as a JSON object")


@subcommand("info", "print the backend, the device and the versions of nbcoll's libraries", _info_arguments)
def info(args: argparse.Namespace) -> int:
    from nbcoll import info as report

    collected = report.collect()
    print(json.dumps(collected, indent=2) if args.json else report.format_report(collected))
    return 0


def _trace_arguments(parser: argparse.ArgumentParser) -> None:
    what = "what to do with the trace: view draws it, export writes it for Perfetto (ui.perfetto.dev)"
    parser.add_argument("action", choices=["view", "export"], help=what)
    parser.add_argument("directory", help="the NBCOLL_TRACE directory of a run")
    parser.add_argument("-o", "--output", default="trace.png", help="image file to write (default trace.png)")
    parser.add_argument("--chrome", metavar="OUT.json", help="export: the Chrome trace event file to write")
    parser.add_argument("--seq", type=int, default=None, help="draw only the collective with this number")
    parser.add_argument("--time", action="store_true", help="x axis in wall-clock time instead of steps")


@subcommand("trace", "draw an NBCOLL_TRACE directory, or export it as Chrome trace events", _trace_arguments)
def trace(args: argparse.Namespace) -> int:
    from nbcoll.comm import trace_export, trace_view

    if args.action == "export" and not args.chrome:
        raise UsageError("export: name the file to write, python -m nbcoll trace export DIR --chrome OUT.json")
    try:
        if args.action == "export":
            path = trace_export.export(args.directory, args.chrome, seq=args.seq)
        else:
            path = trace_view.draw(args.directory, args.output, seq=args.seq, use_time=args.time)
    except (FileNotFoundError, LookupError) as exc:
        raise UsageError(str(exc)) from None
    print(f"wrote {path}")
    return 0


@subcommand(
    "perf", "measure a collective and print nccl-tests' table (the same as python -m nbcoll.perf)", passthrough=True
)
def perf(args: argparse.Namespace) -> int:
    from nbcoll.perf.__main__ import main as perf_main

    return perf_main(args.arguments)


def _calibrate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-bytes", type=int, default=4 << 20, help="largest collective timed (default 4 MiB)")
    parser.add_argument("--repeats", type=int, default=5, help="timed samples per case; the median is kept")


@subcommand(
    "calibrate", "fit the tuner's model per transport to timed collectives (run under mpiexec)", _calibrate_arguments
)
def calibrate(args: argparse.Namespace) -> int:
    from nbcoll.comm import calibrate as calibration

    return calibration.main(max_bytes=args.max_bytes, repeats=args.repeats)


def _exercise_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", help="the exercise; without it, the list of exercises")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--check", metavar="FILE", help="run the exercise's checks on your file")
    what.add_argument("--solution", action="store_true", help="print the reference solution")
    parser.add_argument("--force", action="store_true", help="overwrite an existing starter file")
    parser.add_argument("--dir", default=".", help="where to write the starter (default: the current directory)")
    parser.add_argument("--no-ptx", action="store_true", help="skip the PTX compile of a kernel that passes")
    parser.add_argument(
        "--timeout",
        type=_at_least(float, 0, "seconds", strictly=True),
        default=60.0,
        metavar="SECONDS",
        help="stop a case (or the import of FILE) that runs longer than this and fail it (default 60)",
    )
    parser.add_argument(
        "--trace-dir", default=".", help="where an algorithm exercise writes its trace diagrams (default: here)"
    )


@subcommand("exercise", "list the exercises, start one, check your solution or show the reference", _exercise_arguments)
def exercise(args: argparse.Namespace) -> int:
    from nbcoll import exercises

    if args.name is None:
        if args.check or args.solution:
            raise UsageError("name an exercise: python -m nbcoll exercise NAME --check FILE")
        print("Exercises, in the order of the tutorials (python -m nbcoll exercise NAME starts one):")
        for entry in exercises.EXERCISES.values():
            print(f"  {entry.name:17s} {entry.summary}  [after tutorials/{entry.tutorial}]")
        return 0
    try:
        entry = exercises.get(args.name)
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None
    if args.solution:
        print(entry.solution.read_text(encoding="utf-8"), end="")
        return 0
    if args.check:
        try:
            report = exercises.check(
                entry.name, args.check, ptx=not args.no_ptx, trace_dir=args.trace_dir, timeout=args.timeout
            )
        except FileNotFoundError as exc:
            raise UsageError(str(exc)) from None
        print(report.format())
        return 0 if report.passed else 1
    try:
        target = exercises.copy_starter(entry.name, args.dir, force=args.force)
    except (FileExistsError, FileNotFoundError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    print(f"wrote {target}: fill in {entry.entry}, then run")
    print(f"  python -m nbcoll exercise {entry.name} --check {target}")
    return 0


PLAN_TERMS = """\
what one step costs (see nbcoll.parallel.plan):
  compute    each block's FLOPs at a FLOP rate plus a fixed cost per block (forward + backward); the first
             stage adds the embedding, the last the final norm, the head and the loss; the optimizer's update
  bubble     the other stages' turns while the pipeline fills and drains (pp > 1)
  tp comm    4 all-reduces per block, 1 in the embedding and 4 in the head and loss (tp > 1)
  pp comm    the activation to the next stage and its gradient back, per micro-batch (pp > 1)
  dp comm    one all-reduce of the rank's gradients (dp > 1)
  sharing    with --cores below the ranks, a step lasts at least all ranks' compute over the cores
Collectives cost the tuner's calibrated alpha-beta model plus --call-latency per call; an all-reduce waits
--partner-wait more for its partner to get a shared core back (not with pp > 1, where another stage's rank
uses the core meanwhile). Without --measure the compute rates are NumPy-on-CPU
defaults; --measure times a block, the embedding, the head and loss and the update here, in one process.
The calls are timed only where ranks run: nbcoll.parallel.plan.measure_costs(spec, comm) times every term
on all ranks at once (benchmarks/plan_fit.py and tutorial 20 use it).
"""


def _plan_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog, parser.formatter_class = PLAN_TERMS, argparse.RawDescriptionHelpFormatter
    for name, default, what in [
        ("layers", 4, "transformer blocks"),
        ("hidden", 64, "model width"),
        ("seq", 32, "sequence length"),
        ("batch", 16, "global batch (sequences)"),
        ("heads", 4, "attention heads"),
        ("vocab", 64, "vocabulary size"),
        ("ranks", 4, "ranks to lay out"),
        ("top", 10, "layouts to print"),
    ]:
        parser.add_argument(f"--{name}", type=_COUNT, default=default, help=f"{what} (default {default})")
    parser.add_argument("--bytes", type=int, default=4, choices=(2, 4, 8), help="bytes per value (default 4)")
    parser.add_argument(
        "--measure", action="store_true", help="time the compute costs here (block, embedding, head and loss, update)"
    )
    parser.add_argument("--cores", type=_COUNT, default=None, help="devices the ranks share (default: one per rank)")
    parser.add_argument(
        "--long", action="store_true", help="also lay out context parallelism, sequence parallelism and recomputation"
    )
    parser.add_argument(
        "--memory-limit", type=_at_least(float, 0, "megabytes", strictly=True), default=None,
        help="leave out the layouts whose predicted memory per rank is over this many MB (default: no limit)",
    )  # fmt: skip
    milliseconds = _at_least(float, 0, "milliseconds")
    parser.add_argument(
        "--call-latency", type=milliseconds, default=0.0, help="ms each collective call costs (default 0)"
    )
    parser.add_argument(
        "--partner-wait", type=milliseconds, default=0.0, help="ms more per all-reduce on shared cores (default 0)"
    )


@subcommand("plan", "predict step time and memory of every dp x tp x pp (x cp) layout and rank them", _plan_arguments)
def plan(args: argparse.Namespace) -> int:
    import dataclasses

    from nbcoll.parallel import plan as planner

    if args.hidden % args.heads:  # the one check that takes two options; each alone was checked as it was parsed
        raise UsageError(f"argument --hidden: expected a multiple of --heads ({args.heads}), got {args.hidden}")
    spec = planner.ModelSpec(
        args.layers, args.hidden, args.seq, args.batch, args.heads, args.vocab, bytes_per_value=args.bytes
    )
    rates = planner.measure_rates(spec, cores=args.cores) if args.measure else planner.default_rates(args.cores)
    rates = dataclasses.replace(rates, call_latency=args.call_latency / 1e3, partner_wait=args.partner_wait / 1e3)
    try:
        limit = None if args.memory_limit is None else int(args.memory_limit * 1e6)
        predictions = planner.plan(spec, args.ranks, rates, memory_limit=limit, long_sequences=args.long)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    ms = 1e3
    print(
        f"{spec}\n{args.ranks} ranks; {rates.flops_per_second / 1e9:.2f} GFLOP/s, "
        f"{rates.block_overhead * ms:.2f} ms per block, embedding {rates.embed_overhead * ms:.2f} ms, "
        f"head and loss {rates.head_overhead * ms:.2f} ms, update {rates.update_overhead * ms:.2f} ms per block;\n"
        f"link alpha {rates.link.alpha * 1e6:.0f} us, beta {rates.link.beta / 1e9:.2f} GB/s, "
        f"call {rates.call_latency * ms:.2f} ms, partner wait {rates.partner_wait * ms:.2f} ms\n"
    )
    print(planner.format_plan(predictions, args.top))
    if limit is not None:
        print(f"{len(predictions)} layouts fit the memory limit of {args.memory_limit:g} MB per rank")
    return 0


# ------------------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The argument parser, with one sub-parser per registered subcommand."""
    parser = argparse.ArgumentParser(
        prog="nbcoll", description="nbcoll: NCCL-style collectives, GPU kernels and distributed training."
    )
    commands = parser.add_subparsers(dest="command", metavar="<subcommand>")
    for command in SUBCOMMANDS.values():
        sub = commands.add_parser(
            command.name, help=command.help, description=command.help, add_help=not command.passthrough
        )
        if command.passthrough:
            sub.add_argument("arguments", nargs=argparse.REMAINDER, help="the tool's own arguments")
        if command.arguments is not None:
            command.arguments(sub)
        sub.set_defaults(run=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the subcommand named in ``argv`` (``sys.argv[1:]`` when omitted) and return its exit status.

    A user's mistake (a bad ``NBCOLL_*`` setting, a missing trace directory) ends in one line on standard error
    and exit status 2, not a traceback.
    """
    from nbcoll.backend import BackendError

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.run(args)
    except (UsageError, BackendError) as exc:
        print(f"nbcoll {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
