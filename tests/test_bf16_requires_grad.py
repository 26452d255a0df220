"""Low-precision leaves: a bfloat16 (or fp8, or float16) tensor may require grad, set in the constructor or as an
attribute, and backward brings it a gradient of its own dtype through ``astype``, summed over its uses and over
two backward calls, on the device backend and on numpy."""

import numpy as np
import pytest

import nbcoll

LOW = [nbcoll.bfloat16, nbcoll.float8_e4m3fn, nbcoll.float8_e5m2]


def rounded(values, dtype):
    return np.asarray(values, np.float32).astype(dtype)


@pytest.mark.parametrize("dtype", [nbcoll.bfloat16, np.float16], ids=str)
def test_the_constructor_and_the_attribute_both_accept_a_half_precision_leaf(backend, dtype):
    made = nbcoll.tensor(rounded([1.0, 2.0], dtype), requires_grad=True)
    assert made.dtype == dtype and made.requires_grad and made.is_leaf
    later = nbcoll.tensor(rounded([1.0], dtype))
    later.requires_grad = True
    assert later.requires_grad
    assert "requires_grad=True" in repr(made)


def test_integer_tensors_are_still_refused():
    with nbcoll.use_backend("numpy"):
        with pytest.raises(TypeError, match="requires_grad: only floating tensors can require gradients, .*int64"):
            nbcoll.tensor([1, 2], requires_grad=True)


@pytest.mark.parametrize("dtype", [*LOW, np.float16], ids=str)
def test_backward_brings_a_gradient_of_the_leafs_dtype_summed_over_uses_and_calls(backend, dtype):
    x = nbcoll.tensor(rounded([1.0, -2.0, 0.3], dtype), requires_grad=True)

    def loss():  # x used twice: d/dx (x^2 + 3.1 x) = 2x + 3.1, each path's gradient rounded to x's dtype
        wide, again = x.astype(np.float32), x.astype(np.float32)
        return (wide * wide).sum() + (again * 3.1).sum()

    loss().backward()
    x32 = x.numpy().astype(np.float32)
    first = (rounded(2 * x32, dtype).astype(np.float32) + rounded(np.full(3, 3.1), dtype).astype(np.float32)).astype(
        dtype
    )
    assert x.grad.dtype == dtype and x.grad.shape == (3,)
    assert np.array_equal(x.grad.numpy().astype(np.float32), first.astype(np.float32)), (x.grad.numpy(), first)
    loss().backward()  # accumulated into x.grad, added in float32 and rounded once
    second = (first.astype(np.float32) + first.astype(np.float32)).astype(dtype)
    assert np.array_equal(x.grad.numpy().astype(np.float32), second.astype(np.float32)), (x.grad.numpy(), second)


def test_a_bfloat16_leaf_under_autocast_reaches_its_gradient(backend):
    # A bfloat16 weight used by a bfloat16 matmul: the gradient stays bfloat16, close to float32's.
    w = nbcoll.tensor(rounded([[0.5, -1.0], [2.0, 0.25]], nbcoll.bfloat16), requires_grad=True)
    x = nbcoll.tensor(np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]], np.float32))
    with nbcoll.autocast(dtype=nbcoll.bfloat16):
        y = x @ w
    y.astype(np.float32).sum().backward()
    assert w.grad.dtype == nbcoll.bfloat16
    want = x.numpy().T @ np.ones((3, 2), np.float32)  # d sum(x @ w) / d w
    assert np.allclose(w.grad.numpy().astype(np.float32), want, rtol=1e-2), w.grad.numpy()
