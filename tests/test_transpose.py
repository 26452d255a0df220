"""Axis permutations against NumPy's ``transpose``, on the simulator (small shapes) and on the numpy backend.

A permutation only moves elements, so every comparison is exact, for every dtype and for bool.
"""

import numpy as np
import pytest

import nbcoll
from nbcoll.kernels.transpose import TILE_DIM, permute, transpose
from nbcoll.memory import DTYPES


def _values(rng, shape, dtype):
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return rng.standard_normal(shape).astype(dtype)


def _permute(x, axes):
    return nbcoll.to_host(permute(nbcoll.to_device(x), axes))


@pytest.mark.parametrize("dtype", list(DTYPES) + [np.dtype(np.bool_)], ids=str)
def test_every_dtype_both_kernels(backend, dtype, rng):
    x = _values(rng, (2, 3, 5), dtype)
    for axes in [(0, 2, 1), (2, 0, 1)]:  # the tiled swap of the last two axes, then the general kernel
        got = _permute(x, axes)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, np.transpose(x, axes))


@pytest.mark.parametrize(
    "shape, axes",
    [
        ((TILE_DIM + 1, 7), (1, 0)),  # a ragged second row of tiles
        ((3, TILE_DIM + 2), (-1, -2)),  # negative axes; a ragged second column of tiles
        ((1, 1), (1, 0)),
        ((11, 3), (1, 0)),  # a thin matrix: 4 x 4 tiles, the last one ragged
        ((12, 40), (1, 0)),  # 16 x 16 tiles, each moved by 16 x 8 threads in two passes; ragged both ways
        ((0, 4), (1, 0)),
        ((2, 0, 3), (0, 2, 1)),
        ((5,), (0,)),
        ((2, 3, 4, 2), (3, 1, 0, 2)),
        ((2, 1, 3, 2), (0, 1, 3, 2)),  # a batch of 2 x 1 matrices through the tile
        ((2, 3, 4), (0, 1, 2)),  # the identity: a contiguous copy
        ((4, 5), None),  # None reverses the axes, as in NumPy
    ],
)
def test_shapes_match_numpy(backend, shape, axes, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    got = _permute(x, axes)
    expected = np.transpose(x, axes)
    assert got.shape == expected.shape and got.flags.c_contiguous
    np.testing.assert_array_equal(got, expected)


def test_transpose_swaps_the_last_two_axes(backend, rng):
    x = rng.integers(0, 1000, size=(2, 3, 4)).astype(np.int32)
    np.testing.assert_array_equal(nbcoll.to_host(transpose(nbcoll.to_device(x))), np.swapaxes(x, -1, -2))


def test_result_is_a_new_array(backend):
    x = nbcoll.to_device(np.arange(6, dtype=np.float32).reshape(2, 3))
    y = permute(x, (0, 1))
    y[0, 0] = 42.0
    assert nbcoll.to_host(x)[0, 0] == 0.0


def test_large_on_numpy():
    x = np.random.default_rng(5).standard_normal((8, 33, 65, 17)).astype(np.float32)
    with nbcoll.use_backend("numpy"):
        for axes in [(0, 1, 3, 2), (3, 2, 0, 1)]:
            np.testing.assert_array_equal(_permute(x, axes), np.transpose(x, axes))


def test_bad_arguments_are_named(backend):
    x = nbcoll.to_device(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"axes: \(0,\) is not a permutation of the 2 axes"):
        permute(x, (0,))
    with pytest.raises(ValueError, match="repeated axis"):
        permute(x, (1, -1))
    with pytest.raises(ValueError, match="not a permutation"):
        permute(x, (0, 2))
    with pytest.raises(TypeError, match="axes: expected a sequence of ints"):
        permute(x, 1)
    with pytest.raises(ValueError, match="x: must be C-contiguous"):
        permute(nbcoll.to_device(np.zeros((2, 6), np.float32))[:, ::2], (1, 0))
    with pytest.raises(ValueError, match="x: transpose swaps the last two axes and needs ndim >= 2"):
        transpose(nbcoll.to_device(np.zeros(3, np.float32)))
    with pytest.raises(TypeError, match="x: expected a device array"):
        permute([[1.0]], (1, 0))
