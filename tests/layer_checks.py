"""Helpers for layer tests: a gradient check over a module's parameters and inputs, and small NumPy pieces."""

import numpy as np

import nbcoll
import nbcoll.functional as F
from nbcoll.autograd import gradcheck
from nbcoll.nn import functional_call


def flat_outputs(output):
    """A layer's output (a Tensor, or nested tuples of Tensors and None) as one 1-D Tensor."""
    if isinstance(output, nbcoll.Tensor):
        return output.reshape(-1)
    return F.concat([flat_outputs(o) for o in output if o is not None], axis=0)


def gradcheck_module(module, inputs, **kwargs):
    """gradcheck with respect to every parameter of ``module`` and every floating input Tensor at once."""
    names = [name for name, _ in module.named_parameters()]
    params = [p for _, p in module.named_parameters()]
    inputs = [x.detach() if isinstance(x, nbcoll.Tensor) else x for x in inputs]
    for x in inputs:
        if isinstance(x, nbcoll.Tensor) and x.dtype.kind == "f":
            x.requires_grad = True
    count = len(inputs)

    def run(*args):
        replaced = dict(zip(names, args[count:], strict=True))
        return flat_outputs(functional_call(module, replaced, *args[:count]))

    return gradcheck(run, [*inputs, *[_leaf(p) for p in params]], **kwargs)


def _leaf(p):
    leaf = p.detach()
    leaf.requires_grad = True
    return leaf


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def tensor64(rng, *shape):
    return nbcoll.tensor(rng.standard_normal(shape), dtype=np.float64)


def params(module):
    """The module's parameters as NumPy arrays, by name."""
    return {name: p.numpy() for name, p in module.named_parameters()}


def gradients(make_module, inputs, seed=0):
    """Outputs and gradients (parameters by name, then inputs) of one weighted backward through a fresh module.

    ``make_module`` is called after ``manual_seed(seed)``, so every backend builds the same parameters.
    """
    nbcoll.manual_seed(seed)
    module = make_module()
    tensors = [nbcoll.tensor(a, requires_grad=a.dtype.kind == "f") if isinstance(a, np.ndarray) else a for a in inputs]
    out = flat_outputs(module(*tensors))
    weights = np.random.default_rng(seed).standard_normal(out.shape)
    out.backward(nbcoll.tensor(weights, dtype=out.dtype))
    grads = {name: p.grad.numpy() for name, p in module.named_parameters()}
    grads.update({f"input {i}": t.grad.numpy() for i, t in enumerate(tensors) if getattr(t, "grad", None) is not None})
    return out.numpy(), grads


def assert_same_gradients_as_numpy(make_module, inputs, rtol=1e-9):
    """The device backend's forward and gradients equal the NumPy references' (which gradcheck verifies)."""
    out, grads = gradients(make_module, inputs)
    with nbcoll.use_backend("numpy"):
        expected_out, expected = gradients(make_module, inputs)
    np.testing.assert_allclose(out, expected_out, rtol=rtol, atol=1e-12)
    assert grads.keys() == expected.keys()
    for name in expected:
        np.testing.assert_allclose(grads[name], expected[name], rtol=rtol, atol=1e-12, err_msg=name)
