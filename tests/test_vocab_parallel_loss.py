"""vocab_parallel_cross_entropy on loopback worlds of 1 to 4 ranks: bad targets refused on every rank, and
ignore_index against nn.CrossEntropyLoss on the full logits (loss and each rank's slice of the gradient)."""

import math

import numpy as np
import pytest

import nbcoll
from nbcoll import nn
from nbcoll.comm import loopback
from nbcoll.parallel import vocab_parallel_cross_entropy
from nbcoll.tensors import tensor

VOCAB = 12  # split evenly over 1, 2, 3 and 4 ranks


@pytest.fixture
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


def _logits(rows: int) -> np.ndarray:
    return np.random.default_rng(3).standard_normal((rows, VOCAB)) * 2


def _slice(logits: np.ndarray, comm) -> nbcoll.Tensor:
    per = VOCAB // comm.size
    return tensor(np.ascontiguousarray(logits[:, per * comm.rank : per * (comm.rank + 1)]), requires_grad=True)


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
@pytest.mark.parametrize("bad", [VOCAB, -1, -100])
def test_targets_outside_the_vocabulary_are_refused_on_every_rank(numpy_backend, nranks, bad):
    logits = _logits(4)
    targets = np.array([0, VOCAB - 1, bad, 5])
    good = np.array([0, VOCAB - 1, 3, 5])
    full = nn.CrossEntropyLoss()(tensor(logits), good).item()

    refusal = rf"targets: expected class ids in \[0, {VOCAB}\).* {bad} at position \(2,\)"

    def body(comm):
        with pytest.raises(ValueError, match=refusal):
            vocab_parallel_cross_entropy(_slice(logits, comm), targets, comm)
        # No rank entered a collective for the refused call: the next one still runs in step.
        return vocab_parallel_cross_entropy(_slice(logits, comm), good, comm).item()

    for loss in loopback.run(nranks, body):
        assert loss == pytest.approx(full, rel=1e-12)


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_ignore_index_matches_cross_entropy_on_the_full_logits(numpy_backend, nranks):
    logits = _logits(5)
    targets = np.array([3, -100, 11, -100, 0])
    x = tensor(logits, requires_grad=True)
    want = nn.CrossEntropyLoss(ignore_index=-100)(x, targets)
    want.backward()

    def body(comm):
        local = _slice(logits, comm)
        loss = vocab_parallel_cross_entropy(local, targets, comm, ignore_index=-100)
        loss.backward()
        return loss.item(), local.grad.numpy()

    per = VOCAB // nranks
    for rank, (loss, grad) in enumerate(loopback.run(nranks, body)):
        assert loss == pytest.approx(want.item(), rel=1e-12)
        np.testing.assert_allclose(grad, x.grad.numpy()[:, per * rank : per * (rank + 1)], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("nranks", [1, 3])
def test_all_targets_ignored_give_nan_and_zero_gradients(numpy_backend, nranks):
    logits = _logits(3)

    def body(comm):
        local = _slice(logits, comm)
        loss = vocab_parallel_cross_entropy(local, np.full(3, -1), comm, ignore_index=-1)
        loss.backward()
        return loss.item(), local.grad.numpy()

    for loss, grad in loopback.run(nranks, body):
        assert math.isnan(loss)  # the mean over no targets, as nn.CrossEntropyLoss gives
        np.testing.assert_array_equal(grad, np.zeros_like(grad))
