"""Dropout with a counter-based random generator: the same seed gives the same mask on every backend.

::

    dropout(x, p, seed):           for i: keep[i] = uniform(seed, i) >= p
                                          mask[i] = keep[i];  y[i] = x[i] / (1 - p) if keep[i] else 0
    dropout_backward(dy, mask, p): for i: dx[i] = dy[i] / (1 - p) if mask[i] else 0

A GPU thread cannot share a sequential generator with a million other threads. A *counter-based* generator
needs no shared state: random number ``i`` is a hash of ``(seed, i)``, so every thread computes its own, in any
order, and the host can compute exactly the same numbers. The hash here is SplitMix64's output function (Steele,
Lea and Flood, 2014), applied to the ``i``-th step of a SplitMix64 sequence whose start depends on the seed::

    z = mix(mix(seed) + (i + 1) * 0x9E3779B97F4A7C15)             # all in wrapping uint64 arithmetic
    mix(z): z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27; z *= 0x94D049BB133111EB; z ^= z >> 31

Element ``i`` is kept when the top 53 bits of ``z`` (a uniform integer in ``[0, 2**53)``) reach ``p * 2**53``:
an integer comparison, so the kernel and the NumPy reference agree bit for bit. (``numba.cuda.random`` offers
xoroshiro128+ states, but each state is one sequential stream that has to be created and stored per thread, and
the NumPy backend would have to replay the states' initialisation to match it; a hash of the counter needs
neither.)

Example::

    from nbcoll.kernels import random
    y, mask = random.dropout(x, p=0.1, seed=42)
    dx = random.dropout_backward(dy, mask, p=0.1)
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
from numba import cuda, uint64

from nbcoll import memory
from nbcoll.kernels.dispatch import dispatch
from nbcoll.kernels.indexing import flat_view, launch_1d
from nbcoll.kernels.registry import register

GOLDEN_GAMMA = 0x9E3779B97F4A7C15
"""SplitMix64's step: 2**64 divided by the golden ratio, odd, so that the sequence visits every 64-bit value."""
MIX_MULTIPLIER_1 = 0xBF58476D1CE4E5B9
MIX_MULTIPLIER_2 = 0x94D049BB133111EB
UNIFORM_BITS = 53
"""Bits of each random number compared against the threshold: as many as a float64 mantissa holds."""


def mix64(z):
    """SplitMix64's output function: a bijection of uint64 that spreads every input bit over every output bit.

    Works unchanged on a NumPy uint64 scalar or array and, compiled, on the GPU.
    """
    z = (z ^ (z >> uint64(30))) * uint64(MIX_MULTIPLIER_1)
    z = (z ^ (z >> uint64(27))) * uint64(MIX_MULTIPLIER_2)
    return z ^ (z >> uint64(31))


mix64_device = cuda.jit(device=True)(mix64)


def stream_key(seed: int) -> np.uint64:
    """The start of the SplitMix64 sequence for ``seed``: a mixed seed, so that nearby seeds give unrelated masks."""
    with np.errstate(over="ignore"):
        return mix64(np.uint64(seed))


def keep_threshold(p: float) -> np.uint64:
    """Element ``i`` is kept when ``uniform_bits(i) >= keep_threshold(p)``: probability ``1 - p``."""
    return np.uint64(round(p * 2**UNIFORM_BITS))


def scale_for(p: float, dtype: np.dtype) -> Any:
    """``1 / (1 - p)``, the factor that keeps the expected value of every element, in ``dtype`` (0 when p = 1)."""
    return np.dtype(dtype).type(0.0 if p == 1 else 1.0 / (1.0 - p))


# ---------------------------------------------------------------------------------------------------------------
# NumPy references.


def uniform_bits_reference(seed: int, n: int) -> np.ndarray:
    """The random integers in ``[0, 2**53)`` that elements ``0 .. n-1`` draw for ``seed``."""
    counters = np.arange(1, n + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = mix64(stream_key(seed) + counters * np.uint64(GOLDEN_GAMMA))
    return z >> np.uint64(64 - UNIFORM_BITS)


def dropout_reference(x: np.ndarray, p: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``mask[i] = uniform(seed, i) >= p``; ``y[i] = x[i] * (1 / (1 - p)) if mask[i] else 0``."""
    keep = uniform_bits_reference(seed, x.size).reshape(x.shape) >= keep_threshold(p)
    y = np.where(keep, x * scale_for(p, x.dtype), np.zeros((), x.dtype)).astype(x.dtype)
    return y, keep.astype(np.uint8)


def dropout_backward_reference(dy: np.ndarray, mask: np.ndarray, p: float) -> np.ndarray:
    """``dx[i] = dy[i] * (1 / (1 - p)) if mask[i] else 0``: the same scaling as the forward pass."""
    return np.where(mask != 0, dy * scale_for(p, dy.dtype), np.zeros((), dy.dtype)).astype(dy.dtype)


# ---------------------------------------------------------------------------------------------------------------
# Kernels.


@register(
    "void(float32[::1], uint64, uint64, float32, float32[::1], uint8[::1])",
    "void(float16[::1], uint64, uint64, float16, float16[::1], uint8[::1])",
    "void(float64[::1], uint64, uint64, float64, float64[::1], uint8[::1])",
)
@cuda.jit
def dropout_kernel(x, key, threshold, scale, y, mask):
    # One thread draws the random number of one element (a hash of the key and its index) and keeps or drops it.
    i = cuda.grid(1)
    if i < x.size:
        z = mix64_device(key + (uint64(i) + uint64(1)) * uint64(GOLDEN_GAMMA))
        if (z >> uint64(64 - UNIFORM_BITS)) >= threshold:
            mask[i] = 1
            y[i] = x[i] * scale
        else:
            mask[i] = 0
            y[i] = 0


@register(
    "void(float32[::1], uint8[::1], float32, float32[::1])",
    "void(float16[::1], uint8[::1], float16, float16[::1])",
)
@cuda.jit
def dropout_backward_kernel(dy, mask, scale, dx):
    # One thread passes one gradient element through if the forward pass kept it.
    i = cuda.grid(1)
    if i < dy.size:
        if mask[i] != 0:
            dx[i] = dy[i] * scale
        else:
            dx[i] = 0


# ---------------------------------------------------------------------------------------------------------------
# Launch functions.


def _float_input(x: Any, arg: str) -> Any:
    x = memory.as_device_array(x, arg)
    dtype = memory.check_dtype(x.dtype, f"{arg}.dtype")
    if dtype.kind != "f":
        raise TypeError(f"{arg}.dtype: dropout needs a floating dtype (float16/32/64), got {dtype}")
    memory.require_contiguous(x, arg)
    return x


def _check_p(p: float) -> float:
    if not isinstance(p, (int, float, np.floating, np.integer)) or not 0 <= p <= 1:
        raise ValueError(f"p: the drop probability must be a number in [0, 1], got {p!r}")
    return float(p)


def _check_seed(seed: int) -> int:
    if not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
        raise ValueError(f"seed: expected an int in [0, 2**64), got {seed!r}")
    return int(seed)


@contextlib.contextmanager
def _wrapping_arithmetic() -> Iterator[None]:
    """Silence NumPy's overflow warnings while the simulator runs the hash, whose uint64 products wrap by design.

    The simulator runs kernels on NumPy scalars, which warn when an integer wraps; a GPU wraps silently. The
    warning filter is process-wide, so it reaches the simulator's threads (NumPy's errstate would not).
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*overflow encountered in scalar", category=RuntimeWarning)
        yield


def dropout(x: Any, p: float, seed: int) -> tuple[Any, Any]:
    """Zero each element with probability ``p`` and scale the others by ``1 / (1 - p)``; returns ``(y, mask)``.

    ``mask`` is uint8, 1 where the element was kept. The same ``(seed, x.size)`` gives the same mask on every
    backend. Floats only.
    """
    x, p, seed = _float_input(x, "x"), _check_p(p), _check_seed(seed)
    return _dropout(x, p, seed)


@dispatch(reference=dropout_reference)
def _dropout(x: Any, p: float, seed: int) -> tuple[Any, Any]:
    y = memory.empty(tuple(x.shape), x.dtype)
    mask = memory.empty(tuple(x.shape), np.uint8)
    with _wrapping_arithmetic():
        launch_1d(
            dropout_kernel,
            x.size,
            flat_view(x),
            stream_key(seed),
            keep_threshold(p),
            scale_for(p, x.dtype),
            flat_view(y),
            flat_view(mask),
        )
    return y, mask


def dropout_backward(dy: Any, mask: Any, p: float) -> Any:
    """The gradient of :func:`dropout`: ``dx = dy * mask / (1 - p)``."""
    dy, p = _float_input(dy, "dy"), _check_p(p)
    mask = memory.as_device_array(mask, "mask")
    if mask.dtype != np.uint8:
        raise TypeError(f"mask.dtype: expected uint8 (the mask dropout returns), got {mask.dtype}")
    memory.require_contiguous(mask, "mask")
    if tuple(mask.shape) != tuple(dy.shape):
        raise ValueError(f"mask: expected dy's shape {tuple(dy.shape)}, got {tuple(mask.shape)}")
    return _dropout_backward(dy, mask, p)


@dispatch(reference=dropout_backward_reference)
def _dropout_backward(dy: Any, mask: Any, p: float) -> Any:
    dx = memory.empty(tuple(dy.shape), dy.dtype)
    launch_1d(dropout_backward_kernel, dy.size, flat_view(dy), flat_view(mask), scale_for(p, dy.dtype), flat_view(dx))
    return dx
