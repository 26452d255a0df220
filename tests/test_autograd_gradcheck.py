"""Analytical gradients of every differentiable op against central differences (float64)."""

import numpy as np
import pytest

import nbcoll
import nbcoll.functional as F
from nbcoll.autograd import gradcheck
from nbcoll.tensors import tensor


@pytest.fixture
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


def _leaf(rng, shape, low=-1.0, high=1.0):
    return tensor(rng.uniform(low, high, shape), dtype=np.float64, requires_grad=True)


def _positive(rng, shape):
    return _leaf(rng, shape, 0.5, 2.0)


# name -> (fn, input makers). Inputs are drawn away from kinks (0 for relu/abs) where the derivative jumps.
CASES = {
    "add-broadcast": (lambda a, b: a + b, [(2, 3), (3,)]),
    "sub-broadcast": (lambda a, b: a - b, [(2, 1), (1, 3)]),
    "mul-broadcast": (lambda a, b: a * b, [(2, 3), (2, 1)]),
    "div-broadcast": (lambda a, b: a / b, [(2, 3), "positive:(3,)"]),
    "pow-tensor": (lambda a, b: a**b, ["positive:(2, 3)", (2, 3)]),
    "pow-scalar": (lambda a: a**3, [(2, 3)]),
    "rpow": (lambda a: 2.0**a, [(3,)]),
    "scalar-ops": (lambda a: (2.0 - a) * 3.0 / (a + 4.0), [(4,)]),
    "neg": (lambda a: -a, [(3,)]),
    "exp": (lambda a: a.exp(), [(2, 3)]),
    "log": (lambda a: a.log(), ["positive:(2, 3)"]),
    "sqrt": (lambda a: a.sqrt(), ["positive:(2, 3)"]),
    "tanh": (lambda a: a.tanh(), [(2, 3)]),
    "sigmoid": (lambda a: a.sigmoid(), [(2, 3)]),
    "relu": (lambda a: a.relu(), ["away:(2, 3)"]),
    "gelu": (lambda a: a.gelu(), [(2, 3)]),
    "abs": (lambda a: a.abs(), ["away:(2, 3)"]),
    "sum-all": (lambda a: a.sum(), [(2, 3)]),
    "sum-axis": (lambda a: a.sum(axis=0), [(2, 3)]),
    "sum-tuple-keepdims": (lambda a: a.sum(axis=(0, 2), keepdims=True), [(2, 3, 2)]),
    "mean-axis": (lambda a: a.mean(axis=-1), [(2, 3)]),
    "max-axis": (lambda a: a.max(axis=1), [(2, 3)]),
    "min-all": (lambda a: a.min(), [(2, 3)]),
    "softmax": (lambda a: a.softmax(axis=-1), [(2, 3)]),
    "softmax-axis0": (lambda a: a.softmax(axis=0), [(2, 3)]),
    "log-softmax": (lambda a: a.log_softmax(), [(2, 3)]),
    "matmul": (lambda a, b: a @ b, [(2, 3), (3, 2)]),
    "matmul-batch-broadcast": (lambda a, b: a @ b, [(2, 1, 2, 3), (2, 3, 2)]),
    "matmul-batched-3d": (lambda a, b: a @ b, [(2, 3, 4), (2, 4, 2)]),
    "matmul-3d-by-2d": (lambda a, b: a @ b, [(2, 3, 4), (4, 2)]),
    "max-keepdims": (lambda a: a.max(axis=-1, keepdims=True) * a, [(2, 3)]),
    "mean-keepdims": (lambda a: a - a.mean(axis=(0, 2), keepdims=True), [(2, 3, 2)]),
    "permute": (lambda a: a.permute(2, 0, 1), [(2, 3, 2)]),
    "index-select-negative": (lambda a: a.index_select(1, [-1, 0, -1]), [(2, 3)]),
    "pow-exponent-at-zero-base": (lambda b: tensor(np.array([0.0, 0.0, 1.5])) ** b, ["positive:(3,)"]),
    "scatter-add-small-index": (lambda a, s: a.scatter_add(np.array([[0, 1], [2, 0]]), s, axis=0), [(3, 3), (3, 3)]),
    "matmul-vector-left": (lambda a, b: a @ b, [(3,), (3, 2)]),
    "matmul-vector-right": (lambda a, b: a @ b, [(2, 3), (3,)]),
    "matmul-dot": (lambda a, b: a @ b, [(3,), (3,)]),
    "reshape": (lambda a: a.reshape(3, -1) * a.reshape(3, 2), [(2, 3)]),
    "transpose": (lambda a: a.transpose(1, 0, 2), [(2, 3, 2)]),
    "T": (lambda a, b: a.T @ b, [(3, 2), (3, 2)]),
    "getitem-int": (lambda a: a[1], [(3, 2)]),
    "getitem-slices": (lambda a: a[:, 1::2], [(2, 5)]),
    "getitem-reverse-newaxis": (lambda a: a[None, ::-1, 0], [(3, 2)]),
    "gather": (lambda a: a.gather(np.array([[0, 0], [2, 1]]), axis=1), [(2, 3)]),
    "scatter-add": (lambda a, s: a.scatter_add(np.array([[0, 0], [2, 1]]), s, axis=1), [(2, 3), (2, 2)]),
    "index-select-repeats": (lambda a: a.index_select(0, [2, 0, 2]), [(3, 2)]),
    "embedding": (lambda w: F.embedding(np.array([[1, 0], [1, 1]]), w), [(3, 2)]),
    "layer-norm": (lambda x, w, b: F.layer_norm(x, w, b), [(2, 4), (4,), (4,)]),
    "layer-norm-no-affine": (lambda x: F.layer_norm(x), [(3, 4)]),
    "dropout": (lambda a: F.dropout(a, p=0.3, seed=3), [(3, 4)]),
    "cross-entropy": (lambda a: F.cross_entropy(a, np.array([2, 0, 1])), [(3, 4)]),
    "mse-loss": (lambda a, b: F.mse_loss(a, b), [(2, 3), (2, 3)]),
}


def _make(rng, spec):
    if isinstance(spec, tuple):
        return _leaf(rng, spec)
    kind, shape = spec.split(":")
    shape = eval(shape)  # a shape literal written in CASES above
    if kind == "positive":
        return _positive(rng, shape)
    magnitudes = rng.uniform(0.2, 1.0, shape)  # "away": kept at least 0.2 from the kink at 0
    return tensor(magnitudes * rng.choice([-1.0, 1.0], shape), dtype=np.float64, requires_grad=True)


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradcheck_every_op(numpy_backend, rng, name):
    fn, specs = CASES[name]
    assert gradcheck(fn, [_make(rng, spec) for spec in specs])


def test_gradcheck_compositions(numpy_backend, rng):
    x, w1, b1, w2 = _leaf(rng, (4, 3)), _leaf(rng, (3, 5)), _leaf(rng, (5,)), _leaf(rng, (5, 2))

    def mlp(x, w1, b1, w2):
        hidden = (x @ w1 + b1).tanh()
        return F.cross_entropy(hidden @ w2, np.array([0, 1, 1, 0]))

    assert gradcheck(mlp, [x, w1, b1, w2])
    # One tensor used in two branches: its gradients from both must add up.
    assert gradcheck(lambda a: (a * a.exp()).sum(axis=1) + a.sigmoid()[:, 0], [_leaf(rng, (3, 2))])
    # Indexing inside a graph, with broadcasting and a reduction after it.
    assert gradcheck(lambda a, b: (a[1:, ::2] * b).mean() + a[0].max(), [_leaf(rng, (3, 4)), _leaf(rng, (2,))])


def test_gradcheck_reports_the_worst_mismatch(numpy_backend, rng):
    from nbcoll.autograd import Function
    from nbcoll.kernels.elementwise import binary

    class WrongSquare(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return binary("mul", x, x)

        @staticmethod
        def backward(ctx, dy):
            (x,) = ctx.saved_tensors
            return binary("mul", dy, x)  # forgets the factor 2

    with pytest.raises(AssertionError, match="analytical .* numerical"):
        gradcheck(WrongSquare.apply, [_leaf(rng, (3,), 0.5, 1.0)])


def test_gradcheck_accepts_float32_inputs_and_checks_in_float64(numpy_backend, rng):
    x = tensor(rng.standard_normal(3).astype(np.float32), requires_grad=True)
    assert gradcheck(lambda a: a.tanh() * a, [x])


@pytest.mark.parametrize(
    "fn, shapes",
    [
        (lambda a, b: (a * b + a.exp()).sum(axis=0), [(2, 2), (2,)]),
        (lambda a: (a.tanh() - a.sigmoid()).mean(), [(3,)]),
        (lambda a: a[1:, 0] / (a[0, 1] + 3.0), [(2, 2)]),
        (lambda a, b: (a @ b).log_softmax(axis=-1), [(2, 1, 3), (2, 3, 2)]),
    ],
    ids=["broadcast-and-reuse", "unary-mean", "indexing", "batched-matmul-log-softmax"],
)
def test_gradcheck_on_the_device_backend(rng, fn, shapes):
    with nbcoll.use_backend(nbcoll.backend.device_backend()):
        assert gradcheck(fn, [_leaf(rng, shape) for shape in shapes])
