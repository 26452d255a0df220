"""
Autograd from scratch: the chain rule by hand on a tiny network, then the same gradients from the engine
========================================================================================================

What you learn here:

- what a computational graph is: every operation remembers its inputs and what its derivative needs;
- how backward applies the chain rule node by node, from the loss back to the weights, multiplying each incoming
  gradient by a *local* derivative and adding the contributions of a value used twice;
- how nbcoll's Tensor records that graph (``grad_fn``), in which order its engine visits the nodes, how hooks see
  each gradient as soon as it is complete, and how ``gradcheck`` verifies gradients with finite differences.

Run it with ``python tutorials/11_autograd_from_scratch.py``. Every number is computed by nbcoll's kernels on
the GPU where there is one, on Numba's CUDA simulator elsewhere, or by the NumPy references with
``NBCOLL_BACKEND=numpy``; the network is tiny, so it takes a few seconds on the simulator.
"""

# %%
# Set-up and the network
# ----------------------
#
# The network: two inputs, a hidden layer of two tanh units, one linear output, and a squared-error loss::
#
#     z_j = W1[j, 0] * x_0 + W1[j, 1] * x_1 + b1[j]      (j = 0, 1)
#     h_j = tanh(z_j)
#     y   = w2[0] * h_0 + w2[1] * h_1 + b2
#     L   = (y - target) ** 2
#
# Its weights are plain Python numbers here; the first line printed names the backend the Tensors below use.

import math

import numpy as np

import nbcoll
from nbcoll.autograd import gradcheck
from nbcoll.tensors import tensor
from nbcoll.tensors.engine import topological_order

print(f"Tutorial 11 on the {nbcoll.get_backend()!r} backend")
print()

x = [0.5, -1.5]
W1 = [[0.1, -0.3], [0.8, 0.2]]
b1 = [0.05, 0.2]
w2 = [1.2, -0.7]
b2 = 0.3
target = 1.0

# %%
# 1. The forward pass by hand
# ---------------------------
#
# With plain Python floats. We keep every intermediate value: backward needs them.

print("1. Forward pass by hand")
z = [W1[j][0] * x[0] + W1[j][1] * x[1] + b1[j] for j in range(2)]
h = [math.tanh(zj) for zj in z]
y = w2[0] * h[0] + w2[1] * h[1] + b2
loss = (y - target) ** 2
for j in range(2):
    print(f"   z_{j} = {z[j]: .6f}   h_{j} = tanh(z_{j}) = {h[j]: .6f}")
print(f"   y   = {y: .6f}   L = (y - target)^2 = {loss:.6f}")
print()

# %%
# 2. Backward by hand: the chain rule
# -----------------------------------
#
# From the loss to every weight. Each step multiplies the gradient that arrives from above (``dL/d output``) by
# the *local* derivative of one operation (``d output / d input``). The local derivatives need the values saved
# by the forward pass.

print("2. Backward pass by hand: gradient from above x local derivative")


def step(name: str, rule: str, value: float) -> float:
    print(f"   {name:<12} = {rule:<30} = {value: .6f}")
    return value


dL_dy = step("dL/dy", "2 (y - target)", 2 * (y - target))
dL_db2 = step("dL/db2", "dL/dy x 1", dL_dy * 1.0)
dL_dw2, dL_dz = [], []
for j in range(2):
    dL_dw2.append(step(f"dL/dw2[{j}]", f"dL/dy x h_{j}", dL_dy * h[j]))
    dL_dh = step(f"dL/dh_{j}", f"dL/dy x w2[{j}]", dL_dy * w2[j])
    tanh_slope = 1 - h[j] ** 2
    dL_dz.append(step(f"dL/dz_{j}", f"dL/dh_{j} x (1 - h_{j}^2 = {tanh_slope:.4f})", dL_dh * tanh_slope))
dL_db1 = [step(f"dL/db1[{j}]", f"dL/dz_{j} x 1", dL_dz[j]) for j in range(2)]
dL_dW1 = [[step(f"dL/dW1[{j},{k}]", f"dL/dz_{j} x x_{k}", dL_dz[j] * x[k]) for k in range(2)] for j in range(2)]
print()

# %%
# 3. The graph nbcoll records
# ---------------------------
#
# The same network with Tensors. Each operation on a Tensor that requires a gradient records a node: the
# result's ``grad_fn``, which knows its inputs and has saved what its backward needs.

print("3. The graph nbcoll records")
f64 = np.float64
x_t = tensor(x, dtype=f64)
W1_t = tensor(W1, dtype=f64, requires_grad=True)
b1_t = tensor(b1, dtype=f64, requires_grad=True)
w2_t = tensor(w2, dtype=f64, requires_grad=True)
b2_t = tensor(b2, dtype=f64, requires_grad=True)


def network(x_t, W1_t, b1_t, w2_t, b2_t):
    h_t = (W1_t @ x_t + b1_t).tanh()
    y_t = w2_t @ h_t + b2_t
    return (y_t - target) ** 2, h_t


loss_t, h_t = network(x_t, W1_t, b1_t, w2_t, b2_t)
print(f"   loss = {loss_t.item():.6f}  (by hand: {loss:.6f})")
print("   nodes in the order backward runs them (each after every node that feeds it a gradient):")
names = {id(W1_t): "W1", id(b1_t): "b1", id(w2_t): "w2", id(b2_t): "b2"}
for node in topological_order([loss_t.grad_fn]):
    if id(node) in names:
        print(f"     leaf {names[id(node)]}: add the gradient into {names[id(node)]}.grad")
    else:
        inputs = ", ".join(
            names.get(id(t), "constant" if not t.requires_grad else f"{t.grad_fn!r}")
            for t in node.inputs
            if t is not None
        )
        print(f"     {node!r:<16} inputs: {inputs}")
print()

# %%
# 4. ``loss.backward()``
# ----------------------
#
# The engine runs each node's backward in that order. A hook sees a tensor's gradient the moment it is
# complete; here one on ``h`` prints ``dL/dh``, which the hand computation also has.

print("4. loss.backward()")
h_t.register_hook(lambda g: print(f"   hook on h: dL/dh = {np.round(g.numpy(), 6).tolist()}"))
loss_t.backward()
print()
print(f"   {'parameter':<10} {'by hand':>12} {'by the engine':>14}")
by_hand = {"b2": np.array(dL_db2), "w2": np.array(dL_dw2), "b1": np.array(dL_db1), "W1": np.array(dL_dW1)}
for name, t in [("b2", b2_t), ("w2", w2_t), ("b1", b1_t), ("W1", W1_t)]:
    for position in np.ndindex(t.shape):
        label = name + (str(list(position)) if position else "")
        expected, got = float(by_hand[name][position]), float(t.grad.numpy()[position])
        print(f"   {label:<10} {expected: 12.8f} {got: 14.8f}")
        assert math.isclose(expected, got, rel_tol=1e-9, abs_tol=1e-12), (label, expected, got)
print("   every gradient matches the chain rule by hand")
print()

# %%
# 5. ``gradcheck`` against central differences
# --------------------------------------------
#
# The independent check used by nbcoll's tests. It nudges each weight by ``+-eps``, measures how the loss moves
# (central differences), and compares with the gradients backward computed. That takes two forward passes per
# weight, so it runs on the NumPy references: the same Tensor and engine code, with the numpy backend's launch
# functions computing each operation in NumPy instead of launching a kernel.

print("5. gradcheck against central differences (on the numpy backend)")
with nbcoll.use_backend("numpy"):
    params = [tensor(t.numpy(), requires_grad=True) for t in (W1_t, b1_t, w2_t, b2_t)]
    ok = gradcheck(lambda *p: network(tensor(x, dtype=f64), *p)[0], params)
print(f"   gradcheck(network, [W1, b1, w2, b2]) = {ok}")
print()
print("Try it yourself: python -m nbcoll exercise matmul_backward, then python -m nbcoll exercise softmax_backward")
print("Done: the engine's gradients match the chain rule by hand and finite differences.")
