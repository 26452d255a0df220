"""RNN, LSTM and GRU cells and sequence layers against NumPy written from PyTorch's equations, and their gradients."""

import numpy as np
import pytest
from layer_checks import assert_same_gradients_as_numpy, gradcheck_module, params, sigmoid, tensor64

import nbcoll
from nbcoll import nn

KINDS = ["rnn_tanh", "rnn_relu", "lstm", "gru"]


def numpy_step(kind, x, state, w_ih, w_hh, b_ih, b_hh):
    """One step of each cell, as PyTorch's documentation writes it (gate order i, f, g, o and r, z, n)."""
    h, c = state if kind == "lstm" else (state, None)
    gi, gh = x @ w_ih.T + b_ih, h @ w_hh.T + b_hh
    if kind == "rnn_tanh":
        return np.tanh(gi + gh)
    if kind == "rnn_relu":
        return np.maximum(gi + gh, 0)
    if kind == "lstm":
        i, f, g, o = np.split(gi + gh, 4, axis=-1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        return sigmoid(o) * np.tanh(c), c
    (gi_r, gi_z, gi_n), (gh_r, gh_z, gh_n) = np.split(gi, 3, axis=-1), np.split(gh, 3, axis=-1)
    r, z = sigmoid(gi_r + gh_r), sigmoid(gi_z + gh_z)
    n = np.tanh(gi_n + r * gh_n)
    return (1 - z) * n + z * h


def numpy_sequence(kind, x, p, num_layers, h0, c0=None):
    """Unroll layer by layer over time steps, x (T, B, I); returns outputs (T, B, H) and final states per layer."""
    finals_h, finals_c = [], []
    for layer in range(num_layers):
        w = [p.get(f"{name}_l{layer}", 0.0) for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        state = (h0[layer], c0[layer]) if kind == "lstm" else h0[layer]
        outputs = []
        for t in range(x.shape[0]):
            state = numpy_step(kind, x[t], state, *w)
            outputs.append(state[0] if kind == "lstm" else state)
        x = np.stack(outputs)
        finals_h.append(outputs[-1])
        if kind == "lstm":
            finals_c.append(state[1])
    return x, np.stack(finals_h), (np.stack(finals_c) if kind == "lstm" else None)


def make_cell(kind, input_size, hidden_size, bias=True):
    if kind.startswith("rnn"):
        return nn.RNNCell(input_size, hidden_size, bias=bias, nonlinearity=kind[4:], dtype=np.float64)
    return {"lstm": nn.LSTMCell, "gru": nn.GRUCell}[kind](input_size, hidden_size, bias=bias, dtype=np.float64)


def make_layer(kind, input_size, hidden_size, **kwargs):
    if kind.startswith("rnn"):
        return nn.RNN(input_size, hidden_size, nonlinearity=kind[4:], dtype=np.float64, **kwargs)
    return {"lstm": nn.LSTM, "gru": nn.GRU}[kind](input_size, hidden_size, dtype=np.float64, **kwargs)


# ---------------------------------------------------------------------------------------------------------------
# Cells.


@pytest.mark.parametrize("kind", KINDS)
def test_cell_matches_numpy(backend, rng, kind):
    cell = make_cell(kind, 3, 2)
    p = params(cell)
    x, h, c = rng.standard_normal((2, 3)), rng.standard_normal((2, 2)), rng.standard_normal((2, 2))
    weights = (p["weight_ih"], p["weight_hh"], p["bias_ih"], p["bias_hh"])
    if kind == "lstm":
        got_h, got_c = cell(nbcoll.tensor(x), (nbcoll.tensor(h), nbcoll.tensor(c)))
        want_h, want_c = numpy_step(kind, x, (h, c), *weights)
        np.testing.assert_allclose(got_c.numpy(), want_c, rtol=1e-12)
    else:
        got_h, want_h = cell(nbcoll.tensor(x), nbcoll.tensor(h)), numpy_step(kind, x, h, *weights)
    np.testing.assert_allclose(got_h.numpy(), want_h, rtol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_cell_parameters_have_pytorch_layout(kind):
    gates = {"rnn_tanh": 1, "rnn_relu": 1, "lstm": 4, "gru": 3}[kind]
    shapes = {name: p.shape for name, p in make_cell(kind, 5, 3).named_parameters()}
    assert shapes == {"weight_ih": (3 * gates, 5), "weight_hh": (3 * gates, 3), "bias_ih": (3 * gates,),
                      "bias_hh": (3 * gates,)}  # fmt: skip
    assert [name for name, _ in make_cell(kind, 5, 3, bias=False).named_parameters()] == ["weight_ih", "weight_hh"]
    for p in make_cell(kind, 5, 4).parameters():
        assert np.abs(p.numpy()).max() <= 0.5  # uniform in [-1/sqrt(hidden), 1/sqrt(hidden)]


@pytest.mark.parametrize("kind", KINDS)
def test_cell_starts_from_zeros_and_accepts_unbatched_input(rng, kind):
    with nbcoll.use_backend("numpy"):
        cell = make_cell(kind, 3, 2, bias=False)
        x = rng.standard_normal(3)
        out = cell(nbcoll.tensor(x))
        zeros = np.zeros((1, 2))
        want = numpy_step(kind, x[None], (zeros, zeros) if kind == "lstm" else zeros, *params(cell).values(), 0, 0)
        if kind == "lstm":
            assert out[0].shape == out[1].shape == (2,)
            np.testing.assert_allclose(out[1].numpy(), want[1][0], rtol=1e-12)
            out, want = out[0], want[0]
        assert out.shape == (2,)
        np.testing.assert_allclose(out.numpy(), want[0], rtol=1e-12)


@pytest.mark.parametrize("kind", ["rnn_tanh", "rnn_relu", "gru"])
def test_cell_gradcheck(rng, kind):
    with nbcoll.use_backend("numpy"):
        assert gradcheck_module(make_cell(kind, 3, 2), [tensor64(rng, 2, 3), tensor64(rng, 2, 2)], atol=1e-6)


def test_lstm_cell_gradcheck_through_both_states(rng):
    # The LSTM state is a pair: wrap the cell so the check differentiates h and c as separate inputs.
    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.cell = make_cell("lstm", 2, 3)

        def forward(self, x, h, c):
            return self.cell(x, (h, c))

    with nbcoll.use_backend("numpy"):
        assert gradcheck_module(Pair(), [tensor64(rng, 2, 2), tensor64(rng, 2, 3), tensor64(rng, 2, 3)], atol=1e-6)


def test_rnn_cell_gradcheck_on_the_device_backend(rng):
    # A literal gradient check on the simulator costs two forwards per element: the smallest cell.
    assert gradcheck_module(make_cell("rnn_tanh", 2, 1), [tensor64(rng, 1, 2), tensor64(rng, 1, 1)], atol=1e-6)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_gated_cell_gradients_on_the_device_backend_equal_numpy(rng, kind):
    x, h = rng.standard_normal((2, 2)), rng.standard_normal((2, 3))
    assert_same_gradients_as_numpy(lambda: make_cell(kind, 2, 3), [x, (h, h) if kind == "lstm" else h])


# ---------------------------------------------------------------------------------------------------------------
# Sequence layers.


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("num_layers, batch_first", [(1, False), (2, True)])
def test_sequence_layer_matches_numpy_over_several_steps(backend, rng, kind, num_layers, batch_first):
    if backend != "numpy" and kind == "rnn_relu":
        pytest.skip("the simulator runs every thread in Python: rnn_tanh covers the plain cell there")
    steps, batch, features, hidden = (3, 2, 2, 3) if backend == "numpy" else (2, 1, 2, 2)
    layer = make_layer(kind, features, hidden, num_layers=num_layers, batch_first=batch_first)
    x = rng.standard_normal((steps, batch, features))
    h0, c0 = rng.standard_normal((2, num_layers, batch, hidden))
    state = (nbcoll.tensor(h0), nbcoll.tensor(c0)) if kind == "lstm" else nbcoll.tensor(h0)
    fed = x.transpose(1, 0, 2) if batch_first else x
    output, final = layer(nbcoll.tensor(np.ascontiguousarray(fed)), state)
    want_out, want_h, want_c = numpy_sequence(kind, x, params(layer), num_layers, h0, c0)
    np.testing.assert_allclose(output.numpy(), want_out.transpose(1, 0, 2) if batch_first else want_out, rtol=1e-12)
    if kind == "lstm":
        np.testing.assert_allclose(final[1].numpy(), want_c, rtol=1e-12)
        final = final[0]
    assert final.shape == (num_layers, batch, hidden)
    np.testing.assert_allclose(final.numpy(), want_h, rtol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_sequence_layer_gradcheck(rng, kind):
    with nbcoll.use_backend("numpy"):
        layer = make_layer(kind, 2, 2, num_layers=2)
        x = tensor64(rng, 3, 2, 2)  # three time steps
        assert gradcheck_module(layer, [x], atol=1e-6)


def test_sequence_layer_gradcheck_from_a_given_state(rng):
    with nbcoll.use_backend("numpy"):
        layer = make_layer("gru", 2, 2, batch_first=True)
        assert gradcheck_module(layer, [tensor64(rng, 1, 4, 2), tensor64(rng, 1, 1, 2)], atol=1e-6)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_sequence_layer_gradients_on_the_device_backend_equal_numpy(rng, kind):
    x = rng.standard_normal((2, 1, 2))
    assert_same_gradients_as_numpy(lambda: make_layer(kind, 2, 2), [x])


def test_sequence_layers_are_named_as_pytorch_and_accept_unbatched_input(rng):
    with nbcoll.use_backend("numpy"):
        lstm = make_layer("lstm", 3, 4, num_layers=2, bias=False)
        assert sorted(lstm.state_dict()) == ["weight_hh_l0", "weight_hh_l1", "weight_ih_l0", "weight_ih_l1"]
        assert lstm.weight_ih_l1.shape == (16, 4)
        output, (h_n, c_n) = lstm(nbcoll.tensor(rng.standard_normal((5, 3))))
        assert output.shape == (5, 4) and h_n.shape == c_n.shape == (2, 4)
        np.testing.assert_allclose(output.numpy()[-1], h_n.numpy()[-1], rtol=1e-12)


def test_dropout_between_layers_only_in_training(rng):
    with nbcoll.use_backend("numpy"):
        rnn = make_layer("rnn_tanh", 2, 3, num_layers=2, dropout=0.5)
        x = nbcoll.tensor(rng.standard_normal((4, 2, 2)))
        rnn.eval()
        a, b = rnn(x)[0].numpy(), rnn(x)[0].numpy()
        np.testing.assert_array_equal(a, b)
        rnn.train()
        assert not np.allclose(rnn(x)[0].numpy(), a)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("num_layers, batch_first", [(1, False), (2, False), (2, True)])
@pytest.mark.parametrize("given_state", [False, True])
def test_an_empty_batch_gives_empty_outputs_and_states_and_a_backward(kind, num_layers, batch_first, given_state):
    steps, features, hidden = 3, 2, 4
    with nbcoll.use_backend("numpy"):
        layer = make_layer(kind, features, hidden, num_layers=num_layers, batch_first=batch_first)
        x = nbcoll.tensor(np.zeros((0, steps, features) if batch_first else (steps, 0, features)), requires_grad=True)
        states = [nbcoll.tensor(np.zeros((num_layers, 0, hidden)), requires_grad=True) for _ in range(2)]
        hx = (tuple(states) if kind == "lstm" else states[0]) if given_state else None
        output, final = layer(x, hx)
        assert output.shape == ((0, steps, hidden) if batch_first else (steps, 0, hidden))
        finals = final if kind == "lstm" else (final,)
        assert [f.shape for f in finals] == [(num_layers, 0, hidden)] * len(finals)
        (output.sum() + sum(f.sum() for f in finals)).backward()
        assert x.grad.shape == x.shape
        for name, p in layer.named_parameters():  # nothing was summed: the gradients are zeros of every shape
            assert p.grad is not None and p.grad.shape == p.shape, name
            np.testing.assert_array_equal(p.grad.numpy(), 0)
        if given_state:
            assert all(s.grad.shape == (num_layers, 0, hidden) for s in states[: len(finals)])


@pytest.mark.parametrize("kind", KINDS)
def test_a_cell_takes_an_empty_batch(kind):
    with nbcoll.use_backend("numpy"):
        cell = make_cell(kind, 2, 3)
        x = nbcoll.tensor(np.zeros((0, 2)), requires_grad=True)
        out = cell(x)
        outs = out if kind == "lstm" else (out,)
        assert [o.shape for o in outs] == [(0, 3)] * len(outs)
        sum(o.sum() for o in outs).backward()
        assert x.grad.shape == (0, 2) and cell.weight_ih.grad.shape == cell.weight_ih.shape


@pytest.mark.parametrize("batch_first", [False, True])
def test_an_empty_sequence_is_refused_as_pytorch_does(batch_first):
    # PyTorch raises "Expected sequence length to be larger than 0 in RNN": there is no last state to return.
    with nbcoll.use_backend("numpy"):
        x = nbcoll.tensor(np.zeros((2, 0, 5) if batch_first else (0, 2, 5), np.float32))
        for layer in (nn.RNN(5, 4, batch_first=batch_first), nn.LSTM(5, 4, batch_first=batch_first)):
            with pytest.raises(ValueError, match=r"the sequence is empty \(input shape"):
                layer(x)


# ---------------------------------------------------------------------------------------------------------------
# Bad input.


def test_wrong_shapes_name_the_layer_the_expected_and_the_actual_shape():
    def zeros(*shape):
        return nbcoll.tensor(np.zeros(shape, np.float32))

    with nbcoll.use_backend("numpy"):
        x = zeros(4, 2, 5)
        with pytest.raises(
            ValueError, match=r"LSTM\(3, 4, .*expected input of shape \(seq, batch, 3\) .*got \(4, 2, 5\)"
        ):
            nn.LSTM(3, 4)(x)
        with pytest.raises(ValueError, match=r"GRU\(5, 4.*batch_first=True.*\(batch, seq, 5\)"):
            nn.GRU(5, 4, batch_first=True)(zeros(2, 5, 1))
        with pytest.raises(ValueError, match=r"RNN\(5, 4.*expected hx of shape \(1, 2, 4\), got \(2, 4\)"):
            nn.RNN(5, 4)(x, zeros(2, 4))
        with pytest.raises(
            ValueError, match=r"RNNCell\(3, 2.*expected input of shape \(batch, 3\) or \(3,\), got \(2, 4\)"
        ):
            nn.RNNCell(3, 2)(zeros(2, 4))
        with pytest.raises(ValueError, match=r"LSTMCell\(3, 2.*expected hx\[1\] of shape \(4, 2\), got \(4, 3\)"):
            nn.LSTMCell(3, 2)(zeros(4, 3), (zeros(4, 2), zeros(4, 3)))
        with pytest.raises(ValueError, match="the sequence is empty"):
            nn.GRU(5, 4)(zeros(0, 2, 5))
        with pytest.raises(ValueError, match="nonlinearity"):
            nn.RNN(5, 4, nonlinearity="sigmoid")
        with pytest.raises(ValueError, match="hidden_size"):
            nn.LSTMCell(5, 0)
