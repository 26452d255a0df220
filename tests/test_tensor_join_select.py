"""concat, stack, split, where, clip and masked_fill: forward against NumPy, gradients, and bad arguments."""

import numpy as np
import pytest

import nbcoll
import nbcoll.functional as F
from nbcoll.autograd import gradcheck
from nbcoll.tensors import Tensor, tensor


@pytest.fixture
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


def _leaf(rng, *shape):
    return tensor(rng.standard_normal(shape), dtype=np.float64, requires_grad=True)


def _same(t: Tensor, expected) -> None:
    expected = np.asarray(expected)
    assert isinstance(t, Tensor) and t.shape == expected.shape and t.dtype == expected.dtype
    np.testing.assert_array_equal(t.numpy(), expected)


# -- forward against NumPy, on the device backend (tiny) and on numpy ---------------------------------------------


def test_concat_stack_split_forward(backend, rng):
    a, b = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((2, 1)).astype(np.float32)
    _same(F.concat([tensor(a), tensor(b)], axis=1), np.concatenate([a, b], axis=1))
    _same(F.concat([tensor(a), tensor(a)], axis=-2), np.concatenate([a, a], axis=0))
    _same(F.stack([tensor(a), tensor(a)]), np.stack([a, a]))
    _same(F.stack([tensor(a), tensor(a)], axis=-1), np.stack([a, a], axis=-1))
    _same(F.stack([tensor(2.0), tensor(3.0)]), np.array([2.0, 3.0], np.float32))
    pieces = F.split(tensor(a), [1, 0, 2], axis=1)
    for got, expected in zip(pieces, np.split(a, [1, 1], axis=1), strict=True):
        _same(got, expected)
    assert [p.shape for p in tensor(a).split(3, axis=-1)] == [(2, 1)] * 3
    ints = np.arange(6).reshape(3, 2)
    _same(F.concat([tensor(ints), tensor(ints)], axis=0), np.concatenate([ints, ints]))


def test_where_clip_masked_fill_forward(backend, rng):
    x = rng.standard_normal((2, 3)).astype(np.float32)
    y = rng.standard_normal((3,)).astype(np.float32)
    cond = x > 0
    _same(F.where(tensor(cond), tensor(x), tensor(y)), np.where(cond, x, y))
    _same(F.where(tensor(cond), tensor(x), 0.0), np.where(cond, x, np.float32(0)))
    _same(F.where(tensor(cond), 1.0, tensor(y)), np.where(cond, np.float32(1), y))
    _same(F.where(tensor(cond), 1, 0), np.where(cond, 1, 0))
    _same(tensor(x).clip(-0.5, 0.5), np.clip(x, -0.5, 0.5))
    _same(F.clip(tensor(x), lo=0.0), np.maximum(x, 0))
    _same(F.clip(tensor(x), hi=0.0), np.minimum(x, 0))
    _same(tensor(np.array([-3, 0, 7])).clip(-1, 1), np.array([-1, 0, 1]))
    _same(tensor(np.array([-3, 0, 7])).clip(-0.5, 2.5), np.array([-0.5, 0, 2.5], np.float32))
    mask = np.array([True, False, True])
    _same(tensor(x).masked_fill(tensor(mask), -np.inf), np.where(mask, np.float32(-np.inf), x))
    _same(F.masked_fill(tensor(np.arange(3)), tensor(mask), 9), np.where(mask, 9, np.arange(3)))


def test_clip_propagates_nan_as_numpy(backend):
    x = np.array([np.nan, -2.0, 2.0], np.float32)
    _same(tensor(x).clip(-1.0, 1.0), np.clip(x, -1.0, 1.0))


# -- gradients ----------------------------------------------------------------------------------------------------

CASES = {
    "concat": (lambda a, b: F.concat([a, b, a], axis=1), [(2, 3), (2, 1)]),
    "concat-axis0-3d": (lambda a, b: F.concat([a, b], axis=0), [(1, 2, 2), (2, 2, 2)]),
    "stack": (lambda a, b: F.stack([a, b], axis=1), [(2, 3), (2, 3)]),
    "stack-last": (lambda a: F.stack([a, a * a], axis=-1), [(3,)]),
    "split-sizes": (lambda a: F.split(a, [1, 2], axis=1)[1] * 2.0, [(2, 3)]),
    "split-sections": (lambda a: F.split(a, 2, axis=0)[0] * F.split(a, 2, axis=0)[1], [(4, 3)]),
    "split-method-all-pieces": (lambda a: F.concat(list(a.split([2, 1, 1], axis=-1))[::-1], axis=-1), [(2, 4)]),
    "where-broadcast": (lambda a, b: F.where(tensor(np.array([[True, False, True]])), a, b), [(2, 3), (2, 1)]),
    "where-scalar": (lambda a: F.where(tensor(np.array([True, False])), 0.5, a), [(3, 2)]),
    "clip": (lambda a: a.clip(-0.5, 0.5), [(3, 4)]),
    "clip-one-side": (lambda a: F.clip(a, lo=0.1) + F.clip(a, hi=-0.1), [(3, 4)]),
    "masked-fill": (lambda a: a.masked_fill(tensor(np.array([[True], [False]])), -1.0), [(2, 3)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradcheck(numpy_backend, rng, name):
    fn, shapes = CASES[name]
    assert gradcheck(fn, [_leaf(rng, *s) for s in shapes])


def test_gradients_by_hand(numpy_backend):
    # The gradient of clip is 1 inside [lo, hi], bounds included (as PyTorch's clamp), and 0 outside.
    x = tensor([-2.0, -1.0, 0.0, 1.0, 2.0], requires_grad=True)
    x.clip(-1.0, 1.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0, 1, 1, 1, 0])
    # masked_fill lets nothing through at filled positions.
    x = tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x.masked_fill(tensor([False, True, False]), 0.0) * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3, 0, 3])
    # Pieces of a split that the loss does not use get a zero gradient in their slice.
    x = tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    first, _ = x.split([1, 2], axis=1)
    first.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[1, 0, 0], [1, 0, 0]])


@pytest.mark.parametrize(
    "fn, shapes",
    [
        (lambda a, b: F.concat([a, b], axis=1).sum(axis=0), [(2, 1), (2, 2)]),
        (lambda a: F.stack(list(a.split(1, axis=0)), axis=1), [(2, 2)]),
        (lambda a, b: F.where(a > 0, a, b).clip(-0.5, 0.5).masked_fill(tensor([True, False]), 0.0), [(2,), (2,)]),
    ],
    ids=["concat", "stack-split", "where-clip-masked-fill"],
)
def test_gradcheck_on_the_device_backend(rng, fn, shapes):
    with nbcoll.use_backend(nbcoll.backend.device_backend()):
        assert gradcheck(fn, [_leaf(rng, *s) for s in shapes])


# -- bad arguments ------------------------------------------------------------------------------------------------


def test_bad_arguments_name_the_argument(numpy_backend):
    a, b = tensor(np.zeros((2, 3))), tensor(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="concat: tensors\\[1\\].shape"):
        F.concat([a, b], axis=1)
    with pytest.raises(ValueError, match="non-empty"):
        F.concat([], axis=0)
    with pytest.raises(TypeError, match="tensors\\[1\\].dtype"):
        F.concat([a, tensor(np.zeros((2, 3), np.float32))])
    with pytest.raises(ValueError, match="0-d"):
        F.concat([tensor(1.0), tensor(2.0)])
    with pytest.raises(ValueError, match="axis"):
        F.concat([a, a], axis=2)
    with pytest.raises(ValueError, match="stack: tensors\\[1\\].shape"):
        F.stack([a, b])
    with pytest.raises(ValueError, match="axis"):
        F.stack([a, a], axis=3)
    with pytest.raises(ValueError, match="adding up to x.shape\\[1\\]=3"):
        F.split(a, [1, 1], axis=1)
    with pytest.raises(ValueError, match="2 equal pieces"):
        a.split(2, axis=1)
    with pytest.raises(TypeError, match="cond: expected a bool Tensor"):
        F.where(a, a, a)
    with pytest.raises(ValueError, match="do not broadcast"):
        F.where(tensor([True, False]), a, a)
    with pytest.raises(TypeError, match="same dtype"):
        F.where(tensor([True, False, True]), a, tensor(np.zeros(3, np.float32)))
    with pytest.raises(TypeError, match="lo: expected a number"):
        a.clip(a, 1.0)
    with pytest.raises(TypeError, match="mask: expected a bool Tensor"):
        a.masked_fill(tensor([1, 0, 1]), 0.0)
    with pytest.raises(ValueError, match="does not broadcast to x.shape"):
        a.masked_fill(tensor(np.zeros((3, 3), bool)), 0.0)
    with pytest.raises(TypeError, match="without truncation"):
        tensor([1, 2]).masked_fill(tensor([True, False]), 0.5)
