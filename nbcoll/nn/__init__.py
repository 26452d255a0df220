"""Layers and models: ``Module``, ``Parameter``, the layers built on them, losses and initialisers.

Example::

    import nbcoll
    from nbcoll import nn

    nbcoll.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    loss = nn.CrossEntropyLoss()(model(x), targets)
    loss.backward()
"""

from nbcoll.nn import init
from nbcoll.nn.activation import GELU, ReLU, Sigmoid, Tanh
from nbcoll.nn.container import ModuleDict, ModuleList, Sequential
from nbcoll.nn.dropout import Dropout
from nbcoll.nn.embedding import Embedding
from nbcoll.nn.linear import Identity, Linear
from nbcoll.nn.loss import BCEWithLogitsLoss, CrossEntropyLoss, MSELoss, NLLLoss
from nbcoll.nn.module import ForwardHook, ForwardPreHook, IncompatibleKeys, Module, functional_call
from nbcoll.nn.norm import LayerNorm
from nbcoll.nn.parameter import Parameter
from nbcoll.nn.residual import Residual
from nbcoll.nn.shapes import check_input

__all__ = [
    "BCEWithLogitsLoss",
    "CrossEntropyLoss",
    "Dropout",
    "Embedding",
    "ForwardHook",
    "ForwardPreHook",
    "GELU",
    "Identity",
    "IncompatibleKeys",
    "LayerNorm",
    "Linear",
    "MSELoss",
    "Module",
    "ModuleDict",
    "ModuleList",
    "NLLLoss",
    "Parameter",
    "ReLU",
    "Residual",
    "Sequential",
    "Sigmoid",
    "Tanh",
    "check_input",
    "functional_call",
    "init",
]

# Sequence, convolution and attention layers.
from nbcoll.nn.attention import FeedForward, MultiheadAttention, TransformerBlock  # noqa: E402
from nbcoll.nn.conv import Conv2d, MaxPool2d  # noqa: E402
from nbcoll.nn.recurrent import GRU, LSTM, RNN  # noqa: E402
from nbcoll.nn.recurrent_cells import GRUCell, LSTMCell, RNNCell  # noqa: E402

__all__ += [
    "Conv2d",
    "FeedForward",
    "GRU",
    "GRUCell",
    "LSTM",
    "LSTMCell",
    "MaxPool2d",
    "MultiheadAttention",
    "RNN",
    "RNNCell",
    "TransformerBlock",
]
