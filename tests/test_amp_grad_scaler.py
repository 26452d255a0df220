"""GradScaler: a step with an overflowed gradient is skipped and the scale backs off, good steps grow it, and its
state goes through nbcoll.save and back so that a resumed run is bit-exact."""

import numpy as np
import pytest

import nbcoll
import nbcoll.functional as F
from nbcoll import nn
from nbcoll.amp import GradScaler


@pytest.fixture(autouse=True)
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


def regression_problem():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((64, 4)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32) + 0.25).astype(np.float32)
    return x, y


def make_model():
    nbcoll.manual_seed(3)
    return nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))


def train_step(model, optimizer, scaler, x, y):
    optimizer.zero_grad()
    with nbcoll.autocast(dtype=np.float16):
        loss = F.mse_loss(model(nbcoll.tensor(x)), nbcoll.tensor(y))
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


def test_an_injected_overflow_skips_the_step_halves_the_scale_and_training_still_converges():
    x, y = regression_problem()
    model = make_model()
    optimizer = nbcoll.optim.Adam(model.parameters(), lr=0.02)
    scaler = GradScaler(init_scale=2.0**10, growth_interval=50)
    first = train_step(model, optimizer, scaler, x, y)
    assert scaler.get_scale() == 2.0**10
    # Inputs 1000 times too large: the float16 gradients of the products overflow.
    before = [p.numpy().copy() for p in model.parameters()]
    train_step(model, optimizer, scaler, x * 1000, y * 1000)
    for p, start in zip(model.parameters(), before, strict=True):
        np.testing.assert_array_equal(p.numpy(), start)  # skipped: the parameters did not move
    assert scaler.get_scale() == 2.0**9
    assert optimizer.state[next(iter(model.parameters()))]["step"] == 1  # Adam's count skipped too
    losses = [train_step(model, optimizer, scaler, x, y) for _ in range(150)]
    assert losses[-1] < 0.02 * first and np.isfinite(losses).all()
    assert scaler.get_scale() == 2.0**12  # 150 good steps: grown three times from 2**9, every 50 steps


def test_a_run_resumed_from_a_checkpoint_is_bit_exact(tmp_path):
    x, y = regression_problem()

    def fresh():
        model = make_model()
        return model, nbcoll.optim.Adam(model.parameters(), lr=0.01), GradScaler(growth_interval=3)

    def run(model, optimizer, scaler, steps):
        for step in steps:  # at 2**16 the first steps overflow and back off; step 3 is an injected overflow
            k = 1000 if step == 3 else 1
            train_step(model, optimizer, scaler, x * k, y * k)

    model, optimizer, scaler = fresh()
    run(model, optimizer, scaler, range(8))
    whole, final_scale = [p.numpy() for p in model.parameters()], scaler.get_scale()

    model, optimizer, scaler = fresh()
    run(model, optimizer, scaler, range(5))
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict()}
    nbcoll.save(state, tmp_path / "ckpt.npz")
    expected_scaler = scaler.state_dict()

    model, optimizer, scaler = fresh()
    loaded = nbcoll.load(tmp_path / "ckpt.npz")
    model.load_state_dict(loaded["model"])
    optimizer.load_state_dict(loaded["optimizer"])
    scaler.load_state_dict(loaded["scaler"])
    assert scaler.state_dict() == expected_scaler
    assert (expected_scaler["scale"], expected_scaler["_growth_tracker"]) == (2.0**13, 1)  # mid-interval
    run(model, optimizer, scaler, range(5, 8))
    assert scaler.get_scale() == final_scale == 2.0**14  # grown again after the resume
    for p, want in zip(model.parameters(), whole, strict=True):
        np.testing.assert_array_equal(p.numpy(), want)


def test_growth_backoff_unscale_and_the_order_of_calls():
    w = nn.Parameter(nbcoll.tensor([1.0, -2.0]))
    optimizer = nbcoll.optim.SGD([w], lr=0.25)
    scaler = GradScaler(init_scale=8.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=2)
    scaler.scale((w * w).sum()).backward()
    np.testing.assert_array_equal(w.grad.numpy(), [16.0, -32.0])  # scaled by 8
    scaler.unscale_(optimizer)  # as before gradient clipping
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, -4.0])
    with pytest.raises(RuntimeError, match="unscale_: already called"):
        scaler.unscale_(optimizer)
    scaler.step(optimizer)  # does not unscale again
    np.testing.assert_array_equal(w.numpy(), [0.5, -1.0])
    with pytest.raises(RuntimeError, match="step: already called"):
        scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() == 8.0
    scaler.update()
    assert scaler.get_scale() == 32.0  # the second good step in a row: grown by growth_factor
    w.grad = nbcoll.tensor([np.nan, 1.0], dtype=np.float32)
    scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() == 8.0 and scaler.state_dict()["_growth_tracker"] == 0
    np.testing.assert_array_equal(w.numpy(), [0.5, -1.0])
    scaler.update(new_scale=2.0)
    assert scaler.get_scale() == 2.0


def test_a_disabled_scaler_passes_everything_through():
    w = nn.Parameter(nbcoll.tensor([1.0]))
    optimizer = nbcoll.optim.SGD([w], lr=0.5)
    scaler = GradScaler(enabled=False)
    loss = (w * 3.0).sum()
    assert scaler.scale(loss) is loss and scaler.get_scale() == 1.0 and scaler.state_dict() == {}
    loss.backward()
    scaler.step(optimizer)
    scaler.update()
    np.testing.assert_array_equal(w.numpy(), [-0.5])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"init_scale": 0}, "init_scale"),
        ({"growth_factor": 1.0}, "growth_factor"),
        ({"backoff_factor": 1.5}, "backoff_factor"),
        ({"growth_interval": 0}, "growth_interval"),
        ({"enabled": "yes"}, "enabled"),
    ],
)
def test_bad_settings_name_the_argument(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        GradScaler(**kwargs)


def test_bad_inputs_name_the_argument():
    scaler = GradScaler()
    with pytest.raises(TypeError, match="outputs"):
        scaler.scale(3.0)
    with pytest.raises(TypeError, match="optimizer"):
        scaler.step(object())
    with pytest.raises(ValueError, match="state_dict"):
        scaler.load_state_dict({"scale": 1.0})
