"""Sizes and bandwidths as nccl-tests counts them: ``S`` bytes, algbw = S / time, busbw = algbw x factor.

``S`` is the larger of the send and receive buffers of one rank: the whole all-reduced buffer, or all ranks'
blocks together for all-gather, reduce-scatter, all-to-all, gather and scatter. The bus-bandwidth factor turns
algbw into the bandwidth each link of a ring carries, so that one number can be compared across rank counts
and with the hardware's peak::

    all_reduce                                              2(n-1)/n
    all_gather, reduce_scatter, all_to_all, gather, scatter  (n-1)/n
    broadcast, reduce, sendrecv                             1

Example::

    bus_factor("all_reduce", 4)          # 1.5
    parse_size("8M")                     # 8388608
    block_count("all_gather", 1024, np.dtype("float32"), 4)   # 64 elements per rank
"""

from __future__ import annotations

import numpy as np

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "sendrecv",
)
"""Every collective the perf tool measures, under nbcoll's method names."""

BLOCKED = frozenset({"all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"})
"""Collectives whose ``S`` holds one block per rank."""

REDUCING = frozenset({"all_reduce", "reduce", "reduce_scatter"})
ROOTED = frozenset({"broadcast", "reduce", "gather", "scatter"})

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def bus_factor(collective: str, nranks: int) -> float:
    """nccl-tests' factor from algbw to busbw for ``collective`` on ``nranks`` ranks.

    >>> from nbcoll.perf import bus_factor
    >>> bus_factor("all_reduce", 4), bus_factor("all_gather", 4), bus_factor("broadcast", 4)
    (1.5, 0.75, 1.0)
    """
    if collective not in COLLECTIVES:
        raise ValueError(f"collective: unknown {collective!r}; expected one of {', '.join(COLLECTIVES)}")
    if nranks < 1:
        raise ValueError(f"nranks: must be >= 1, got {nranks}")
    n = nranks
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective in BLOCKED:
        return (n - 1) / n
    return 1.0


def parse_size(text: str | int) -> int:
    """Bytes from ``"8"``, ``"64K"``, ``"8M"`` or ``"1G"`` (powers of 1024, as nccl-tests reads them).

    >>> from nbcoll.perf import parse_size
    >>> parse_size("8"), parse_size("64K"), parse_size("8M")
    (8, 65536, 8388608)
    """
    if isinstance(text, int):
        value = text
    else:
        cleaned = text.strip().upper().removesuffix("IB").removesuffix("B") if text.strip() else ""
        digits, unit = cleaned.rstrip("KMG"), cleaned[len(cleaned.rstrip("KMG")) :]
        if not digits.isdigit() or len(unit) > 1:
            raise ValueError(f"size: expected a byte count such as 8, 64K, 8M or 1G, got {text!r}")
        value = int(digits) * _UNITS[unit]
    if value < 0:
        raise ValueError(f"size: must be >= 0, got {value}")
    return value


def format_size(nbytes: int) -> str:
    """``1048576`` -> ``"1 MiB"``: the short form used in progress lines and plots."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def size_sweep(min_bytes: int, max_bytes: int, factor: int | None = None, step_bytes: int | None = None) -> list[int]:
    """The sizes of a sweep (nccl-tests' -b -e -f -i): ``min, min*factor, ...`` or ``min, min+step, ...`` to ``max``.

    >>> from nbcoll.perf import parse_size, size_sweep
    >>> size_sweep(8, parse_size("1K"), factor=4)
    [8, 32, 128, 512]
    >>> size_sweep(0, 3000, step_bytes=1000)
    [0, 1000, 2000, 3000]
    """
    if max_bytes < min_bytes:
        raise ValueError(f"-e: the largest size ({max_bytes}) is smaller than the first (-b {min_bytes})")
    if factor is not None and step_bytes is not None:
        raise ValueError("-f, -i: give a step factor or a step size, not both")
    if step_bytes is not None:
        if step_bytes <= 0:
            raise ValueError(f"-i: the step must be > 0 bytes, got {step_bytes}")
        return list(range(min_bytes, max_bytes + 1, step_bytes))
    factor = 2 if factor is None else factor
    if factor < 2:
        raise ValueError(f"-f: the step factor must be >= 2, got {factor}")
    if min_bytes == 0:
        return [0] if max_bytes == 0 else [0, *size_sweep(1, max_bytes, factor)]
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


def block_count(collective: str, nbytes: int, dtype: np.dtype, nranks: int) -> int:
    """Elements of one rank's block for a test of ``nbytes`` (``S``), rounded down to whole elements and blocks."""
    per = dtype.itemsize * (nranks if collective in BLOCKED else 1)
    return nbytes // per


def total_bytes(collective: str, count: int, dtype: np.dtype, nranks: int) -> int:
    """``S`` for a block of ``count`` elements: what the size column prints and bandwidths divide."""
    return count * dtype.itemsize * (nranks if collective in BLOCKED else 1)


def bandwidths(collective: str, nbytes: int, seconds: float, nranks: int) -> tuple[float, float]:
    """``(algbw, busbw)`` in GB/s (10^9 bytes per second, as nccl-tests prints).

    >>> from nbcoll.perf import bandwidths
    >>> algbw, busbw = bandwidths("all_reduce", 1 << 30, seconds=0.5, nranks=4)
    >>> round(algbw, 3), round(busbw, 3)                  # busbw = algbw * 2 (n - 1) / n
    (2.147, 3.221)
    """
    if seconds <= 0:
        return 0.0, 0.0
    algbw = nbytes / seconds / 1e9
    return algbw, algbw * bus_factor(collective, nranks)
