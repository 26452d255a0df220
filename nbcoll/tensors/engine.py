"""The backward engine: walk the graph from the outputs to the leaves in reverse topological order.

The graph's nodes are the ``Context`` objects recorded by ``Function.apply`` and the leaf Tensors that require a
gradient. A node runs only when every node that uses its output has run, so its incoming gradient is complete:
that is when its hooks fire and, for a leaf, when the gradient is added into ``.grad``.

Example::

    loss = ((w * x).sum() - 1.0) ** 2
    backward([loss])                    # what loss.backward() does; w.grad now holds d loss / d w

This module also gives :class:`~nbcoll.tensors.tensor.Tensor` its ``backward`` method (:func:`tensor_backward`).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from nbcoll import memory
from nbcoll.kernels import combine, elementwise
from nbcoll.tensors import arrays
from nbcoll.tensors.function import Context
from nbcoll.tensors.grad_mode import no_grad
from nbcoll.tensors.tensor import Tensor

Node = Any  # a Context, or a leaf Tensor that requires a gradient


def _node_of(t: Tensor) -> Node:
    return t.grad_fn if t.grad_fn is not None else t


def _parents(node: Node) -> list[Node]:
    """The nodes a node sends gradients to (its inputs that need one)."""
    if not isinstance(node, Context):
        return []
    return [_node_of(t) for t in node.inputs if t is not None and t.requires_grad]


def topological_order(roots: Sequence[Node]) -> list[Node]:
    """Every node reachable from ``roots``, each before all of the nodes it sends gradients to.

    An iterative depth-first search (no recursion, so deep graphs are fine): a node is appended after all of its
    parents, and the reversed list puts the outputs first.
    """
    finished: list[Node] = []
    seen: set[int] = set()
    for root in roots:
        stack = [(root, False)]
        while stack:
            node, parents_done = stack.pop()
            if parents_done:
                finished.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))
            stack.extend((parent, False) for parent in _parents(node) if id(parent) not in seen)
    return finished[::-1]


def execution_order(roots: Sequence[Node]) -> list[Node]:
    """The order backward runs the nodes in: each once every node that sends it a gradient has run.

    Among the nodes that are ready, a leaf goes first (its gradient is complete: it is accumulated and its
    post-accumulate-grad hooks fire while the rest of backward still runs), then the node recorded last in
    forward. So backward walks forward in reverse, and the last layers' gradients are final first, which is when
    data parallelism starts averaging them.
    """
    nodes = topological_order(roots)
    waiting = {id(node): 0 for node in nodes}  # senders that have not run yet
    for node in nodes:
        for parent in _parents(node):
            waiting[id(parent)] += 1
    tiebreak = itertools.count()

    def entry(node: Node) -> tuple:
        leaf = not isinstance(node, Context)
        return (0 if leaf else 1, 0 if leaf else -node.sequence, next(tiebreak), node)

    ready = [entry(node) for node in nodes if waiting[id(node)] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        node = heapq.heappop(ready)[-1]
        order.append(node)
        for parent in _parents(node):
            waiting[id(parent)] -= 1
            if waiting[id(parent)] == 0:
                heapq.heappush(ready, entry(parent))
    return order


def run_hooks(hooks: list[Any], grad: Any) -> Any:
    """Call each ``hook(grad_tensor)``; a hook that returns a Tensor replaces the gradient."""
    for hook in list(hooks):
        replacement = hook(Tensor._from_array(grad))
        if replacement is not None:
            grad = replacement.data if isinstance(replacement, Tensor) else replacement
    return grad


def _add(a: Any, b: Any) -> Any:
    """``a + b`` for two gradients of one tensor; bfloat16 and fp8 ones are added on their words, in float32."""
    if a.dtype in memory.WORD_DTYPES:  # the elementwise kernels take NumPy's own dtypes only
        return combine.combine_into("sum", memory.empty(tuple(a.shape), a.dtype), a, b)
    return elementwise.binary("add", a, b)


def _accumulate(leaf: Tensor, grad: Any) -> None:
    grad = run_hooks(leaf._hooks, grad)
    if leaf.grad is None:
        # A copy, so that two leaves never share one gradient buffer (e.g. both inputs of an add).
        leaf.grad = Tensor._from_array(arrays.copy(grad))
    else:
        leaf.grad.data = _add(leaf.grad.data, grad)
    for hook in list(leaf._post_accumulate_grad_hooks):
        hook(leaf)


def _initial_grad(t: Tensor, grad: Any) -> Any:
    if not t.requires_grad:
        raise RuntimeError("backward: the tensor does not require grad and has no grad_fn")
    if grad is None:
        if t.size != 1:
            raise RuntimeError(
                f"grad can be implicitly created only for scalar outputs; this output has shape {t.shape}: "
                "pass backward(grad) with a gradient of the same shape"
            )
        return arrays.full(t.shape, 1, t.dtype)
    grad = grad.data if isinstance(grad, Tensor) else arrays.from_host(np.asarray(grad, dtype=t.dtype))
    if tuple(grad.shape) != t.shape or grad.dtype != t.dtype:
        raise ValueError(
            f"backward(grad): expected shape {t.shape} and dtype {t.dtype}, got {tuple(grad.shape)} and {grad.dtype}"
        )
    return grad


def backward(tensors: Sequence[Tensor], grad_tensors: Sequence[Any] | None = None, retain_graph: bool = False) -> None:
    """Add d(tensors)/d(leaf) into ``leaf.grad`` of every leaf that requires a gradient.

    ``grad_tensors`` holds the gradient flowing into each output (``None`` for a one-element output means 1).
    Without ``retain_graph`` the saved arrays of every node are released as it runs.

    >>> import nbcoll
    >>> from nbcoll.autograd import backward
    >>> x = nbcoll.tensor([1.0, 2.0], requires_grad=True)
    >>> backward([(x * x).sum(), x.sum()])          # both losses at once: x.grad = 2x + 1
    >>> x.grad.numpy()
    array([3., 5.], dtype=float32)
    >>> x.grad = None
    >>> backward([x * 3], [nbcoll.tensor([1.0, 0.5])])       # a non-scalar output needs its gradient
    >>> x.grad.numpy()
    array([3. , 1.5], dtype=float32)
    """
    tensors = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    grad_tensors = [None] * len(tensors) if grad_tensors is None else list(grad_tensors)
    if len(grad_tensors) != len(tensors):
        raise ValueError(f"grad_tensors: expected {len(tensors)} gradients, got {len(grad_tensors)}")

    pending: dict[int, Any] = {}  # id(node) -> the sum of the gradients received so far

    def send(node: Node, grad: Any) -> None:
        key = id(node)
        pending[key] = grad if key not in pending else _add(pending[key], grad)

    with no_grad():
        for t, grad in zip(tensors, grad_tensors, strict=True):
            send(_node_of(t), _initial_grad(t, grad))
        for node in execution_order([_node_of(t) for t in tensors]):
            grad = pending.pop(id(node), None)
            if grad is None:
                continue
            if not isinstance(node, Context):
                _accumulate(node, grad)
                continue
            grad = run_hooks(node.hooks, grad)
            input_grads = node.run_backward(grad)
            if not retain_graph:
                node.release()
            for t, input_grad in zip(node.inputs, input_grads, strict=True):
                if t is not None and t.requires_grad and input_grad is not None:
                    send(_node_of(t), input_grad)


def tensor_backward(self: Tensor, grad: Any = None, retain_graph: bool = False) -> None:
    """``t.backward()``: add d(t)/d(leaf) into ``.grad`` of every leaf ``t`` depends on.

    ``grad`` is the gradient flowing into ``t``; it may be left out only when ``t`` has one element.

    >>> import nbcoll
    >>> x = nbcoll.tensor([3.0], requires_grad=True)
    >>> (x * x).sum().backward()
    >>> x.grad.numpy()                        # d(x^2)/dx = 2x
    array([6.], dtype=float32)
    """
    backward([self], [grad], retain_graph=retain_graph)


Tensor.backward = tensor_backward
