"""Activation checkpointing: keep a block's inputs instead of its intermediates, and recompute them in backward.

``checkpoint(fn, *args)`` runs ``fn`` as one node of the graph::

    forward:   y = fn(*args) under no_grad          nothing inside fn is recorded, so its intermediates are freed
               keep the tensors of args             (and a copy of the random state, when preserve_rng_state)
    backward:  x = the kept arrays, as new leaves   each requires grad as the argument it stands for did
               y = fn(*x) recorded, with the random state of forward   (so dropout draws the same masks)
               backward(y, dy)                      into x.grad, and into .grad of every parameter fn used
               return x.grad                        the outer backward carries it on to the arguments

So a block keeps its inputs alive, not its activations, and recomputes them when backward reaches it: one extra
forward per block buys memory, which is what long sequences and deep models run out of. The recomputation draws
from a copy of the state saved in forward, so the generator itself is left where forward left it: a step with
checkpointing leaves it in the same state as a step without (PyTorch's choice too).

``fully_shard`` (:mod:`nbcoll.parallel.fsdp`) recomputes each unit in its backward the same way, and gathers the
parameters around it; here the parameters stay where they are and the inner backward adds into their ``.grad``.

Example::

    block = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
    y = checkpoint(block, x)                  # keeps x; the 256-wide activations are recomputed in backward
    model = nn.Sequential(*[checkpoint_wrapper(nn.TransformerBlock(64, 4)) for _ in range(8)])
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np

from nbcoll import memory, seed
from nbcoll.functional import concat
from nbcoll.nn.module import Module
from nbcoll.tensors import Tensor, enable_grad, is_grad_enabled, no_grad
from nbcoll.tensors.engine import backward
from nbcoll.tensors.function import Context, Function


class _Call:
    """One call of ``fn``: what the recomputation needs besides the kept arrays, and the layout of its outputs."""

    def __init__(self, fn: Callable, args: tuple, kwargs: dict, preserve_rng_state: bool) -> None:
        self.fn, self.kwargs = fn, kwargs
        self.positions = [k for k, a in enumerate(args) if isinstance(a, Tensor)]  # where the tensors go back
        self.args = [None if isinstance(a, Tensor) else a for a in args]  # the others pass through as they are
        self.rng_state = seed.snapshot() if preserve_rng_state else None
        self.single = True  # fn returned one Tensor, not a tuple
        self.layout: list[tuple[int, ...]] = []  # the shape of each output
        self.dtype: np.dtype | None = None

    def run(self, tensors: list[Tensor]) -> Any:
        args = list(self.args)
        for k, t in zip(self.positions, tensors, strict=True):
            args[k] = t
        return self.fn(*args, **self.kwargs)

    def random_state(self) -> contextlib.AbstractContextManager:
        """Draw from a copy of the state forward started from; the generator itself does not move."""
        return contextlib.nullcontext() if self.rng_state is None else seed.rank_state(self.rng_state)

    def pack(self, outputs: Any) -> Any:
        """One array for the node's output: the Tensor's, or a tuple's flattened and joined (split again after)."""
        if isinstance(outputs, Tensor):
            self.layout, self.dtype = [outputs.shape], outputs.dtype
            return outputs.data
        if not isinstance(outputs, (tuple, list)) or not outputs or not all(isinstance(o, Tensor) for o in outputs):
            raise TypeError(
                "fn: a checkpointed function must return a Tensor or a non-empty tuple of Tensors, "
                f"got {_kind(outputs)}"
            )
        dtypes = {o.dtype for o in outputs}
        if len(dtypes) > 1 or np.dtype(outputs[0].dtype).kind != "f":
            raise TypeError(
                "fn: the Tensors a checkpointed function returns must share one floating dtype, got "
                f"{sorted(str(d) for d in dtypes)}"
            )
        self.single, self.layout, self.dtype = False, [o.shape for o in outputs], outputs[0].dtype
        return concat([o.reshape(o.size) for o in outputs]).data

    def unpack(self, joined: Tensor) -> Any:
        """The outputs as fn returned them, each a differentiable slice of the node's joined output."""
        if self.single:
            return joined
        outputs, start = [], 0
        for shape in self.layout:
            size = int(np.prod(shape))
            outputs.append(joined[start : start + size].reshape(shape))
            start += size
        return tuple(outputs)

    def check_same(self, outputs: Any) -> list[Tensor]:
        """The recomputed outputs as a list, refused when they differ from forward's in kind, shape or dtype."""
        single = isinstance(outputs, Tensor)
        found = [outputs] if single else list(outputs) if isinstance(outputs, (tuple, list)) else []
        same = (
            single == self.single
            and all(isinstance(o, Tensor) and o.dtype == self.dtype for o in found)
            and [o.shape for o in found] == self.layout
        )
        if not same:
            raise RuntimeError(
                f"fn: its recomputation in backward returned {_kind(outputs)}, unlike its forward (shapes "
                f"{self.layout}, dtype {self.dtype}): a checkpointed function must compute the same outputs from "
                "the same inputs both times"
            )
        return found

    def split_grad(self, grad: Any) -> list[Any]:
        if self.single:
            return [grad]
        with no_grad():
            return [g.data for g in self.unpack(Tensor._from_array(grad))]


def _kind(value: Any) -> str:
    if isinstance(value, Tensor):
        return f"a Tensor of shape {value.shape}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {', '.join(_kind(v) for v in value) or 'nothing'}"
    return f"a {type(value).__name__}"


def _refuse_outer_intermediates(outputs: list[Tensor], first_inner: int) -> None:
    """Refuse a recomputed graph that reaches a tensor computed before the checkpoint by recorded operations.

    Such a tensor (one fn takes from its closure, not from its arguments) is not an input of the checkpoint's
    node: the inner backward would run the nodes that made it, and the outer backward would run them again.
    Leaves (parameters) are fine: the inner backward adds into their ``.grad``. The nodes recorded by the
    recomputation are those numbered after the checkpoint's own node, ``first_inner``.
    """
    stack = [o.grad_fn for o in outputs if o.grad_fn is not None]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for t in node.inputs:
            if t is None or not t.requires_grad or t.grad_fn is None:
                continue
            if t.grad_fn.sequence < first_inner:
                raise RuntimeError(
                    f"fn: uses a tensor of shape {t.shape} computed outside the checkpoint (by {t.grad_fn!r}) that "
                    "requires grad: pass it to checkpoint as an argument so that its gradient flows back"
                )
            stack.append(t.grad_fn)


class _Checkpoint(Function):
    @staticmethod
    def forward(ctx: Context, call: _Call, anchor: Any, *arrays: Any) -> Any:
        with no_grad():
            output = call.pack(call.run([Tensor._from_array(a) for a in arrays]))
        ctx.save_for_backward(*arrays)
        ctx.call = call
        return output

    @staticmethod
    def backward(ctx: Context, grad: Any) -> tuple:
        call = ctx.call
        inputs = [
            Tensor._from_array(a, requires_grad=need)
            for a, need in zip(ctx.saved_tensors, ctx.needs_input_grad[2:], strict=True)
        ]
        with enable_grad(), call.random_state():
            outputs = call.check_same(call.run(inputs))
        _refuse_outer_intermediates(outputs, ctx.sequence)
        pairs = [(o, g) for o, g in zip(outputs, call.split_grad(grad), strict=True) if o.requires_grad]
        if pairs:
            backward([o for o, _ in pairs], [Tensor._from_array(g) for _, g in pairs])
        return (None, None, *[None if t.grad is None else t.grad.data for t in inputs])


def checkpoint(
    fn: Callable, *args: Any, use_reentrant: bool = False, preserve_rng_state: bool = True, **kwargs: Any
) -> Any:
    """``fn(*args, **kwargs)``, keeping only the Tensors of ``args`` for backward, which recomputes the rest.

    ``fn`` returns a Tensor or a tuple of Tensors of one floating dtype. Tensors among ``args`` receive
    gradients (those that require one); other arguments and ``kwargs`` pass through to ``fn`` as they are, and
    get none. Every parameter ``fn`` uses gets its gradient when backward recomputes it: the output requires
    grad whenever grad mode is on, since which parameters ``fn`` uses is seen only then. A tensor ``fn`` takes
    from outside that requires grad and is not a leaf must be passed as an argument (backward says so).

    With ``preserve_rng_state`` (the default) the recomputation draws the random numbers forward drew, so dropout
    masks are equal. ``use_reentrant`` is accepted as in PyTorch; both values run the one algorithm described in
    the module docstring. Under ``no_grad`` this is ``fn(*args, **kwargs)``.

    >>> import numpy as np, nbcoll
    >>> from nbcoll import nn
    >>> from nbcoll.utils import checkpoint
    >>> block = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Dropout(0.5), nn.Linear(16, 4))
    >>> x = nbcoll.tensor(np.ones((2, 4), np.float32), requires_grad=True)
    >>> nbcoll.manual_seed(1)
    >>> checkpoint(block, x).sum().backward()                 # block's forward runs twice, the masks equal
    >>> g = block[0].weight.grad.numpy()
    >>> block.zero_grad()
    >>> nbcoll.manual_seed(1)
    >>> block(x).sum().backward()                             # the same step without checkpointing
    >>> bool((block[0].weight.grad.numpy() == g).all())
    True
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a function or a Module to checkpoint, got {type(fn).__name__}")
    for name, value in (("use_reentrant", use_reentrant), ("preserve_rng_state", preserve_rng_state)):
        if not isinstance(value, bool):
            raise TypeError(f"{name}: expected True or False, got {value!r}")
    if not is_grad_enabled():
        return fn(*args, **kwargs)
    call = _Call(fn, args, kwargs, preserve_rng_state)
    # A leaf that requires grad and never receives one: it makes the node recorded even when no argument needs a
    # gradient (the first block of a model takes data), so the parameters inside still get theirs.
    anchor = Tensor._from_array(memory.empty((0,), _anchor_dtype(args)), requires_grad=True)
    joined = _Checkpoint.apply(call, anchor, *[a for a in args if isinstance(a, Tensor)])
    return call.unpack(joined)


def _anchor_dtype(args: tuple) -> np.dtype:
    """The dtype of the anchor leaf: that of the first floating Tensor argument, float32 when there is none."""
    floats = [a.dtype for a in args if isinstance(a, Tensor) and np.dtype(a.dtype).kind == "f"]
    return floats[0] if floats else np.dtype(np.float32)


class _CheckpointedForward:
    """A module's forward, run under :func:`checkpoint`; an object (not a closure) so that deepcopy rebinds it."""

    def __init__(self, module: Module, forward: Callable | None, preserve_rng_state: bool) -> None:
        self.module, self.forward, self.preserve_rng_state = module, forward, preserve_rng_state

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        forward = self.forward if self.forward is not None else type(self.module).forward.__get__(self.module)
        return checkpoint(forward, *args, preserve_rng_state=self.preserve_rng_state, **kwargs)


def checkpoint_wrapper(module: Module, preserve_rng_state: bool = True) -> Module:
    """Make every call of ``module`` a :func:`checkpoint` of its forward; return ``module`` itself.

    The module is changed in place, so its ``state_dict`` keys, ``named_parameters``, hooks and repr stay as they
    were (PyTorch wraps it in a new module whose keys it rewrites back). Positional Tensor arguments get
    gradients; keyword arguments (a padding mask) pass through.

    >>> import numpy as np, nbcoll
    >>> from nbcoll import nn
    >>> from nbcoll.utils import checkpoint_wrapper
    >>> model = nn.Sequential(checkpoint_wrapper(nn.TransformerBlock(8, 2, dropout=0.1)), nn.Linear(8, 1))
    >>> list(model.state_dict())[:2]                          # the keys of the plain model
    ['0.ln1.weight', '0.ln1.bias']
    >>> model(nbcoll.tensor(np.ones((2, 3, 8), np.float32))).sum().backward()
    >>> model[0].mlp.fc_in.weight.grad.shape
    (32, 8)
    """
    if not isinstance(module, Module):
        raise TypeError(f"module: expected an nbcoll.nn.Module, got {type(module).__name__}")
    if not isinstance(preserve_rng_state, bool):
        raise TypeError(f"preserve_rng_state: expected True or False, got {preserve_rng_state!r}")
    current = module.__dict__.get("forward")  # a forward set on the instance (fully_shard's), else the class's
    if isinstance(current, _CheckpointedForward):
        raise ValueError(f"module: this {type(module).__name__} is already checkpointed by checkpoint_wrapper")
    object.__setattr__(module, "forward", _CheckpointedForward(module, current, preserve_rng_state))
    return module


__all__ = ["checkpoint", "checkpoint_wrapper"]
