"""Properties of the training stack on random small models (Hypothesis), on ``numpy`` and on the device backend.

For every drawn model (``training_strategies.models``): its forward pass equals a NumPy reference computed from its
own parameters; in float64 its loss passes ``gradcheck`` with respect to parameters and inputs; its state dict
loads into a model built with other parameters and survives ``nbcoll.save``/``nbcoll.load`` bit for bit. Training
interrupted at a drawn step and resumed from a checkpoint of model, optimizer and schedule ends on the very same
parameters as the uninterrupted run. Every DataLoader epoch visits each example exactly once.

Each property runs a fixed, derandomized set of examples: a few per family of models on ``numpy``, two or three
tiny ones on the device backend, where the simulator pays for every thread of every kernel.
"""

import threading
from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from training_references import reference_forward
from training_strategies import FAMILIES, ModelSpec, build, choice, flag, models, parameter_count, size

import nbcoll
from nbcoll import nn, optim
from nbcoll.autograd import gradcheck
from nbcoll.backend import device_backend
from nbcoll.data import DataLoader, TensorDataset

DEVICE = device_backend()
BACKENDS = ["numpy", DEVICE]
SEEDS = st.integers(0, 2**31 - 1)
TOLERANCES = {"float64": {"rtol": 1e-10, "atol": 1e-12}, "float32": {"rtol": 1e-5, "atol": 1e-5}}


def examples(backend: str, numpy_count: int, device_count: int = 2) -> settings:
    """A fixed number of reproducible examples; no example database written into the working tree."""
    return settings(
        max_examples=numpy_count if backend == "numpy" else device_count,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
    )


def cases(*device_families: str) -> list:
    """(backend, family) pairs: every family of models on numpy, the families named on the device backend."""
    pairs = [("numpy", family) for family in FAMILIES] + [(DEVICE, family) for family in device_families]
    return [pytest.param(backend, family, id=f"{backend}-{family}") for backend, family in pairs]


def small_models(backend: str, family: str, **kwargs) -> st.SearchStrategy[ModelSpec]:
    """Models of a few dozen elements on the device backend, somewhat larger ones on numpy.

    On the device backend the batch is never empty: an empty batch launches no threads, so the numpy examples
    already cover everything it exercises.
    """
    if backend != "numpy":
        kwargs = {"min_batch": 1, "max_batch": 2, "max_tail": 1, **kwargs}
    return models(family, **kwargs)


def elements(spec: ModelSpec) -> int:
    """How many numbers a gradient check moves: every parameter's and the input's."""
    return parameter_count(build(spec, 0)) + (0 if spec.vocab else int(np.prod(spec.input_shape)))


def forward(model: nn.Module, x: np.ndarray, seed: int) -> np.ndarray:
    """The model's output on host; the generator restarts first, so training-mode Dropouts draw known masks."""
    nbcoll.manual_seed(seed)
    return model(nbcoll.tensor(x)).numpy()


# ---------------------------------------------------------------------------------------------------------------
# Forward against NumPy, and gradients against central differences.


@pytest.mark.parametrize("backend, family", cases(*FAMILIES))
def test_forward_matches_the_numpy_reference(backend, family):
    @examples(backend, 10)
    @given(spec=small_models(backend, family), seed=SEEDS)
    def check(spec, seed):
        model = build(spec, seed)
        x = spec.make_input(np.random.default_rng(seed))
        got = forward(model, x, seed + 1)
        nbcoll.manual_seed(seed + 1)
        expected = reference_forward(spec, model, x)
        assert got.dtype == spec.dtype and got.shape == expected.shape
        np.testing.assert_allclose(got, expected, **TOLERANCES[spec.dtype])

    with nbcoll.use_backend(backend):
        check()


def mse(output, target, reduction):
    return nn.MSELoss(reduction=reduction)(output, nbcoll.tensor(target))


@pytest.mark.parametrize("backend, family", cases("dense"))
def test_loss_passes_gradcheck_on_parameters_and_inputs(backend, family):
    # Two forward passes per element of every parameter and input: a cap on those, tighter on the device backend.
    cap = (40 if family == "recurrent" else 100) if backend == "numpy" else 12  # recurrent ones step by step
    spec = small_models(backend, family, dtypes=("float64",), max_tail=2).filter(lambda spec: elements(spec) <= cap)

    @examples(backend, 8 if family in ("dense", "embedding") else 4)
    @given(spec=spec, seed=SEEDS, data=st.data())
    def check(spec, seed, data):
        model = build(spec, seed)
        rng = np.random.default_rng(seed)
        x = spec.make_input(rng)
        names = [name for name, _ in model.named_parameters()]
        target = rng.standard_normal(forward(model, x, seed).shape)
        reduction = data.draw(choice("none", "sum", "mean") if target.size else choice("none", "sum"))

        def loss(x, *params):
            nbcoll.manual_seed(seed)  # the same Dropout masks in every evaluation
            return mse(nn.functional_call(model, dict(zip(names, params, strict=True)), x), target, reduction)

        leaves = [nbcoll.tensor(x, requires_grad=not spec.vocab)]
        leaves += [nbcoll.tensor(p.numpy(), requires_grad=True) for p in model.parameters()]
        assert gradcheck(loss, leaves)

    with nbcoll.use_backend(backend):
        check()


# ---------------------------------------------------------------------------------------------------------------
# State dicts and checkpoints.


@pytest.mark.parametrize("backend, family", cases("dense"))
def test_state_dict_round_trips_through_a_fresh_model_and_a_checkpoint(backend, family, tmp_path):
    @examples(backend, 6)
    @given(spec=small_models(backend, family), seed=SEEDS)
    def check(spec, seed):
        source = build(spec, seed)
        x = spec.make_input(np.random.default_rng(seed))
        expected = forward(source, x, seed)
        state = source.state_dict()
        kept = {name: value.copy() for name, value in state.items()}

        fresh = build(spec, seed + 1)
        for p in fresh.parameters():  # away from the defaults too: LayerNorm starts at ones and zeros for any seed
            nn.init.uniform_(p, -2.0, 2.0)
        assert all(not np.array_equal(fresh.state_dict()[name], value) for name, value in state.items())
        assert fresh.load_state_dict(state) == nn.IncompatibleKeys([], [])
        np.testing.assert_array_equal(forward(fresh, x, seed), expected)
        for p in source.parameters():  # the state dict holds copies, not views of the parameters
            nn.init.uniform_(p, -2.0, 2.0)
        for name, value in kept.items():
            np.testing.assert_array_equal(state[name], value, err_msg=name)

        path = tmp_path / "model.npz"
        nbcoll.save(state, path)
        loaded = nbcoll.load(path)
        assert list(loaded) == list(state)
        for name, value in state.items():
            assert type(loaded[name]) is np.ndarray
            assert (loaded[name].dtype, loaded[name].shape) == (value.dtype, value.shape), name
            assert loaded[name].tobytes() == value.tobytes(), name
        fresh.load_state_dict(loaded)
        np.testing.assert_array_equal(forward(fresh, x, seed), expected)

    with nbcoll.use_backend(backend):
        check()


class TrainingRun(NamedTuple):
    spec: ModelSpec
    kind: str  # a key of OPTIMIZERS
    settings: dict  # the optimizer's, besides lr
    schedule: str  # "none", "step" or "cosine"
    steps: int
    stop: int  # the step at which the run is checkpointed and resumed
    two_groups: bool


@st.composite
def training_runs(draw, backend: str, family: str):
    """A model, an optimizer (with one or two parameter groups), a schedule, a step count and a step to stop at."""
    trainable = small_models(backend, family, min_batch=1, max_tail=2)
    spec = draw(trainable.filter(lambda spec: parameter_count(build(spec, 0)) > 0))
    kind = draw(choice("sgd", "adamw", "adam"))
    if kind == "sgd":
        momentum = draw(choice(0.9, 0.0, 0.5))
        nesterov = momentum > 0 and draw(flag())
        dampening = 0.0 if nesterov else draw(choice(0.3, 0.0))
        options = {"momentum": momentum, "nesterov": nesterov, "dampening": dampening}
    else:
        options = {"betas": (draw(choice(0.9, 0.8)), draw(choice(0.99, 0.999))), "eps": 1e-8}
    options["weight_decay"] = draw(choice(0.01, 0.0, 0.1))
    schedule = draw(choice("step", "cosine", "none"))
    steps = draw(size(1, 4, simplest=3) if backend == "numpy" else size(1, 2, simplest=2))
    stop = draw(size(0, steps, simplest=steps // 2))
    return TrainingRun(spec, kind, options, schedule, steps, stop, draw(flag()))


OPTIMIZERS = {"sgd": optim.SGD, "adam": optim.Adam, "adamw": optim.AdamW}


def make_training(run: TrainingRun, seed: int, other: bool = False):
    """Model, optimizer and schedule; ``other=True`` changes every setting, which loading must put back."""
    model = build(run.spec, seed)
    params, scale = list(model.parameters()), 1.5 if other else 1.0
    split = len(params) // 2 if run.two_groups and len(params) > 1 else len(params)
    groups = [{"params": params[:split]}] + ([{"params": params[split:], "lr": 0.02 * scale}] if params[split:] else [])
    changed = {k: v * scale if isinstance(v, float) else v for k, v in run.settings.items()}
    if "betas" in changed:
        changed["betas"] = tuple(b * (0.9 if other else 1.0) for b in changed["betas"])
    optimizer = OPTIMIZERS[run.kind](groups, lr=0.05 * scale, **changed)
    if run.schedule == "step":
        scheduler = optim.StepLR(optimizer, step_size=2, gamma=0.5 * scale)
    elif run.schedule == "cosine":
        scheduler = optim.CosineWarmupLR(optimizer, warmup_steps=1, total_steps=run.steps + 1, min_lr=0.001 * scale)
    else:
        scheduler = None
    return model, optimizer, scheduler


def train(spec, model, optimizer, scheduler, seed, steps):
    """One step per batch ``k`` of ``steps`` (its data derived from ``seed`` and ``k``)."""
    for k in steps:
        rng = np.random.default_rng([seed, k])
        x = spec.make_input(rng)
        out = model(nbcoll.tensor(x))
        loss = mse(out, rng.standard_normal(out.shape).astype(spec.dtype), "mean")
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()


@pytest.mark.parametrize("backend, family", cases("dense"))
def test_training_resumed_from_a_checkpoint_ends_bit_exact(backend, family, tmp_path):
    @examples(backend, 6)
    @given(run=training_runs(backend, family), seed=SEEDS)
    def check(run, seed):
        # Dropout stays in evaluation mode: the masks would otherwise depend on the generator's position.
        whole = make_training(run, seed)
        whole[0].eval()
        train(run.spec, *whole, seed, range(run.steps))

        model, optimizer, scheduler = make_training(run, seed)
        model.eval()
        train(run.spec, model, optimizer, scheduler, seed, range(run.stop))
        path = tmp_path / "checkpoint.npz"
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": run.stop}
        state["scheduler"] = None if scheduler is None else scheduler.state_dict()
        nbcoll.save(state, path)

        model, optimizer, scheduler = make_training(run, seed + 1, other=True)
        model.eval()
        loaded = nbcoll.load(path)
        model.load_state_dict(loaded["model"])
        optimizer.load_state_dict(loaded["optimizer"])
        if scheduler is not None:
            scheduler.load_state_dict(loaded["scheduler"])
        train(run.spec, model, optimizer, scheduler, seed, range(loaded["step"], run.steps))

        for (name, expected), got in zip(whole[0].named_parameters(), model.parameters(), strict=True):
            assert np.array_equal(got.numpy(), expected.numpy()), f"{name} differs after resuming at step {run.stop}"
        assert [g["lr"] for g in optimizer.param_groups] == [g["lr"] for g in whole[1].param_groups]

    with nbcoll.use_backend(backend):
        check()


# ---------------------------------------------------------------------------------------------------------------
# The DataLoader.

DATASET_SIZES = st.sampled_from([0, 1, 2, 3, 5, 7, 11, 13, 17, 23, 31]) | st.integers(0, 40)


def features(index: np.ndarray) -> np.ndarray:
    """What each example carries besides its index: two values that identify it."""
    return np.stack([index + 0.5, -index - 0.5], axis=1).astype(np.float32)


def epoch_batches(loader) -> list[np.ndarray]:
    """The indices each batch of one epoch carries, checked against the features that travel with them."""
    batches = []
    for index, feature in loader:
        index = index.numpy() if isinstance(index, nbcoll.Tensor) else index
        feature = feature.numpy() if isinstance(feature, nbcoll.Tensor) else feature
        np.testing.assert_array_equal(feature, features(index))
        batches.append(index)
    return batches


def concatenated(batches: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(batches) if batches else np.zeros(0, np.int64)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_epoch_visits_each_example_once(backend):
    @examples(backend, 40, 3)
    @given(
        n=DATASET_SIZES,
        batch_size=st.integers(1, 12),
        shuffle=st.booleans(),
        drop_last=st.booleans(),
        seed=SEEDS,
        prefetch=st.integers(0, 3),
        device=st.booleans(),
    )
    def check(n, batch_size, shuffle, drop_last, seed, prefetch, device):
        dataset = TensorDataset(np.arange(n), features(np.arange(n)))

        def loader(depth, drop=drop_last):
            return DataLoader(dataset, batch_size, shuffle, drop, seed=seed, prefetch=depth, device=device)

        prefetched, plain, complete = loader(prefetch), loader(0), loader(0, drop=False)
        full = n // batch_size
        kept = full * batch_size if drop_last else n
        orders = []
        for _ in range(3):
            batches = epoch_batches(prefetched)
            assert len(batches) == len(prefetched)
            # Prefetch changes nothing, and drop_last only leaves out the short batch at the end.
            for expected in (epoch_batches(plain), epoch_batches(complete)[: len(batches)]):
                assert len(batches) == len(expected) and all(map(np.array_equal, batches, expected))
            sizes = [len(b) for b in batches]
            assert sizes[:full] == [batch_size] * full and sum(sizes) == kept and all(sizes)
            order = concatenated(batches)
            assert len(set(order.tolist())) == kept and set(order.tolist()) <= set(range(n))
            if not shuffle:
                np.testing.assert_array_equal(order, np.arange(kept))
            orders.append(order)
        if shuffle:
            # Each epoch draws its own order from (seed, epoch); set_epoch brings an epoch's order back, and a new
            # loader with the same seed starts with the same order.
            if kept >= 8:
                assert not all(np.array_equal(orders[0], o) for o in orders[1:]), "shuffled epochs repeat one order"
            prefetched.set_epoch(1)
            np.testing.assert_array_equal(concatenated(epoch_batches(prefetched)), orders[1])
            np.testing.assert_array_equal(concatenated(epoch_batches(loader(prefetch))), orders[0])
        alive = [t for t in threading.enumerate() if t.name == "nbcoll-prefetch"]
        assert not alive, "a prefetch thread outlived its epoch"

    with nbcoll.use_backend(backend):
        check()
