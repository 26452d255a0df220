"""The handle a hook registration returns, shared by tensors' and modules' hooks."""

from __future__ import annotations

from typing import Any


class RemovableHandle:
    """What ``register_hook`` returns: ``handle.remove()`` takes the hook off again.

    Example::

        >>> import nbcoll
        >>> x = nbcoll.tensor([1.0, 2.0], requires_grad=True)
        >>> handle = x.register_hook(lambda grad: print("gradient", grad.numpy()))
        >>> (x * 3).sum().backward()
        gradient [3. 3.]
        >>> handle.remove()
        >>> (x * 3).sum().backward()       # the hook is gone: nothing printed
    """

    def __init__(self, hooks: list[Any], hook: Any) -> None:
        self._hooks, self._hook = hooks, hook

    def remove(self) -> None:
        """Unregister the hook; removing it twice is harmless.

        >>> import nbcoll
        >>> x = nbcoll.tensor([1.0], requires_grad=True)
        >>> handle = x.register_hook(lambda grad: print("seen"))
        >>> handle.remove()
        >>> x.sum().backward()                         # nothing printed
        """
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


__all__ = ["RemovableHandle"]
