"""Wrong results once found in the tensor layer, each kept out by a test (both backends unless noted)."""

import numpy as np
import pytest

import nbcoll
from nbcoll.autograd import Function
from nbcoll.kernels import elementwise
from nbcoll.kernels.reduce_axes import reduce
from nbcoll.tensors import dtypes, tensor


@pytest.fixture
def default_dtype():
    before = dtypes.get_default_dtype()
    yield
    dtypes.set_default_dtype(before)


# -- scatter_add's src gradient, and the engine's shape check -----------------------------------------------------


def test_scatter_add_src_gradient_has_src_shape(backend):
    x = tensor(np.zeros((3, 3)), requires_grad=True)
    src = tensor(np.arange(9.0).reshape(3, 3), requires_grad=True)
    weights = tensor(np.arange(1.0, 10.0).reshape(3, 3))
    (x.scatter_add([[0, 1], [2, 0]], src, axis=0) * weights).sum().backward()
    # src[i][j] went to row index[i][j] of column j; src outside index's (2, 2) block was not used.
    np.testing.assert_array_equal(src.grad.numpy(), [[1, 5, 0], [7, 2, 0], [0, 0, 0]])
    np.testing.assert_array_equal(x.grad.numpy(), weights.numpy())


def test_the_engine_names_an_op_whose_gradient_has_the_wrong_shape(backend):
    class SumRows(Function):
        @staticmethod
        def forward(ctx, x):
            return reduce("sum", x, axis=1)

        @staticmethod
        def backward(ctx, dy):
            return dy  # wrong: should spread dy over the summed axis

    x = tensor(np.ones((2, 3)), requires_grad=True)
    with pytest.raises(RuntimeError, match=r"SumRows.backward returned a gradient of shape \(2,\).*shape \(2, 3\)"):
        SumRows.apply(x).sum().backward()


def test_the_engine_checks_the_gradient_dtype_too(backend):
    class Widen(Function):
        @staticmethod
        def forward(ctx, x):
            return elementwise.unary("neg", x)

        @staticmethod
        def backward(ctx, dy):
            return nbcoll.to_device(nbcoll.to_host(dy).astype(np.float64))

    x = tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="Widen.backward .* dtype float64 .* dtype float32"):
        Widen.apply(x).sum().backward()


# -- transpose -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("axes", [(1, 2), (0, 3), (0, 0), (-3, 0), (0,), (0, 1, 2)])
def test_transpose_rejects_invalid_axes_as_numpy_does(backend, axes):
    x = tensor(np.arange(6.0).reshape(2, 3))
    with pytest.raises(ValueError):
        np.transpose(np.zeros((2, 3)), axes)
    with pytest.raises(ValueError, match="transpose"):
        x.transpose(*axes)
    with pytest.raises(ValueError, match="transpose"):
        x.permute(axes)


def test_transpose_accepts_negative_axes(backend):
    x = np.arange(6.0).reshape(1, 2, 3)
    np.testing.assert_array_equal(tensor(x).transpose(-1, 0, -2).numpy(), np.transpose(x, (-1, 0, -2)))


# -- index_select with negative indices ----------------------------------------------------------------------------


def test_index_select_backward_with_negative_indices(backend):
    x = tensor(np.arange(8.0).reshape(4, 2), requires_grad=True)
    y = x.index_select(0, [-1, 0, -1, -4])
    np.testing.assert_array_equal(y.numpy(), np.take(x.numpy(), [-1, 0, -1, -4], axis=0))
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[2, 2], [0, 0], [0, 0], [2, 2]])


# -- pow at zero ---------------------------------------------------------------------------------------------------


# The simulator runs each kernel thread as Python on NumPy scalars, which warn at 0**-1 and 0 * inf; a GPU does not.
@pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_pow_gradients_at_zero_are_zero_as_in_pytorch(backend):
    x = tensor([0.0, 1.0, 2.0], requires_grad=True)
    (x**0).sum().backward()  # d(x**0)/dx = 0 everywhere, also at x = 0 (where 0 * 0**-1 is NaN)
    np.testing.assert_array_equal(x.grad.numpy(), [0, 0, 0])

    x = tensor([0.0, 0.0, 2.0], requires_grad=True)
    b = tensor([0.0, 2.0, 3.0], requires_grad=True)
    (x**b).sum().backward()  # d(x**b)/db = x**b log(x) is 0 at x = 0 for b >= 0 (log(0) is -inf)
    np.testing.assert_allclose(b.grad.numpy(), [0, 0, 8 * np.log(2)], rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), [0, 0, 12], rtol=1e-6)


# -- promotion of an integer tensor with a float scalar --------------------------------------------------------------


def test_integer_tensor_times_float_scalar_promotes(backend):
    x = tensor([0, 1, 2, 3])
    for y, expected in [
        (x * 0.5, [0, 0.5, 1, 1.5]),
        (0.5 * x, [0, 0.5, 1, 1.5]),
        (x + 0.5, [0.5, 1.5, 2.5, 3.5]),
        (0.5 + x, [0.5, 1.5, 2.5, 3.5]),
        (x - 0.5, [-0.5, 0.5, 1.5, 2.5]),
        (0.5 - x, [0.5, -0.5, -1.5, -2.5]),
        (x / 2, [0, 0.5, 1, 1.5]),
        (3 / (x + 1), [3, 1.5, 1, 0.75]),
        (x / tensor([2, 2, 2, 2]), [0, 0.5, 1, 1.5]),
        (x**0.5, np.sqrt([0, 1, 2, 3])),
        (2.0**x, [1, 2, 4, 8]),
        (x * np.float64(0.5), [0, 0.5, 1, 1.5]),
    ]:
        assert y.dtype == np.float32, y
        np.testing.assert_allclose(y.numpy(), expected, rtol=1e-6)
    np.testing.assert_array_equal((x < 1.5).numpy(), [True, True, False, False])
    np.testing.assert_array_equal((x == 1.0).numpy(), [False, True, False, False])


def test_promotion_keeps_the_tensor_dtype_when_the_scalar_is_not_of_a_higher_kind(backend):
    assert (tensor(np.array([1, 2], np.int32)) + 2).dtype == np.int32
    assert (tensor(np.array([1, 2], np.float16)) * 0.5).dtype == np.float16
    assert (tensor(np.array([1.0], np.float64)) * 2).dtype == np.float64
    assert (tensor([True, False]) + 1).dtype == np.int64
    np.testing.assert_array_equal((tensor([True, False]) + 1).numpy(), [2, 1])
    with pytest.raises(TypeError, match="same dtype"):
        tensor([1, 2]) * tensor([0.5, 0.5])


def test_promotion_uses_the_default_dtype(backend, default_dtype):
    dtypes.set_default_dtype(np.float64)
    assert (tensor([1, 2]) * 0.5).dtype == np.float64
    assert tensor([0.5]).dtype == np.float64
    with pytest.raises(TypeError, match="floating"):
        dtypes.set_default_dtype(np.int32)


# -- inf and NaN: the simulator agrees with NumPy (and a GPU) ----------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64], ids=str)
@pytest.mark.parametrize(
    "op, values",
    [
        ("exp", [1000.0, 100.0, 709.0, 710.0, -1000.0, np.inf, -np.inf, np.nan, 0.0]),
        ("log", [0.0, -0.0, -1.0, np.inf, -np.inf, np.nan, 1.0]),
        ("sqrt", [-1.0, -0.0, 0.0, -np.inf, np.inf, np.nan, 4.0]),
        ("sigmoid", [1000.0, -1000.0, np.nan, 0.0]),
        ("tanh", [1000.0, -1000.0, np.nan]),
    ],
)
def test_unary_kernels_give_numpy_inf_and_nan(backend, op, values, dtype):
    x = np.array(values, dtype)
    with np.errstate(all="ignore"):
        got = nbcoll.to_host(elementwise.unary(op, nbcoll.to_device(x)))
    np.testing.assert_array_equal(got, elementwise.unary_reference(op, x))


def test_tensor_methods_give_inf_and_nan(backend):
    with np.errstate(all="ignore"):
        assert tensor(1000.0).exp().item() == np.inf
        assert tensor(0.0).log().item() == -np.inf
        assert np.isnan(tensor(-1.0).log().item())
        assert np.isnan(tensor(-1.0).sqrt().item())


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_maximum_and_minimum_propagate_nan_as_numpy(backend, op):
    a = np.array([np.nan, 1.0, 2.0, np.nan], np.float32)
    b = np.array([1.0, np.nan, 1.0, np.nan], np.float32)
    got = nbcoll.to_host(elementwise.binary(op, nbcoll.to_device(a), nbcoll.to_device(b)))
    np.testing.assert_array_equal(got, elementwise.binary_reference(op, a, b))


# -- empty reductions ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(0,), (0, 3), (2, 0, 1)])
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_empty_reduction_over_every_axis_has_shape_unit(backend, shape, op):
    x = np.zeros(shape, np.float32)
    expected = np.float32(np.nan) if op == "mean" else np.sum(x)  # (NumPy warns at the mean of nothing)
    with np.errstate(all="ignore"):
        for axis in (None, tuple(range(len(shape)))):
            got = reduce(op, nbcoll.to_device(x), axis=axis)
            assert tuple(got.shape) == (), (axis, got.shape)
            np.testing.assert_array_equal(nbcoll.to_host(got).reshape(()), expected)
        assert getattr(tensor(x), op)().shape == ()
        assert tensor(x).sum(keepdims=True).shape == (1,) * len(shape)
