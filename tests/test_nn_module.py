"""Module and Parameter: registration, walking the tree, modes, state dicts, dtype casts, hooks and printing."""

import numpy as np
import pytest

import nbcoll
from nbcoll import nn
from nbcoll.nn import Module, Parameter, functional_call
from nbcoll.tensors import tensor


class Affine(Module):
    def __init__(self, n, bias=True):
        super().__init__()
        self.n = n
        self.weight = Parameter(np.arange(1, n + 1, dtype=np.float64))
        self.bias = Parameter(np.zeros(n)) if bias else None
        self.register_buffer("steps", tensor(np.zeros(1)))
        self.register_buffer("scratch", tensor(np.ones(2)), persistent=False)

    def forward(self, x):
        y = x * self.weight
        return y if self.bias is None else y + self.bias

    def extra_repr(self):
        return f"n={self.n}"


class Net(Module):
    def __init__(self):
        super().__init__()
        self.first = Affine(2)
        self.second = Affine(2, bias=False)
        self.plain = 3  # an ordinary attribute

    def forward(self, x):
        return self.second(self.first(x))


@pytest.fixture(autouse=True)
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


def test_parameter_is_a_leaf_tensor_that_requires_grad():
    p = Parameter(np.ones(3, np.float32))
    assert isinstance(p, nbcoll.Tensor) and p.requires_grad and p.is_leaf and p.dtype == np.float32
    assert repr(p).startswith("Parameter containing:\ntensor(")
    assert not Parameter(np.ones(2), requires_grad=False).requires_grad
    source = tensor(np.ones(2))
    assert Parameter(source).data is source.data  # wraps, as PyTorch's Parameter(t) shares t's storage
    with pytest.raises(TypeError, match="floating"):
        Parameter(np.ones(2, np.int64))


def test_attribute_assignment_registers_parameters_modules_and_buffers():
    net = Net()
    assert [n for n, _ in net.named_parameters()] == ["first.weight", "first.bias", "second.weight"]
    assert [n for n, _ in net.named_children()] == ["first", "second"]
    assert list(net.children()) == [net.first, net.second]
    assert [n for n, _ in net.named_modules()] == ["", "first", "second"]
    assert len(list(net.modules())) == 3
    assert [n for n, _ in net.named_buffers()] == ["first.steps", "first.scratch", "second.steps", "second.scratch"]
    assert len(list(net.parameters(recurse=False))) == 0
    assert net.second.bias is None and net.plain == 3
    assert net.get_submodule("first") is net.first and net.get_submodule("") is net
    with pytest.raises(AttributeError, match="no sub-module 'third'"):
        net.get_submodule("third")
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        getattr(net, "missing")  # noqa: B009


def test_reassignment_and_deletion_keep_the_registries_consistent():
    net = Net()
    with pytest.raises(TypeError, match="Parameter or None"):
        net.first.weight = tensor(np.ones(2))
    net.first.bias = None
    assert [n for n, _ in net.named_parameters()] == ["first.weight", "second.weight"]
    net.first.weight = Parameter(np.zeros(2))
    net.first = Affine(3)  # replacing a child
    assert net.first.n == 3
    del net.second
    assert [n for n, _ in net.named_children()] == ["first"]
    net.first.steps = tensor(np.ones(1))  # a buffer is replaced by a Tensor
    with pytest.raises(TypeError, match="buffer"):
        net.first.steps = 1.0
    with pytest.raises(KeyError, match="already has an attribute"):
        net.register_buffer("plain", tensor(np.ones(1)))
    with pytest.raises(ValueError, match="without '.'"):
        net.register_parameter("a.b", None)


def test_shared_parameters_and_modules_are_listed_once():
    net = Net()
    net.second.weight = net.first.weight  # tied weights
    net.again = net.first  # the same child under two names
    assert [n for n, _ in net.named_parameters()] == ["first.weight", "first.bias"]
    assert [n for n, _ in net.named_modules()] == ["", "first", "second"]
    # state_dict lists a shared tensor under each of its names, as PyTorch's does.
    assert "second.weight" in net.state_dict() and "again.weight" in net.state_dict()


def test_forgetting_super_init_is_a_clear_error():
    class Broken(Module):
        def __init__(self):
            self.w = Parameter(np.ones(1))

    with pytest.raises(AttributeError, match=r"super\(\).__init__\(\)"):
        Broken()


def test_forward_is_required():
    with pytest.raises(NotImplementedError, match="must define forward"):
        Module()(1)


def test_train_and_eval_reach_every_descendant():
    net = Net()
    assert net.training and net.first.training
    assert net.eval() is net
    assert not net.training and not net.first.training and not net.second.training
    net.train()
    assert all(m.training for m in net.modules())
    with pytest.raises(TypeError, match="bool"):
        net.train("no")


def test_zero_grad_and_requires_grad():
    net = Net()
    net(tensor(np.ones(2))).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    assert all(np.all(p.grad.numpy() == 0) for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())


def test_state_dict_round_trip_copies_into_the_existing_arrays():
    net = Net()
    state = net.state_dict()
    assert list(state) == ["first.weight", "first.bias", "first.steps", "second.weight", "second.steps"]
    assert all(isinstance(v, np.ndarray) for v in state.values())
    state["first.weight"] += 10  # a host copy: the model is unchanged
    assert net.first.weight.numpy()[0] == 1
    weight_array = net.first.weight.data
    assert net.load_state_dict(state) == ([], [])
    assert net.first.weight.data is weight_array  # copied into, not replaced
    np.testing.assert_array_equal(net.first.weight.numpy(), [11, 12])
    other = Net()
    other.load_state_dict(net.state_dict())
    for (name, a), b in zip(net.state_dict().items(), other.state_dict().values(), strict=True):
        np.testing.assert_array_equal(a, b, err_msg=name)
    assert net.state_dict(keep_vars=True)["first.weight"] is net.first.weight


def test_load_state_dict_names_every_missing_unexpected_and_wrong_shape_key():
    net = Net()
    state = net.state_dict()
    del state["first.bias"]
    state["first.extra"] = np.ones(1)
    state["second.weight"] = np.ones(3)
    before = net.state_dict()
    with pytest.raises(RuntimeError) as info:
        net.load_state_dict(state)
    message = str(info.value)
    assert "missing keys 'first.bias'" in message and "unexpected keys 'first.extra'" in message
    assert "'second.weight' (expected (2,), got (3,))" in message
    for name, value in before.items():  # nothing was copied
        np.testing.assert_array_equal(net.state_dict()[name], value)
    state["second.weight"] = np.ones(2)
    assert net.load_state_dict(state, strict=False) == (["first.bias"], ["first.extra"])
    with pytest.raises(RuntimeError, match="wrong shapes"):
        net.load_state_dict({"first.weight": np.ones(5)}, strict=False)
    with pytest.raises(TypeError, match="dict"):
        net.load_state_dict([1, 2])


def test_load_state_dict_converts_dtype_and_accepts_tensors():
    net = Net().to(np.float32)
    net.load_state_dict({k: tensor(v.astype(np.float64) + 1) for k, v in net.state_dict().items()})
    assert net.first.weight.dtype == np.float32
    np.testing.assert_array_equal(net.first.weight.numpy(), [2, 3])


def test_to_casts_parameters_gradients_and_buffers_in_place():
    net = Net()
    weight = net.first.weight
    net(tensor(np.ones(2))).sum().backward()
    assert net.to(np.float32) is net
    assert net.first.weight is weight and weight.dtype == np.float32 and weight.grad.dtype == np.float32
    assert net.first.steps.dtype == np.float32 and net.first.scratch.dtype == np.float32
    assert net(tensor(np.ones(2, np.float32))).dtype == np.float32
    assert net.double().first.weight.dtype == np.float64
    with pytest.raises(TypeError, match="floating"):
        net.to(np.int64)


def test_forward_hooks_run_in_order_and_can_replace_arguments_and_output():
    layer = Affine(2)
    calls = []
    pre = layer.register_forward_pre_hook(lambda m, args: calls.append(("pre", m)) or (args[0] * 2,))
    post = layer.register_forward_hook(lambda m, args, out: calls.append(("post", len(args))) or out + 1)
    y = layer(tensor(np.ones(2)))
    assert calls == [("pre", layer), ("post", 1)]
    np.testing.assert_array_equal(y.numpy(), [3, 5])  # (1 * 2) * [1, 2] + 0 + 1
    pre.remove()
    post.remove()
    pre.remove()  # a second remove does nothing
    np.testing.assert_array_equal(layer(tensor(np.ones(2))).numpy(), [1, 2])
    assert len(calls) == 2
    with pytest.raises(TypeError, match="callable"):
        layer.register_forward_hook(3)


def test_apply_visits_children_first():
    net = Net()
    order = []
    assert net.apply(lambda m: order.append(type(m).__name__)) is net
    assert order == ["Affine", "Affine", "Net"]


def test_repr_nests_like_pytorch():
    assert repr(Affine(2)) == "Affine(n=2)"
    assert repr(Net()) == "Net(\n  (first): Affine(n=2)\n  (second): Affine(n=2)\n)"

    class Outer(Module):
        def __init__(self):
            super().__init__()
            self.inner = Net()

    assert repr(Outer()) == "Outer(\n  (inner): Net(\n    (first): Affine(n=2)\n    (second): Affine(n=2)\n  )\n)"


def test_functional_call_swaps_members_and_restores_them():
    layer = Affine(2)
    original = layer.weight
    y = functional_call(layer, {"weight": tensor(np.array([5.0, 6.0]))}, tensor(np.ones(2)))
    np.testing.assert_array_equal(y.numpy(), [5, 6])
    assert layer.weight is original
    with pytest.raises(KeyError, match="no parameter or buffer 'nope'"):
        functional_call(layer, {"nope": original}, tensor(np.ones(2)))
    assert layer.weight is original


def test_manual_seed_and_default_dtype():
    nbcoll.manual_seed(5)
    assert nbcoll.initial_seed() == 5
    a = nbcoll.seed.host_generator().standard_normal(3)
    nbcoll.manual_seed(5)
    np.testing.assert_array_equal(a, nbcoll.seed.host_generator().standard_normal(3))
    with pytest.raises(ValueError, match="seed"):
        nbcoll.manual_seed(-1)
    assert nbcoll.get_default_dtype() == np.float32
    nbcoll.set_default_dtype(np.float64)
    try:
        assert nbcoll.get_default_dtype() == np.float64
    finally:
        nbcoll.set_default_dtype(np.float32)
    with pytest.raises(TypeError, match="floating dtype"):
        nbcoll.set_default_dtype(np.int32)


def test_check_input_names_the_layer_and_both_shapes():
    layer = Affine(2)
    assert nn.check_input(layer, tensor(np.ones((4, 2))), (..., 2)).shape == (4, 2)
    assert nn.check_input(layer, np.ones((2,)), [(2,), ("batch", 2)]).shape == (2,)
    with pytest.raises(ValueError, match=r"Affine\(n=2\): expected input of shape \(\*, 2\), got \(4, 3\)"):
        nn.check_input(layer, tensor(np.ones((4, 3))), (..., 2))
    with pytest.raises(ValueError, match=r"\(2,\) or \(batch, 2\), got \(3, 3\)"):
        nn.check_input(layer, tensor(np.ones((3, 3))), [(2,), ("batch", 2)])
    with pytest.raises(TypeError, match="Tensor"):
        nn.check_input(layer, [1, 2], (2,))


def test_state_dict_cast_and_zero_grad_on_every_backend(backend):
    net = Net()
    net(tensor(np.ones(2))).sum().backward()
    net.zero_grad(set_to_none=False)
    assert np.all(net.first.weight.grad.numpy() == 0)
    state = {k: v + 1 for k, v in net.state_dict().items()}
    net.load_state_dict(state)
    np.testing.assert_array_equal(net.first.weight.numpy(), [2, 3])
    net.to(np.float32)
    assert net.first.weight.dtype == np.float32
    np.testing.assert_array_equal(net.state_dict()["second.steps"], np.ones(1, np.float32))


def test_deepcopy_gives_an_independent_model_on_every_backend(backend):
    import copy

    net = Net()
    net.second.weight = net.first.weight  # tied weights stay tied in the copy
    net(tensor(np.ones(2))).sum().backward()
    twin = copy.deepcopy(net)
    assert isinstance(twin.first.weight, Parameter) and twin.first.weight is not net.first.weight
    assert twin.second.weight is twin.first.weight
    assert twin.first.weight.grad is not None and twin.first.weight.requires_grad
    for name, value in net.state_dict().items():
        np.testing.assert_array_equal(twin.state_dict()[name], value)
    twin.load_state_dict({k: v * 0 for k, v in twin.state_dict().items()})
    assert net.first.weight.numpy()[1] == 2  # the original is untouched
    assert repr(twin) == repr(net)
