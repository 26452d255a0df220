"""Precision and compression: fewer bits per number, in the arithmetic and on the wire.

What you learn here:

- the formats: bfloat16 (float32's exponent, 8 bits of precision) and the two fp8 formats, ``float8_e4m3fn``
  (more precision, largest 448, no inf) and ``float8_e5m2`` (more range, largest 57344, inf), a few values rounded
  bit by bit against float32, and what happens past the largest value (NaN for e4m3fn, inf for e5m2);
- mixed precision: ``nbcoll.autocast`` runs the products in bfloat16 or float16 over float32 master parameters;
  float16's narrow range needs a ``GradScaler``, which skips a step whose gradients overflowed and halves its
  scale, shown here on an overflow made on purpose;
- compressing data parallelism's gradients: the float16 communication hook sends half the bytes, PowerSGD (rank 2)
  sends two thin matrices instead of each weight's gradient, and post-local SGD sends the model every few steps
  instead of the gradients every step; the communicator's traffic counters show the bytes, which the tutorial
  checks against what each method should send;
- that the accuracy of the digits MLP barely moves with any of them.

Run it with ``python tutorials/23_precision_and_compression.py [--out DIR]``: it re-launches itself on 2 ranks and
draws the loss curves and the bytes sent into DIR (by default a temporary folder, removed at the end). It trains
for 2 epochs so that it finishes in well under 40 s on a quiet 2-core machine with ``NBCOLL_BACKEND=numpy``; more
epochs reach 98%. On the simulator (``NBCOLL_BACKEND=sim``), where every GPU thread runs in Python, it runs the
same steps at toy sizes (a hidden layer of 8, batches of 4, 3 steps) and checks the bytes, not the accuracy.

Without a GPU, its tests and the docs build run it at full size with ``NBCOLL_BACKEND=numpy``.
"""

import nbcoll.launch

nbcoll.launch.relaunch(2)

# Everything below runs on each of the 2 ranks.
import argparse  # noqa: E402
import dataclasses  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import nbcoll  # noqa: E402
import nbcoll.functional as F  # noqa: E402
from nbcoll import nn  # noqa: E402
from nbcoll.amp import GradScaler  # noqa: E402
from nbcoll.comm import CommConfig  # noqa: E402
from nbcoll.datasets import load_digits  # noqa: E402
from nbcoll.kernels import low_precision as lp  # noqa: E402
from nbcoll.parallel import (  # noqa: E402
    DistributedDataParallel,
    PeriodicModelAverager,
    PostLocalSGDOptimizer,
    PostLocalSGDState,
    PowerSGDState,
    fp16_compress_hook,
    post_localSGD_hook,
    powerSGD_hook,
)

parser = argparse.ArgumentParser()
parser.add_argument("--out", default="", help="a folder for the figure (default: a temporary one)")
args = parser.parse_args()

# One algorithm at every size, so that an all-reduce of N numbers sends exactly N per rank on 2 ranks.
comm = nbcoll.init(config=dataclasses.replace(CommConfig.from_env(), algo="ring"))
rank, n = comm.rank, comm.size
TINY = nbcoll.get_backend() == "sim"
HIDDEN, BATCH, EPOCHS, MAX_STEPS = (8, 4, 1, 3) if TINY else (128, 32, 2, None)
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

# ---------------------------------------------------------------------------------------------------------------
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

# ---------------------------------------------------------------------------------------------------------------
images, labels = load_digits()
images = images / np.float32(16.0)  # pixels 0..1
order = np.random.default_rng(0).permutation(len(images))
test, train = order[:360], order[360:]
if TINY:
    test, train = test[:8], train[: MAX_STEPS * BATCH * n]


def make_mlp() -> nn.Module:
    nbcoll.manual_seed(0)  # the same weights in every run and on every rank
    return nn.Sequential(nn.Linear(64, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 10))


def batches(size: int):
    """The same shuffled batches for every run: (epoch position, indices)."""
    rng = np.random.default_rng(1)
    for epoch in range(EPOCHS):
        shuffled = rng.permutation(train)
        starts = list(range(0, len(shuffled), size))[:MAX_STEPS]
        for k, start in enumerate(starts):
            yield epoch + k / len(starts), shuffled[start : start + size]


def accuracy(model: nn.Module, dtype) -> float:
    with nbcoll.no_grad(), nbcoll.autocast(dtype=dtype or np.float16, enabled=dtype is not None):
        return float((model(nbcoll.tensor(images[test])).numpy().argmax(axis=1) == labels[test]).mean())


say(f"2. Mixed precision: the digits MLP 64 -> {HIDDEN} -> 10, Adam, batches of {BATCH}, {EPOCHS} epochs")
runs = {}  # name -> (epoch positions, losses)
results = []


def train_alone(name: str, dtype, scaler: GradScaler | None = None) -> None:
    model = make_mlp()
    optimizer = nbcoll.optim.Adam(model.parameters(), lr=3e-3)
    seconds, curve = [], ([], [])
    for step, (when, idx) in enumerate(batches(BATCH)):
        overflow = scaler is not None and step == OVERFLOW_AT
        before = ([p.numpy().copy() for p in model.parameters()], scaler.get_scale()) if overflow else None
        start = time.perf_counter()
        optimizer.zero_grad()
        with nbcoll.autocast(dtype=dtype or np.float16, enabled=dtype is not None):
            x = images[idx] * np.float32(1e4 if overflow else 1)
            loss = F.cross_entropy(model(nbcoll.tensor(x)), labels[idx])
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
    runs[name] = curve
    results.append((name, accuracy(model, dtype), 1e3 * float(np.median(seconds))))


train_alone("float32", None)
train_alone("bfloat16 autocast", nbcoll.bfloat16)
train_alone("float16 autocast + GradScaler", np.float16, GradScaler())
say(f"   {'run':<34} {'accuracy':>9} {'ms a step':>10}")
for name, acc, ms in results:
    say(f"   {name:<34} {acc:>9.1%} {ms:>10.1f}")
if not TINY:
    assert min(acc for _, acc, _ in results) >= 0.93, results
    assert max(acc for _, acc, _ in results) - min(acc for _, acc, _ in results) <= 0.02, results
say("   the same accuracy. Here a low-precision step is no faster (NumPy has no fast bfloat16 or float16 products,")
say("   and every cast is one more copy); on a GPU's tensor cores those products are the fast ones, on half the")
say("   memory. (The character model of tutorial 24 is left out for time: its forward under the same autocast.)")
say()

# ---------------------------------------------------------------------------------------------------------------
say(f"3. Data parallel on {n} ranks, global batches of {n * BATCH} (each rank its {BATCH}), SGD with momentum")
numbers = sum(p.size for p in make_mlp().parameters())  # the gradients DDP averages every step


def train_ddp(name: str, method: str) -> None:
    model = DistributedDataParallel(make_mlp(), comm)
    optimizer = nbcoll.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state = None
    if method == "fp16":
        model.register_comm_hook(None, fp16_compress_hook)
    elif method == "powersgd":
        state = PowerSGDState(None, matrix_approximation_rank=2, start_powerSGD_iter=WARMUP)
        model.register_comm_hook(state, powerSGD_hook)
    elif method == "local":
        model.register_comm_hook(PostLocalSGDState(comm, None, start_localSGD_iter=WARMUP), post_localSGD_hook)
        averager = PeriodicModelAverager(period=PERIOD, warmup_steps=WARMUP, process_group=comm)
        optimizer = PostLocalSGDOptimizer(optimizer, averager)
    comm.reset_counters()
    seconds, curve = [], ([], [])
    for when, idx in batches(n * BATCH):
        mine = idx[rank::n]
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(nbcoll.tensor(images[mine])), labels[mine])
        loss.backward()  # the hook averages (or compresses) each bucket's gradients
        optimizer.step()
        seconds.append(time.perf_counter() - start)
        curve[0].append(when)
        curve[1].append(loss.item())
    steps = len(seconds)
    sent = int(summed([comm.counters.bytes_sent])[0])  # both ranks' bytes
    # What each method should send: on 2 ranks a ring all-reduce of N numbers sends N from each rank.
    if method == "fp16":
        want = n * steps * numbers * 2
    elif method == "powersgd":
        want = n * 4 * (WARMUP * numbers + state.total_numel_after_compression)
    elif method == "local":
        averages = len(range(WARMUP, steps, PERIOD))  # the model averaged at steps WARMUP, WARMUP + PERIOD, ...
        want = n * 4 * (WARMUP + averages) * numbers
    else:
        want = n * steps * numbers * 4
    assert sent == want, (name, sent, want)
    local = [p.numpy() for p in model.parameters()]
    if method != "local" or (steps - WARMUP - 1) % PERIOD == 0:  # local SGD's replicas drift between averages
        assert all(np.array_equal(summed(a.ravel().tolist()), n * a.ravel()) for a in local)  # replicas equal
    runs[name] = (curve[0], list(summed(curve[1]) / n))
    results.append((name, accuracy(model.module, None), sent, 1e3 * float(np.median(seconds))))


results = []
train_ddp("DDP float32", "plain")
train_ddp("DDP fp16_compress_hook", "fp16")
train_ddp("DDP PowerSGD rank 2", "powersgd")
train_ddp(f"DDP post-local SGD, period {PERIOD}", "local")
say(f"   {'run':<34} {'accuracy':>9} {'bytes sent':>12} {'ms a step':>10}")
for name, acc, sent, ms in results:
    say(f"   {name:<34} {acc:>9.1%} {sent:>12,} {ms:>10.1f}")
plain_bytes = results[0][2]
say(f"   float32: {numbers:,} gradients of 4 bytes every step; the fp16 hook sends half of that")
ratio = plain_bytes / results[2][2]
say(f"   PowerSGD: {WARMUP} full steps, then each weight W (n x m) as P (n x 2), Q (m x 2): {ratio:.1f}x fewer bytes")
say(f"   post-local SGD: {WARMUP} steps of DDP, then each rank steps alone and the model is averaged every {PERIOD}")
if not TINY:
    assert results[1][2] * 2 == plain_bytes and results[2][2] * 5 < plain_bytes and results[3][2] * 2 < plain_bytes
    assert min(acc for _, acc, _, _ in results) >= results[0][1] - 0.03, results
say("   the bytes match what each method should send, checked against the traffic counters; the accuracy stays")
say("   within a few points: on a slow network these are the steps that would be faster")
say()

# ---------------------------------------------------------------------------------------------------------------
out = args.out or tempfile.mkdtemp(prefix="nbcoll_tutorial_23_")
os.makedirs(out, exist_ok=True)
if rank == 0 and not TINY:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), gridspec_kw={"width_ratios": [3, 2]})
    for name, (when, losses) in runs.items():
        k = 5  # a running mean over 5 steps, so the curves can be told apart
        smooth = np.convolve(losses, np.ones(k) / k, mode="valid")
        left.plot(when[k - 1 :], smooth, label=name, linestyle="--" if name.startswith("DDP") else "-")
    left.set_xlabel("epoch")
    left.set_ylabel("training loss (running mean of 5 steps)")
    left.set_yscale("log")
    left.legend(fontsize=7)
    names = [name.removeprefix("DDP ") for name, _, _, _ in results]
    right.barh(names, [sent / 1e6 for _, _, sent, _ in results], color="tab:orange")
    right.invert_yaxis()
    right.set_xlabel(f"MB sent by {n} ranks in {EPOCHS} epochs")
    right.tick_params(axis="y", labelsize=8)
    fig.suptitle("Precision and compression: the digits MLP")
    fig.tight_layout()
    path = os.path.join(out, "precision_and_compression.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    say("4. The figure: the loss curves of every run, and the bytes each data-parallel run sent")
    say(f"   drawn: {path if args.out else 'precision_and_compression.png (in a temporary folder, removed)'}")
    say()

comm.destroy()
if not args.out:
    shutil.rmtree(out, ignore_errors=True)
say("Larger global batches, which fewer bytes a step make cheap, are what LARS and LAMB (nbcoll.optim) are for.")
say(f"Done: bfloat16, float16 and compressed gradients train as float32 does, PowerSGD on 1/{ratio:.0f} of the bytes.")
