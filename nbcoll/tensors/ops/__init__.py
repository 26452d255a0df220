"""The differentiable operations, one module per family; each ``Function`` keeps forward and backward side by side,
and the functions that apply it (Tensor methods, ``F.*`` forms) follow it in the same module.

============================== ===================================================================================
module                         what it holds
============================== ===================================================================================
``arithmetic``                 ``+ - * / **``, unary ``-``, the comparisons; ``F.add`` ... ``F.neg``
``elementwise``                exp, log, sqrt, tanh, sigmoid, relu, abs, gelu
``special``                    erf (for the exact GELU of ``nbcoll.nn.GELU``)
``cast``                       ``astype``, low-precision dtypes included
``reduce``                     sum, mean, max, min, argmax
``matmul``                     ``@`` and ``F.matmul``
``softmax``                    softmax, log_softmax
``shape``                      reshape, flatten, transpose, permute, ``.T``
``indexing``                   index_select, gather, scatter_add, embedding
``getitem``                    ``x[key]``, basic and advanced indexing, built from ``shape`` and ``indexing``
``select``                     where, clip, masked_fill
``join``                       concat, stack, split
``nn``                         layer_norm, dropout
``conv``                       im2col and max pooling, for ``nbcoll.nn``'s convolution and pooling layers
============================== ===================================================================================
"""
