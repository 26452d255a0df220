"""Layers and models: ``Module``, ``Parameter``, the layers built on them, losses and initialisers.

Example::

    import nbcoll
    from nbcoll import nn

    nbcoll.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    loss = nn.CrossEntropyLoss()(model(x), targets)
    loss.backward()
"""

from nbcoll.nn.module import ForwardHook, ForwardPreHook, IncompatibleKeys, Module, functional_call
from nbcoll.nn.parameter import Parameter
from nbcoll.nn.shapes import check_input

__all__ = [
    "ForwardHook",
    "ForwardPreHook",
    "IncompatibleKeys",
    "Module",
    "Parameter",
    "check_input",
    "functional_call",
]
