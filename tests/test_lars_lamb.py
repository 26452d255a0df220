"""LARS and LAMB step for step against their update rules in NumPy; their kernels against the references on the
simulator; LinearLR and SequentialLR against their closed formulas, through state_dict."""

import math

import numpy as np
import pytest

import nbcoll
from nbcoll import nn, optim
from nbcoll.kernels import layerwise_optim as ok

STEPS = 4


def norm(x):
    return float(np.sqrt(np.sum(x * x)))


def lars_reference(ws, gs, groups):
    """LARS in NumPy: ws[k] updated in place for STEPS steps of gradients gs[step][k]; groups: (indices, settings)."""
    bufs = [np.zeros_like(w) for w in ws]
    for step in range(STEPS):
        for indices, s in groups:
            for k in indices:
                w, g = ws[k], gs[step][k]
                wn, gn = norm(w), norm(g)
                trust = 1.0
                if s["adaptation"] and wn > 0 and gn > 0:
                    trust = s["eta"] * wn / (gn + s["weight_decay"] * wn)
                bufs[k] = s["momentum"] * bufs[k] + s["lr"] * trust * (g + s["weight_decay"] * w)
                ws[k] = w - bufs[k]
    return ws


def lamb_reference(ws, gs, groups):
    ms, vs = [np.zeros_like(w) for w in ws], [np.zeros_like(w) for w in ws]
    for step in range(1, STEPS + 1):
        for indices, s in groups:
            b1, b2 = s["betas"]
            for k in indices:
                w, g = ws[k], gs[step - 1][k]
                ms[k] = b1 * ms[k] + (1 - b1) * g
                vs[k] = b2 * vs[k] + (1 - b2) * g * g
                m_hat, v_hat = ms[k] / (1 - b1**step), vs[k] / (1 - b2**step)
                r = m_hat / (np.sqrt(v_hat) + s["eps"]) + s["weight_decay"] * w
                wn, rn = norm(w), norm(r)
                trust = wn / rn if s["adaptation"] and wn > 0 and rn > 0 else 1.0
                ws[k] = w - s["lr"] * trust * r
    return ws


def run_optimizer(cls, ws, gs, groups, defaults):
    params = [nn.Parameter(nbcoll.tensor(w.copy())) for w in ws]
    optimizer = cls([{"params": [params[k] for k in idx], **over} for idx, over in groups], **defaults)
    for step in range(STEPS):
        for p, g in zip(params, gs[step], strict=True):
            p.grad = nbcoll.tensor(g)
        optimizer.step()
    return [p.numpy() for p in params], optimizer


def problem(rng):
    """Four parameters: two weights, one that starts at zero (norm 0), and a bias; the zero one gets zero grads."""
    ws = [rng.standard_normal((5, 3)), rng.standard_normal((7,)), np.zeros((3, 3)), rng.standard_normal((4,))]
    gs = [[rng.standard_normal(w.shape) for w in ws] for _ in range(STEPS)]
    gs[0][2] = np.zeros((3, 3))  # a zero gradient too, on the first step
    return ws, gs


@pytest.mark.parametrize("cls", ["LARS", "LAMB"])
def test_each_step_follows_the_update_rule_with_two_groups_and_a_zero_norm_parameter(cls):
    rng = np.random.default_rng(3)
    ws, gs = problem(rng)
    if cls == "LARS":
        defaults = {"lr": 0.5, "momentum": 0.9, "weight_decay": 0.01, "eta": 0.02, "adaptation": True}
        reference = lars_reference
    else:
        defaults = {"lr": 0.05, "betas": (0.9, 0.99), "eps": 1e-6, "weight_decay": 0.01, "adaptation": True}
        reference = lamb_reference
    overrides = {"lr": 0.1, "weight_decay": 0.0, "adaptation": False}  # the bias and the zero one: excluded
    groups = [([0, 1], {}), ([2, 3], overrides)]
    with nbcoll.use_backend("numpy"):
        got, optimizer = run_optimizer(getattr(optim, cls), ws, gs, groups, defaults)
    want = reference([w.copy() for w in ws], gs, [(idx, {**defaults, **over}) for idx, over in groups])
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14, err_msg=f"parameter {k}")
    assert not np.array_equal(got[2], ws[2])  # the zero-norm parameter moved: its trust ratio is 1, not 0
    # The zero-norm parameter adapted too: with adaptation on, a zero norm still gives a trust ratio of 1.
    with nbcoll.use_backend("numpy"):
        got, optimizer = run_optimizer(getattr(optim, cls), ws, gs, [([0, 1, 2, 3], {})], defaults)
    want = reference([w.copy() for w in ws], gs, [([0, 1, 2, 3], defaults)])
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


def test_bad_settings_are_named():
    w = [nn.Parameter(nbcoll.tensor([1.0]))]
    with pytest.raises(ValueError, match="eta: must be >= 0"):
        optim.LARS(w, eta=-1.0)
    with pytest.raises(TypeError, match="adaptation: expected True or False"):
        optim.LAMB(w, adaptation="yes")
    with pytest.raises(ValueError, match="betas"):
        optim.LAMB(w, betas=(0.9, 1.0))


def sizes_for(backend):
    return [0, 1, 33, 257] if backend != "numpy" else [0, 1, 33, 257, 10_001]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_lars_and_lamb_kernels_match_their_references(backend, rng, dtype):
    t = np.dtype(dtype).type
    for n in sizes_for(backend):
        p, g, buf, m, r = (rng.standard_normal(n).astype(dtype) for _ in range(5))
        v = np.abs(rng.standard_normal(n)).astype(dtype)
        want_p, want_b = p.copy(), buf.copy()
        ok.lars_reference(want_p, g, want_b, t(0.05 * 0.3), t(0.9), t(0.01))
        got_p, got_b = nbcoll.to_device(p), nbcoll.to_device(buf)
        ok.lars_step(got_p, nbcoll.to_device(g), got_b, lr=0.05, trust_ratio=0.3, momentum=0.9, weight_decay=0.01)
        for got, want in ((got_p, want_p), (got_b, want_b)):
            np.testing.assert_allclose(nbcoll.to_host(got), want, rtol=1e-6, atol=1e-7, err_msg=f"LARS n={n}")

        want = [m.copy(), v.copy(), r.copy()]
        scalars = (t(0.9), t(0.1), t(0.99), t(1 - 0.99), t(1e-6), t(0.01), t(1 - 0.9**3), t(1 - 0.99**3))
        ok.lamb_direction_reference(p, g, *want, *scalars)
        got = [nbcoll.to_device(a) for a in (m, v, r)]
        ok.lamb_direction(nbcoll.to_device(p), nbcoll.to_device(g), *got, 3, 0.9, 0.99, 1e-6, 0.01)
        for name, a, b in zip(("exp_avg", "exp_avg_sq", "update"), got, want, strict=True):
            np.testing.assert_allclose(nbcoll.to_host(a), b, rtol=1e-5, atol=1e-6, err_msg=f"{name} n={n}")

        want_p = p.copy()
        ok.lamb_apply_reference(want_p, r, t(0.02))
        got_p = nbcoll.to_device(p)
        ok.lamb_apply(got_p, nbcoll.to_device(r), 0.02)
        np.testing.assert_allclose(nbcoll.to_host(got_p), want_p, rtol=1e-6, atol=1e-7, err_msg=f"apply n={n}")
    assert ok.l2_norm(nbcoll.to_device(np.array([3.0, 4.0], dtype))) == 5.0
    assert ok.l2_norm(nbcoll.to_device(np.zeros(0, dtype))) == 0.0


# -- warm-up, then cosine -------------------------------------------------------------------------------------------


def sgd(lr=1.0):
    return optim.SGD(nn.Linear(2, 1).parameters(), lr=lr)


def warmup_then_cosine(optimizer, warmup=3, total=10):
    warm = optim.LinearLR(optimizer, start_factor=0.1, end_factor=1.0, total_iters=warmup)
    cosine = optim.CosineWarmupLR(optimizer, warmup_steps=0, total_steps=total - warmup, min_lr=0.01)
    return optim.SequentialLR(optimizer, [warm, cosine], milestones=[warmup])


def lrs_of(optimizer, scheduler, steps):
    out = []
    for _ in range(steps):
        out.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return out


def test_linear_warm_up_then_cosine_follows_the_closed_formulas():
    with nbcoll.use_backend("numpy"):
        optimizer = sgd(0.8)
        got = lrs_of(optimizer, warmup_then_cosine(optimizer), 12)
    want = [0.8 * (0.1 + 0.9 * t / 3) for t in range(3)]
    want += [0.01 + (0.8 - 0.01) * (1 + math.cos(math.pi * t / 7)) / 2 for t in range(8)] + [0.01]
    np.testing.assert_allclose(got, want, rtol=1e-14)


def test_state_dict_round_trips_resume_the_same_schedule():
    with nbcoll.use_backend("numpy"):
        first_opt = sgd()
        first = warmup_then_cosine(first_opt)
        lrs_of(first_opt, first, 5)
        state = first.state_dict()
        assert [s["last_epoch"] for s in state["_schedulers"]] == [2, 2] and state["last_epoch"] == 5
        resumed_opt = sgd()
        resumed = warmup_then_cosine(resumed_opt)
        resumed.load_state_dict(state)
        assert resumed_opt.param_groups[0]["lr"] == first_opt.param_groups[0]["lr"]
        assert lrs_of(resumed_opt, resumed, 6) == lrs_of(first_opt, first, 6)
        linear_opt = sgd()
        linear = optim.LinearLR(linear_opt, start_factor=0.5, total_iters=4)
        linear.step()
        again = optim.LinearLR(sgd(), start_factor=0.5, total_iters=4)
        again.load_state_dict(linear.state_dict())
        assert again.get_last_lr() == linear.get_last_lr() == [0.625]


def test_bad_schedules_are_named():
    with nbcoll.use_backend("numpy"):
        optimizer = sgd()
        with pytest.raises(ValueError, match="start_factor"):
            optim.LinearLR(optimizer, start_factor=0.0)
        with pytest.raises(ValueError, match="total_iters"):
            optim.LinearLR(optimizer, total_iters=0)
        warm = optim.LinearLR(optimizer)
        with pytest.raises(ValueError, match="milestones: expected 1"):
            optim.SequentialLR(optimizer, [warm, optim.StepLR(optimizer, 2)], milestones=[])
        with pytest.raises(ValueError, match=r"schedulers\[0\]"):
            optim.SequentialLR(optimizer, [optim.LinearLR(sgd())], milestones=[])
