"""Each optimizer against its update rule written out in NumPy, step for step; schedules, clipping, state dicts."""

import math

import numpy as np
import pytest

import nbcoll
from nbcoll import optim

STEPS = 4


def make_params(rng, shapes=((3, 2), (5,), ())):
    return [nbcoll.tensor(rng.standard_normal(s), requires_grad=True) for s in shapes]


def run(optimizer, params, grads_per_step):
    """Apply the given gradients step by step; return the parameter values after each step."""
    history = []
    for grads in grads_per_step:
        for p, g in zip(params, grads, strict=True):
            p.grad = nbcoll.tensor(g)
        optimizer.step()
        history.append([p.numpy().copy() for p in params])
    return history


def random_grads(rng, params, steps=STEPS):
    return [[rng.standard_normal(p.shape) for p in params] for _ in range(steps)]


@pytest.mark.parametrize(
    "momentum, dampening, weight_decay, nesterov",
    [(0.0, 0.0, 0.0, False), (0.0, 0.0, 0.1, False), (0.9, 0.0, 0.0, False), (0.9, 0.3, 0.05, False),
     (0.8, 0.0, 0.02, True)],
)  # fmt: skip
def test_sgd_matches_its_rule(backend, rng, momentum, dampening, weight_decay, nesterov):
    params = make_params(rng)
    start = [p.numpy().copy() for p in params]
    grads = random_grads(rng, params)
    lr = 0.1
    opt = optim.SGD(params, lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov)
    got = run(opt, params, grads)

    values, bufs = [s.copy() for s in start], [None] * len(start)
    for t, step_grads in enumerate(grads):
        for k, g in enumerate(step_grads):
            d = g + weight_decay * values[k]
            if momentum:
                bufs[k] = d if bufs[k] is None else momentum * bufs[k] + (1 - dampening) * d
                d = d + momentum * bufs[k] if nesterov else bufs[k]
            values[k] = values[k] - lr * d
            np.testing.assert_allclose(got[t][k], values[k], rtol=1e-12, atol=1e-14, err_msg=f"step {t}, param {k}")


@pytest.mark.parametrize("decoupled, weight_decay", [(False, 0.0), (False, 0.1), (True, 0.1), (True, 0.0)])
def test_adam_and_adamw_match_their_rule(backend, rng, decoupled, weight_decay):
    params = make_params(rng)
    start = [p.numpy().copy() for p in params]
    grads = random_grads(rng, params)
    lr, (beta1, beta2), eps = 0.05, (0.8, 0.95), 1e-6
    kind = optim.AdamW if decoupled else optim.Adam
    got = run(kind(params, lr=lr, betas=(beta1, beta2), eps=eps, weight_decay=weight_decay), params, grads)

    values = [s.copy() for s in start]
    m = [np.zeros_like(s) for s in start]
    v = [np.zeros_like(s) for s in start]
    for t, step_grads in enumerate(grads, start=1):
        for k, g in enumerate(step_grads):
            if decoupled:
                values[k] = values[k] * (1 - lr * weight_decay)
            else:
                g = g + weight_decay * values[k]
            m[k] = beta1 * m[k] + (1 - beta1) * g
            v[k] = beta2 * v[k] + (1 - beta2) * g * g
            m_hat = m[k] / (1 - beta1**t)
            v_hat = v[k] / (1 - beta2**t)
            values[k] = values[k] - lr * m_hat / (np.sqrt(v_hat) + eps)
            np.testing.assert_allclose(got[t - 1][k], values[k], rtol=1e-10, atol=1e-12, err_msg=f"step {t}, k={k}")


def test_defaults_are_pytorchs():
    p = [nbcoll.tensor([1.0], requires_grad=True)]
    assert optim.SGD(p).defaults == {"lr": 1e-3, "momentum": 0, "dampening": 0, "weight_decay": 0, "nesterov": False}
    assert optim.Adam(p).defaults == {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0}
    assert optim.AdamW(p).defaults["weight_decay"] == 1e-2


def test_parameters_without_grad_are_skipped_and_zero_grad_clears():
    a, b = nbcoll.tensor([1.0, 2.0], requires_grad=True), nbcoll.tensor([3.0], requires_grad=True)
    opt = optim.SGD([a, b], lr=1.0)
    a.grad = nbcoll.tensor([0.5, 0.5])
    opt.step()
    np.testing.assert_array_equal(a.numpy(), [0.5, 1.5])
    np.testing.assert_array_equal(b.numpy(), [3.0])
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(a.grad.numpy(), [0, 0])
    assert b.grad is None
    opt.zero_grad()
    assert a.grad is None


def test_bad_use_gets_clear_errors():
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.Adam(iter([]))
    p = nbcoll.tensor([1.0], requires_grad=True)
    with pytest.raises(TypeError, match="params: expected an iterable"):
        optim.SGD(p)
    with pytest.raises(ValueError, match="nesterov"):
        optim.SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="lr: must be >= 0"):
        optim.Adam([p], lr=-1)
    with pytest.raises(ValueError, match="betas"):
        optim.Adam([p], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="more than one place"):
        optim.SGD([p, p])
    with pytest.raises(ValueError, match=r"params\[0\]: expected a leaf tensor"):
        optim.SGD([nbcoll.tensor([1.0], requires_grad=True) * 2])
    with pytest.raises(TypeError, match=r"params\[1\]: expected a Tensor"):
        optim.SGD([p, np.zeros(2)])


def test_param_groups_take_their_own_settings_and_the_defaults():
    a, b = nbcoll.tensor([1.0], requires_grad=True), nbcoll.tensor([1.0], requires_grad=True)
    opt = optim.SGD([{"params": [a], "lr": 0.5}, {"params": [b]}], lr=0.1)
    a.grad, b.grad = nbcoll.tensor([1.0]), nbcoll.tensor([1.0])
    opt.step()
    np.testing.assert_allclose(a.numpy(), [0.5])
    np.testing.assert_allclose(b.numpy(), [0.9])
    with pytest.raises(ValueError, match="unknown settings"):
        optim.SGD([{"params": [a], "betas": (0.9, 0.9)}])


def test_state_dict_round_trip_continues_identically(rng):
    params = make_params(rng)
    twin = [nbcoll.tensor(p.numpy(), requires_grad=True) for p in params]
    grads = random_grads(rng, params, steps=4)
    opt = optim.AdamW(params, lr=0.01)
    run(opt, params, grads[:2])
    saved = opt.state_dict()
    assert saved["param_groups"][0]["params"] == [0, 1, 2]
    assert saved["state"][0]["step"] == 2 and isinstance(saved["state"][0]["exp_avg"], np.ndarray)
    for p, q in zip(params, twin, strict=True):
        q.data = nbcoll.tensor(p.numpy()).data
    other = optim.AdamW(twin, lr=0.5)
    other.load_state_dict(saved)
    assert other.param_groups[0]["lr"] == 0.01
    first, second = run(opt, params, grads[2:]), run(other, twin, grads[2:])
    for x, y in zip(first[-1], second[-1], strict=True):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(ValueError, match="parameter group 0 has 3 parameters"):
        optim.AdamW(params[:2]).load_state_dict(saved)
    saved["state"][0]["exp_avg"] = np.zeros(7)
    with pytest.raises(ValueError, match=r"state\[0\]\['exp_avg'\]: expected shape \(3, 2\)"):
        other.load_state_dict(saved)


def test_step_lr_and_cosine_warmup():
    p = nbcoll.tensor([1.0], requires_grad=True)
    opt = optim.SGD([p], lr=1.0)
    sched = optim.StepLR(opt, step_size=2, gamma=0.5)
    lrs = [sched.get_last_lr()[0]]
    for _ in range(5):
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]

    opt = optim.SGD([p], lr=2.0)
    sched = optim.CosineWarmupLR(opt, warmup_steps=4, total_steps=8, min_lr=0.0)
    lrs = [sched.get_last_lr()[0]]
    for _ in range(9):
        sched.step()
        lrs.append(sched.get_last_lr()[0])
    want = [0.5, 1.0, 1.5, 2.0] + [1 + math.cos(math.pi * k / 4) for k in range(5)] + [0.0]
    np.testing.assert_allclose(lrs, want, atol=1e-15)
    state = sched.state_dict()
    resumed = optim.CosineWarmupLR(optim.SGD([p], lr=2.0), warmup_steps=4, total_steps=8)
    resumed.load_state_dict(state)
    assert resumed.get_last_lr() == sched.get_last_lr() and resumed.last_epoch == 9
    with pytest.raises(ValueError, match="total_steps"):
        optim.CosineWarmupLR(opt, warmup_steps=4, total_steps=4)


def test_clip_grad_norm(backend):
    a, b = nbcoll.tensor([3.0, 0.0], requires_grad=True), nbcoll.tensor([4.0], requires_grad=True)
    c = nbcoll.tensor([1.0], requires_grad=True)  # no gradient: skipped
    a.grad, b.grad = nbcoll.tensor([3.0, 0.0]), nbcoll.tensor([-4.0])
    assert optim.clip_grad_norm_([a, b, c], max_norm=10.0) == pytest.approx(5.0)
    np.testing.assert_allclose(a.grad.numpy(), [3.0, 0.0])  # under the limit: untouched
    assert optim.clip_grad_norm_([a, b], max_norm=1.0) == pytest.approx(5.0)
    np.testing.assert_allclose(a.grad.numpy(), [0.6, 0.0], rtol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), [-0.8], rtol=1e-5)
    assert optim.clip_grad_norm_([a, b], max_norm=0.1, norm_type=math.inf) == pytest.approx(0.8, rel=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), [-0.1], rtol=1e-4)
    a.grad = nbcoll.tensor([math.inf, 0.0])
    with pytest.raises(RuntimeError, match="total norm"):
        optim.clip_grad_norm_([a], 1.0, error_if_nonfinite=True)


def test_optimizer_and_scheduler_state_survive_a_checkpoint_file(tmp_path, rng):
    params = make_params(rng)
    twin = [nbcoll.tensor(p.numpy(), requires_grad=True) for p in params]
    grads = random_grads(rng, params, steps=4)
    opt = optim.SGD(params, lr=0.1, momentum=0.9)
    sched = optim.StepLR(opt, step_size=1, gamma=0.5)
    for step_grads in grads[:2]:
        run(opt, params, [step_grads])
        sched.step()
    nbcoll.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict()}, tmp_path / "opt.npz")
    for p, q in zip(params, twin, strict=True):
        q.data = nbcoll.tensor(p.numpy()).data

    state = nbcoll.load(tmp_path / "opt.npz")
    assert list(state["optimizer"]["state"]) == [0, 1, 2]  # integer keys stay integers
    other = optim.SGD(twin, lr=1.0, momentum=0.9)
    other_sched = optim.StepLR(other, step_size=1, gamma=0.5)
    other.load_state_dict(state["optimizer"])
    other_sched.load_state_dict(state["scheduler"])
    assert other.param_groups[0]["lr"] == opt.param_groups[0]["lr"] == 0.025
    for step_grads in grads[2:]:
        run(opt, params, [step_grads])
        run(other, twin, [step_grads])
        sched.step()
        other_sched.step()
    for p, q in zip(params, twin, strict=True):
        np.testing.assert_array_equal(p.numpy(), q.numpy())


@pytest.mark.parametrize("make", [lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), lambda ps: optim.Adam(ps, lr=0.1)])
def test_frozen_parameters_and_parameters_without_grad_are_skipped(make):
    """Fine-tuning: model.parameters() with some frozen; they get no state and do not move, as in PyTorch."""
    frozen = nbcoll.tensor([1.0, 2.0])  # requires_grad=False
    head, sometimes = nbcoll.tensor([3.0], requires_grad=True), nbcoll.tensor([4.0], requires_grad=True)
    opt = make([frozen, head, sometimes])
    for step in range(3):
        head.grad = nbcoll.tensor([1.0])
        sometimes.grad = nbcoll.tensor([1.0]) if step == 1 else None
        opt.step()
    np.testing.assert_array_equal(frozen.numpy(), [1.0, 2.0])
    assert frozen not in opt.state and head.numpy()[0] < 3.0
    assert opt.state_dict()["state"].keys() == {1, 2}
    if isinstance(opt, optim.Adam):  # each parameter counts its own steps
        assert opt.state[head]["step"] == 3 and opt.state[sometimes]["step"] == 1


SCHEDULERS = [
    lambda opt: optim.StepLR(opt, step_size=2, gamma=0.5),
    lambda opt: optim.CosineWarmupLR(opt, warmup_steps=2, total_steps=6),
]


@pytest.mark.parametrize("make", SCHEDULERS, ids=["StepLR", "CosineWarmupLR"])
def test_schedulers_keep_going_after_add_param_group(make):
    """The constructed groups keep their schedule; a group added later starts at its own lr (see LRScheduler)."""
    p, q = nbcoll.tensor([1.0], requires_grad=True), nbcoll.tensor([1.0], requires_grad=True)
    opt, reference = optim.SGD([p], lr=1.0), optim.SGD([nbcoll.tensor([1.0], requires_grad=True)], lr=1.0)
    sched, reference_sched = make(opt), make(reference)
    sched.step()
    reference_sched.step()
    opt.add_param_group({"params": [q], "lr": 0.4})  # at epoch 1
    lrs = []
    for _ in range(6):
        sched.step()
        reference_sched.step()
        lrs.append(sched.get_last_lr())
        assert lrs[-1][0] == reference_sched.get_last_lr()[0]
    assert "initial_lr" not in opt.param_groups[1]  # PyTorch sets it only for the groups it was built with
    if isinstance(sched, optim.StepLR):  # PyTorch's StepLR multiplies every group's lr at each boundary
        assert [lr[1] for lr in lrs] == [0.2, 0.2, 0.1, 0.1, 0.05, 0.05]  # epochs 2 to 7
    else:  # a closed-form schedule has no base for the new group: PyTorch leaves its lr alone
        assert [lr[1] for lr in lrs] == [0.4] * 6
    resumed = make(optim.SGD([nbcoll.tensor([1.0], requires_grad=True)], lr=1.0))
    resumed.optimizer.add_param_group({"params": [nbcoll.tensor([1.0], requires_grad=True)], "lr": lrs[-1][1]})
    resumed.load_state_dict(sched.state_dict())
    assert resumed.get_last_lr() == sched.get_last_lr()


def test_schedulers_accept_any_optimizer_with_param_groups():
    class Wrapper:  # like ZeroRedundancyOptimizer: not an Optimizer, but it has param_groups
        def __init__(self, inner):
            self.param_groups = inner.param_groups

    opt = Wrapper(optim.SGD([nbcoll.tensor([1.0], requires_grad=True)], lr=1.0))
    sched = optim.StepLR(opt, step_size=1, gamma=0.5)
    sched.step()
    assert opt.param_groups[0]["lr"] == 0.5
    with pytest.raises(TypeError, match="optimizer: expected an optimizer with param_groups"):
        optim.StepLR(object(), step_size=1)
    with pytest.raises(TypeError, match="optimizer: expected an optimizer with param_groups"):
        optim.StepLR(optim.SGD([nbcoll.tensor([1.0], requires_grad=True)]).param_groups, step_size=1)
