"""The nccl-tests table: header, one row per size (out-of-place then in-place), and the closing lines.

Example::

    print(header())
    print(row(Row(...)))
    print(footer(rows))

The columns are nccl-tests' own, in its order and widths, so a script that reads nccl-tests' output reads
this too. Lines that are not data start with ``#``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

TYPE_NAMES = {
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "uint32": "uint32",
    "int64": "int64",
    "uint64": "uint64",
    "float16": "half",
    "float32": "float",
    "float64": "double",
    "bfloat16": "bfloat16",
    "float8_e4m3fn": "f8e4m3",
    "float8_e5m2": "f8e5m2",
}
"""NumPy dtype name -> the name nccl-tests prints."""

OP_NAMES = {"premul_sum": "mulsum"}
"""Ops that nccl-tests prints under another name."""

TYPE_ALIASES = {nccl: np_name for np_name, nccl in TYPE_NAMES.items()} | {"int": "int32", "bf16": "bfloat16"}


@dataclass
class Measurement:
    """One timed test: seconds per call (over ranks, as ``-a`` says), bandwidths in GB/s, and ``#wrong``.

    >>> from nbcoll.perf import Measurement, bandwidths
    >>> algbw, busbw = bandwidths("all_reduce", 1 << 20, 0.001, 2)
    >>> Measurement(seconds=0.001, algbw=algbw, busbw=busbw, wrong=0)
    Measurement(seconds=0.001, algbw=1.048576, busbw=1.048576, wrong=0)
    """

    seconds: float
    algbw: float
    busbw: float
    wrong: int | None  # None: not checked (-c 0)


@dataclass
class Row:
    """One line of the table: a size, a type, an op and a root, out-of-place and in-place.

    >>> from nbcoll.perf import Measurement, Row
    >>> from nbcoll.perf.table import row
    >>> timed = Measurement(seconds=2e-5, algbw=0.4, busbw=0.4, wrong=0)
    >>> print(row(Row("all_reduce", "ring", 8192, 2048, "float32", "sum", -1, timed, timed)))
            8192          2048     float     sum      -1    20.00    0.40    0.40      0    20.00    0.40    0.40      0
    """

    collective: str
    algo: str
    nbytes: int
    count: int
    dtype: str
    redop: str
    root: int
    out_of_place: Measurement
    in_place: Measurement | None  # None: the collective has no in-place form


def header() -> str:
    return "\n".join(
        [
            f"#{'':>53}{'out-of-place':>24}{'':>9}{'in-place':>24}",
            f"#{'size':>11}{'count':>14}{'type':>10}{'redop':>8}{'root':>8}"
            f"{'time':>9}{'algbw':>8}{'busbw':>8}{'#wrong':>7}{'time':>9}{'algbw':>8}{'busbw':>8}{'#wrong':>7}",
            f"#{'(B)':>11}{'(elements)':>14}{'':>26}"
            f"{'(us)':>9}{'(GB/s)':>8}{'(GB/s)':>8}{'':>7}{'(us)':>9}{'(GB/s)':>8}{'(GB/s)':>8}{'':>7}",
        ]
    )


def _time(us: float) -> str:
    """At most 8 characters, so the 9-wide column always keeps a space before it."""
    text = f"{us:.2f}" if us < 1e4 else f"{us:.1f}" if us < 1e6 else f"{us:.0f}"
    return f"{text:>9}"


def _measurement(m: Measurement | None) -> str:
    if m is None:
        return f"{'N/A':>9}{'N/A':>8}{'N/A':>8}{'N/A':>7}"
    wrong = "N/A" if m.wrong is None else str(m.wrong)
    return f"{_time(m.seconds * 1e6)}{m.algbw:8.2f}{m.busbw:8.2f} {wrong:>6}"


def row(r: Row) -> str:
    type_name, op_name = TYPE_NAMES.get(r.dtype, r.dtype), OP_NAMES.get(r.redop, r.redop)
    return (
        f"{r.nbytes:12d}{r.count:14d}{type_name:>10}{op_name:>8}{r.root:8d}"
        f"{_measurement(r.out_of_place)}{_measurement(r.in_place)}"
    )


def wrong_total(rows: Sequence[Row]) -> int:
    return sum((m.wrong or 0) for r in rows for m in (r.out_of_place, r.in_place) if m is not None)


def average_busbw(rows: Sequence[Row]) -> float:
    """The mean busbw over every measurement, out-of-place and in-place, as nccl-tests' footer has it."""
    values = [m.busbw for r in rows for m in (r.out_of_place, r.in_place) if m is not None]
    return sum(values) / len(values) if values else 0.0


def footer(rows: Sequence[Row]) -> str:
    wrong = wrong_total(rows)
    return "\n".join(
        [
            f"# Wrong elements       : {wrong} {'OK' if wrong == 0 else 'FAILED'}",
            f"# Avg bus bandwidth    : {average_busbw(rows):.6g} ",
            "#",
        ]
    )
