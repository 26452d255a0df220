"""Losses against NumPy references written from their definitions, gradcheck, stability and bad targets."""

import math

import numpy as np
import pytest
from layer_checks import assert_same_gradients_as_numpy

import nbcoll
from nbcoll import nn
from nbcoll.autograd import gradcheck
from nbcoll.tensors import tensor


def log_softmax(x, axis):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def cross_entropy_reference(x, t, weight=None, ignore_index=-100, reduction="mean", smoothing=0.0, is_log=False):
    """Class-index targets: PyTorch's cross entropy (``is_log=True``: NLLLoss) written with plain NumPy."""
    class_axis = 1 if x.ndim > 1 else 0
    logp = x if is_log else log_softmax(x, class_axis)
    logp = np.moveaxis(logp, class_axis, -1)
    classes = logp.shape[-1]
    w = np.ones(classes) if weight is None else np.asarray(weight, float)
    keep = t != ignore_index
    safe = np.where(keep, t, 0)
    nll = -np.take_along_axis(logp, safe[..., None], axis=-1)[..., 0] * w[safe] * keep
    smooth = -(logp * w).sum(axis=-1) * keep / classes
    loss = (1 - smoothing) * nll + smoothing * smooth
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.sum() / (w[safe] * keep).sum()


def bce_reference(x, y, weight=None, pos_weight=None, reduction="mean"):
    pos = 1.0 if pos_weight is None else pos_weight
    loss = pos * y * np.logaddexp(0, -x) + (1 - y) * np.logaddexp(0, x)
    loss = loss * (1.0 if weight is None else weight)
    return {"none": loss, "sum": loss.sum(), "mean": loss.mean()}[reduction]


@pytest.fixture
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


def leaf(rng, *shape, scale=2.0):
    return tensor(rng.standard_normal(shape) * scale, dtype=np.float64, requires_grad=True)


CE_CASES = {
    "plain": ({}, (4, 3), [2, 0, 1, 1]),
    "sum": ({"reduction": "sum"}, (3, 4), [3, 0, 1]),
    "none": ({"reduction": "none"}, (3, 4), [3, 0, 1]),
    "ignore-index": ({"ignore_index": -1}, (4, 3), [2, -1, 1, -1]),
    "ignore-class-0": ({"ignore_index": 0}, (4, 3), [2, 0, 1, 1]),
    "smoothing": ({"label_smoothing": 0.1}, (4, 3), [2, 0, 1, 1]),
    "smoothing-ignore-none": ({"label_smoothing": 0.2, "ignore_index": 1, "reduction": "none"}, (3, 3), [1, 0, 2]),
    "weights": ({"weight": [0.5, 2.0, 1.0]}, (4, 3), [2, 0, 1, 1]),
    "weights-smoothing-ignore": (
        {"weight": [0.5, 2.0, 1.0], "label_smoothing": 0.3, "ignore_index": 2},
        (4, 3),
        [2, 0, 1, 1],
    ),
    "spatial": ({}, (2, 3, 2), [[0, 2], [1, 1]]),
    "one-sample": ({}, (3,), 2),
}


@pytest.mark.parametrize("name", sorted(CE_CASES))
def test_cross_entropy_and_nll_match_the_reference(numpy_backend, rng, name):
    options, shape, targets = CE_CASES[name]
    x, t = leaf(rng, *shape), np.array(targets)
    reference_options = {k: v for k, v in options.items() if k != "label_smoothing"}
    smoothing = options.get("label_smoothing", 0.0)
    loss_fn = nn.CrossEntropyLoss(**options)
    expected = cross_entropy_reference(x.numpy(), t, smoothing=smoothing, **reference_options)
    np.testing.assert_allclose(loss_fn(x, t).numpy(), expected, rtol=1e-12)
    assert gradcheck(lambda x: loss_fn(x, t), [x])
    nll = nn.NLLLoss(**reference_options)
    logp = leaf(rng, *shape)
    np.testing.assert_allclose(
        nll(logp, t).numpy(), cross_entropy_reference(logp.numpy(), t, is_log=True, **reference_options), rtol=1e-12
    )
    assert gradcheck(lambda logp: nll(logp, t), [logp])


def test_cross_entropy_known_values(numpy_backend):
    # log 2 for two equal logits, with or without smoothing; a value worked out by hand for smoothing 0.1.
    equal = tensor(np.zeros((1, 2)))
    assert nn.CrossEntropyLoss()(equal, [0]).item() == pytest.approx(math.log(2))
    assert nn.CrossEntropyLoss(label_smoothing=0.5)(equal, [1]).item() == pytest.approx(math.log(2))
    logits = tensor(np.array([[1.0, 2.0, 3.0]]))
    lse = math.log(math.exp(1) + math.exp(2) + math.exp(3))
    nll, spread = lse - 1, lse - 2  # -logp[0] and the mean over the classes of -logp[c]
    assert nn.CrossEntropyLoss(label_smoothing=0.1)(logits, [0]).item() == pytest.approx(0.9 * nll + 0.1 * spread)
    # Every target ignored: the mean is 0 / 0, NaN, as in PyTorch.
    with np.errstate(invalid="ignore", divide="ignore"):
        assert math.isnan(nn.CrossEntropyLoss(ignore_index=0)(logits, [0]).item())


ALL_IGNORED_CASES = {
    "ce": (nn.CrossEntropyLoss, {}),
    "ce-smoothing": (nn.CrossEntropyLoss, {"label_smoothing": 0.2}),
    "ce-weights": (nn.CrossEntropyLoss, {"weight": [0.5, 2.0, 1.0]}),
    "ce-weights-smoothing": (nn.CrossEntropyLoss, {"weight": [0.5, 2.0, 1.0], "label_smoothing": 0.3}),
    "nll": (nn.NLLLoss, {}),
    "nll-weights": (nn.NLLLoss, {"weight": [0.5, 2.0, 1.0]}),
}


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name", sorted(ALL_IGNORED_CASES))
def test_a_batch_of_ignored_targets_gives_zero_gradients(numpy_backend, rng, name, reduction):
    # As in PyTorch: nothing counts, so the gradient is zero everywhere; the mean over no targets is NaN.
    loss_class, options = ALL_IGNORED_CASES[name]
    loss_fn = loss_class(reduction=reduction, **options)
    for shape, targets in (((4, 3), np.full(4, -100)), ((2, 3, 2), np.full((2, 2), -100))):
        x = leaf(rng, *shape)
        loss = loss_fn(x, targets)
        loss.sum().backward()
        if reduction == "mean":
            assert math.isnan(loss.item())
        else:
            np.testing.assert_array_equal(loss.numpy(), np.zeros(() if reduction == "sum" else targets.shape))
        np.testing.assert_array_equal(x.grad.numpy(), np.zeros(shape))


def test_an_optimizer_step_on_an_ignored_batch_leaves_the_parameters_finite(numpy_backend, rng):
    layer = nn.Linear(4, 3, dtype=np.float64)
    before = [p.numpy().copy() for p in layer.parameters()]
    optimizer = nbcoll.optim.SGD(layer.parameters(), lr=0.1)
    loss = nn.CrossEntropyLoss(label_smoothing=0.1)(layer(tensor(rng.standard_normal((5, 4)))), np.full(5, -100))
    loss.backward()
    optimizer.step()
    for p, old in zip(layer.parameters(), before, strict=True):
        np.testing.assert_array_equal(p.numpy(), old)  # a zero gradient moves nothing


def test_cross_entropy_with_class_probabilities(numpy_backend, rng):
    x = leaf(rng, 3, 4)
    p = rng.dirichlet(np.ones(4), size=3)
    weight = np.array([1.0, 0.5, 2.0, 1.0])
    for smoothing in (0.0, 0.2):
        loss_fn = nn.CrossEntropyLoss(weight=weight, label_smoothing=smoothing)
        smoothed = p * (1 - smoothing) + smoothing / 4
        expected = -(log_softmax(x.numpy(), 1) * smoothed * weight).sum(axis=1).mean()
        np.testing.assert_allclose(loss_fn(x, tensor(p)).numpy(), expected, rtol=1e-12)
        assert gradcheck(lambda x, loss_fn=loss_fn: loss_fn(x, tensor(p)), [x])


def test_cross_entropy_is_stable_for_large_logits(numpy_backend):
    x = tensor(np.array([[1000.0, -1000.0, 0.0]]), requires_grad=True)
    loss = nn.CrossEntropyLoss()(x, [1])
    loss.backward()
    assert loss.item() == pytest.approx(2000.0)
    np.testing.assert_allclose(x.grad.numpy(), [[1.0, -1.0, 0.0]], atol=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_matches_the_reference(numpy_backend, rng, reduction):
    a, b = leaf(rng, 2, 3), leaf(rng, 2, 3)
    loss_fn = nn.MSELoss(reduction=reduction)
    squared = (a.numpy() - b.numpy()) ** 2
    expected = {"none": squared, "sum": squared.sum(), "mean": squared.mean()}[reduction]
    np.testing.assert_allclose(loss_fn(a, b).numpy(), expected, rtol=1e-12)
    assert gradcheck(loss_fn, [a, b])


@pytest.mark.parametrize(
    "options",
    [{}, {"reduction": "sum"}, {"reduction": "none"}, {"weight": [0.5, 2.0, 1.0]}, {"pos_weight": [3.0, 1.0, 0.5]}],
    ids=["mean", "sum", "none", "weight", "pos-weight"],
)
def test_bce_with_logits_matches_the_reference(numpy_backend, rng, options):
    x = leaf(rng, 2, 3)
    y = rng.uniform(0, 1, (2, 3))
    loss_fn = nn.BCEWithLogitsLoss(**options)
    reference = {k: np.asarray(v) for k, v in options.items() if k != "reduction"}
    expected = bce_reference(x.numpy(), y, reduction=options.get("reduction", "mean"), **reference)
    np.testing.assert_allclose(loss_fn(x, y).numpy(), expected, rtol=1e-12)
    assert gradcheck(lambda x: loss_fn(x, y), [x])


def test_bce_with_logits_is_stable_and_exact_at_zero(numpy_backend):
    x = tensor(np.array([1000.0, -1000.0, 0.0, 0.0]), requires_grad=True)
    y = np.array([0.0, 1.0, 1.0, 0.0])
    loss = nn.BCEWithLogitsLoss(reduction="sum")(x, y)
    loss.backward()
    assert loss.item() == pytest.approx(2000 + 2 * math.log(2))
    # d loss / d x = sigmoid(x) - y, also at x = 0 where an |x|-based formula has a kink.
    np.testing.assert_allclose(x.grad.numpy(), [1.0, -1.0, -0.5, 0.5], atol=1e-12)


def test_losses_on_the_device_backend(rng):
    with nbcoll.use_backend(nbcoll.backend.device_backend()):
        x, t = leaf(rng, 2, 3), np.array([2, -1])
        ce = nn.CrossEntropyLoss(ignore_index=-1, label_smoothing=0.1)
        np.testing.assert_allclose(
            ce(x, t).numpy(), cross_entropy_reference(x.numpy(), t, ignore_index=-1, smoothing=0.1), rtol=1e-12
        )
        # The NumPy cases gradcheck every option; here the device's gradient equals NumPy's, at one backward's cost.
        assert_same_gradients_as_numpy(lambda: ce, [x.numpy(), t])
        logits, y = leaf(rng, 3), np.array([0.0, 1.0, 0.25])
        bce = nn.BCEWithLogitsLoss()
        np.testing.assert_allclose(bce(logits, y).numpy(), bce_reference(logits.numpy(), y), rtol=1e-12)
        assert gradcheck(lambda z: bce(z, y), [logits])
        a, b = leaf(rng, 3), leaf(rng, 3)
        np.testing.assert_allclose(nn.MSELoss()(a, b).numpy(), ((a.numpy() - b.numpy()) ** 2).mean(), rtol=1e-12)
        assert gradcheck(nn.MSELoss(), [a, b])
        logp = leaf(rng, 2, 2)
        np.testing.assert_allclose(
            nn.NLLLoss()(logp, [1, 0]).numpy(), -(logp.numpy()[0, 1] + logp.numpy()[1, 0]) / 2, rtol=1e-12
        )
        assert gradcheck(lambda logp: nn.NLLLoss()(logp, [1, 0]), [logp])


def test_targets_out_of_range_and_wrong_shapes_are_clear_errors(numpy_backend):
    logits = tensor(np.zeros((2, 3)))
    with pytest.raises(
        ValueError, match=r"CrossEntropyLoss\(.*\): target 3 at position \(1,\) is out of range \[0, 3\)"
    ):
        nn.CrossEntropyLoss()(logits, [0, 3])
    with pytest.raises(ValueError, match=r"NLLLoss\(.*\): target -1 at position \(0,\) is out of range"):
        nn.NLLLoss()(logits, [-1, 0])
    with pytest.raises(
        ValueError, match=r"expected integer class targets of shape \(2,\) .* got dtype int64 and shape \(3,\)"
    ):
        nn.CrossEntropyLoss()(logits, [0, 1, 2])
    with pytest.raises(ValueError, match="class probabilities of the input's shape"):
        nn.CrossEntropyLoss()(logits, np.ones((2, 2)))
    with pytest.raises(ValueError, match="weight has 2 entries for 3 classes"):
        nn.CrossEntropyLoss(weight=[1.0, 2.0])(logits, [0, 1])
    with pytest.raises(
        ValueError, match=r"BCEWithLogitsLoss\(.*\): target 1.5 at position \(1,\) is out of range \[0, 1\]"
    ):
        nn.BCEWithLogitsLoss()(tensor(np.zeros(2)), [0.0, 1.5])
    with pytest.raises(ValueError, match=r"MSELoss\(.*\): expected target of input's shape \(2, 3\), got \(3,\)"):
        nn.MSELoss()(logits, np.zeros(3))
    with pytest.raises(ValueError, match="reduction"):
        nn.MSELoss(reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing"):
        nn.CrossEntropyLoss(label_smoothing=1.5)
    with pytest.raises(TypeError, match="floating-point logits"):
        nn.CrossEntropyLoss()(tensor([1, 2]), [0])
