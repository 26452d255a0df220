"""Initialisers: PyTorch's gains, fans and bounds, filled in place and reproducible from the seed."""

import math

import numpy as np
import pytest

import nbcoll
from nbcoll.nn import Parameter, init


@pytest.fixture
def weight():
    nbcoll.manual_seed(0)
    return Parameter(np.zeros((200, 100, 3), np.float32))  # fan_in 300, fan_out 600


def test_gains_and_fans():
    assert init.calculate_gain("relu") == pytest.approx(math.sqrt(2))
    assert init.calculate_gain("tanh") == pytest.approx(5 / 3)
    assert init.calculate_gain("linear") == 1 and init.calculate_gain("sigmoid") == 1
    assert init.calculate_gain("leaky_relu") == pytest.approx(math.sqrt(2 / (1 + 0.01**2)))
    assert init.calculate_gain("leaky_relu", math.sqrt(5)) == pytest.approx(math.sqrt(1 / 3))
    assert init.fan_in_and_fan_out(Parameter(np.zeros((4, 3, 2, 5)))) == (30, 40)
    with pytest.raises(ValueError, match="nonlinearity"):
        init.calculate_gain("swish")
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        init.xavier_uniform_(Parameter(np.zeros(3)))


def test_uniform_and_normal_fill_in_place(backend, weight):
    array = weight.data
    assert init.uniform_(weight, -2.0, 3.0) is weight and weight.data is array
    values = weight.numpy()
    assert values.min() >= -2 and values.max() <= 3 and abs(values.mean() - 0.5) < 0.05
    init.normal_(weight, mean=1.0, std=0.5)
    assert abs(weight.numpy().mean() - 1.0) < 0.01 and abs(weight.numpy().std() - 0.5) < 0.01
    init.constant_(weight, 0.25)
    assert np.all(weight.numpy() == 0.25) and weight.dtype == np.float32
    assert np.all(init.zeros_(weight).numpy() == 0) and np.all(init.ones_(weight).numpy() == 1)


@pytest.mark.parametrize(
    "fill, expected_std, uniform",
    [
        (lambda w: init.xavier_uniform_(w, gain=2.0), 2.0 * math.sqrt(2 / 900), True),
        (lambda w: init.xavier_normal_(w), math.sqrt(2 / 900), False),
        (lambda w: init.kaiming_uniform_(w, nonlinearity="relu"), math.sqrt(2) / math.sqrt(300), True),
        (lambda w: init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu"), math.sqrt(2) / math.sqrt(600), False),
        (lambda w: init.kaiming_uniform_(w, a=math.sqrt(5)), math.sqrt(1 / 3) / math.sqrt(300), True),
    ],
    ids=["xavier-uniform", "xavier-normal", "kaiming-uniform", "kaiming-normal-fan-out", "linear-default"],
)
def test_scaled_initialisers_have_the_formula_std(weight, fill, expected_std, uniform):
    values = fill(weight).numpy()
    assert abs(values.std() / expected_std - 1) < 0.02
    if uniform:  # U(-bound, bound) has std bound / sqrt(3)
        assert np.abs(values).max() <= math.sqrt(3) * expected_std * (1 + 1e-6)


def test_same_seed_same_values(weight):
    nbcoll.manual_seed(11)
    a = init.kaiming_normal_(weight).numpy()
    nbcoll.manual_seed(11)
    np.testing.assert_array_equal(init.kaiming_normal_(weight).numpy(), a)
    with pytest.raises(ValueError, match="mode"):
        init.kaiming_normal_(weight, mode="fan")
    with pytest.raises(TypeError, match="Tensor"):
        init.normal_(np.zeros(3))
