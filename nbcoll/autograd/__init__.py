"""Automatic differentiation: the engine's entry points and a numerical gradient check.

Example::

    from nbcoll.autograd import Function, backward, gradcheck, no_grad
    backward([loss])                           # the same as loss.backward()
    gradcheck(lambda x: x.tanh().sum(), [x])   # analytical gradients vs central differences
"""

from nbcoll.autograd.gradcheck import gradcheck
from nbcoll.tensors import Context, Function, backward, enable_grad, is_grad_enabled, no_grad

__all__ = ["Context", "Function", "backward", "enable_grad", "gradcheck", "is_grad_enabled", "no_grad"]
