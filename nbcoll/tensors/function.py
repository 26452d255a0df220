"""``Function``: one differentiable operation, its forward and its backward side by side.

A subclass writes two static methods on device arrays (never on Tensors): ``forward(ctx, *args)`` computes the
result with kernel launch functions and saves what backward needs on ``ctx``; ``backward(ctx, grad_output)``
returns one gradient per positional argument of forward (``None`` where there is none). ``apply`` runs forward
on Tensors and, when a gradient is wanted, records ``ctx`` as the ``grad_fn`` node of the result.

Example::

    class Square(Function):
        @staticmethod
        def forward(ctx, x):                     # for i: y[i] = x[i] * x[i]
            ctx.save_for_backward(x)
            return elementwise.binary("mul", x, x)

        @staticmethod
        def backward(ctx, dy):                   # for i: dx[i] = 2 * x[i] * dy[i]
            (x,) = ctx.saved_tensors
            return elementwise.binary("mul", dy, elementwise.binary("add", x, x))

    y = Square.apply(x)
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from nbcoll.kernels.low_precision import is_low_precision
from nbcoll.tensors.autocast_state import active_autocast
from nbcoll.tensors.dtypes import refuse_low_precision
from nbcoll.tensors.grad_mode import is_grad_enabled
from nbcoll.tensors.tensor import Tensor  # the core, which imports no operation: apply builds Tensors

_sequence = itertools.count()  # numbers the nodes in the order forward records them

FREED_GRAPH_MESSAGE = (
    "Trying to backward through the graph a second time (or to read saved tensors after they were freed). "
    "Saved intermediate values of the graph are freed when you call .backward(); "
    "specify retain_graph=True if you need to backward through the graph a second time."
)


class Context:
    """A node of the graph: what one ``Function`` call needs for its backward.

    Example::

        >>> import nbcoll
        >>> x = nbcoll.tensor([1.0, 2.0], requires_grad=True)
        >>> y = x.exp()
        >>> y.grad_fn, y.grad_fn.inputs[0] is x
        (<Exp node>, True)
    """

    def __init__(self, function: type[Function], inputs: tuple[Tensor | None, ...]) -> None:
        self.function = function
        self.sequence = next(_sequence)  # backward runs later nodes first when several are ready
        # One entry per positional argument of forward: the Tensor, or None for a non-Tensor argument.
        self.inputs = inputs
        self.needs_input_grad = tuple(t is not None and t.requires_grad for t in inputs)
        self.hooks: list[Any] = []  # hooks of the output Tensor, run on its gradient before backward
        self._saved: tuple[Any, ...] = ()
        self._freed = False

    def save_for_backward(self, *arrays: Any) -> None:
        """Keep device arrays for backward; they are released after backward unless ``retain_graph=True``.

        >>> import nbcoll
        >>> from nbcoll.autograd import Function
        >>> class Cube(Function):
        ...     @staticmethod
        ...     def forward(ctx, x):
        ...         ctx.save_for_backward(x)
        ...         return x * x * x
        ...
        ...     @staticmethod
        ...     def backward(ctx, dy):
        ...         (x,) = ctx.saved_tensors
        ...         return 3 * x * x * dy
        >>> x = nbcoll.tensor([2.0], requires_grad=True)
        >>> Cube.apply(x).backward()
        >>> x.grad.numpy()
        array([12.], dtype=float32)
        """
        self._saved = arrays

    @property
    def saved_tensors(self) -> tuple[Any, ...]:
        """The arrays given to :meth:`save_for_backward`; reading them after they were released is an error.

        >>> import nbcoll
        >>> x = nbcoll.tensor([2.0], requires_grad=True)
        >>> y = x.exp()
        >>> y.grad_fn.saved_tensors
        (array([7.3890557], dtype=float32),)
        """
        if self._freed:
            raise RuntimeError(FREED_GRAPH_MESSAGE)
        return self._saved

    def release(self) -> None:
        """Drop the saved arrays (what ``backward`` does unless asked to retain the graph).

        >>> import nbcoll
        >>> y = nbcoll.tensor([2.0], requires_grad=True).exp()
        >>> y.grad_fn.release()
        >>> y.grad_fn.saved_tensors
        Traceback (most recent call last):
            ...
        RuntimeError: Trying to backward through the graph a second time...
        """
        if self._saved:
            self._freed = True
        self._saved = ()

    def run_backward(self, grad_output: Any) -> tuple[Any, ...]:
        """Call the function's backward; check that it returned one gradient per input, each of its input's shape
        and dtype (a wrong one would otherwise surface far away, or not at all).

        >>> import numpy as np, nbcoll
        >>> y = nbcoll.tensor([0.0, 1.0], requires_grad=True).exp()
        >>> y.grad_fn.run_backward(np.ones(2, np.float32))          # d exp(x) / dx = exp(x)
        (array([1.      , 2.718282], dtype=float32),)
        """
        grads = self.function.backward(self, grad_output)
        grads = grads if isinstance(grads, tuple) else (grads,)
        if len(grads) != len(self.inputs):
            raise RuntimeError(
                f"{self.function.__name__}.backward returned {len(grads)} gradients, expected {len(self.inputs)} "
                "(one per positional argument of forward, None where there is none)"
            )
        for k, (t, grad) in enumerate(zip(self.inputs, grads, strict=True)):
            if t is None or grad is None or not t.requires_grad:
                continue
            if tuple(grad.shape) != t.shape or np.dtype(grad.dtype) != t.dtype:
                raise RuntimeError(
                    f"{self.function.__name__}.backward returned a gradient of shape {tuple(grad.shape)} and dtype "
                    f"{np.dtype(grad.dtype)} for input {k}, which has shape {t.shape} and dtype {t.dtype}"
                )
        return grads

    def __repr__(self) -> str:
        return f"<{self.function.__name__} node>"


class Function:
    """Base class of differentiable operations (see the module docstring for a complete example).

    Example::

        >>> import nbcoll
        >>> from nbcoll.autograd import Function
        >>> from nbcoll.kernels import elementwise
        >>> class Square(Function):
        ...     @staticmethod
        ...     def forward(ctx, x):                     # for i: y[i] = x[i] * x[i]
        ...         ctx.save_for_backward(x)
        ...         return elementwise.binary("mul", x, x)
        ...
        ...     @staticmethod
        ...     def backward(ctx, dy):                   # for i: dx[i] = 2 * x[i] * dy[i]
        ...         (x,) = ctx.saved_tensors
        ...         return elementwise.binary("mul", dy, elementwise.binary("add", x, x))
        >>> x = nbcoll.tensor([3.0], requires_grad=True)
        >>> y = Square.apply(x)             # y.grad_fn is the recorded node; y.backward() calls Square.backward
        >>> y.backward()
        >>> y.numpy(), x.grad.numpy()
        (array([9.], dtype=float32), array([6.], dtype=float32))
    """

    @staticmethod
    def forward(ctx: Context, *args: Any, **kwargs: Any) -> Any:
        """Compute the result from device arrays (never Tensors) and save on ``ctx`` what backward needs.

        >>> import nbcoll
        >>> from nbcoll.autograd import Function
        >>> class Double(Function):
        ...     @staticmethod
        ...     def forward(ctx, x):
        ...         return x * 2
        ...
        ...     @staticmethod
        ...     def backward(ctx, dy):
        ...         return dy * 2
        >>> Double.apply(nbcoll.tensor([1.0, 2.0])).numpy()
        array([2., 4.], dtype=float32)
        """
        raise NotImplementedError

    @staticmethod
    def backward(ctx: Context, grad_output: Any) -> Any:
        """Given the gradient of the output, return one gradient per positional argument of forward (None for none).

        >>> import nbcoll
        >>> from nbcoll.autograd import Function
        >>> class Scale(Function):
        ...     @staticmethod
        ...     def forward(ctx, x, factor):
        ...         ctx.factor = factor
        ...         return x * factor
        ...
        ...     @staticmethod
        ...     def backward(ctx, dy):
        ...         return dy * ctx.factor, None         # no gradient for the number
        >>> x = nbcoll.tensor([1.0], requires_grad=True)
        >>> Scale.apply(x, 5.0).backward()
        >>> x.grad.numpy()
        array([5.], dtype=float32)
        """
        raise NotImplementedError

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Tensor:
        """Run forward on the device arrays of the Tensor arguments; record the node when a gradient is wanted.

        >>> import nbcoll
        >>> from nbcoll.autograd import Function
        >>> class Negate(Function):
        ...     @staticmethod
        ...     def forward(ctx, x):
        ...         return -x
        ...
        ...     @staticmethod
        ...     def backward(ctx, dy):
        ...         return -dy
        >>> y = Negate.apply(nbcoll.tensor([1.0], requires_grad=True))
        >>> y.numpy(), y.grad_fn
        (array([-1.], dtype=float32), <Negate node>)
        """
        policy = active_autocast()
        if policy is not None:  # the one autocast hook: the ops it lists get their arguments recast
            cls, args = policy.route(cls, args)
        ctx = Context(cls, tuple(a if isinstance(a, Tensor) else None for a in args))
        refuse_low_precision(cls, ctx.inputs)  # bfloat16 and fp8: only the ops that take them (astype)
        records = is_grad_enabled() and any(ctx.needs_input_grad)
        if not records:
            ctx.needs_input_grad = tuple(False for _ in args)  # lets forward skip what only backward needs
        arrays = [a.data if isinstance(a, Tensor) else a for a in args]
        output = cls.forward(ctx, *arrays, **kwargs)
        if records and np.dtype(output.dtype).kind != "f" and not is_low_precision(output.dtype):
            records = False  # integer and bool results (indices, masks) carry no gradient
            ctx.release()
        return Tensor._from_array(output, requires_grad=records, grad_fn=ctx if records else None)
