"""Mixed precision trains the digits MLP of tutorial 12 (64 -> 128 -> 10, Adam): bfloat16 autocast reaches 95% test
accuracy, and float16 autocast with a GradScaler skips an injected overflow and reaches it too. Three epochs here
to keep the suite fast; 25 epochs reach 98% in both."""

import numpy as np
import pytest

import nbcoll
import nbcoll.functional as F
from nbcoll import nn
from nbcoll.amp import GradScaler
from nbcoll.datasets import load_digits

EPOCHS, BATCH = 3, 32


@pytest.fixture(autouse=True)
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


def split_digits():
    images, labels = load_digits()
    order = np.random.default_rng(0).permutation(len(images))
    return images / np.float32(16.0), labels, order[:360], order[360:]  # pixels 0..1; 360 test images


@pytest.fixture(scope="module")
def digits():
    return split_digits()


def train(digits, dtype, scaler=None, overflow_at=None):
    """Train under autocast; the batch of step ``overflow_at`` is 10,000 times too large. Returns the model,
    the test accuracy, and the parameters just before and after that step."""
    images, labels, test, train_idx = digits
    nbcoll.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    optimizer = nbcoll.optim.Adam(model.parameters(), lr=3e-3)
    rng, step, around = np.random.default_rng(1), 0, []
    for _ in range(EPOCHS):
        order = rng.permutation(train_idx)
        for i in range(0, len(order), BATCH):
            batch = order[i : i + BATCH]
            if step == overflow_at:
                around.append(([p.numpy().copy() for p in model.parameters()], scaler.get_scale()))
            optimizer.zero_grad()
            with nbcoll.autocast(dtype=dtype):
                x = images[batch] * (1e4 if step == overflow_at else 1)
                loss = F.cross_entropy(model(nbcoll.tensor(x)), labels[batch])
            if scaler is None:
                loss.backward()
                optimizer.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            if step == overflow_at:
                around.append(([p.numpy().copy() for p in model.parameters()], scaler.get_scale()))
            step += 1
    assert all(p.dtype == np.float32 for p in model.parameters())  # the masters never left float32
    with nbcoll.no_grad(), nbcoll.autocast(dtype=dtype):
        predicted = model(nbcoll.tensor(images[test])).numpy().argmax(axis=1)
    return float((predicted == labels[test]).mean()), around


def test_bfloat16_autocast_trains_the_digits_mlp_to_95_percent(digits):
    accuracy, _ = train(digits, nbcoll.bfloat16)
    assert accuracy >= 0.95


def test_float16_with_a_grad_scaler_skips_an_injected_overflow_and_reaches_95_percent(digits):
    scaler = GradScaler()
    accuracy, ((before, scale_before), (after, scale_after)) = train(digits, np.float16, scaler, overflow_at=20)
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)  # the overflowed step was skipped
    assert scale_after == scale_before / 2
    assert accuracy >= 0.95
