"""Elementwise map (one input) and zip (two or three inputs, NumPy broadcasting), the simplest GPU pattern.

Every output element is computed by exactly one thread, independently of all others::

    unary:   for i: out[i] = f(x[i])
    binary:  for i: out[i] = f(a[offset_a(i)], b[offset_b(i)])     # offsets from nbcoll.kernels.indexing
    where:   for i: out[i] = a[...] if cond[...] else b[...]

Example::

    >>> import numpy as np, nbcoll
    >>> from nbcoll.kernels import elementwise
    >>> x = nbcoll.to_device(np.array([[-1.0, 2.0], [3.0, -4.0]], np.float32))
    >>> nbcoll.to_host(elementwise.unary("relu", x))
    array([[0., 2.],
           [3., 0.]], dtype=float32)
    >>> bias = nbcoll.to_device(np.array([10.0, 20.0], np.float32))
    >>> nbcoll.to_host(elementwise.binary("add", x, bias))      # bias broadcasts along x's leading dims
    array([[ 9., 22.],
           [13., 16.]], dtype=float32)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numba import cuda

from nbcoll import memory
from nbcoll.kernels.dispatch import dispatch, fill_out
from nbcoll.kernels.indexing import (
    broadcast_shapes,
    broadcast_strides,
    flat_view,
    launch_1d,
    offset_of_device,
    size_of,
)
from nbcoll.kernels.registry import register

# ---------------------------------------------------------------------------------------------------------------
# The scalar rules, written once: each is a device function on the GPU and a plain function in the references.


def _neg(v):
    return -v


def _abs(v):
    return abs(v)


def _relu(v):
    return v if v > 0 else v - v  # v - v is a zero of v's own type


# The simulator runs these rules as Python's math functions, which raise where a GPU (and NumPy) return inf or
# NaN; the explicit branches give the GPU's answers on every backend.
EXP_OVERFLOW = math.log(1.7976931348623157e308)  # above this, exp overflows even float64


def _exp(v):
    if float(v) > EXP_OVERFLOW:  # float(): a float16 v would round the bound itself to 710
        return math.inf
    return math.exp(v)


def _log(v):
    if v > 0:
        return math.log(v)
    if v == 0:
        return -math.inf
    return math.nan  # v < 0, or v is NaN


def _sqrt(v):
    if v >= 0:
        return math.sqrt(v)
    return math.nan  # v < 0, or v is NaN


def _tanh(v):
    return math.tanh(v)


def _sigmoid(v):
    # Two branches so that exp never overflows: exp(-|v|) <= 1.
    if v >= 0:
        return 1 / (1 + math.exp(-v))
    e = math.exp(v)
    return e / (1 + e)


def _erf(v):
    return math.erf(v)


def _erf_reference(x: np.ndarray) -> np.ndarray:
    # NumPy has no erf; Python's, element by element, is the reference (exact to the last bit or so).
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _add(a, b):
    return a + b


def _sub(a, b):
    return a - b


def _mul(a, b):
    return a * b


def _div(a, b):
    return a / b


def _pow(a, b):
    return a**b


def _maximum(a, b):
    # NaN wins, as in NumPy: a != a only for NaN, and a >= NaN is false.
    return a if a >= b or a != a else b


def _minimum(a, b):
    return a if a <= b or a != a else b


def _eq(a, b):
    return a == b


def _ne(a, b):
    return a != b


def _lt(a, b):
    return a < b


def _le(a, b):
    return a <= b


def _gt(a, b):
    return a > b


def _ge(a, b):
    return a >= b


# op name -> (scalar rule, NumPy reference, True when the op needs a floating dtype)
UNARY_OPS = {
    "neg": (_neg, np.negative, False),
    "abs": (_abs, np.abs, False),
    "relu": (_relu, lambda x: np.maximum(x, np.zeros((), x.dtype)), False),
    "exp": (_exp, np.exp, True),
    "log": (_log, np.log, True),
    "sqrt": (_sqrt, np.sqrt, True),
    "tanh": (_tanh, np.tanh, True),
    "sigmoid": (_sigmoid, lambda x: np.exp(-np.logaddexp(np.zeros((), x.dtype), -x)).astype(x.dtype), True),
    "erf": (_erf, _erf_reference, True),
}
BINARY_OPS = {
    "add": (_add, np.add, False),
    "sub": (_sub, np.subtract, False),
    "mul": (_mul, np.multiply, False),
    "div": (_div, np.divide, True),
    "pow": (_pow, np.power, True),
    "maximum": (_maximum, np.maximum, False),
    "minimum": (_minimum, np.minimum, False),
}
COMPARISON_OPS = {
    "eq": (_eq, np.equal),
    "ne": (_ne, np.not_equal),
    "lt": (_lt, np.less),
    "le": (_le, np.less_equal),
    "gt": (_gt, np.greater),
    "ge": (_ge, np.greater_equal),
}

# ---------------------------------------------------------------------------------------------------------------
# NumPy references.


def unary_reference(op: str, x: np.ndarray) -> np.ndarray:
    """``for i: out[i] = f(x[i])`` in NumPy, with NumPy's wrap-around for integers."""
    with np.errstate(all="ignore"):
        return np.asarray(UNARY_OPS[op][1](x), dtype=x.dtype)


def binary_reference(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``for i: out[i] = f(a[i], b[i])`` with broadcasting; comparisons give ``bool``."""
    with np.errstate(all="ignore"):
        if op in COMPARISON_OPS:
            return COMPARISON_OPS[op][1](a, b)
        return np.asarray(BINARY_OPS[op][1](a, b), dtype=a.dtype)


def where_reference(cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``for i: out[i] = a[i] if cond[i] else b[i]`` with broadcasting."""
    return np.where(cond, a, b).astype(a.dtype)


# ---------------------------------------------------------------------------------------------------------------
# Kernels. One kernel per op, built by a factory so that every op is compiled with its rule inlined.

_SIG1 = ("void(float32[::1], float32[::1])", "void(int8[::1], int8[::1])", "void(float16[::1], float16[::1])")
_SIG2 = (
    "void(float32[::1], UniTuple(int64, 2), float32[::1], UniTuple(int64, 2), float32[::1], UniTuple(int64, 2))",
    "void(uint64[::1], UniTuple(int64, 1), uint64[::1], UniTuple(int64, 1), uint64[::1], UniTuple(int64, 1))",
    "void(float16[::1], UniTuple(int64, 3), float16[::1], UniTuple(int64, 3), float16[::1], UniTuple(int64, 3))",
)
_SIG_CMP = (
    "void(float32[::1], UniTuple(int64, 2), float32[::1], UniTuple(int64, 2), boolean[::1], UniTuple(int64, 2))",
    "void(int32[::1], UniTuple(int64, 1), int32[::1], UniTuple(int64, 1), boolean[::1], UniTuple(int64, 1))",
)


def _make_unary_kernel(op: str, rule) -> Any:
    f = cuda.jit(device=True)(rule)

    @cuda.jit
    def unary_kernel(x, out):
        # One thread computes one output element.
        i = cuda.grid(1)
        if i < out.size:
            out[i] = f(x[i])

    unary_kernel.py_func.__name__ = unary_kernel.py_func.__qualname__ = f"unary_{op}"
    signatures = _SIG1 if not UNARY_OPS[op][2] else (_SIG1[0], _SIG1[2])
    return register(*signatures, name=f"kernels.elementwise.unary_{op}")(unary_kernel)


def _make_binary_kernel(op: str, rule, signatures) -> Any:
    f = cuda.jit(device=True)(rule)

    @cuda.jit
    def binary_kernel(a, a_strides, b, b_strides, out, out_shape):
        # One thread computes one output element, reading each input at its broadcast offset.
        i = cuda.grid(1)
        if i < out.size:
            out[i] = f(a[offset_of_device(i, out_shape, a_strides)], b[offset_of_device(i, out_shape, b_strides)])

    binary_kernel.py_func.__name__ = binary_kernel.py_func.__qualname__ = f"binary_{op}"
    return register(*signatures, name=f"kernels.elementwise.binary_{op}")(binary_kernel)


UNARY_KERNELS = {op: _make_unary_kernel(op, spec[0]) for op, spec in UNARY_OPS.items()}
BINARY_KERNELS = {
    op: _make_binary_kernel(op, spec[0], _SIG2 if not spec[2] else (_SIG2[0], _SIG2[2]))
    for op, spec in BINARY_OPS.items()
}
BINARY_KERNELS.update({op: _make_binary_kernel(op, spec[0], _SIG_CMP) for op, spec in COMPARISON_OPS.items()})


@register(
    "void(boolean[::1], UniTuple(int64, 2), float32[::1], UniTuple(int64, 2), float32[::1], "
    "UniTuple(int64, 2), float32[::1], UniTuple(int64, 2))",
    "void(boolean[::1], UniTuple(int64, 1), int64[::1], UniTuple(int64, 1), int64[::1], "
    "UniTuple(int64, 1), int64[::1], UniTuple(int64, 1))",
)
@cuda.jit
def where_kernel(cond, cond_strides, a, a_strides, b, b_strides, out, out_shape):
    # One thread picks one output element from a or b.
    i = cuda.grid(1)
    if i < out.size:
        if cond[offset_of_device(i, out_shape, cond_strides)]:
            out[i] = a[offset_of_device(i, out_shape, a_strides)]
        else:
            out[i] = b[offset_of_device(i, out_shape, b_strides)]


# ---------------------------------------------------------------------------------------------------------------
# Launch functions: check the arguments, then run the kernel or, on the numpy backend, the reference.


def _check_op(op: str, table: dict, arg: str = "op") -> None:
    if op not in table:
        raise ValueError(f"{arg}: unknown op {op!r}; expected one of {', '.join(table)}")


def _input(x: Any, arg: str) -> Any:
    x = memory.as_device_array(x, arg)
    memory.check_dtype(x.dtype, f"{arg}.dtype", allow_bool=True)
    memory.require_contiguous(x, arg)
    return x


def _needs_float(op: str, dtype: np.dtype, needs: bool, arg: str) -> None:
    if needs and dtype.kind != "f":
        raise TypeError(f"{arg}.dtype: op {op!r} needs a floating dtype (float16/32/64), got {dtype}")


def _output(out: Any, shape: tuple[int, ...], dtype: np.dtype) -> Any:
    if out is None:
        return memory.empty(shape, dtype)
    out = memory.as_device_array(out, "out")
    if tuple(out.shape) != shape or out.dtype != dtype:
        raise ValueError(f"out: expected shape {shape} and dtype {dtype}, got {tuple(out.shape)} and {out.dtype}")
    memory.require_contiguous(out, "out")
    return out


def unary(op: str, x: Any, out: Any = None) -> Any:
    """``for i: out[i] = op(x[i])``. ``op`` is one of :data:`UNARY_OPS`; returns ``out``."""
    _check_op(op, UNARY_OPS)
    x = _input(x, "x")
    _needs_float(op, x.dtype, UNARY_OPS[op][2], "x")
    return _unary(op, x, _output(out, tuple(x.shape), x.dtype))


@dispatch(reference=fill_out(unary_reference))
def _unary(op: str, x: Any, out: Any) -> Any:
    if x.size:
        launch_1d(UNARY_KERNELS[op], x.size, flat_view(x), flat_view(out))
    return out


def binary(op: str, a: Any, b: Any, out: Any = None) -> Any:
    """``for i: out[i] = op(a[i], b[i])`` with NumPy broadcasting; comparisons give a ``bool`` array."""
    _check_op(op, {**BINARY_OPS, **COMPARISON_OPS})
    a, b = _input(a, "a"), _input(b, "b")
    if a.dtype != b.dtype:
        raise TypeError(f"a, b: dtypes must match, got a.dtype={a.dtype} and b.dtype={b.dtype}")
    if op in BINARY_OPS:
        _needs_float(op, a.dtype, BINARY_OPS[op][2], "a")
    shape = broadcast_shapes([a.shape, b.shape], ["a", "b"])
    return _binary(op, a, b, _output(out, shape, np.dtype(np.bool_) if op in COMPARISON_OPS else a.dtype))


@dispatch(reference=fill_out(binary_reference))
def _binary(op: str, a: Any, b: Any, out: Any) -> Any:
    shape = tuple(int(s) for s in out.shape)
    n = size_of(shape)
    if n:
        grid_shape = shape or (1,)
        launch_1d(
            BINARY_KERNELS[op],
            n,
            flat_view(a),
            broadcast_strides(a.shape, grid_shape),
            flat_view(b),
            broadcast_strides(b.shape, grid_shape),
            flat_view(out),
            grid_shape,
        )
    return out


def where(cond: Any, a: Any, b: Any, out: Any = None) -> Any:
    """``for i: out[i] = a[i] if cond[i] else b[i]`` with broadcasting; ``cond`` is a ``bool`` array."""
    cond, a, b = _input(cond, "cond"), _input(a, "a"), _input(b, "b")
    if cond.dtype != np.bool_:
        raise TypeError(f"cond.dtype: expected bool, got {cond.dtype}")
    if a.dtype != b.dtype:
        raise TypeError(f"a, b: dtypes must match, got a.dtype={a.dtype} and b.dtype={b.dtype}")
    shape = broadcast_shapes([cond.shape, a.shape, b.shape], ["cond", "a", "b"])
    return _where(cond, a, b, _output(out, shape, a.dtype))


@dispatch(reference=fill_out(where_reference))
def _where(cond: Any, a: Any, b: Any, out: Any) -> Any:
    shape = tuple(int(s) for s in out.shape)
    n = size_of(shape)
    if n:
        grid_shape = shape or (1,)
        launch_1d(
            where_kernel,
            n,
            flat_view(cond),
            broadcast_strides(cond.shape, grid_shape),
            flat_view(a),
            broadcast_strides(a.shape, grid_shape),
            flat_view(b),
            broadcast_strides(b.shape, grid_shape),
            flat_view(out),
            grid_shape,
        )
    return out
