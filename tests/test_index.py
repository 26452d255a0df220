"""Gather, scatter, scatter_add, scatter_nd, index_select and embedding against their NumPy references."""

import numpy as np
import pytest

import nbcoll
from nbcoll.kernels import index as ix
from nbcoll.kernels import index_args

DTYPES = nbcoll.DTYPES
INDEX_DTYPES = [np.int64, np.int32, np.uint8, np.uint64]


def values(rng, shape, dtype):
    """Small values that every dtype holds (so float sums of a few of them are exact)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "u":
        return rng.integers(0, 50, size=shape).astype(dtype)
    return rng.integers(-50, 50, size=shape).astype(dtype)


def run(fn, *args, **kwargs):
    """Call a launch function with device copies of every array argument; return host results."""
    moved = [nbcoll.to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    result = fn(*moved, **kwargs)
    return nbcoll.to_host(result)


def check(actual, expected):
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(actual, expected)


@pytest.fixture
def no_launch(monkeypatch):
    """Fail the test if any kernel is started: argument errors must be raised before a launch."""

    def refuse(*args, **kwargs):
        raise AssertionError("a kernel was launched although the arguments were invalid")

    monkeypatch.setattr(index_args, "launch", refuse)


# ---------------------------------------------------------------------------------------------------------------
# gather


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gather_every_dtype(backend, rng, dtype):
    x = values(rng, (3, 5), dtype)
    index = rng.integers(0, 3, size=(2, 5))
    check(run(ix.gather, x, index, 0), np.take_along_axis(x, index, 0))


@pytest.mark.parametrize(
    "x_shape, index_shape, axis",
    [
        ((4, 3, 2), (2, 3, 2), 0),
        ((4, 3, 2), (4, 7, 1), 1),  # index longer than x along the axis, shorter on the others
        ((4, 3, 2), (1, 1, 5), -1),
        ((1,), (1,), 0),
        ((3, 4), (0, 4), 0),
        ((0, 4), (0, 2), 0),
        ((7,), (9,), 0),
    ],
)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
def test_gather_shapes_and_axes(backend, rng, x_shape, index_shape, axis, index_dtype):
    x = rng.standard_normal(x_shape).astype(np.float32)
    size = x_shape[axis]
    index = rng.integers(0, max(size, 1), size=index_shape).astype(index_dtype)
    expected = ix.gather_reference(x, index, axis % len(x_shape))
    if index.size:
        # The reference must mean torch.gather: out[i][j][k] = x[i][index[i][j][k]][k] along axis 1, etc.
        position = tuple(n - 1 for n in index_shape)
        source = list(position)
        source[axis] = int(index[position])
        assert expected[position] == x[tuple(source)]
    check(run(ix.gather, x, index, axis), expected)


def test_gather_large_numpy(rng):
    with nbcoll.use_backend("numpy"):
        x = rng.standard_normal((300, 200))
        index = rng.integers(0, 300, size=(500, 200))
        check(run(ix.gather, x, index, 0), np.take_along_axis(x, index, 0))


# ---------------------------------------------------------------------------------------------------------------
# scatter and scatter_add


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_scatter_every_dtype_with_unique_targets(backend, rng, dtype):
    x = values(rng, (4, 3), dtype)
    src = values(rng, (3, 3), dtype)
    # A permutation per column: every target is written once, so the result is defined.
    index = np.stack([rng.permutation(4)[:3] for _ in range(3)], axis=1)
    expected = x.copy()
    np.put_along_axis(expected, index, src, 0)
    check(run(ix.scatter, x, index, src, 0), expected)


def test_scatter_duplicates_keep_one_of_the_writes(backend, rng):
    x = np.zeros((2, 3), np.int32)
    index = np.zeros((6, 3), np.int64)
    src = np.arange(18, dtype=np.int32).reshape(6, 3)
    out = run(ix.scatter, x, index, src, 0)
    for column in range(3):
        assert out[0, column] in src[:, column]
    np.testing.assert_array_equal(out[1], 0)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_src_larger_than_index(backend, rng, axis):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    src = rng.standard_normal((5, 6)).astype(np.float32)
    index = np.array([[0, 1], [2, 0]]) if axis == 0 else np.array([[3, 1], [0, 2]])
    expected = ix.scatter_reference(x, index, src, axis % 2)
    position = (1, 1)
    target = list(position)
    target[axis] = index[position]
    assert expected[tuple(target)] == src[position]
    check(run(ix.scatter, x, index, src, axis), expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_scatter_add_many_duplicates_every_dtype(backend, rng, dtype):
    x = values(rng, (3, 4), dtype)
    src = values(rng, (40, 4), dtype)
    index = rng.integers(0, 3, size=(40, 4))  # about 13 writers per target
    expected = x.astype(np.float64)
    np.add.at(expected, (index, np.arange(4)), src)
    # Sums of 14 values below 50 in magnitude: exact in every float type, wrapped in the 8-bit integers.
    check(run(ix.scatter_add, x, index, src, 0), expected.astype(np.int64).astype(dtype))


def test_scatter_add_all_to_one_target_is_exact_for_ints(backend):
    x = np.zeros(1, np.int64)
    src = np.arange(600, dtype=np.int64)
    index = np.zeros(600, np.int32)
    check(run(ix.scatter_add, x, index, src, 0), np.array([src.sum()]))


def test_scatter_add_int8_wraps_like_numpy(backend):
    x = np.array([100, -100], np.int8)
    src = np.full(10, 100, np.int8)
    index = np.array([0, 1] * 5, np.uint8)
    expected = x.copy()
    np.add.at(expected, index, src)
    check(run(ix.scatter_add, x, index, src, 0), expected)


def test_scatter_add_3d_axis_1_and_empty_index(backend, rng):
    x = rng.standard_normal((2, 3, 2))
    src = rng.standard_normal((2, 5, 2))
    index = rng.integers(0, 3, size=(2, 5, 2))
    check(run(ix.scatter_add, x, index, src, 1), ix.scatter_add_reference(x, index, src, 1))
    empty = np.zeros((2, 0, 2), np.int64)
    check(run(ix.scatter_add, x, empty, src, 1), x)


def test_scatter_add_float16_accumulates_in_float32(backend):
    # 2048 + 1 + 1 in float16 steps would stay at 2048; accumulated in float32 it reaches 2050.
    x = np.array([2048], np.float16)
    src = np.ones(2, np.float16)
    check(run(ix.scatter_add, x, np.zeros(2, np.int64), src, 0), np.array([2050], np.float16))


def test_scatter_add_large_numpy(rng):
    with nbcoll.use_backend("numpy"):
        x = rng.integers(-1000, 1000, size=(50, 30)).astype(np.int32)
        src = rng.integers(-1000, 1000, size=(5000, 30)).astype(np.int32)
        index = rng.integers(0, 50, size=(5000, 30))
        expected = x.copy()
        np.add.at(expected, (index, np.arange(30)), src)
        check(run(ix.scatter_add, x, index, src, 0), expected)


# ---------------------------------------------------------------------------------------------------------------
# scatter_nd


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_scatter_nd_elements_with_duplicates(backend, rng, dtype):
    indices = rng.integers(0, 3, size=(30, 2))
    updates = values(rng, (30,), dtype)
    expected = np.zeros((3, 3), np.int64)
    np.add.at(expected, (indices[:, 0], indices[:, 1]), updates)
    check(run(ix.scatter_nd, indices, updates, (3, 3)), expected.astype(dtype))


def test_scatter_nd_slices_as_in_tensorflow(backend):
    # The example of tf.scatter_nd's documentation: two slices of a (4, 4, 4) tensor.
    indices = np.array([[0], [2]])
    slab = np.array([[5, 5, 5, 5], [6, 6, 6, 6], [7, 7, 7, 7], [8, 8, 8, 8]], np.int32)
    updates = np.stack([slab, slab])
    expected = np.zeros((4, 4, 4), np.int32)
    expected[0] = expected[2] = slab
    check(run(ix.scatter_nd, indices, updates, (4, 4, 4)), expected)


@pytest.mark.parametrize(
    "indices_shape, shape",
    [((5, 1), (4,)), ((2, 3, 2), (3, 2, 2)), ((0, 2), (3, 3)), ((4, 0), (2, 3)), ((1, 1), (1,))],
)
def test_scatter_nd_shapes(backend, rng, indices_shape, shape):
    depth = indices_shape[-1]
    indices = np.zeros(indices_shape, np.int64)
    for k in range(depth):
        indices[..., k] = rng.integers(0, shape[k], size=indices_shape[:-1])
    updates = rng.standard_normal(indices_shape[:-1] + shape[depth:])
    expected = np.zeros(shape)
    for b in np.ndindex(*indices_shape[:-1]):
        expected[tuple(indices[b])] += updates[b]
    np.testing.assert_allclose(run(ix.scatter_nd, indices, updates, shape), expected, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------------------------------------------------------
# index_select


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_index_select_every_dtype(backend, rng, dtype):
    x = values(rng, (3, 4), dtype)
    index = np.array([3, 0, 0, -1, 2], np.int32)
    check(run(ix.index_select, x, 1, index), np.take(x, index, axis=1))


@pytest.mark.parametrize(
    "shape, axis, picks",
    [((5,), 0, [4, 0, 4]), ((2, 3, 4), 1, [2, -3]), ((2, 3, 4), -1, [0]), ((2, 3, 4), 0, []), ((1, 1), 0, [0])],
)
def test_index_select_shapes(backend, rng, shape, axis, picks):
    x = rng.standard_normal(shape).astype(np.float32)
    index = np.array(picks, np.int64)
    check(run(ix.index_select, x, axis, index), np.take(x, index, axis=axis))


def test_index_select_large_numpy(rng):
    with nbcoll.use_backend("numpy"):
        x = rng.standard_normal((100, 70, 5))
        index = rng.integers(-70, 70, size=1000)
        check(run(ix.index_select, x, 1, index), np.take(x, index, axis=1))


# ---------------------------------------------------------------------------------------------------------------
# embedding and its backward


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_embedding_every_dtype(backend, rng, dtype):
    weight = values(rng, (5, 3), dtype)
    ids = rng.integers(0, 5, size=(2, 3)).astype(np.int32)
    check(run(ix.embedding, weight, ids), weight[ids])


@pytest.mark.parametrize("ids_shape", [(1,), (0,), (2, 0), (3, 2, 2)])
def test_embedding_id_shapes(backend, rng, ids_shape):
    weight = rng.standard_normal((4, 3)).astype(np.float32)
    ids = rng.integers(0, 4, size=ids_shape)
    check(run(ix.embedding, weight, ids), weight[ids])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_embedding_backward_many_duplicates_every_dtype(backend, rng, dtype):
    ids = rng.integers(0, 3, size=(4, 10))  # 40 lookups of 3 rows
    grad = values(rng, (4, 10, 2), dtype)
    expected = np.zeros((5, 2), np.int64)
    np.add.at(expected, ids.reshape(-1), grad.reshape(-1, 2))
    check(run(ix.embedding_backward, grad, ids, 5), expected.astype(dtype))


def test_embedding_backward_all_ids_equal_is_exact_for_ints(backend):
    ids = np.full(500, 2, np.uint8)
    grad = np.arange(1000, dtype=np.uint64).reshape(500, 2)
    expected = np.zeros((3, 2), np.uint64)
    expected[2] = grad.sum(axis=0)
    check(run(ix.embedding_backward, grad, ids, 3), expected)


def test_embedding_backward_empty(backend):
    check(
        run(ix.embedding_backward, np.zeros((0, 4), np.float32), np.zeros(0, np.int64), 3), np.zeros((3, 4), np.float32)
    )


def test_embedding_round_trip_large_numpy(rng):
    with nbcoll.use_backend("numpy"):
        weight = rng.standard_normal((1000, 16))
        ids = rng.integers(0, 1000, size=(64, 128))
        check(run(ix.embedding, weight, ids), weight[ids])
        grad = rng.integers(-5, 5, size=(64, 128, 16)).astype(np.int64)
        expected = np.zeros((1000, 16), np.int64)
        np.add.at(expected, ids.reshape(-1), grad.reshape(-1, 16))
        check(run(ix.embedding_backward, grad, ids, 1000), expected)


# ---------------------------------------------------------------------------------------------------------------
# Errors: every bad index is found on the host, before any kernel starts.


BAD_INDEX_CALLS = {
    "gather": (lambda: ix.gather, lambda: (np.zeros((3, 2)), np.array([[0, 3]]), 0), "index", "3"),
    "gather_negative": (lambda: ix.gather, lambda: (np.zeros((3, 2)), np.array([[0, -1]]), 0), "index", "-1"),
    "scatter": (
        lambda: ix.scatter,
        lambda: (np.zeros((3, 2)), np.array([[0, 1], [7, 0]]), np.ones((2, 2)), 0),
        "index",
        "7",
    ),
    "scatter_add": (
        lambda: ix.scatter_add,
        lambda: (np.zeros((3, 2)), np.array([[0, 2]], np.uint64), np.ones((1, 2)), 1),
        "index",
        "2",
    ),
    "scatter_nd": (
        lambda: ix.scatter_nd,
        lambda: (np.array([[0, 1], [1, 5]]), np.ones(2), (2, 3)),
        "indices[..., 1]",
        "5",
    ),
    "index_select": (lambda: ix.index_select, lambda: (np.zeros((2, 3)), 1, np.array([1, -4])), "index", "-4"),
    "embedding": (lambda: ix.embedding, lambda: (np.zeros((4, 2)), np.array([[1, 4]], np.int8)), "ids", "4"),
    "embedding_backward": (
        lambda: ix.embedding_backward,
        lambda: (np.ones((2, 3)), np.array([0, -2]), 4),
        "ids",
        "-2",
    ),
}


@pytest.mark.parametrize("case", list(BAD_INDEX_CALLS))
def test_out_of_range_index_raises_before_launch(backend, no_launch, case):
    fn, make_args, arg_name, bad_value = BAD_INDEX_CALLS[case]
    args = [nbcoll.to_device(a) if isinstance(a, np.ndarray) else a for a in make_args()]
    with pytest.raises(IndexError) as excinfo:
        fn()(*args)
    message = str(excinfo.value)
    assert message.startswith(arg_name + ":")
    assert f"index {bad_value} " in message


def test_argument_errors_name_the_argument(backend):
    x = nbcoll.to_device(np.zeros((3, 2), np.float32))
    with pytest.raises(TypeError, match="index.dtype"):
        ix.gather(x, nbcoll.to_device(np.zeros((1, 2), np.float32)), 0)
    with pytest.raises(ValueError, match="index: must have x's number of dimensions"):
        ix.gather(x, nbcoll.to_device(np.zeros(2, np.int64)), 0)
    with pytest.raises(ValueError, match="axis"):
        ix.gather(x, nbcoll.to_device(np.zeros((1, 2), np.int64)), 2)
    with pytest.raises(ValueError, match="index.shape"):
        ix.gather(x, nbcoll.to_device(np.zeros((1, 3), np.int64)), 0)
    with pytest.raises(TypeError, match="src.dtype"):
        ix.scatter(x, nbcoll.to_device(np.zeros((1, 2), np.int64)), nbcoll.to_device(np.zeros((1, 2))), 0)
    with pytest.raises(ValueError, match="src.shape"):
        ix.scatter_add(
            x, nbcoll.to_device(np.zeros((2, 2), np.int64)), nbcoll.to_device(np.zeros((1, 2), np.float32)), 0
        )
    with pytest.raises(ValueError, match="updates: expected shape"):
        ix.scatter_nd(nbcoll.to_device(np.zeros((2, 1), np.int64)), nbcoll.to_device(np.zeros(3)), (4,))
    with pytest.raises(ValueError, match="index: must be 1-D"):
        ix.index_select(x, 0, nbcoll.to_device(np.zeros((1, 1), np.int64)))
    with pytest.raises(ValueError, match="weight: expected shape"):
        ix.embedding(nbcoll.to_device(np.zeros(3)), nbcoll.to_device(np.zeros(2, np.int64)))
    with pytest.raises(ValueError, match="grad_out: expected shape"):
        ix.embedding_backward(x, nbcoll.to_device(np.zeros(2, np.int64)), 4)
    with pytest.raises(ValueError, match="x: must be C-contiguous"):
        ix.gather(
            nbcoll.to_device(np.zeros((2, 3), np.float32))[:, ::2], nbcoll.to_device(np.zeros((1, 2), np.int64)), 0
        )
