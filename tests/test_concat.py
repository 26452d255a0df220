"""concat and split against np.concatenate and np.split."""

import numpy as np
import pytest

import nbcoll
from nbcoll.kernels import concat as cc

DTYPES = nbcoll.DTYPES


def values(rng, shape, dtype):
    return rng.integers(0, 100, size=shape).astype(dtype)


def host_list(arrays):
    return [nbcoll.to_host(a) for a in arrays]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_concat_every_dtype(backend, rng, dtype):
    parts = [values(rng, (2, n), dtype) for n in (3, 1, 4)]
    got = nbcoll.to_host(cc.concat([nbcoll.to_device(p) for p in parts], axis=1))
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, np.concatenate(parts, axis=1))


@pytest.mark.parametrize(
    "shapes, axis",
    [
        ([(1,)], 0),
        ([(3,), (0,), (2,)], 0),
        ([(2, 3, 4), (1, 3, 4)], 0),
        ([(2, 3, 4), (2, 1, 4), (2, 2, 4)], -2),
        ([(2, 3, 1), (2, 3, 5)], 2),
        ([(0, 3), (0, 2)], 1),
        ([(1, 1, 1, 2), (1, 1, 1, 3)], 3),
    ],
)
def test_concat_shapes_and_axes(backend, rng, shapes, axis):
    parts = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    got = nbcoll.to_host(cc.concat([nbcoll.to_device(p) for p in parts], axis=axis))
    np.testing.assert_array_equal(got, np.concatenate(parts, axis=axis))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_split_every_dtype(backend, rng, dtype):
    x = values(rng, (5, 3), dtype)
    got = host_list(cc.split(nbcoll.to_device(x), [2, 0, 3], axis=0))
    expected = np.split(x, [2, 2], axis=0)
    assert len(got) == 3
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == dtype
        np.testing.assert_array_equal(g, e)


@pytest.mark.parametrize(
    "shape, sizes, axis",
    [((1,), [1], 0), ((6,), [1, 2, 3], 0), ((2, 7, 3), [3, 4], 1), ((2, 7, 3), [1, 1, 1], -1), ((0, 4), [4], 1)],
)
def test_split_shapes_and_axes(backend, rng, shape, sizes, axis):
    x = rng.standard_normal(shape)
    got = host_list(cc.split(nbcoll.to_device(x), sizes, axis=axis))
    expected = np.split(x, np.cumsum(sizes)[:-1], axis=axis)
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape
        np.testing.assert_array_equal(g, e)


def test_split_then_concat_is_the_identity(backend, rng):
    x = nbcoll.to_device(values(rng, (3, 4, 5), np.int32))
    again = cc.concat(cc.split(x, [2, 0, 3], axis=2), axis=2)
    np.testing.assert_array_equal(nbcoll.to_host(again), nbcoll.to_host(x))


def test_large_numpy(rng):
    with nbcoll.use_backend("numpy"):
        parts = [rng.standard_normal((100, n, 30)) for n in (50, 70, 1)]
        joined = cc.concat(parts, axis=1)
        np.testing.assert_array_equal(joined, np.concatenate(parts, axis=1))
        for g, e in zip(cc.split(joined, [50, 70, 1], axis=1), parts, strict=True):
            np.testing.assert_array_equal(g, e)


def test_argument_errors(backend):
    a = nbcoll.to_device(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="arrays: expected a non-empty"):
        cc.concat([])
    with pytest.raises(TypeError, match=r"arrays\[1\].dtype"):
        cc.concat([a, nbcoll.to_device(np.ones((2, 3)))])
    with pytest.raises(ValueError, match=r"arrays\[1\]: shape"):
        cc.concat([a, nbcoll.to_device(np.ones((3, 3), np.float32))], axis=1)
    with pytest.raises(ValueError, match="axis"):
        cc.concat([a], axis=2)
    with pytest.raises(ValueError, match="sizes"):
        cc.split(a, [1, 1], axis=1)
    with pytest.raises(ValueError, match="sizes"):
        cc.split(a, [4, -1], axis=1)
    with pytest.raises(ValueError, match="x: must be C-contiguous"):
        cc.split(nbcoll.to_device(np.ones((4, 4), np.float32))[:, ::2], [1, 1], axis=1)


# narrow and pad: one block cut out of, or placed into, a larger array. Piece sizes 0, 1, and 3 * 67 = 201 and
# 7 * 43 = 301 elements (not multiples of any block size) are checked against the references.
@pytest.mark.parametrize(
    "shape, axis, start, length",
    [((4,), 0, 1, 0), ((1,), 0, 0, 1), ((3, 70), 1, 2, 67), ((2, 9, 43), 1, 1, 7), ((2, 9, 43), -3, 1, 1)],
)
def test_narrow_and_pad_against_the_references(backend, rng, shape, axis, start, length):
    x = rng.standard_normal(shape).astype(np.float32)
    piece = nbcoll.to_host(cc.narrow(nbcoll.to_device(x), axis, start, length))
    expected = cc.narrow_reference(x, axis % x.ndim, start, length)
    np.testing.assert_array_equal(piece, expected)
    np.testing.assert_array_equal(piece, np.take(x, range(start, start + length), axis=axis))
    padded = nbcoll.to_host(cc.pad(nbcoll.to_device(piece), shape, axis, start))
    np.testing.assert_array_equal(padded, cc.pad_reference(piece, shape, axis % x.ndim, start))
    outside = np.ones(shape, bool)
    np.put_along_axis(
        outside,
        np.arange(start, start + length).reshape([-1 if d == axis % x.ndim else 1 for d in range(x.ndim)]),
        False,
        axis,
    )
    assert not padded[outside].any()


def test_pad_places_a_leading_block_on_every_axis(backend):
    piece = nbcoll.to_device(np.arange(1, 5, dtype=np.int32).reshape(2, 2))
    got = nbcoll.to_host(cc.pad(piece, (3, 3)))
    np.testing.assert_array_equal(got, [[1, 2, 0], [3, 4, 0], [0, 0, 0]])


def test_narrow_and_pad_argument_errors(backend):
    a = nbcoll.to_device(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="start, length"):
        cc.narrow(a, 1, 2, 2)
    with pytest.raises(ValueError, match="start, length"):
        cc.narrow(a, 1, -1, 1)
    with pytest.raises(ValueError, match="axis"):
        cc.narrow(a, 2, 0, 1)
    with pytest.raises(ValueError, match="does not fit"):
        cc.pad(a, (2, 3), axis=1, start=1)
    with pytest.raises(ValueError, match="shape: expected 2 dimensions"):
        cc.pad(a, (2, 3, 1))
