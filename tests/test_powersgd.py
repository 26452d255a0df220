"""PowerSGD: the hook against its steps written in NumPy, the bytes it saves, and the accuracy it keeps."""

import numpy as np
import pytest

import nbcoll
from nbcoll import nn, optim
from nbcoll.comm import CommConfig, loopback
from nbcoll.parallel import DistributedDataParallel, PowerSGDState, allreduce_hook, powerSGD_hook
from nbcoll.parallel.buckets import Bucket

SHAPES = [(9, 11), (7,), (8, 3, 4), (4,)]  # two matrices (the 3-D one is 8 x 12), two vectors
RING = CommConfig(algo="ring")


@pytest.fixture(autouse=True)
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


def gram_schmidt(p):
    p = p.copy()
    for i in range(p.shape[1]):
        norm = np.linalg.norm(p[:, i])
        if norm > 0:
            p[:, i] /= norm
        p[:, i + 1 :] -= (p[:, i] @ p[:, i + 1 :]) * p[:, i : i + 1]
    return p


def reference(grads, rank, steps):
    """The algorithm for every rank at once: grads[step][r] is rank r's list of gradients (SHAPES)."""
    nranks = len(grads[0])
    rng = np.random.RandomState(0)  # PowerSGDState's random_seed
    errors = [[np.zeros((s[0], int(np.prod(s[1:])))) for s in SHAPES if len(s) > 1] for _ in range(nranks)]
    qs = None
    out = []
    for step in range(steps):
        mats = [
            [g.reshape(g.shape[0], -1) + e for g, e in zip([g for g in gs if g.ndim > 1], errs, strict=True)]
            for gs, errs in zip(grads[step], errors, strict=True)
        ]
        if qs is None:
            qs = [gram_schmidt(rng.standard_normal((m.shape[1], rank))) for m in mats[0]]
        ps = [gram_schmidt(sum(mats[r][k] @ qs[k] for r in range(nranks))) for k in range(len(qs))]
        qs = [sum(mats[r][k].T @ ps[k] for r in range(nranks)) / nranks for k in range(len(ps))]
        approx = [p @ q.T for p, q in zip(ps, qs, strict=True)]
        errors = [[m - a for m, a in zip(mats[r], approx, strict=True)] for r in range(nranks)]
        vectors = [sum(grads[step][r][k] for r in range(nranks)) / nranks for k in (1, 3)]
        out.append([approx[0], vectors[0], approx[1].reshape(8, 3, 4), vectors[1]])
    return out


def bucket_of(comm, values):
    params = [nn.Parameter(nbcoll.tensor(np.zeros(s))) for s in SHAPES]
    offsets = list(np.cumsum([0] + [int(np.prod(s)) for s in SHAPES[:-1]]))
    flat = np.concatenate([v.ravel() for v in values])
    return Bucket(
        0, [str(k) for k in range(len(SHAPES))], params, offsets, nbcoll.to_device(flat), comm=comm, last=True
    )


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_the_hook_follows_its_update_rule_with_warm_start_and_error_feedback(nranks):
    rng = np.random.default_rng(nranks)
    steps = 3
    grads = [[[rng.standard_normal(s) for s in SHAPES] for _ in range(nranks)] for _ in range(steps)]

    def run(comm):
        state = PowerSGDState(None, matrix_approximation_rank=2, start_powerSGD_iter=0)
        outs = []
        for step in range(steps):
            bucket = bucket_of(comm, grads[step][comm.rank])
            assert powerSGD_hook(state, bucket) is bucket.flat
            outs.append([np.array(g) for g in bucket.gradients()])
        return outs, state.iter

    want = reference(grads, 2, steps)
    for outs, iters in loopback.run(nranks, run):
        assert iters == steps
        for got_step, want_step in zip(outs, want, strict=True):
            for g, w in zip(got_step, want_step, strict=True):
                np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-10)


def test_before_start_powerSGD_iter_buckets_are_averaged_uncompressed():
    rng = np.random.default_rng(0)
    values = [[rng.standard_normal(s) for s in SHAPES] for _ in range(2)]

    def run(comm):
        state = PowerSGDState(None, matrix_approximation_rank=1, start_powerSGD_iter=2)
        a, b = bucket_of(comm, values[comm.rank]), bucket_of(comm, values[comm.rank])
        got = np.array(powerSGD_hook(state, a))
        return got, np.array(allreduce_hook(None, b).wait()), state.iter, state.compression_stats()

    for got, want, iters, stats in loopback.run(2, run):
        np.testing.assert_array_equal(got, want)
        assert iters == 1 and stats == (0.0, 0, 0)


def mlp():
    nbcoll.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 10), nn.Tanh(), nn.Linear(10, 9))


@pytest.mark.parametrize("nranks", [2, 3])
def test_rank_2_sends_the_fraction_of_bytes_its_formula_gives(nranks):
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((4, 12)).astype(np.float32), rng.standard_normal((4, 9)).astype(np.float32)

    def run(comm, compress):
        model = DistributedDataParallel(mlp(), comm, bucket_cap_mb=3e-4)  # 315 B: the layers in two buckets
        if compress:
            model.register_comm_hook(PowerSGDState(None, 2, start_powerSGD_iter=0), powerSGD_hook)
        comm.reset_counters()
        ((model(nbcoll.tensor(x)) - nbcoll.tensor(y)) ** 2).mean().backward()
        return comm.counters.bytes_sent, len(model.buckets)

    plain = loopback.run(nranks, run, False, config=RING)
    compressed = loopback.run(nranks, run, True, config=RING)
    assert plain[0][1] == 2
    # Weights 10 x 12 and 9 x 10 as 2 * (10 + 12) and 2 * (9 + 10) numbers; the biases, 10 and 9, whole.
    before = 10 * 12 + 9 * 10 + 10 + 9
    after = 2 * (10 + 12) + 2 * (9 + 10) + 10 + 9
    assert sum(b for b, _ in compressed) * before == sum(b for b, _ in plain) * after
    assert sum(b for b, _ in compressed) > 0


def train_digits(comm, compress, epochs=4, train=1500):
    """A 64-32-10 MLP on the digits, SGD with momentum, each rank on its half of every batch; test accuracy."""
    images, labels = nbcoll.datasets.load_digits()
    images = images / 16.0
    order = np.random.default_rng(0).permutation(len(labels))
    tr, te = order[:train], order[train:]
    nbcoll.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10)), comm)
    state = PowerSGDState(None, 2, start_powerSGD_iter=10)
    if compress:
        model.register_comm_hook(state, powerSGD_hook)
    optimizer = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    batch = 32 * comm.size
    for _ in range(epochs):
        for start in range(0, len(tr), batch):
            idx = tr[start : start + batch][comm.rank :: comm.size]
            optimizer.zero_grad()
            loss_fn(model(nbcoll.tensor(images[idx])), nbcoll.tensor(labels[idx])).backward()
            optimizer.step()
    with nbcoll.no_grad():
        predicted = model.module(nbcoll.tensor(images[te])).numpy().argmax(axis=1)
    return float((predicted == labels[te]).mean()), state.compression_stats()[0]


def test_rank_2_powersgd_trains_the_digits_within_one_percent_of_uncompressed():
    plain = loopback.run(2, train_digits, False)
    compressed = loopback.run(2, train_digits, True)
    assert plain[0] == plain[1] and compressed[0] == compressed[1]  # the replicas stay equal
    (accuracy, _), (compressed_accuracy, rate) = plain[0], compressed[0]
    assert rate == pytest.approx(2410 / 318)  # weights 32 x 64 and 10 x 32 as 2 * (32 + 64) and 2 * (10 + 32)
    assert accuracy > 0.9
    assert compressed_accuracy >= accuracy - 0.01, (plain, compressed)


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="matrix_approximation_rank"):
        PowerSGDState(matrix_approximation_rank=0)
    with pytest.raises(ValueError, match="start_powerSGD_iter"):
        PowerSGDState(start_powerSGD_iter=-1)
    with pytest.raises(ValueError, match="min_compression_rate"):
        PowerSGDState(min_compression_rate=0.5)
