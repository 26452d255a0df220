"""Pipeline parallelism: consecutive layers on consecutive ranks, the batch cut into micro-batches that flow through.

Rank ``s`` holds stage ``s``. For each micro-batch, a forward receives the activation from stage ``s - 1``,
runs the stage and sends its output to ``s + 1``; a backward receives the gradient of that output from ``s + 1``,
runs backward and sends the gradient of its input to ``s - 1``. The last stage computes the loss. The order of
forwards and backwards on each stage is the schedule (:mod:`.pipeline_schedule`: GPipe or 1F1B).

Two neighbours can both be sending to each other at once (1F1B's steady state: stage ``s`` sends an activation
up while ``s + 1`` sends a gradient down). A send blocks until the peer takes the message, so each send is
grouped with the receive of the next action (``comm.group()``): both progress together and neither waits for
the other, Megatron's ``send_forward_recv_backward``. The shape and dtype of the activations travel once, in a
small header before micro-batch 0, and all micro-batches share them.

An activation may be integer (token ids that the next stage embeds). No gradient flows back through integers, so
over such an edge the backward sends nothing, and the stage that produced the ids, knowing their dtype, expects
nothing. A floating activation always gets its gradient back, zeros where the next stage's output does not
depend on it (the next stage turns it into ids, say), so the two sides never have to agree on more than the
dtype.

Gradients accumulate in the stage's parameters over the micro-batches, each micro-batch's loss divided by their
number, so one ``step`` gives the gradient of the mean loss over the whole batch, as one process would. A stage
wrapped in DistributedDataParallel (pipelines side by side, DP x PP) runs its backwards in ``no_sync()`` but the
last, so its gradients are averaged over the data-parallel ranks once per step.

Example::

    comm = nbcoll.init()                                     # 4 ranks
    stages = [nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(4)]
    pipe = Pipeline(stages, comm, chunks=8, schedule="1f1b")  # this rank keeps stages[comm.rank]
    opt = nbcoll.optim.SGD(pipe.parameters(), lr=0.1)
    loss = pipe.step(x, y, nn.MSELoss())                     # forward and backward of 8 micro-batches
    opt.step()
    draw_timeline(timeline(pipe.gather_actions()), "pipe.png")
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from nbcoll import memory
from nbcoll.kernels import copy as copy_kernels
from nbcoll.nn import Module, Parameter
from nbcoll.parallel.pipeline_schedule import Action, peak_in_flight, schedule_actions
from nbcoll.tensors import Tensor

if TYPE_CHECKING:
    from nbcoll.comm import Communicator

HEADER_DIMS = 8
DTYPES = (np.float16, np.float32, np.float64, np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64)
"""The activation dtypes a header can name (by index: new ones go at the end)."""


def _host(x: Any) -> np.ndarray:
    return x.numpy() if isinstance(x, Tensor) else np.asarray(x)


def _carries_gradient(dtype: Any) -> bool:
    """Whether a gradient comes back for an activation of ``dtype``: only floating ones can have one."""
    return np.issubdtype(dtype, np.floating)


class Pipeline:
    """One stage of a pipeline over ``comm``: runs a schedule of micro-batch forwards and backwards per ``step``.

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import Pipeline
        >>> comm = nbcoll.init()                       # one stage per rank: here the only stage is the model
        >>> stages = [nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))]
        >>> pipe = Pipeline(stages, comm, chunks=2, schedule="gpipe")
        >>> inputs = nbcoll.tensor(np.ones((4, 4), np.float32))
        >>> targets = nbcoll.tensor([0, 1, 0, 1])
        >>> loss = pipe.step(inputs, targets, nn.CrossEntropyLoss())   # the mean loss of the batch, on every rank
        >>> loss > 0, pipe.peak_in_flight              # the activations this stage held at once
        (True, 2)
        >>> comm.destroy()

    ``stages`` are all the stages, one per rank (every rank builds them alike, so they start from the same
    weights); this rank keeps ``stages[comm.rank]``. ``inputs`` are read on the first stage, ``targets`` on the
    last; both split along dim 0 into ``chunks`` equal micro-batches.
    """

    def __init__(self, stages: Sequence[Module], comm: Communicator, chunks: int = 1, schedule: str = "gpipe") -> None:
        warnings.warn(
            "Pipeline(stages, comm, chunks, schedule) is deprecated: use PipelineStage(stages[rank], rank, "
            "comm.size, group=comm) with ScheduleGPipe or Schedule1F1B (nbcoll.parallel.pipelining)",
            DeprecationWarning,
            stacklevel=2,
        )
        if len(stages) != comm.size:
            raise ValueError(
                f"stages: a pipeline over {comm.size} ranks needs {comm.size} stages (one per rank), got {len(stages)}"
            )
        self._setup(stages[comm.rank], comm, chunks, schedule)

    @classmethod
    def for_stage(cls, stage: Module, comm: Communicator, chunks: int, schedule: str) -> Pipeline:
        """The pipeline of which this rank runs ``stage`` (what :mod:`.pipelining`'s schedules drive).

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel.pipeline import Pipeline
        >>> comm = nbcoll.init()
        >>> Pipeline.for_stage(nn.Linear(2, 2), comm, chunks=2, schedule="1f1b").actions
        [('F', 0), ('B', 0), ('F', 1), ('B', 1)]
        >>> comm.destroy()
        """
        pipe = cls.__new__(cls)
        pipe._setup(stage, comm, chunks, schedule)
        return pipe

    def _setup(self, stage: Module, comm: Communicator, chunks: int, schedule: str) -> None:
        if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
            raise ValueError(f"chunks: expected a positive number of micro-batches, got {chunks!r}")
        self.comm, self.chunks, self.schedule = comm, chunks, schedule
        self.stage = stage
        self.first, self.last = comm.rank == 0, comm.rank == comm.size - 1
        self.actions = schedule_actions(schedule, comm.size, comm.rank, chunks)
        self.actions_run: list[Action] = []
        self.peak_in_flight = 0
        self.peak_activation_bytes = 0
        self.outputs: list[Tensor] = []  # the last stage's output of each micro-batch, in the last step
        self.losses: list[float] = []  # and each micro-batch's loss (before the 1 / chunks scaling)

    def parameters(self) -> Iterator[Parameter]:
        """The parameters of this rank's stage, for its optimizer.

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import Pipeline
        >>> comm = nbcoll.init()
        >>> pipe = Pipeline([nn.Linear(4, 2)], comm)
        >>> [p.shape for p in pipe.parameters()]
        [(2, 4), (2,)]
        >>> comm.destroy()
        """
        return self.stage.parameters()

    # -- messages --------------------------------------------------------------------------------------------

    def _send_header(self, x: Any) -> None:
        dtype = np.dtype(x.dtype).type
        if dtype not in DTYPES:
            names = ", ".join(np.dtype(d).name for d in DTYPES)
            raise TypeError(
                f"stage {self.comm.rank}: an output of dtype {np.dtype(dtype).name} cannot be sent to the next "
                f"stage; expected one of {names}"
            )
        header = np.zeros(HEADER_DIMS + 2, np.int64)
        header[0], header[1] = x.ndim, DTYPES.index(dtype)
        header[2 : 2 + x.ndim] = x.shape
        self.comm.send(memory.to_device(header), self.comm.rank + 1)

    def _recv_header(self) -> tuple[tuple[int, ...], np.dtype]:
        header = memory.zeros(HEADER_DIMS + 2, np.int64)
        self.comm.recv(header, self.comm.rank - 1)
        header = memory.to_host(header)
        return tuple(int(d) for d in header[2 : 2 + header[0]]), np.dtype(DTYPES[header[1]])

    def _incoming(self, action: Action, output_shapes: dict[int, Any]) -> tuple[Any, int] | None:
        """The buffer and peer of the message ``action`` needs before it can run, or None."""
        kind, i = action
        if kind == "F" and not self.first:
            return memory.empty(*self.activation), self.comm.rank - 1
        if kind == "B" and not self.last and _carries_gradient(output_shapes[i][1]):
            return memory.empty(*output_shapes[i]), self.comm.rank + 1
        return None

    def _exchange(self, outgoing: tuple[Any, int] | None, incoming: tuple[Any, int] | None) -> None:
        """Send ``outgoing`` and receive ``incoming`` together, so that two neighbours never wait on each other."""
        if outgoing is None and incoming is None:
            return
        with self.comm.group():
            if outgoing is not None:
                self.comm.send(*outgoing)
            if incoming is not None:
                self.comm.recv(*incoming)

    # -- one training step -----------------------------------------------------------------------------------

    def _micro_batches(self, values: Any, arg: str) -> list[np.ndarray]:
        host = _host(values)
        if host.ndim == 0 or host.shape[0] % self.chunks:
            raise ValueError(
                f"{arg}: dim 0 ({host.shape[:1]}) must split into chunks={self.chunks} equal micro-batches"
            )
        return np.split(host, self.chunks)

    def step(self, inputs: Any, targets: Any, loss_fn: Callable[[Tensor, Any], Tensor]) -> float:
        """Forward and backward of every micro-batch in schedule order; returns the batch's mean loss everywhere.

        Gradients are added into the stage's parameters' ``.grad`` (zero them before, as usual).

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import Pipeline
        >>> comm = nbcoll.init()
        >>> pipe = Pipeline([nn.Linear(3, 1)], comm, chunks=2, schedule="1f1b")
        >>> x, y = nbcoll.tensor(np.ones((4, 3), np.float32)), nbcoll.tensor(np.zeros((4, 1), np.float32))
        >>> loss = pipe.step(x, y, nn.MSELoss())
        >>> [p.grad is not None for p in pipe.parameters()]
        [True, True]
        >>> comm.destroy()
        """
        # Checked wherever given (not only where used), so that bad input fails on every rank rather than leaving
        # a neighbour waiting for a message.
        micro_inputs = None if inputs is None and not self.first else self._micro_batches(inputs, "inputs")
        micro_targets = None if targets is None and not self.last else self._micro_batches(targets, "targets")
        saved: dict[int, tuple[Tensor, Tensor]] = {}  # micro-batch -> (stage input, stage output or loss)
        output_shapes: dict[int, Any] = {}
        loss_sum = 0.0
        self.actions_run, held, self.peak_in_flight = [], 0, 0
        self.outputs, self.losses = [], []
        memory.reset_peak_stats()
        baseline = memory.stats().allocated_bytes
        if not self.first:
            self.activation = self._recv_header()  # micro-batch 0 is every stage's first action
        incoming = self._incoming(self.actions[0], output_shapes)
        self._exchange(None, incoming)
        for n, (kind, i) in enumerate(self.actions):
            outgoing = None
            if kind == "F":
                if self.first:
                    x = Tensor(micro_inputs[i])
                else:
                    x = Tensor(incoming[0], requires_grad=_carries_gradient(incoming[0].dtype))
                y = self.stage(x)
                if self.last:
                    self.outputs.append(y.detach())
                    loss = loss_fn(y, Tensor(micro_targets[i]))
                    self.losses.append(loss.item())
                    y = loss * (1.0 / self.chunks)
                    loss_sum += y.item()
                else:
                    output_shapes[i] = (tuple(y.shape), y.dtype)
                    if i == 0:
                        self._send_header(y.data)
                    outgoing = (copy_kernels.contiguous(y.data), self.comm.rank + 1)
                saved[i] = (x, y)
                held += 1
            else:
                x, y = saved.pop(i)
                if y.requires_grad:  # not so for ids: nothing before them is differentiable through them
                    with self._gradient_sync(final=n == len(self.actions) - 1):
                        y.backward(None if self.last else Tensor(incoming[0]))
                if x.requires_grad:  # a floating input: the previous stage waits for its gradient
                    grad = memory.zeros(x.shape, x.dtype) if x.grad is None else copy_kernels.contiguous(x.grad.data)
                    outgoing = (grad, self.comm.rank - 1)
                held -= 1
            self.actions_run.append((kind, i))
            self.peak_in_flight = max(self.peak_in_flight, held)
            incoming = self._incoming(self.actions[n + 1], output_shapes) if n + 1 < len(self.actions) else None
            self._exchange(outgoing, incoming)
        self.peak_activation_bytes = memory.stats().peak_bytes - baseline
        assert self.peak_in_flight == peak_in_flight(self.actions_run)
        return self._broadcast_loss(loss_sum)

    def _gradient_sync(self, final: bool) -> Any:
        """A data-parallel stage averages its gradients once, in the step's last backward, not per micro-batch."""
        if final or not hasattr(self.stage, "no_sync"):
            return contextlib.nullcontext()
        return self.stage.no_sync()

    def _broadcast_loss(self, loss_sum: float) -> float:
        value = memory.to_device(np.array([loss_sum], np.float64))
        out = memory.empty(1, np.float64)
        self.comm.broadcast(value, out, root=self.comm.size - 1)
        return float(memory.to_host(out)[0])

    def gather_actions(self) -> list[list[Action]]:
        """Collective: the actions every stage ran in the last ``step``, in order, for :func:`timeline`.

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import Pipeline
        >>> comm = nbcoll.init()
        >>> pipe = Pipeline([nn.Linear(3, 1)], comm, chunks=2)
        >>> x, y = nbcoll.tensor(np.ones((2, 3), np.float32)), nbcoll.tensor(np.zeros((2, 1), np.float32))
        >>> loss = pipe.step(x, y, nn.MSELoss())
        >>> pipe.gather_actions()
        [[('F', 0), ('F', 1), ('B', 0), ('B', 1)]]
        >>> comm.destroy()
        """
        codes = np.array([2 * i + (kind == "B") for kind, i in self.actions_run], np.int64)
        everyone = memory.zeros(self.comm.size * len(codes), np.int64)
        self.comm.all_gather(memory.to_device(codes), everyone)
        rows = memory.to_host(everyone).reshape(self.comm.size, len(codes))
        return [[("B" if c % 2 else "F", int(c // 2)) for c in row] for row in rows]


__all__ = ["Pipeline"]
