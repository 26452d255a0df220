"""The reduction step of every collective: ``dst = op(dst, src)``, one element per thread.

A ring all-reduce receives a chunk from its left neighbour and folds it into its own chunk; a tree reduce does the
same with its children's chunks. That fold is this file::

    combine(op, dst, src):          for i: dst[i] = op(dst[i], src[i])
    combine_into(op, out, a, b):    for i: out[i] = op(a[i], b[i])      # no extra copy of a received chunk

The reduction ops are NCCL's: ``"sum"``, ``"prod"``, ``"max"``, ``"min"``, ``"avg"`` and the pre-multiplied sum
``premul_sum(scalar)``. The last two are a sum plus one extra elementwise step, again as in NCCL:

* ``avg`` sums, and the rank that holds the final value divides it by the number of ranks
  (:func:`~nbcoll.kernels.scale.divide`: floor division for integers, true division for floats);
* ``premul_sum(s)`` multiplies every rank's input by ``s`` (:func:`~nbcoll.kernels.scale.premul`) and then sums.

:func:`pre_op` and :func:`post_op` apply those extra steps for any op, so a collective can be written once.

float16 is widened to float32 for the arithmetic and rounded back, as NCCL accumulates half precision; integer
overflow wraps around like NumPy's fixed-width integers. bfloat16, float8_e4m3fn and float8_e5m2 follow the same
rule, one step at a time, as NCCL does per step::

    for i: dst[i] = round_to_dtype(op(float32(dst[i]), float32(src[i])))      # once per step, nearest even

so a ring's sum of n inputs is rounded n - 1 times, in the ring's order. avg's division and premul_sum's
multiplication are one more such step: float32, then one rounding. The words are converted by
:mod:`nbcoll.kernels.low_precision` (on numpy, ``ml_dtypes``' casts, which equal those kernels bit for bit).

With NaNs in the input, ``max`` and ``min`` follow the
kernel's rule ``a if a >= b else b`` and may differ from NumPy's NaN-propagating ``maximum``.

Example::

    >>> import numpy as np, nbcoll
    >>> from nbcoll.kernels import combine
    >>> dst = nbcoll.to_device(np.array([1.0, 2.0], np.float32))
    >>> src = nbcoll.to_device(np.array([10.0, 20.0], np.float32))
    >>> _ = combine.combine("sum", dst, src)         # dst += src
    >>> nbcoll.to_host(dst)
    array([11., 22.], dtype=float32)
    >>> op = combine.premul_sum(0.5)
    >>> _ = combine.pre_op(op, src)                  # src *= 0.5, before src is sent
    >>> _ = combine.combine(op, dst, src)            # then a sum
    >>> nbcoll.to_host(dst)
    array([16., 32.], dtype=float32)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import cuda
from numba.types import float16, float32

from nbcoll import memory
from nbcoll.kernels import low_precision as lp
from nbcoll.kernels import scale as scale_kernels
from nbcoll.kernels.dispatch import dispatch
from nbcoll.kernels.indexing import flat_view, launch_1d
from nbcoll.kernels.registry import register
from nbcoll.kernels.scale import (  # noqa: F401  (importable from here as before)
    accumulation_dtype,
    divide_reference,
    scale,
    scale_reference,
)

# ---------------------------------------------------------------------------------------------------------------
# Describing a reduction op.

REDUCE_OPS = ("sum", "prod", "max", "min", "avg")
"""The reduction ops named by a string; the pre-multiplied sum is :func:`premul_sum`."""


@dataclass(frozen=True)
class PremulSum:
    """NCCL's pre-multiplied sum: every rank's input is multiplied by ``scalar``, then the results are summed.

    Example::

        >>> world_size = 8
        >>> op = premul_sum(1 / world_size)     # a sum that already averages, for floating dtypes
        >>> op.scalar
        0.125
    """

    scalar: float

    def __post_init__(self) -> None:
        scalar = self.scalar
        if isinstance(scalar, (bool, np.bool_)) or not isinstance(scalar, (int, float, np.integer, np.floating)):
            raise TypeError(f"scalar: expected a real number, got {type(scalar).__name__}")
        if not math.isfinite(float(scalar)):
            raise ValueError(f"scalar: must be finite, got {scalar}")
        if isinstance(scalar, np.generic):  # a plain int or float, so that equal ops compare and hash equal
            object.__setattr__(self, "scalar", scalar.item())

    def __str__(self) -> str:
        return f"premul_sum({self.scalar})"


ReduceOp = str | PremulSum
"""What :func:`parse_op` returns: one of :data:`REDUCE_OPS`, or a :class:`PremulSum`."""


def premul_sum(scalar: float) -> PremulSum:
    """The pre-multiplied sum op with ``scalar`` (NCCL's ``ncclRedOpCreatePreMulSum``).

    >>> import numpy as np, nbcoll
    >>> comm = nbcoll.init()
    >>> x = nbcoll.to_device(np.array([1.0, 2.0], np.float32))
    >>> nbcoll.to_host(comm.all_reduce(x, op=nbcoll.premul_sum(0.5)))   # sum over ranks of 0.5 * x
    array([0.5, 1. ], dtype=float32)
    >>> comm.destroy()
    """
    return PremulSum(scalar)


def parse_op(op: Any) -> ReduceOp:
    """Validate a reduction op: one of :data:`REDUCE_OPS` (any case) or a :class:`PremulSum`."""
    if isinstance(op, PremulSum):
        return op
    if isinstance(op, str) and op.lower() in REDUCE_OPS:
        return op.lower()
    raise ValueError(f"op: unknown reduction op {op!r}; expected one of sum, prod, max, min, avg or premul_sum(scalar)")


def kernel_op(op: Any) -> str:
    """The elementwise op that folds two partial results of ``op``: avg and premul_sum both fold with ``sum``."""
    op = parse_op(op)
    return "sum" if op == "avg" or isinstance(op, PremulSum) else op


# ---------------------------------------------------------------------------------------------------------------
# The scalar rules, written once: device functions in the kernels, plain Python in the simulator.


def _sum(a, b):
    return a + b


def _prod(a, b):
    return a * b


def _max(a, b):
    return a if a >= b else b


def _min(a, b):
    return a if a <= b else b


def _same(v):
    return v


def _to_float32(v):
    return float32(v)


def _to_float16(v):
    return float16(v)


RULES = {"sum": _sum, "prod": _prod, "max": _max, "min": _min}
_NUMPY_RULES = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}

# ---------------------------------------------------------------------------------------------------------------
# NumPy references.


def combine_reference(op: str, a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``for i: out[i] = op(a[i], b[i])`` in NumPy for op in sum, prod, max, min (float16, bfloat16 and fp8
    through float32).

    With ``out`` the result is written there (it may be ``a`` or ``b``) in one pass, without temporaries,
    except for float16 and the low-precision dtypes, which are widened first.
    """
    with np.errstate(all="ignore"):
        return _combine_quietly(op, a, b, out)


def _combine_quietly(op: str, a: np.ndarray, b: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """:func:`combine_reference` inside the caller's ``np.errstate``: an overflow or ``inf - inf`` makes NumPy warn,
    and a kernel does not."""
    rule = _NUMPY_RULES[op]
    if a.dtype == np.float16 or a.dtype in lp.WORD_DTYPES:  # float32 arithmetic, one rounding back
        result = rule(a.astype(np.float32), b.astype(np.float32)).astype(a.dtype)
        if out is None:
            return result
        out[...] = result
        return out
    return rule(a, b, out=out)


def fold_reference(op: str, out: np.ndarray, sources: Sequence[np.ndarray]) -> None:
    """``out = op(sources[0], sources[1])``, then ``out = op(out, s)`` for each later ``s``, in NumPy."""
    if out.dtype.kind != "f":  # integer folds never warn: no errstate, which costs more than a small fold
        _fold_quietly(op, out, sources)
        return
    with np.errstate(all="ignore"):  # once for the whole fold, not once a pair
        _fold_quietly(op, out, sources)


def _fold_quietly(op: str, out: np.ndarray, sources: Sequence[np.ndarray]) -> None:
    _combine_quietly(op, sources[0], sources[1], out)
    for src in sources[2:]:
        _combine_quietly(op, out, src, out)


# ---------------------------------------------------------------------------------------------------------------
# Kernels. A factory compiles one kernel per op with its rule inlined; float16 gets its own kernel that widens
# each element to float32 before the rule and rounds the result back.

_SIG_COMBINE = (
    "void(float32[::1], float32[::1], float32[::1])",
    "void(int8[::1], int8[::1], int8[::1])",
    "void(uint64[::1], uint64[::1], uint64[::1])",
)
_SIG_COMBINE_HALF = ("void(float16[::1], float16[::1], float16[::1])",)


def _make_combine_kernel(op: str, widen, narrow, signatures: tuple[str, ...], name: str) -> Any:
    """The kernel for ``op`` with the element -> accumulator conversion ``widen`` and back ``narrow`` (Python
    functions, or device functions already: the low-precision conversions)."""
    f = cuda.jit(device=True)(RULES[op])
    to_acc = widen if widen in lp.WIDEN.values() else cuda.jit(device=True)(widen)
    from_acc = narrow if narrow in lp.NARROW.values() else cuda.jit(device=True)(narrow)

    @cuda.jit
    def combine_kernel(out, a, b):
        # One thread folds one element: out[i] = op(a[i], b[i]); out may be a itself.
        i = cuda.grid(1)
        if i < out.size:
            out[i] = from_acc(f(to_acc(a[i]), to_acc(b[i])))

    combine_kernel.py_func.__name__ = combine_kernel.py_func.__qualname__ = name
    return register(*signatures, name=f"kernels.combine.{name}")(combine_kernel)


COMBINE_KERNELS = {op: _make_combine_kernel(op, _same, _same, _SIG_COMBINE, f"combine_{op}") for op in RULES}
COMBINE_HALF_KERNELS = {
    op: _make_combine_kernel(op, _to_float32, _to_float16, _SIG_COMBINE_HALF, f"combine_{op}_float16") for op in RULES
}
COMBINE_LOW_PRECISION_KERNELS = {
    dtype: {
        op: _make_combine_kernel(
            op,
            lp.WIDEN[dtype],
            lp.NARROW[dtype],
            (f"void({w}[::1], {w}[::1], {w}[::1])",),
            f"combine_{op}_{dtype.name}",
        )
        for op in RULES
    }
    for dtype, w in ((dtype, word.name) for dtype, word in lp.WORD_DTYPES.items())
}
"""For bfloat16 and fp8, on their words: each element widened to float32, combined, rounded back once."""


def _kernels_and_views(out: Any, *arrays: Any) -> tuple[dict[str, Any], list[Any]]:
    """The kernels for ``out``'s dtype, and the arrays as those kernels take them (low precision: the words)."""
    dtype = out.dtype
    if dtype in lp.WORD_DTYPES:
        return COMBINE_LOW_PRECISION_KERNELS[dtype], [flat_view(lp.words(x)) for x in (out, *arrays)]
    kernels = COMBINE_HALF_KERNELS if dtype == np.float16 else COMBINE_KERNELS
    return kernels, [flat_view(x) for x in (out, *arrays)]


# ---------------------------------------------------------------------------------------------------------------
# Launch functions: check the arguments, then run the kernel or, on the numpy backend, the reference.


def _same_layout(first: Any, first_arg: str, other: Any, other_arg: str) -> None:
    if other.dtype != first.dtype:
        raise TypeError(
            f"{other_arg}: dtype must match {first_arg}, got {other_arg}.dtype={other.dtype} and "
            f"{first_arg}.dtype={first.dtype}"
        )
    if tuple(other.shape) != tuple(first.shape):
        raise ValueError(
            f"{other_arg}: shape must match {first_arg}, got {other_arg}.shape={tuple(other.shape)} and "
            f"{first_arg}.shape={tuple(first.shape)}"
        )


def combine_into(op: Any, out: Any, a: Any, b: Any) -> Any:
    """``for i: out[i] = op(a[i], b[i])``; ``out`` may be ``a`` or ``b`` itself. Returns ``out``.

    ``op`` is any :func:`parse_op` op; avg and premul_sum fold with a sum (their extra steps are
    :func:`pre_op` and :func:`post_op`). All three arrays are C-contiguous, of one shape and one dtype.
    """
    name = kernel_op(op)
    out, a, b = memory.contiguous_input(out, "out"), memory.contiguous_input(a, "a"), memory.contiguous_input(b, "b")
    _same_layout(out, "out", a, "a")
    _same_layout(out, "out", b, "b")
    return _combine_into(name, out, a, b)


def _combine_into_reference(op: str, out: Any, a: Any, b: Any) -> Any:
    return combine_reference(op, a, b, out=out)


@dispatch(reference=_combine_into_reference)
def _combine_into(op: str, out: Any, a: Any, b: Any) -> Any:
    """:func:`combine_into` without its checks: ``op`` is a kernel op, the arrays are checked already."""
    kernels, (out_, a_, b_) = _kernels_and_views(out, a, b)
    launch_1d(kernels[op], out.size, out_, a_, b_)
    return out


def fold_into(rule: str, out: Any, sources: Sequence[Any]) -> None:
    """``for i: out[i] = rule(...rule(rule(sources[0][i], sources[1][i]), sources[2][i])..., sources[-1][i])``: the
    sources folded in the order given, into ``out``, on 1-D contiguous arrays of one dtype and size, without checks.

    The launch the collectives call once per chunk, with every rank's part in rank order, so that every rank
    computes the same bits: they check their buffers and parse their op (:func:`kernel_op` gives ``rule``) once,
    when the collective is called, not again for every chunk. ``out`` may be ``sources[0]`` or ``sources[1]`` (a
    fold in place, as the first pair is folded element by element); a later source must not overlap it, since
    ``out`` changes before that source is read.
    """
    _fold(rule, out, sources)


@dispatch(reference=fold_reference)
def _fold(rule: str, out: Any, sources: Sequence[Any]) -> None:
    """:func:`fold_into` on a device: one launch of the combine kernel a source after the first."""
    kernels, (out_, *views) = _kernels_and_views(out, *sources)
    launch_1d(kernels[rule], out.size, out_, views[0], views[1])
    for src in views[2:]:
        launch_1d(kernels[rule], out.size, out_, out_, src)


def combine(op: Any, dst: Any, src: Any) -> Any:
    """``for i: dst[i] = op(dst[i], src[i])``, the reduction step of the collectives. Returns ``dst``.

    ``dst`` and ``src`` are C-contiguous device arrays of one shape and dtype; pass slices to combine a part.
    """
    name = kernel_op(op)
    dst, src = memory.contiguous_input(dst, "dst"), memory.contiguous_input(src, "src")
    _same_layout(dst, "dst", src, "src")
    return _combine_into(name, dst, dst, src)


# ---------------------------------------------------------------------------------------------------------------
# avg's division and premul_sum's multiplication: kernels.scale's, and for the low-precision dtypes one more step
# of the rule above (float32, then one rounding).


def premul(dst: Any, scalar: float) -> Any:
    """``for i: dst[i] *= scalar`` in place, premul_sum's first step (:func:`nbcoll.kernels.scale.premul`; for
    bfloat16 and fp8 in float32, rounded once). Returns ``dst``."""
    if dst.dtype not in lp.WORD_DTYPES:
        return scale_kernels.premul(dst, scalar)
    dst = memory.contiguous_input(dst, "dst")
    return lp.scale_in_float32(dst, np.float32(PremulSum(scalar).scalar), False)


def divide(dst: Any, n: int) -> Any:
    """``for i: dst[i] /= n`` in place, avg's last step (:func:`nbcoll.kernels.scale.divide`: floor division for
    integers; for bfloat16 and fp8 in float32, rounded once). Returns ``dst``."""
    if dst.dtype not in lp.WORD_DTYPES:
        return scale_kernels.divide(dst, n)
    dst = memory.contiguous_input(dst, "dst")
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n: expected a positive integer (a number of ranks), got {n!r}")
    return lp.scale_in_float32(dst, np.float32(n), True)


def divide_in_place(dst: Any, n: int) -> None:
    """:func:`divide` on a 1-D contiguous array and a positive ``int``, without checks: the per-chunk call."""
    if dst.dtype in lp.WORD_DTYPES:
        lp.scale_in_float32(dst, np.float32(n), True)
    else:
        scale_kernels.divide_in_place(dst, n)


def pre_op(op: Any, x: Any) -> Any:
    """What a rank does to its input before a reduction with ``op``: ``premul`` for premul_sum, else nothing."""
    op = parse_op(op)
    if isinstance(op, PremulSum):
        premul(x, op.scalar)
    return x


def post_op(op: Any, dst: Any, nranks: int) -> Any:
    """What the rank holding a final value does with it: ``divide(dst, nranks)`` for avg, else nothing."""
    if parse_op(op) == "avg":
        divide(dst, nranks)
    return dst
