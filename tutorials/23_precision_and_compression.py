"""
Precision and compression: fewer bits per number, in the arithmetic and on the wire
===================================================================================

What you learn here:

- the formats: bfloat16 (float32's exponent, 8 bits of precision) and the two fp8 formats, ``float8_e4m3fn``
  (more precision, largest 448, no inf) and ``float8_e5m2`` (more range, largest 57344, inf), a few values rounded
  bit by bit against float32, and what happens past the largest value (NaN for e4m3fn, inf for e5m2);
- mixed precision: ``nbcoll.autocast`` runs the products in bfloat16 or float16 over float32 master parameters;
  float16's narrow range needs a ``GradScaler``, which skips a step whose gradients overflowed and halves its
  scale, shown here on an overflow made on purpose;
- compressing data parallelism's gradients: the float16 and bfloat16 communication hooks send half the bytes,
  PowerSGD (rank 2) sends two thin matrices instead of each weight's gradient, and post-local SGD sends the model
  every few steps instead of the gradients every step; the communicator's traffic counters show the bytes, which
  the tutorial checks against what each method should send;
- that the accuracy of the digits MLP and the held-out loss of a small character model (the next character from
  the four before it) barely move with any of them.

Run it with ``python tutorials/23_precision_and_compression.py [--out DIR]``: it re-launches itself on 2 ranks and
draws the loss curves and the bytes sent into DIR (by default a temporary folder, removed at the end). It trains
for 2 epochs so that it finishes in well under 40 s on a quiet 2-core machine with ``NBCOLL_BACKEND=numpy``; more
epochs reach 98%. On the simulator (``NBCOLL_BACKEND=sim``), where every GPU thread runs in Python, it runs the
same steps at toy sizes (a hidden layer of 8, a character model of width 4, batches of 4, 3 steps) and checks
the bytes, not the accuracy.

Without a GPU, its tests and the docs build run it at full size with ``NBCOLL_BACKEND=numpy``.
"""

# %%
# Set-up
# ------
#
# Two ranks, and one all-reduce algorithm at every size (the ring), so that an all-reduce of N numbers sends
# exactly N per rank and the bytes each method sends can be checked to the byte. On the simulator every size is a
# toy one.

import nbcoll.launch

nbcoll.launch.relaunch(2)

# Everything below runs on each of the 2 ranks.
import argparse  # noqa: E402
import dataclasses  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import nbcoll  # noqa: E402
import nbcoll.functional as F  # noqa: E402
from nbcoll import nn  # noqa: E402
from nbcoll.amp import GradScaler  # noqa: E402
from nbcoll.comm import CommConfig  # noqa: E402
from nbcoll.datasets import load_digits, load_text  # noqa: E402
from nbcoll.kernels import low_precision as lp  # noqa: E402
from nbcoll.parallel import (  # noqa: E402
    DistributedDataParallel,
    PeriodicModelAverager,
    PostLocalSGDOptimizer,
    PostLocalSGDState,
    PowerSGDState,
    bf16_compress_hook,
    fp16_compress_hook,
    post_localSGD_hook,
    powerSGD_hook,
)

parser = argparse.ArgumentParser()
parser.add_argument("--out", default="", help="a folder for the figure (default: a temporary one)")
args = parser.parse_args()

comm = nbcoll.init(config=dataclasses.replace(CommConfig.from_env(), algo="ring"))
rank, n = comm.rank, comm.size
TINY = nbcoll.get_backend() == "sim"
HIDDEN, BATCH, EPOCHS, MAX_STEPS = (8, 4, 1, 3) if TINY else (128, 32, 2, None)
CONTEXT, EMBED, CHAR_HIDDEN, CHAR_BATCH = (2, 2, 4, 4) if TINY else (4, 8, 64, 64)  # the character model's sizes
OVERFLOW_AT = 1 if TINY else 20  # the float16 step whose inputs are made 10,000 times too large
WARMUP, PERIOD = (1, 2) if TINY else (4, 4)  # PowerSGD's and local SGD's full-precision steps; local SGD's period


def say(text: str = "") -> None:
    if rank == 0:
        print(text, flush=True)


def summed(values: list[float]) -> np.ndarray:
    """The sum over the ranks of each rank's list of numbers."""
    return nbcoll.to_host(comm.all_reduce(nbcoll.to_device(np.array(values, np.float64))))


say(f"Tutorial 23 on the {nbcoll.get_backend()!r} backend, {n} ranks")
say()

# %%
# 1. The formats, bit by bit
# --------------------------
#
# Each format is sign | exponent | mantissa. The device's conversion kernel rounds five values of float32 to
# each low-precision format, and every word is checked against ``ml_dtypes``' rounding: to nearest, ties to even,
# NaN past the largest value of e4m3fn (it has no inf), inf past the largest of e5m2 and bfloat16.

say("1. The formats, bit by bit: sign | exponent | mantissa")
FORMATS = [  # name, dtype, exponent bits, mantissa bits
    ("float32", np.dtype(np.float32), 8, 23),
    ("bfloat16", nbcoll.bfloat16, 8, 7),
    ("float8_e4m3fn", nbcoll.float8_e4m3fn, 4, 3),
    ("float8_e5m2", nbcoll.float8_e5m2, 5, 2),
]
for name, dtype, e, m in FORMATS[1:]:
    say(f"   {name:<14} 1 | {e} | {m:<2}  largest {float(ml_dtypes.finfo(dtype).max):.6g}")
values = np.array([3.14159, 500.0, 100000.0, 0.001, np.nan], np.float32)
x = nbcoll.to_device(values)
rounded = {"float32": values.view(np.uint32)}
for name, dtype, _, _ in FORMATS[1:]:
    rounded[name] = nbcoll.to_host(lp.words(lp.cast(x, dtype)))  # the device's conversion kernel
    with np.errstate(invalid="ignore", over="ignore"):
        reference = values.astype(dtype).view(lp.WORD_DTYPES[dtype])  # ml_dtypes' rounding
    assert np.array_equal(rounded[name], reference), (name, rounded[name], reference)


def bits(word: int, e: int, m: int) -> str:
    text = format(int(word), f"0{1 + e + m}b")
    return f"{text[0]} {text[1 : 1 + e]} {text[1 + e :]}"


for i, value in enumerate(values):
    say(f"   {value:g}")
    for name, dtype, e, m in FORMATS:
        word = rounded[name][i]
        back = np.array([word], lp.WORD_DTYPES.get(dtype, np.uint32)).view(dtype).astype(np.float32)[0]
        say(f"     {name:<14} {bits(word, e, m):<34} {back:.9g}")
low = {name: rounded[name].view(dtype).astype(np.float32) for name, dtype, _, _ in FORMATS[1:]}
assert low["bfloat16"][0] == 3.140625  # 8 significant bits
assert np.isnan(low["float8_e4m3fn"][1]) and low["float8_e5m2"][1] == 512  # past 448: NaN; e5m2 rounds to 512
assert low["bfloat16"][2] == 99840 and np.isinf(low["float8_e5m2"][2])  # bfloat16 keeps float32's range
assert low["float8_e4m3fn"][3] == 2.0**-9  # 0.001 rounds to e4m3fn's smallest subnormal, twice as large
say("   e4m3fn has no inf: 500 (past 448) becomes NaN, where fp8 training scales tensors to stay in range;")
say("   e5m2 gives up a mantissa bit for range (inf only past 57344); bfloat16 keeps float32's range, 1e5 included")
say()

# %%
# Helpers: a task, its batches, its held-out score
# ------------------------------------------------
#
# Two models train below, each in every precision and with every hook. A ``Task`` holds what the training loops
# need of either: how to build the model (with the same weights in every run and on every rank), its examples,
# which of them train and which are held out, its batch sizes and its optimizers. Every run of a task sees the same
# shuffled batches, and is scored on the held-out examples under the autocast it trained with.


@dataclasses.dataclass
class Task:
    """One model and its data: ``inputs[i]`` should give ``targets[i]``; ``train`` and ``held`` index them."""

    name: str
    make: Callable[[], nn.Module]
    inputs: np.ndarray
    targets: np.ndarray
    train: np.ndarray
    held: np.ndarray
    batch: int  # a step's examples when training alone
    rank_batch: int  # each rank's examples of a data-parallel step
    alone: Callable  # parameters -> the optimizer of a model trained alone
    together: Callable  # parameters -> the optimizer of a data-parallel one


def seeded(make: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    """``make`` with the same weights in every run and on every rank."""

    def build() -> nn.Module:
        nbcoll.manual_seed(0)
        return make()

    return build


def toy(train: np.ndarray, held: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """On the simulator, a few batches to train on and 8 examples held out."""
    return (train[: MAX_STEPS * BATCH * n], held[:8]) if TINY else (train, held)


def batches(task: Task, size: int):
    """The same shuffled batches of ``task`` for every run: (epoch position, indices)."""
    rng = np.random.default_rng(1)
    for epoch in range(EPOCHS):
        shuffled = rng.permutation(task.train)
        starts = list(range(0, len(shuffled), size))[:MAX_STEPS]
        for k, start in enumerate(starts):
            yield epoch + k / len(starts), shuffled[start : start + size]


def evaluate(task: Task, model: nn.Module, dtype) -> tuple[float, float]:
    """Accuracy and mean cross-entropy on the held-out examples, under the autocast the model trained with."""
    x, y = task.inputs[task.held], task.targets[task.held]
    with nbcoll.no_grad(), nbcoll.autocast(dtype=dtype or np.float16, enabled=dtype is not None):
        scores = model(nbcoll.tensor(x))
        loss = F.cross_entropy(scores, y).item()
    return float((scores.numpy().astype(np.float32).argmax(axis=1) == y).mean()), loss


# %%
# 2. Two models: the digits MLP and a character model
# ---------------------------------------------------
#
# The digits MLP classifies 8 x 8 images. The character model reads the ``CONTEXT`` characters before a position
# of a page of *Alice's Adventures in Wonderland* and scores every character of the alphabet as the next one: an
# ``nn.Embedding`` row per character, the rows side by side, an MLP. The last tenth of the page is held out. Its
# yardstick is the *unigram* model, which always predicts the characters' frequencies in the training text
# (counted from one, so that none has probability 0): a model that learned anything from the characters before
# beats its held-out loss.


class CharMLP(nn.Module):
    """Next-character scores from the ``context`` characters before: (batch, context) ids -> (batch, vocabulary).

    Example::

        model = CharMLP(vocabulary=59, context=4, embedding=8, hidden=64)
        scores = model(nbcoll.tensor(ids))                  # ids: (batch, 4) indices into the alphabet
    """

    def __init__(self, vocabulary: int, context: int, embedding: int, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocabulary, embedding)
        self.mlp = nn.Sequential(nn.Linear(context * embedding, hidden), nn.ReLU(), nn.Linear(hidden, vocabulary))

    def forward(self, ids):
        rows = self.embed(ids)  # (batch, context, embedding)
        return self.mlp(rows.reshape(rows.shape[0], -1))


images, labels = load_digits()
order = np.random.default_rng(0).permutation(len(images))
train, held = toy(order[360:], order[:360])
DIGITS = Task(
    name="digits",
    make=seeded(lambda: nn.Sequential(nn.Linear(64, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 10))),
    inputs=images / np.float32(16.0),  # pixels 0..1
    targets=labels,
    train=train,
    held=held,
    batch=BATCH,
    rank_batch=BATCH,
    alone=lambda params: nbcoll.optim.Adam(params, lr=3e-3),
    together=lambda params: nbcoll.optim.SGD(params, lr=0.1, momentum=0.9),
)

text = load_text()
alphabet = sorted(set(text))
codes = np.array([alphabet.index(c) for c in text], np.int64)
cut = int(0.9 * (len(codes) - CONTEXT))
train, held = toy(np.arange(cut), np.arange(cut, len(codes) - CONTEXT))  # the page's last tenth is held out
CHARS = Task(
    name="chars",
    make=seeded(lambda: CharMLP(len(alphabet), CONTEXT, EMBED, CHAR_HIDDEN)),
    inputs=np.stack([codes[i - CONTEXT : i] for i in range(CONTEXT, len(codes))]),  # the characters before...
    targets=codes[CONTEXT:],  # ... each character
    train=train,
    held=held,
    batch=CHAR_BATCH,
    rank_batch=CHAR_BATCH // n,
    alone=lambda params: nbcoll.optim.Adam(params, lr=1e-2),
    together=lambda params: nbcoll.optim.Adam(params, lr=1e-2),
)
counts = np.bincount(CHARS.targets[CHARS.train], minlength=len(alphabet)) + 1.0
UNIGRAM = float(-np.log(counts[CHARS.targets[CHARS.held]] / counts.sum()).mean())  # nats per character

say("2. Two models and their data")
for task in (DIGITS, CHARS):
    numbers = sum(p.size for p in task.make().parameters())
    sizes = f"{len(task.train):>6,} examples to train on, {len(task.held):>4,} held out"
    say(f"   {task.name:<7} {sizes}, {numbers:,} parameters")
say(f"   the character model: {CONTEXT} characters before -> embeddings of {EMBED} -> {CHAR_HIDDEN} -> {len(alphabet)}")
say(f"   the unigram model's held-out loss: {UNIGRAM:.3f} nats per character, the one to beat")
say()

# %%
# 3. Mixed precision: the digits MLP
# ----------------------------------
#
# The same loop trains in float32, under bfloat16 autocast and under float16 autocast with a ``GradScaler``.
# Autocast runs each matrix product in the low precision and keeps sums, softmax and the loss in float32; the
# parameters (the *masters*) never leave float32. The GradScaler multiplies the loss by a large scale so that
# small float16 gradients do not flush to zero, divides the gradients back before the step, and skips a step whose
# gradients overflowed. One digits step is made to overflow on purpose: its inputs are 10,000 times too large.

runs = {}  # (task, run) -> (epoch positions, losses)
mixed = []  # (task, run, accuracy, held-out loss, ms a step)


def train_alone(task: Task, name: str, dtype, scaler: GradScaler | None = None) -> None:
    model = task.make()
    optimizer = task.alone(model.parameters())
    seconds, curve = [], ([], [])
    for step, (when, idx) in enumerate(batches(task, task.batch)):
        overflow = scaler is not None and task is DIGITS and step == OVERFLOW_AT
        before = ([p.numpy().copy() for p in model.parameters()], scaler.get_scale()) if overflow else None
        start = time.perf_counter()
        optimizer.zero_grad()
        with nbcoll.autocast(dtype=dtype or np.float16, enabled=dtype is not None):
            x = task.inputs[idx] * np.float32(1e4) if overflow else task.inputs[idx]
            loss = F.cross_entropy(model(nbcoll.tensor(x)), task.targets[idx])
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()  # float16 gradients of loss * scale, so that small ones survive
            scaler.step(optimizer)  # skipped when a gradient is inf or NaN
            scaler.update()  # halve the scale after an overflow
        seconds.append(time.perf_counter() - start)
        if overflow:
            params, scale = before
            assert all(np.array_equal(a, p.numpy()) for a, p in zip(params, model.parameters(), strict=True))
            assert scaler.get_scale() == scale / 2
            say(f"   float16 step {step}: inputs x 10,000, the float16 gradients overflow: the step is skipped")
            say(f"   (every parameter unchanged) and the scale halved, {scale:,.0f} -> {scaler.get_scale():,.0f}")
        else:
            curve[0].append(when)
            curve[1].append(loss.item())
    assert all(p.dtype == np.float32 for p in model.parameters())  # the masters never leave float32
    runs[task.name, name] = curve
    mixed.append((task.name, name, *evaluate(task, model, dtype), 1e3 * float(np.median(seconds))))


PRECISIONS = [  # name, autocast's dtype (None: off), whether a GradScaler scales the loss
    ("float32", None, False),
    ("bfloat16 autocast", nbcoll.bfloat16, False),
    ("float16 autocast + GradScaler", np.float16, True),
]
say(f"3. Mixed precision: the digits MLP 64 -> {HIDDEN} -> 10, Adam, batches of {BATCH}, {EPOCHS} epochs")
for name, dtype, scaled in PRECISIONS:
    train_alone(DIGITS, name, dtype, GradScaler() if scaled else None)
say(f"   {'model':<7} {'run':<34} {'accuracy':>9} {'held-out loss':>14} {'ms a step':>10}")
for task, name, acc, loss, ms in mixed:
    say(f"   {task:<7} {name:<34} {acc:>9.1%} {loss:>14.3f} {ms:>10.1f}")
if not TINY:
    assert min(acc for _, _, acc, _, _ in mixed) >= 0.93, mixed
    assert max(acc for _, _, acc, _, _ in mixed) - min(acc for _, _, acc, _, _ in mixed) <= 0.02, mixed
say()

# %%
# 4. Mixed precision: the character model
# ---------------------------------------
#
# The same three precisions on the character model, with batches of ``CHAR_BATCH``. Its embeddings stay float32
# under autocast (a lookup is no product); its two linear layers run in bfloat16 or float16. What counts is the
# held-out loss, against the unigram model's: every precision learns as much from the characters before.

say(f"4. Mixed precision: the character model, Adam, batches of {CHAR_BATCH}, {EPOCHS} epochs")
for name, dtype, scaled in PRECISIONS:
    train_alone(CHARS, name, dtype, GradScaler() if scaled else None)
say(f"   {'model':<7} {'run':<34} {'accuracy':>9} {'held-out loss':>14} {'ms a step':>10}")
for task, name, acc, loss, ms in mixed:
    say(f"   {task:<7} {name:<34} {acc:>9.1%} {loss:>14.3f} {ms:>10.1f}")
say(f"   {'chars':<7} {'unigram (the frequencies)':<34} {'':>9} {UNIGRAM:>14.3f}")
char_losses = [loss for task, _, _, loss, _ in mixed if task == "chars"]
if not TINY:
    assert max(char_losses) < UNIGRAM - 0.3, (char_losses, UNIGRAM)
    assert max(char_losses) - min(char_losses) <= 0.05, char_losses
say("   the same accuracy and loss in every precision. Here a low-precision step is no faster (NumPy has")
say("   no fast bfloat16 or float16 products, and every cast is one more copy); on a GPU's tensor cores")
say("   those products are the fast ones, on half the memory.")
say()

# %%
# Helpers: data parallelism with a communication hook, and the bytes it should send
# ---------------------------------------------------------------------------------
#
# ``DistributedDataParallel`` averages the gradients every step; a *communication hook* decides what goes on the
# wire. ``fp16_compress_hook`` and ``bf16_compress_hook`` send each gradient in 2 bytes instead of 4. PowerSGD
# sends each weight ``W`` (n x m) as ``P`` (n x 2) and ``Q`` (m x 2) after ``WARMUP`` full steps (biases go
# uncompressed). Post-local SGD steps each rank alone after ``WARMUP`` steps and averages the models every
# ``PERIOD``. The communicator's traffic counters give the bytes both ranks sent, which must equal what each
# method should send: on 2 ranks a ring all-reduce of N numbers sends N from each rank.

parallel = []  # (task, run, accuracy, held-out loss, bytes sent, ms a step)


def hooked(task: Task, method: str):
    """A DDP model of ``task`` with ``method``'s hook, its optimizer, and PowerSGD's state (or None)."""
    model = DistributedDataParallel(task.make(), comm)
    optimizer = task.together(model.parameters())
    state = None
    if method in ("fp16", "bf16"):
        model.register_comm_hook(None, fp16_compress_hook if method == "fp16" else bf16_compress_hook)
    elif method == "powersgd":
        state = PowerSGDState(None, matrix_approximation_rank=2, start_powerSGD_iter=WARMUP)
        model.register_comm_hook(state, powerSGD_hook)
    elif method == "local":
        model.register_comm_hook(PostLocalSGDState(comm, None, start_localSGD_iter=WARMUP), post_localSGD_hook)
        averager = PeriodicModelAverager(period=PERIOD, warmup_steps=WARMUP, process_group=comm)
        optimizer = PostLocalSGDOptimizer(optimizer, averager)
    return model, optimizer, state


def train_ddp(task: Task, name: str, method: str) -> None:
    model, optimizer, state = hooked(task, method)
    numbers = sum(p.size for p in model.parameters())  # the gradients DDP averages every step
    comm.reset_counters()
    seconds, curve = [], ([], [])
    for when, idx in batches(task, n * task.rank_batch):
        mine = idx[rank::n]
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(nbcoll.tensor(task.inputs[mine])), task.targets[mine])
        loss.backward()  # the hook averages (or compresses) each bucket's gradients
        optimizer.step()
        seconds.append(time.perf_counter() - start)
        curve[0].append(when)
        curve[1].append(loss.item())
    steps = len(seconds)
    sent = int(summed([comm.counters.bytes_sent])[0])  # both ranks' bytes
    if method in ("fp16", "bf16"):
        want = n * steps * numbers * 2
    elif method == "powersgd":
        want = n * 4 * (WARMUP * numbers + state.total_numel_after_compression)
    elif method == "local":
        averages = len(range(WARMUP, steps, PERIOD))  # the model averaged at steps WARMUP, WARMUP + PERIOD, ...
        want = n * 4 * (WARMUP + averages) * numbers
    else:
        want = n * steps * numbers * 4
    assert sent == want, (task.name, name, sent, want)
    local = [p.numpy() for p in model.parameters()]
    if method != "local" or (steps - WARMUP - 1) % PERIOD == 0:  # local SGD's replicas drift between averages
        assert all(np.array_equal(summed(a.ravel().tolist()), n * a.ravel()) for a in local)  # replicas equal
    runs[task.name, name] = (curve[0], list(summed(curve[1]) / n))
    parallel.append((task.name, name, *evaluate(task, model.module, None), sent, 1e3 * float(np.median(seconds))))


# %%
# 5. Compressed gradients: the digits MLP
# ---------------------------------------
#
# Every method on the digits MLP, global batches of ``2 * BATCH``, SGD with momentum. The float16 and bfloat16
# hooks send exactly half of float32's bytes; PowerSGD and post-local SGD far fewer; the accuracy stays within a
# few points of float32's.

say(f"5. Data parallel on {n} ranks: the digits MLP, global batches of {n * BATCH} (each rank its {BATCH}), SGD")
METHODS = [
    ("DDP float32", "plain"),
    ("DDP fp16_compress_hook", "fp16"),
    ("DDP bf16_compress_hook", "bf16"),
    ("DDP PowerSGD rank 2", "powersgd"),
]
for name, method in [*METHODS, (f"DDP post-local SGD, period {PERIOD}", "local")]:
    train_ddp(DIGITS, name, method)
say(f"   {'model':<7} {'run':<34} {'accuracy':>9} {'held-out loss':>14} {'bytes sent':>12} {'ms a step':>10}")
for task, name, acc, loss, sent, ms in parallel:
    say(f"   {task:<7} {name:<34} {acc:>9.1%} {loss:>14.3f} {sent:>12,} {ms:>10.1f}")
digits_numbers = sum(p.size for p in DIGITS.make().parameters())
say(f"   float32: {digits_numbers:,} gradients of 4 bytes every step; the fp16 and bf16 hooks send half of that")
if not TINY:
    plain_bytes = parallel[0][4]
    assert parallel[1][4] * 2 == plain_bytes == parallel[2][4] * 2, parallel
    assert parallel[3][4] * 5 < plain_bytes and parallel[4][4] * 2 < plain_bytes, parallel
    assert min(acc for _, _, acc, _, _, _ in parallel) >= parallel[0][2] - 0.03, parallel
say()

# %%
# 6. Compressed gradients: the character model
# --------------------------------------------
#
# The same hooks on the character model, global batches of ``CHAR_BATCH`` split over the ranks, Adam. PowerSGD
# compresses its embedding table (59 x 8) as well as its two weights; its two biases go as they are. Fewer bytes,
# the same held-out loss.

say(f"6. Data parallel on {n} ranks: the character model, global batches of {CHAR_BATCH}, Adam")
for name, method in METHODS:
    train_ddp(CHARS, name, method)
say(f"   {'model':<7} {'run':<34} {'accuracy':>9} {'held-out loss':>14} {'bytes sent':>12} {'ms a step':>10}")
for task, name, acc, loss, sent, ms in parallel:
    say(f"   {task:<7} {name:<34} {acc:>9.1%} {loss:>14.3f} {sent:>12,} {ms:>10.1f}")
chars_ddp = [r for r in parallel if r[0] == "chars"]
if not TINY:
    assert chars_ddp[1][4] * 2 == chars_ddp[0][4] == chars_ddp[2][4] * 2 and chars_ddp[3][4] * 5 < chars_ddp[0][4]
    assert max(loss for _, _, _, loss, _, _ in chars_ddp) < UNIGRAM - 0.3, (chars_ddp, UNIGRAM)
    assert max(loss for _, _, _, loss, _, _ in chars_ddp) - chars_ddp[0][3] <= 0.1, chars_ddp
plain = {task: sent for task, name, _, _, sent, _ in parallel if name == "DDP float32"}
ratios = {task: plain[task] / sent for task, name, _, _, sent, _ in parallel if name == "DDP PowerSGD rank 2"}
say(f"   PowerSGD: {WARMUP} full steps, then each weight W (n x m) as P (n x 2), Q (m x 2):")
say(f"   {ratios['digits']:.1f}x fewer bytes for the digits, {ratios['chars']:.1f}x for the character model")
say(f"   post-local SGD: {WARMUP} steps of DDP, then each rank steps alone and the model is averaged every {PERIOD}")
say("   the bytes match what each method should send, checked against the traffic counters; the accuracy")
say("   and the loss stay within a little of float32's: on a slow network these are the faster steps")
say()

# %%
# 7. The figure
# -------------
#
# The loss curves of every run of both models (the data-parallel ones dashed; the character model's against the
# unigram model's held-out loss), and the bytes each data-parallel run sent.

# $NBCOLL_FIGURES_DIR (the docs build sets it) is the default folder; else a temporary one, removed at the end
kept = args.out or os.environ.get("NBCOLL_FIGURES_DIR")
out = kept or tempfile.mkdtemp(prefix="nbcoll_tutorial_23_")
os.makedirs(out, exist_ok=True)
if rank == 0 and not TINY:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2), gridspec_kw={"width_ratios": [3, 3, 2]})
    for ax, task in zip(axes[:2], (DIGITS, CHARS), strict=True):
        for (owner, name), (when, losses) in runs.items():
            if owner == task.name:
                k = 5  # a running mean over 5 steps, so the curves can be told apart
                smooth = np.convolve(losses, np.ones(k) / k, mode="valid")
                ax.plot(when[k - 1 :], smooth, label=name, linestyle="--" if name.startswith("DDP") else "-")
        ax.set_xlabel("epoch")
        ax.set_title(f"{task.name}: training loss (running mean of 5 steps)", fontsize=9)
        ax.legend(fontsize=6)
    axes[0].set_yscale("log")
    axes[1].axhline(UNIGRAM, color="gray", linewidth=0.8, linestyle=":")
    axes[1].text(EPOCHS, UNIGRAM, "the unigram model, held out", fontsize=7, color="gray", ha="right", va="bottom")
    names = [f"{task}: {name.removeprefix('DDP ')}" for task, name, *_ in parallel]
    axes[2].barh(names, [r[4] / 1e6 for r in parallel], color="tab:orange")
    axes[2].invert_yaxis()
    axes[2].set_xlabel(f"MB sent by {n} ranks in {EPOCHS} epochs")
    axes[2].tick_params(axis="y", labelsize=7)
    fig.suptitle("Precision and compression: the digits MLP and the character model")
    fig.tight_layout()
    path = os.path.join(out, "precision_and_compression.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    say("7. The figure: the loss curves of every run of both models, and the bytes each data-parallel run sent")
    where = path if args.out else os.path.basename(path) + ("" if kept else " (in a temporary folder, removed)")
    say(f"   drawn: {where}")
    say()

# %%
# 8. Wrap-up
# ----------
#
# Fewer bytes a step make larger global batches cheap; the communicator is closed, and without ``--out`` the
# temporary folder of the figure is removed.

comm.destroy()
if not kept:
    shutil.rmtree(out, ignore_errors=True)
say("Larger global batches, which fewer bytes a step make cheap, are what LARS and LAMB (nbcoll.optim) are for.")
say(
    "Done: bfloat16, float16 and compressed gradients train as float32 does, "
    f"PowerSGD on 1/{ratios['digits']:.0f} of the bytes."
)
