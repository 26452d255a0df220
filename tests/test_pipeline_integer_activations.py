"""Pipeline stages that pass integer activations (token ids) to the next stage, against one process.

The ranks are threads of this process (``nbcoll.comm.loopback``). No gradient flows back over an integer edge:
the stage that receives ids sends nothing back for them, and the stage that produced them expects nothing. A
floating edge whose receiver computed no gradient for it (its output is ids) carries zeros back.
"""

import numpy as np
import pytest

import nbcoll
from nbcoll import nn
from nbcoll.comm import loopback
from nbcoll.parallel import PipelineStage, Schedule1F1B, ScheduleGPipe

VOCAB, WIDTH, CLASSES, BATCH, CHUNKS = 5, 4, 3, 8, 4

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


class Argmax(nn.Module):
    """Scores (B, V) to ids (B,): an integer output, through which no gradient passes."""

    def forward(self, x):
        return x.argmax(axis=-1)


class Identity(nn.Module):
    def forward(self, x):
        return x


def head():
    return nn.Sequential(
        nn.Embedding(VOCAB, WIDTH, dtype=np.float64), nn.Tanh(), nn.Linear(WIDTH, CLASSES, dtype=np.float64)
    )


def build(case):
    """The stages of each case, built from one seed; the integer edge is the one after the Argmax/Identity."""
    nbcoll.manual_seed(3)
    linear = nn.Linear(VOCAB, VOCAB, dtype=np.float64)
    return {
        "argmax, embed": lambda: [Argmax(), head()],
        "ids, embed, classify": lambda: [Identity(), head()[:2], head()[2:]],
        "linear, argmax, embed": lambda: [linear, Argmax(), head()],
    }[case]()


def data(case, rng):
    if case.startswith("ids"):
        x = rng.integers(0, VOCAB, BATCH)
    else:
        x = rng.standard_normal((BATCH, VOCAB))
    return x, rng.integers(0, CLASSES, BATCH)


def grads(module):
    """Every parameter's gradient, zeros where none reached it."""
    return {n: np.zeros(p.shape) if p.grad is None else p.grad.numpy() for n, p in module.named_parameters()}


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("case", ["argmax, embed", "ids, embed, classify", "linear, argmax, embed"])
def test_integer_activations_pass_between_stages_as_in_one_process(case, schedule):
    with nbcoll.use_backend("numpy"):
        stages, reference = build(case), nn.Sequential(*build(case))
        loss_fn = nn.CrossEntropyLoss()
        batches = [data(case, np.random.default_rng(seed)) for seed in range(2)]

        want = []
        for x, y in batches:  # one process: two SGD steps over the whole batch
            opt = nbcoll.optim.SGD(reference.parameters(), lr=0.5)
            opt.zero_grad()
            loss = loss_fn(reference(nbcoll.tensor(x)), nbcoll.tensor(y))
            loss.backward()
            want.append((loss.item(), [grads(stage) for stage in reference]))
            opt.step()

        def rank(comm):
            stage = PipelineStage(stages[comm.rank], comm.rank, comm.size, group=comm)
            pipe = SCHEDULES[schedule](stage, CHUNKS, loss_fn=loss_fn)
            params = list(stage.submod.parameters())
            opt = nbcoll.optim.SGD(params, lr=0.5) if params else None  # Argmax and Identity have none
            got = []
            for x, y in batches:
                if opt:
                    opt.zero_grad()
                pipe.step(*([x] if stage.is_first else []), target=y if stage.is_last else None)
                got.append((pipe.loss, grads(stage.submod)))
                if opt:
                    opt.step()
            return got

        for r, got in enumerate(loopback.run(len(stages), rank)):
            for step, ((loss, got_grads), (want_loss, want_grads)) in enumerate(zip(got, want, strict=True)):
                assert loss == pytest.approx(want_loss, rel=1e-12), (r, step)
                assert got_grads.keys() == want_grads[r].keys()
                for name, g in got_grads.items():
                    np.testing.assert_allclose(g, want_grads[r][name], rtol=1e-10, atol=1e-14, err_msg=f"{r} {name}")
        for stage, ref in zip(stages, reference, strict=True):  # the parameters after both steps
            for name, value in stage.state_dict().items():
                np.testing.assert_allclose(value, ref.state_dict()[name], rtol=1e-10, atol=1e-14)


def test_an_activation_dtype_that_cannot_travel_names_the_stage_and_the_dtype():
    class Positive(nn.Module):
        def forward(self, x):
            return x > 0  # a bool mask: cast it to an integer dtype to send it

    with nbcoll.use_backend("numpy"):
        stages = [Positive(), Identity()]

        def rank(comm):
            stage = PipelineStage(stages[comm.rank], comm.rank, comm.size, group=comm)
            ScheduleGPipe(stage, 1, loss_fn=lambda y, t: y.sum()).step(np.zeros((2, 2)), target=np.zeros(2))

        with pytest.raises(TypeError, match=r"stage 0: an output of dtype bool cannot be sent .* one of .*int64"):
            loopback.run(2, rank)
