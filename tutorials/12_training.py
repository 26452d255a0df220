"""
Training: from a straight line to a character-level LSTM
========================================================

Four models trained with nbcoll's layers, optimizers, loader and meters.

What you learn here:

- the training loop every model shares: a batch from a ``DataLoader``, a forward pass through ``nn`` modules, a
  loss, ``backward()``, one ``optimizer.step()`` (one fused kernel per parameter), and ``zero_grad()``;
- how the same loop fits a line (``Linear`` + ``MSELoss`` + ``SGD`` with momentum), separates classes (a softmax
  classifier with ``CrossEntropyLoss``), recognises handwritten digits (an MLP with ``Adam``, a cosine schedule
  with warm-up and a prefetching loader) and learns to spell (an ``Embedding`` + ``LSTM`` + ``Linear``, with
  gradient clipping);
- how to watch a run: a tqdm progress bar on each epoch loop, meters for loss, accuracy and per-character error,
  a loss curve drawn to a PNG per model, and a checkpoint saved with ``nbcoll.save`` and loaded back.

Run it with ``python tutorials/12_training.py [--out DIR] [--tiny]``. With ``NBCOLL_BACKEND=numpy`` it trains the
full-size models in well under a minute on two CPU cores; on the simulator (the default without a GPU) every
thread of every kernel runs in Python, so it trains the same models at toy sizes (``--tiny``, chosen
automatically there).
"""

# %%
# Set-up
# ------
#
# The command line picks the output folder and the sizes. The first lines of output name the backend, the sizes
# and the folder that receives the four loss curves and the checkpoint. ``manual_seed`` fixes the initial
# weights, so every run prints the same numbers.

import argparse
import os
import tempfile
import textwrap

# Small matrices: one BLAS thread beats several that fight over a few busy cores. Set before NumPy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402

import nbcoll  # noqa: E402
from nbcoll import nn, optim  # noqa: E402
from nbcoll.data import DataLoader, TensorDataset  # noqa: E402
from nbcoll.datasets import load_digits, load_text  # noqa: E402
from nbcoll.meters import AverageValueMeter, FrameErrorMeter, TimeMeter, TopKMeter  # noqa: E402
from nbcoll.plotting import plot_curves  # noqa: E402

parser = argparse.ArgumentParser(description="Training: from a straight line to a character-level LSTM")
parser.add_argument("--out", default=None, help="folder for the loss curves and the checkpoint (default: a new one)")
parser.add_argument("--tiny", action="store_true", help="toy sizes (the default on the simulator)")
args = parser.parse_args()
TINY = args.tiny or nbcoll.get_backend() == "sim"
# NBCOLL_FIGURES_DIR, when set (the docs build sets it), is the default folder instead of a new one.
# Otherwise a temporary folder, removed when the tutorial ends: --out keeps the curves and the checkpoint.
asked = args.out or os.environ.get("NBCOLL_FIGURES_DIR")
scratch = None if asked else tempfile.TemporaryDirectory(prefix="nbcoll-training-")
OUT = asked or scratch.name
os.makedirs(OUT, exist_ok=True)
PROGRESS = {"leave": False, "mininterval": 0.5}  # the bar redraws at most twice a second and clears at the end

print(f"Tutorial 12 on the {nbcoll.get_backend()!r} backend ({'toy' if TINY else 'full'} sizes)")
print(f"loss curves and checkpoint go to {OUT}" + ("" if asked else " (removed at the end: --out DIR keeps them)"))
print()
nbcoll.manual_seed(0)  # the same initial weights and dropout masks on every run
rng = np.random.default_rng(0)

# %%
# The training loop
# -----------------
#
# Every model below trains with this one function. For each batch the loader hands out, it clears the old
# gradients (``zero_grad``), runs the model forward and computes the loss, lets ``backward()`` fill every
# parameter's ``.grad``, optionally clips their global norm, and takes one optimizer step (and one step of the
# learning-rate schedule, if there is one). An ``AverageValueMeter`` averages the loss over the epoch, weighted
# by the batch sizes, and the function returns one mean loss per epoch: the points of the loss curves below.
#
# ``tqdm`` draws a progress bar per model while it trains and clears it at the end, so it leaves nothing in
# the output.


def train(model, loss_fn, optimizer, loader, epochs, scheduler=None, clip=None, name="model"):
    """The loop every section uses; returns the mean loss of each epoch."""
    losses = []
    for _ in tqdm(range(epochs), desc=name, **PROGRESS):
        meter = AverageValueMeter()
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            if clip is not None:
                optim.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            meter.add(loss.item(), weight=len(y))
        losses.append(meter.value()[0])
    return losses


# %%
# 1. Linear regression
# --------------------
#
# The points follow ``y = 3x - 2`` plus a little noise. One ``Linear(1, 1)`` layer (a weight and a bias) is fitted
# by ``MSELoss`` and ``SGD`` with momentum. Look for a learned slope close to 3 and an intercept close to -2, and
# a mean squared error that falls to about the noise's variance (0.01).

print("1. Linear regression: fit y = 3x - 2 from noisy points")
n = 8 if TINY else 512
x = rng.uniform(-1, 1, (n, 1)).astype(np.float32)
y = (3 * x - 2 + 0.1 * rng.standard_normal((n, 1))).astype(np.float32)
line = nn.Linear(1, 1)
line_losses = train(
    line,
    nn.MSELoss(),
    optim.SGD(line.parameters(), lr=0.1, momentum=0.9),
    DataLoader(TensorDataset(x, y), batch_size=8 if TINY else 32, shuffle=True, seed=0),
    epochs=1 if TINY else 20,
    name="line",
)
w, b = line.weight.numpy().item(), line.bias.numpy().item()
print(f"   learned y = {w:.3f} x {b:+.3f}; mean squared error {line_losses[0]:.4f} -> {line_losses[-1]:.4f}")
print(f"   loss curve: {plot_curves({'train': line_losses}, os.path.join(OUT, 'linear.png'), 'linear', 'epoch')}")
print()

# %%
# 2. A softmax classifier
# -----------------------
#
# Three clouds of points in the plane, one per class, are told apart by a softmax over three scores. The model is
# still one ``Linear`` layer, now with three outputs (one score per class); ``CrossEntropyLoss`` applies
# ``log_softmax`` to the scores and takes the negative log-probability of the right class. A ``TopKMeter``
# with ``k=1`` counts how often the highest score is the right class: the clouds overlap a little, so expect an
# accuracy a little below 100%.

print("2. A softmax classifier: three clouds of points in the plane")
per_class = 4 if TINY else 200
centres = np.array([[0.0, 2.0], [-2.0, -1.0], [2.0, -1.0]], dtype=np.float32)
points = np.concatenate([c + rng.standard_normal((per_class, 2)).astype(np.float32) for c in centres])
labels = np.repeat(np.arange(3), per_class)
classifier = nn.Linear(2, 3)
classifier_losses = train(
    classifier,
    nn.CrossEntropyLoss(),
    optim.SGD(classifier.parameters(), lr=0.1, momentum=0.9),
    DataLoader(TensorDataset(points, labels), batch_size=12 if TINY else 32, shuffle=True, seed=1),
    epochs=1 if TINY else 15,
    name="classifier",
)
accuracy = TopKMeter(k=1)
with nbcoll.no_grad():
    accuracy.add(classifier(nbcoll.tensor(points)), labels)
print(f"   cross-entropy {classifier_losses[0]:.3f} -> {classifier_losses[-1]:.3f}")
print(f"   training accuracy {accuracy.value():.1f}%")
path = plot_curves({"train": classifier_losses}, os.path.join(OUT, "classifier.png"), "classifier", "epoch")
print(f"   loss curve: {path}")
print()

# %%
# 3. An MLP on the handwritten digits
# -----------------------------------
#
# The 1,797 images of 8x8 handwritten digits ship with nbcoll; 360 of them are held out as a test set. The model
# is 64 pixels -> 128 hidden units (ReLU) -> 10 scores. ``Adam`` trains it with a learning rate that warms up
# linearly for one epoch and then decays along a cosine (``CosineWarmupLR``, stepped once per batch). The loader
# prepares two batches ahead in a background thread (``prefetch=2``), copied to the device while the current
# step runs. A ``TimeMeter`` gives the time of one training step.
#
# Look for the test accuracy: the images it reports on were never trained on, and it should pass 95%.

print("3. An MLP on the handwritten digits")
images, digits = load_digits()
images /= 16.0  # pixels 0..16 -> 0..1
order = rng.permutation(len(images))
test_idx, train_idx = (order[:8], order[8:16]) if TINY else (order[:360], order[360:])
hidden = 8 if TINY else 128
epochs = 1 if TINY else 25
mlp = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
digits_loader = DataLoader(
    TensorDataset(images[train_idx], digits[train_idx]), batch_size=8 if TINY else 32, shuffle=True, seed=2, prefetch=2
)
adam = optim.Adam(mlp.parameters(), lr=3e-3)
steps = epochs * len(digits_loader)
schedule = optim.CosineWarmupLR(adam, warmup_steps=0 if TINY else len(digits_loader), total_steps=steps)
timer = TimeMeter(unit=True)
mlp_losses = train(mlp, nn.CrossEntropyLoss(), adam, digits_loader, epochs, scheduler=schedule, name="digits MLP")
timer.increment(steps)


def accuracy_on_test_images(model):
    meter = TopKMeter(k=1)
    model.eval()
    with nbcoll.no_grad():
        meter.add(model(nbcoll.tensor(images[test_idx])), digits[test_idx])
    return meter.value()


mlp_accuracy = accuracy_on_test_images(mlp)
print(f"   {len(train_idx)} training images, {len(test_idx)} test images, {epochs} epochs")
print(f"   {timer.value() * 1e3:.1f} ms a training step")
print(f"   cross-entropy {mlp_losses[0]:.3f} -> {mlp_losses[-1]:.4f}")
print(f"   test accuracy: {mlp_accuracy:.1f}%")
print(
    f"   loss curve: {plot_curves({'train': mlp_losses}, os.path.join(OUT, 'digits_mlp.png'), 'digits MLP', 'epoch')}"
)

# %%
# Saving and loading a checkpoint
# -------------------------------
#
# ``nbcoll.save`` writes the model's and the optimizer's state into one file (npz + JSON, never a pickle).
# ``nbcoll.load`` reads it back, and ``load_state_dict`` puts it into a fresh model built the same way. The
# restored model must predict exactly as the trained one: the last line should say ``same: True``.

checkpoint = os.path.join(OUT, "digits_mlp.npz")
nbcoll.save({"model": mlp.state_dict(), "optimizer": adam.state_dict(), "epochs": epochs}, checkpoint)
restored = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
state = nbcoll.load(checkpoint)
restored.load_state_dict(state["model"])
optim.Adam(restored.parameters()).load_state_dict(state["optimizer"])
restored_accuracy = accuracy_on_test_images(restored)
print(f"   checkpoint {checkpoint}")
print(f"   reloaded into a new model: {restored_accuracy:.1f}% (same: {restored_accuracy == mlp_accuracy})")
print()

# %%
# 4. A character-level LSTM
# -------------------------
#
# The text is a page of Alice's Adventures in Wonderland (public domain). Each character becomes an index into
# the text's alphabet. The model reads a window of characters and, at every position, scores each character of
# the alphabet as the next one: ``Embedding -> LSTM -> Linear``. The targets are the same window shifted by one.
# Gradients of recurrent networks can spike, so their global norm is clipped to 1 (``clip=1.0``). The model's
# ``step`` method also returns the LSTM's state, so that generating text below can go on from where it stopped.
# This cell prints the section's title and trains; the next one prints what the model learned.

print("4. A character-level LSTM on a page of Alice's Adventures in Wonderland")
text = load_text()
alphabet = sorted(set(text))
encoded = np.array([alphabet.index(c) for c in text], dtype=np.int64)
split = int(0.9 * len(encoded))
window = 2 if TINY else 24


class CharLSTM(nn.Module):
    """Next-character scores for every position of a (batch, window) array of character indices.

    Example::

        model = CharLSTM(vocabulary=60)
        scores = model(nbcoll.tensor(ids))                  # (batch, window, 60)
        scores, state = model.step(nbcoll.tensor(ids), state)  # and the LSTM's state, to continue from
    """

    def __init__(self, vocabulary, embedding=16, hidden=64):
        super().__init__()
        self.embed = nn.Embedding(vocabulary, embedding)
        self.lstm = nn.LSTM(embedding, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocabulary)

    def step(self, ids, state=None):
        outputs, state = self.lstm(self.embed(ids), state)
        return self.head(outputs), state

    def forward(self, ids):
        return self.step(ids)[0]


def windows(ids, step):
    starts = range(0, len(ids) - window - 1, step)
    return np.stack([ids[s : s + window] for s in starts]), np.stack([ids[s + 1 : s + window + 1] for s in starts])


def flat_cross_entropy(scores, targets):
    return nn.CrossEntropyLoss()(scores.reshape(-1, len(alphabet)), targets.reshape(-1))


lstm_model = CharLSTM(len(alphabet), *((4, 4) if TINY else (16, 64)))
train_x, train_y = windows(encoded[:split], step=window)
if TINY:
    train_x, train_y = train_x[:4], train_y[:4]
lstm_losses = train(
    lstm_model,
    flat_cross_entropy,
    optim.Adam(lstm_model.parameters(), lr=1e-2),
    DataLoader(TensorDataset(train_x, train_y), batch_size=4 if TINY else 32, shuffle=True, seed=3),
    epochs=1 if TINY else 30,
    clip=1.0,
    name="char LSTM",
)

# %%
# What the LSTM learned
# ---------------------
#
# Three ways to judge it. The cross-entropy per character: a uniform guess over an alphabet of 59 characters
# costs ``ln 59``, about 4.1 nats, and it falls well below that as the model learns which characters follow
# which. A ``FrameErrorMeter`` counts how often the most likely next character is wrong on the last 10% of the
# page, which the model never trained on: a page is little text, so more than half are still wrong, against 98%
# for a random guess. And a sample: starting from ``'Alice '``, the model draws one character at a time from its
# softmax, feeding each back in with the LSTM's state. Expect word-like pieces and spaces, not sentences. The
# sample is printed as a Python string (``\n`` marks a line break of the text), wrapped over a few lines.

errors = FrameErrorMeter()
held_x, held_y = windows(encoded[split:], step=window)
lstm_model.eval()
with nbcoll.no_grad():
    errors.add(
        lstm_model(nbcoll.tensor(held_x[:2] if TINY else held_x)).argmax(axis=-1), held_y[:2] if TINY else held_y
    )


def sample(model, prompt, length):
    """Continue ``prompt`` one character at a time, drawing each from the model's softmax."""
    out, ids, state = prompt, [alphabet.index(c) for c in prompt], None
    with nbcoll.no_grad():
        for _ in range(length):
            scores, state = model.step(nbcoll.tensor(np.array([ids])), state)
            scores = scores[0, -1].numpy()
            p = np.exp(scores - scores.max())
            ids = [int(rng.choice(len(alphabet), p=p / p.sum()))]
            out += alphabet[ids[0]]
    return out


print(f"   {len(text)} characters, an alphabet of {len(alphabet)}, windows of {window}")
print(f"   cross-entropy {lstm_losses[0]:.3f} -> {lstm_losses[-1]:.3f} nats per character")
print(f"   held-out next-character error: {errors.value():.1f}%")
generated = repr(sample(lstm_model, "Alice ", 2 if TINY else 120))
print("   sample: " + "\n           ".join(textwrap.wrap(generated, 80, drop_whitespace=False)))
print(f"   loss curve: {plot_curves({'train': lstm_losses}, os.path.join(OUT, 'char_lstm.png'), 'char LSTM', 'epoch')}")
print()
print(f"Done: four models trained; digits test accuracy {mlp_accuracy:.1f}%.")
