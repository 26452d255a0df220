"""Indexing by integer arrays and boolean masks: forward against NumPy, gradcheck, repeated positions adding up,
the device backend on a tiny case, and clear errors for bad indices."""

import numpy as np
import pytest

import nbcoll
from nbcoll.autograd import gradcheck
from nbcoll.tensors import tensor

HOST = np.arange(24, dtype=np.float64).reshape(3, 4, 2) - 11.5
MASK_ROWS = np.array([True, False, True])
MASK_2D = HOST[:, :, 0] > 0

KEYS = {
    "list": [0, 2],
    "repeated": np.array([0, 0, 2]),
    "negative": [-1, 0, -3],
    "2-d-index": np.array([[0, 1], [2, 2]]),
    "empty-list": [],
    "mask-rows": MASK_ROWS,
    "mask-2-d": MASK_2D,
    "mask-none-true": np.zeros(3, bool),
    "slice-then-index": (slice(None), np.array([3, 1, 3])),
    "ellipsis-then-index": (Ellipsis, [1, 1]),
    "index-then-slice": ([2, 0], slice(1, None)),
    "newaxis-index": (None, [1, 2]),
    "int-beside-index": (1, [0, 3]),
    "two-indices-broadcast": (np.array([[0], [2]]), slice(None), np.array([1, 0, 1])),
    "two-indices-adjacent": (slice(None), np.array([0, 3]), np.array([1, 1])),
    "int-apart-from-index": (0, slice(None), [1, 0, 1]),
    "slice-mask": (slice(1, None), np.array([True, False, False, True])),
    "mask-and-int": (MASK_ROWS, 2),
}


@pytest.fixture
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


def _as_numpy_key(key):
    return tuple(np.asarray(k) if isinstance(k, list) else k for k in key) if isinstance(key, tuple) else key


@pytest.mark.parametrize("name", sorted(KEYS))
def test_array_and_mask_indexing_matches_numpy_with_its_gradient(numpy_backend, name):
    key = KEYS[name]
    expected = HOST[_as_numpy_key(key) if not isinstance(key, list) else np.asarray(key, np.int64)]
    x = tensor(HOST, requires_grad=True)
    got = x[key]
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got.numpy(), expected)
    assert gradcheck(lambda x: x[key], [x])


def test_repeated_positions_add_their_gradients(numpy_backend):
    x = tensor(np.zeros((3, 2)), requires_grad=True)
    (x[np.array([0, 0, 2])] * tensor(np.array([[1.0], [10.0], [100.0]]))).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[11.0, 11.0], [0.0, 0.0], [100.0, 100.0]])
    x.grad = None
    x[:, [1, 1, 1, -1]].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0.0, 4.0]] * 3)


def test_tensor_indices_and_masks(numpy_backend):
    x = tensor(HOST, requires_grad=True)
    np.testing.assert_array_equal(x[tensor([2, 0])].numpy(), HOST[[2, 0]])
    np.testing.assert_array_equal(x[tensor(np.int64(1))].numpy(), HOST[1])  # a 0-d integer Tensor is an int
    picked = x[x > 0]
    np.testing.assert_array_equal(picked.numpy(), HOST[HOST > 0])
    picked.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), (HOST > 0).astype(np.float64))


def test_bad_indices_are_clear_errors(numpy_backend):
    x = tensor(HOST)
    with pytest.raises(IndexError, match=r"index: 3 is out of bounds for axis 0 with size 3"):
        x[[0, 3]]
    with pytest.raises(IndexError, match=r"index: -5 is out of bounds for axis 1 with size 4"):
        x[:, np.array([0, -5])]
    with pytest.raises(IndexError, match=r"index: a boolean mask of shape \(2,\) must match the shape \(3,\)"):
        x[np.array([True, False])]
    with pytest.raises(IndexError, match=r"index: a boolean mask of shape \(3, 3\) must match the shape \(3, 4\)"):
        x[tensor(np.ones((3, 3), bool))]
    with pytest.raises(IndexError, match="index: arrays used as indices must be of integer or boolean type"):
        x[np.array([0.0, 1.0])]
    with pytest.raises(IndexError, match=r"index: the index arrays' shapes \[\(2,\), \(3,\)\] do not broadcast"):
        x[[0, 1], [0, 1, 2]]
    with pytest.raises(IndexError, match="too many indices: 4 given"):
        x[MASK_2D, 0, 0]
    with pytest.raises(TypeError, match="index: expected integers"):
        x[True]


def test_array_indexing_on_the_device_backend(backend):
    # Tiny: the index_select forward and the scatter_add backward (repeated rows) through the kernels.
    host = np.arange(6, dtype=np.float32).reshape(3, 2)
    x = tensor(host, requires_grad=True)
    y = x[[2, 0, 2]]
    np.testing.assert_array_equal(y.numpy(), host[[2, 0, 2]])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[1.0, 1.0], [0.0, 0.0], [2.0, 2.0]])
    np.testing.assert_array_equal(x[np.array([True, False, True]), 1].numpy(), host[[0, 2], 1])
