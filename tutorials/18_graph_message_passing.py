"""
Graph message passing: a graph neural network layer from gather and scatter_add
===============================================================================

Trained on a karate club.

What you learn here:

- how a graph is stored for a GPU: not as an adjacency matrix, mostly zeros, but as an edge list, two integer
  arrays ``src`` and ``dst``, one entry per edge;
- message passing, as DGL and PyG do it: gather each edge's source features (``index_select``), then add the
  messages up at each edge's destination node (``scatter_add``, an atomic add per element on a GPU, so edges
  that share a destination add up). The two are each other's backward: autograd moves gradients the other way;
- the degree normalisation of a graph convolution (Kipf and Welling's GCN): a self loop per node, and each
  message scaled by ``1 / sqrt(deg(src) deg(dst))`` so that well-connected members do not drown the others;
- semi-supervised node classification on Zachary's karate club (34 members, 78 friendships, shipped with
  nbcoll): two members are labelled, and the faction of the other 32 is predicted from the friendships alone.

Run it with ``python tutorials/18_graph_message_passing.py [--epochs N] [--out DIR]``. It uses the GPU where there
is one and Numba's CUDA simulator everywhere else, where it takes about half a minute of CPU time (every kernel
thread runs in Python); with ``NBCOLL_BACKEND=numpy`` it takes a second or two.
"""

# %%
# Set-up
# ------
#
# ``--epochs`` sets the number of training steps (the simulator's test takes one) and ``--out`` the folder of the
# picture. ``manual_seed`` fixes the initial weights, so every run, on every backend, prints the same numbers.

import argparse
import os
import tempfile

import numpy as np

import nbcoll
from nbcoll import nn, optim
from nbcoll.datasets import load_karate_club
from nbcoll.kernels import index as index_kernels

parser = argparse.ArgumentParser(description="Graph message passing: a GNN layer from gather and scatter_add")
parser.add_argument("--epochs", type=int, default=12, help="training steps over the whole graph (default 12)")
parser.add_argument("--out", default=None, help="folder for the picture (default: a new one)")
args = parser.parse_args()
BACKEND = nbcoll.get_backend()
# NBCOLL_FIGURES_DIR, when set (the docs build sets it), is the default folder of the picture.
# Otherwise a temporary folder, removed when the tutorial ends (--out keeps the picture).
asked = args.out or os.environ.get("NBCOLL_FIGURES_DIR")
scratch = None if asked else tempfile.TemporaryDirectory(prefix="nbcoll-graph-")
OUT = asked or scratch.name
os.makedirs(OUT, exist_ok=True)
print(f"Tutorial 18 on the {BACKEND!r} backend")
print()
nbcoll.manual_seed(0)  # the same initial weights on every run and every backend

# %%
# 1. A graph as an edge list
# --------------------------
#
# In 1977 W. W. Zachary recorded which members of a university karate club met outside the club. A quarrel
# between the instructor (member 0, "Mr. Hi") and the administrator (member 33) split the club in two; each
# member's faction is the label to predict. Each friendship is listed once, as a pair ``(a, b)``; messages must
# flow both ways, so every edge becomes two directed edges, ``a->b`` and ``b->a``. A self loop ``n->n`` per node
# lets a node's own features into its sum. The graph is then two integer arrays, ``src`` and ``dst``: look at how
# few of the adjacency matrix's entries they stand for.

print("1. A graph as an edge list: Zachary's karate club")
pairs, factions = load_karate_club()
n_nodes = len(factions)
loops = np.arange(n_nodes)
src = np.concatenate([pairs[:, 0], pairs[:, 1], loops])
dst = np.concatenate([pairs[:, 1], pairs[:, 0], loops])
print(f"   {n_nodes} members, {len(pairs)} friendships -> {len(src)} directed edges with the self loops")
print(f"   src[:6] = {src[:6].tolist()}  dst[:6] = {dst[:6].tolist()}   (member 0 sends to 1, 2, 3, ...)")
print(f"   an adjacency matrix would hold {n_nodes * n_nodes} numbers, {len(src) / n_nodes**2:.0%} of them non-zero")
print(f"   factions: {np.bincount(factions).tolist()} members followed Mr. Hi (0) / the officers (1)")
print()

# %%
# 2. Message passing by hand
# --------------------------
#
# A graph small enough to follow by hand: 4 nodes, 5 directed edges, 2 features per node. Two kernels do all the
# work::
#
#     gather:       for e: message[e] = x[src[e]]      (index_select of whole rows: a thread per element)
#     scatter_add:  for e: out[dst[e]] += message[e]    (atomic adds: node 2 receives three messages)
#
# Together they compute ``out = A @ x``, where ``A[d, s] = 1`` for each edge ``s->d``, without ever building
# ``A``. Look at node 2: its three messages add up to ``[1.0, 11.0]``; node 0 receives none.

print("2. Message passing by hand: gather along the edges, scatter_add at the nodes")
toy_src = np.array([0, 1, 3, 0, 2])
toy_dst = np.array([2, 2, 2, 1, 3])
toy_x = np.array([[1, 0], [0, 1], [10, 0], [0, 10]], dtype=np.float32)  # node features, 2 per node
messages = index_kernels.index_select(nbcoll.to_device(toy_x), 0, nbcoll.to_device(toy_src))
# scatter_add wants an index of the messages' shape: each row's destination repeated along the features.
toy_index = np.repeat(toy_dst[:, None], toy_x.shape[1], axis=1)
summed = index_kernels.scatter_add(nbcoll.zeros(toy_x.shape, np.float32), nbcoll.to_device(toy_index), messages, axis=0)
toy_adjacency = np.zeros((4, 4), np.float32)
np.add.at(toy_adjacency, (toy_dst, toy_src), 1)
for e, (s, d) in enumerate(zip(toy_src, toy_dst, strict=True)):
    print(f"   edge {e}: {s} -> {d}   message = x[{s}] = {nbcoll.to_host(messages)[e].tolist()}")
for node, row in enumerate(nbcoll.to_host(summed)):
    print(f"   node {node} receives {row.tolist()}")
print(f"   equal to the dense A @ x: {np.array_equal(nbcoll.to_host(summed), toy_adjacency @ toy_x)}")
print()

# %%
# 3. Degree normalisation
# -----------------------
#
# A plain sum grows with the number of friends: member 33 (17 friends) would receive about eight times the
# signal of a member with two. GCN scales the message on edge ``s->d`` by ``1/sqrt(deg(s) deg(d))``, degrees
# counted with the self loop; the layer then computes ``D^-1/2 (A + I) D^-1/2 @ x``. The degrees themselves are
# a ``scatter_add`` of ones, one per edge, at its destination.

print("3. Degree normalisation: deg = scatter_add of ones, norm[e] = 1 / sqrt(deg[src[e]] deg[dst[e]])")
ones = nbcoll.to_device(np.ones(len(dst), np.float32))
degree = nbcoll.to_host(index_kernels.scatter_add(nbcoll.zeros(n_nodes, np.float32), nbcoll.to_device(dst), ones))
norm = (1.0 / np.sqrt(degree[src] * degree[dst])).astype(np.float32)
print(
    f"   degree (with the self loop): member 0 {degree[0]:.0f}, member 33 {degree[33]:.0f}, member 11 {degree[11]:.0f}"
)


def edge_norm(s, d):
    return norm[np.flatnonzero((src == s) & (dst == d))[0]]


print(
    f"   edge 0 -> 1 is scaled by 1/sqrt({degree[0]:.0f} x {degree[1]:.0f}) = {edge_norm(0, 1):.3f}, "
    f"edge 11 -> 0 by 1/sqrt({degree[11]:.0f} x {degree[0]:.0f}) = {edge_norm(11, 0):.3f}"
)
print()

# %%
# 4. The layer: transform, gather, scale, scatter_add
# ---------------------------------------------------
#
# A graph convolution in three lines of pseudocode::
#
#     h = transform(x)                          (a Linear: transforming first keeps the messages short)
#     for e: message[e] = h[src[e]] * norm[e]   (index_select, then a broadcast multiply)
#     for e: out[dst[e]] += message[e]          (scatter_add)
#
# Backward runs the same steps the other way: ``scatter_add``'s gradient is a gather of the output gradient
# along the edges, and ``index_select``'s gradient is a ``scatter_add`` into the source nodes. Nothing here is
# specific to graphs: the same two kernels serve embeddings, expert routing and sparse updates. The check: with
# the identity as transform and every ``norm`` 1, the layer must give section 2's sums again.


class GraphConv(nn.Module):
    """One graph convolution (GCN) over a fixed edge list: a transform, then index_select and scatter_add.

    Example::

        layer = GraphConv(nn.Linear(16, 4), 4, src, dst, norm)   # src, dst: (E,) ints; norm: (E,) float32
        out = layer(nbcoll.tensor(features))                     # (nodes, 4): one row per node
    """

    def __init__(self, transform, width, src, dst, norm):
        super().__init__()
        self.transform = transform
        self.n_nodes, self.width = int(max(src.max(), dst.max())) + 1, width
        self.src = nbcoll.to_device(src)
        self.norm = nbcoll.tensor(norm.reshape(-1, 1))  # (E, 1): broadcast along the features
        # scatter_add takes an index of the messages' shape: each edge's destination, repeated along the features.
        self.index = nbcoll.to_device(np.repeat(dst[:, None], width, axis=1))

    def forward(self, x):
        h = self.transform(x)
        messages = h.index_select(0, self.src) * self.norm
        zeros = nbcoll.tensor(np.zeros((self.n_nodes, self.width), np.float32))
        return zeros.scatter_add(self.index, messages, axis=0)


print("4. The layer: a Linear, then index_select along the edges, scale by norm, scatter_add at the nodes")
check = GraphConv(nn.Linear(2, 2), 2, toy_src, toy_dst, np.ones(len(toy_src), np.float32))
check.transform.weight.data = nbcoll.to_device(np.eye(2, dtype=np.float32))
check.transform.bias.data = nbcoll.to_device(np.zeros(2, np.float32))
same = np.array_equal(check(nbcoll.tensor(toy_x)).numpy(), toy_adjacency @ toy_x)
print(f"   with W = I, b = 0 and norm = 1 it is section 2 again: {same}")
print()

# %%
# 5. Training with two labels
# ---------------------------
#
# The members have no features of their own: each is its own one-hot row, so everything the model learns comes
# from who is friends with whom. A one-hot row times a weight matrix is just that matrix's row, so the first
# layer's transform is an ``Embedding``: a row lookup (a gather again) instead of a 34 x 34 matrix product. Only
# the instructor (0) and the administrator (33) are labelled: the loss sees their two rows alone, and the other
# 32 members are predicted from the graph. Two layers: a member's scores depend on its friends' friends.
#
# Look for the loss falling and the accuracy on the 32 unlabelled members rising from a coin toss to above 90%;
# the two strings of factions at the end show which members the model gets wrong.

print("5. Training with the labels of members 0 and 33 only; the other 32 predicted from the graph")
HIDDEN, EPOCHS = 4, args.epochs
model = nn.Sequential(
    GraphConv(nn.Embedding(n_nodes, HIDDEN), HIDDEN, src, dst, norm),  # one-hot features @ W1: a row lookup
    nn.ReLU(),
    GraphConv(nn.Linear(HIDDEN, 2), 2, src, dst, norm),
)
members = np.arange(n_nodes)
labelled = np.array([0, 33])
others = np.setdiff1d(members, labelled)
optimizer = optim.Adam(model.parameters(), lr=0.1)
loss_fn = nn.CrossEntropyLoss()


def accuracy(scores):
    predicted = scores.argmax(axis=1)
    return float(np.mean(predicted[others] == factions[others])), predicted


for epoch in range(EPOCHS):
    optimizer.zero_grad()
    scores = model(members)
    loss = loss_fn(scores.index_select(0, labelled), factions[labelled])
    loss.backward()
    optimizer.step()
    if epoch % 3 == 0 or epoch == EPOCHS - 1:
        acc, _ = accuracy(scores.numpy())
        print(f"   epoch {epoch:2d}: loss {loss.item():.4f}, accuracy on the 32 unlabelled members {acc:.0%}")

with nbcoll.no_grad():
    final = model(members).numpy()
final_accuracy, predicted = accuracy(final)
wrong = [int(m) for m in others if predicted[m] != factions[m]]
print(f"   predicted factions: {''.join(str(p) for p in predicted)}")
print(f"   true factions:      {''.join(str(f) for f in factions)}")
print(f"   accuracy on the 32 unlabelled members: {final_accuracy:.1%}; wrong: {wrong or 'none'}")
print()

# %%
# 6. The picture
# --------------
#
# The club laid out by its friendships alone, with a spring layout in a few lines of NumPy: friends pull each
# other close, every pair of members pushes apart, and each of 300 moves is a little shorter than the one
# before. Each member is coloured by its predicted faction and ringed in red where the prediction is wrong; the
# two labelled members are stars, and the lines are the friendships. The two factions should sit on two sides
# of the picture, the wrong predictions near the border between them.

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

adjacency = np.zeros((n_nodes, n_nodes))
adjacency[pairs[:, 0], pairs[:, 1]] = adjacency[pairs[:, 1], pairs[:, 0]] = 1
position = np.random.default_rng(0).uniform(-1, 1, (n_nodes, 2))
spacing, step = 1 / np.sqrt(n_nodes), 0.1
for _ in range(300):
    apart = position[:, None, :] - position[None, :, :]  # apart[i, j] points from member j to member i
    distance = np.maximum(np.linalg.norm(apart, axis=-1), 1e-3)[..., None]
    push = spacing**2 / distance - adjacency[..., None] * distance**2 / spacing  # > 0 pushes i away from j
    move = (apart / distance * push).sum(axis=1)
    length = np.maximum(np.linalg.norm(move, axis=1, keepdims=True), 1e-9)
    position += move / length * np.minimum(length, step)
    step *= 0.985

figure, axes = plt.subplots(figsize=(6.5, 5))
for a, b in pairs:
    axes.plot(position[[a, b], 0], position[[a, b], 1], color="lightgray", linewidth=0.6, zorder=1)
palette = np.array(["tab:blue", "tab:orange"])
unlabelled_members = np.setdiff1d(others, wrong)
axes.scatter(*position[unlabelled_members].T, c=palette[predicted[unlabelled_members]], s=70, zorder=2)
axes.scatter(*position[labelled].T, c=palette[factions[labelled]], s=260, marker="*", zorder=2)
if wrong:
    axes.scatter(*position[wrong].T, c=palette[predicted[wrong]], s=70, edgecolors="tab:red", linewidths=2.5)
for m in range(n_nodes):
    axes.annotate(str(m), position[m], textcoords="offset points", xytext=(5, 4), fontsize=7, color="dimgray")
axes.scatter([], [], color="tab:blue", label="predicted: Mr. Hi's club (0)")
axes.scatter([], [], color="tab:orange", label="predicted: the officers' club (1)")
axes.scatter([], [], color="gray", marker="*", s=120, label="labelled (members 0 and 33)")
axes.scatter([], [], color="white", edgecolors="tab:red", linewidths=2.5, label="predicted wrong")
axes.set_xticks([])
axes.set_yticks([])
axes.set_title(f"A two-layer GCN on the karate club: {final_accuracy:.0%} of the unlabelled members right")
axes.legend(fontsize="small", loc="best")
figure.tight_layout()
picture = os.path.join(OUT, "karate_club_gcn.png")
figure.savefig(picture, dpi=100)
plt.close(figure)
print(f"6. The picture: {picture}" + ("" if asked else " (removed at the end: --out DIR keeps it)"))
print()

# %%
# What to try next
# ----------------
#
# Change one thing at a time and run the tutorial again with ``NBCOLL_BACKEND=numpy``: it takes a second or
# two.

print("What to try next:")
print("   - label one member only, or four, and watch the accuracy;")
print("   - drop the normalisation (norm = 1) or the self loops, and see which members flip;")
print("   - a third GraphConv: each layer lets a message travel one more friendship.")
print(f"Done: a graph convolution from gather and scatter_add, {final_accuracy:.0%} of the unlabelled members right.")
