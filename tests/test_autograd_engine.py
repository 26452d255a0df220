"""The backward engine: accumulation, no_grad, retain_graph, hooks, errors, detach, custom Functions."""

import numpy as np
import pytest

import nbcoll
from nbcoll.autograd import Function, backward, enable_grad, no_grad
from nbcoll.kernels.elementwise import binary
from nbcoll.tensors import tensor


def test_gradients_accumulate_across_backward_calls(backend):
    x = tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    (x * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2 + 3, 4 + 3])
    x.zero_grad()
    assert x.grad is None
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2, 4])


def test_a_tensor_used_in_two_branches_gets_both_gradients(backend):
    x = tensor([3.0], requires_grad=True)
    y = x * x + x.exp()
    y.backward(tensor([1.0]))
    np.testing.assert_allclose(x.grad.numpy(), [6 + np.exp(3.0)], rtol=1e-6)


def test_broadcast_gradient_is_summed_to_the_input_shape(backend):
    a = tensor(np.ones((2, 3), np.float32), requires_grad=True)
    b = tensor([1.0, 2.0, 3.0], requires_grad=True)
    (a * b).sum().backward()
    assert b.grad.shape == (3,)
    np.testing.assert_allclose(b.grad.numpy(), [2, 2, 2])
    np.testing.assert_allclose(a.grad.numpy(), [[1, 2, 3], [1, 2, 3]])


def test_indexing_backward_scatters_into_zeros(backend):
    x = tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)
    x[1, ::2].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0, 0], [1, 0, 1]])


def test_no_grad_context_and_decorator(backend):
    x = tensor([1.0], requires_grad=True)
    with no_grad():
        y = x * 2
        with enable_grad():
            z = x * 2
    assert not y.requires_grad and y.grad_fn is None
    assert z.requires_grad and z.grad_fn is not None

    @no_grad()
    def double(t):
        return t * 2

    assert not double(x).requires_grad
    assert (x * 2).requires_grad
    assert nbcoll.autograd.is_grad_enabled()


def test_operations_on_tensors_without_grad_record_nothing(backend):
    y = tensor([1.0]) * tensor([2.0])
    assert not y.requires_grad and y.grad_fn is None
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.backward()


def test_backward_twice_needs_retain_graph(backend):
    x = tensor([2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [8.0])
    with pytest.raises(RuntimeError, match="backward through the graph a second time.*retain_graph=True"):
        y.backward()


def test_non_scalar_backward_needs_a_gradient(backend):
    x = tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        y.backward()
    y.backward(tensor([1.0, 10.0]))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 20.0])
    with pytest.raises(ValueError, match="expected shape"):
        (x * 2).backward(tensor([1.0]))


def test_hooks_fire_in_order_as_each_gradient_is_ready(backend):
    events = []
    x = tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    z = y * 3
    loss = z.sum() + y.sum()  # y gets gradient from two places: its hook fires once, with the sum
    for name, t in [("x", x), ("y", y), ("z", z)]:
        t.register_hook(lambda g, name=name: events.append((name, g.numpy().tolist())))
    x.register_post_accumulate_grad_hook(lambda t: events.append(("x accumulated", t.grad.numpy().tolist())))
    loss.backward()
    assert events == [
        ("z", [1.0, 1.0]),
        ("y", [4.0, 4.0]),
        ("x", [8.0, 8.0]),
        ("x accumulated", [8.0, 8.0]),
    ]


def test_hook_can_replace_the_gradient_and_be_removed(backend):
    x = tensor([1.0, 2.0], requires_grad=True)
    y = x * 1.0
    handle = y.register_hook(lambda g: g * 10.0)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [10.0, 10.0])
    handle.remove()
    x.zero_grad()
    y = x * 1.0
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 1.0])
    with pytest.raises(RuntimeError, match="does not require grad"):
        tensor([1.0]).register_hook(print)


def test_retain_grad_keeps_an_intermediate_gradient(backend):
    x = tensor([1.0, 2.0], requires_grad=True)
    y = x * x
    y.retain_grad()
    y.sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), [1.0, 1.0])


def test_detach_cuts_the_graph(backend):
    x = tensor([2.0], requires_grad=True)
    d = x.detach()
    assert not d.requires_grad and d.is_leaf
    np.testing.assert_array_equal(d.numpy(), x.numpy())
    y = (x * d).sum()  # d is a constant: dy/dx = d
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0])


def test_backward_function_and_leaf_root(backend):
    a, b = tensor([1.0], requires_grad=True), tensor([2.0], requires_grad=True)
    backward([(a * b).sum(), (a + b).sum()])
    np.testing.assert_allclose(a.grad.numpy(), [3.0])
    np.testing.assert_allclose(b.grad.numpy(), [2.0])
    a.backward(tensor([5.0]))  # a leaf as the root: its gradient is the one given
    np.testing.assert_allclose(a.grad.numpy(), [8.0])


def test_a_custom_function(backend):
    class Cube(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return binary("mul", x, binary("mul", x, x))

        @staticmethod
        def backward(ctx, dy):
            (x,) = ctx.saved_tensors
            three = nbcoll.to_device(np.full(x.shape, 3, x.dtype))
            return binary("mul", dy, binary("mul", three, binary("mul", x, x)))

    x = tensor([2.0], requires_grad=True)
    y = Cube.apply(x)
    assert repr(y.grad_fn) == "<Cube node>"
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [12.0])


def test_a_deep_graph_needs_no_recursion():
    with nbcoll.use_backend("numpy"):
        x = tensor([1.0], requires_grad=True)
        y = x
        for _ in range(5000):
            y = y * 1.0
        y.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), [1.0])


def test_leaf_gradients_never_share_a_buffer(backend):
    a, b = tensor([1.0], requires_grad=True), tensor([2.0], requires_grad=True)
    (a + b).sum().backward()
    assert a.grad.data is not b.grad.data
