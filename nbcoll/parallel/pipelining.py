"""PyTorch's pipelining names: a ``PipelineStage`` per rank, and a schedule (``ScheduleGPipe``, ``Schedule1F1B``)
that runs its micro-batches.

The same machinery as :class:`~nbcoll.parallel.pipeline.Pipeline` (one stage per rank, each send grouped with the
next receive), spelled as ``torch.distributed.pipelining`` spells it::

    stage = PipelineStage(my_part, stage_index=rank, num_stages=comm.size, group=comm)
    schedule = Schedule1F1B(stage, n_microbatches=8, loss_fn=nn.CrossEntropyLoss())
    if rank == 0:
        schedule.step(x)                                 # the first stage reads the inputs
    elif rank == comm.size - 1:
        losses = []
        output = schedule.step(target=y, losses=losses)  # the last stage reads the targets, returns the output
    else:
        schedule.step()                                  # a middle stage only passes activations on

As in PyTorch, each micro-batch's loss is divided by the number of micro-batches before its backward, so one
``step`` leaves the gradient of the batch's mean loss in the stage's parameters. nbcoll adds ``schedule.loss``:
that mean, on every rank.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from nbcoll.nn import Module
from nbcoll.parallel.pipeline import Pipeline
from nbcoll.parallel.pipeline_schedule import Action
from nbcoll.tensors import Tensor

if TYPE_CHECKING:
    from nbcoll.comm import Communicator


class PipelineStage:
    """This rank's part of a model, ``stage_index`` of ``num_stages``, exchanging activations over ``group``.

    Example::

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import PipelineStage
        >>> comm = nbcoll.init()                       # under mpiexec -n 4: stage_index=comm.rank, num_stages=4
        >>> stage = PipelineStage(nn.Linear(4, 2), stage_index=comm.rank, num_stages=comm.size, group=comm)
        >>> stage.is_first, stage.is_last
        (True, True)
        >>> comm.destroy()

    One stage per rank, stage ``s`` on rank ``s`` of ``group`` (PyTorch's interleaved schedules, with several
    stages per rank, are not built here). ``device`` is accepted for PyTorch's signature and ignored: the backend
    decides where arrays live.
    """

    def __init__(
        self, submodule: Module, stage_index: int, num_stages: int, device: Any = None, *, group: Communicator
    ) -> None:
        if group is None:
            raise ValueError("group: expected the communicator of the pipeline's ranks, got None")
        if isinstance(num_stages, bool) or not isinstance(num_stages, int) or num_stages != group.size:
            raise ValueError(f"num_stages: expected {group.size} (one stage per rank of the group), got {num_stages!r}")
        if isinstance(stage_index, bool) or not isinstance(stage_index, int) or stage_index != group.rank:
            raise ValueError(
                f"stage_index: expected {group.rank} (stage s runs on rank s of the group), got {stage_index!r}"
            )
        self.submod, self.stage_index, self.num_stages, self.group = submodule, stage_index, num_stages, group

    @property
    def is_first(self) -> bool:
        """Whether this stage reads the inputs.

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import PipelineStage
        >>> comm = nbcoll.init()
        >>> PipelineStage(nn.Linear(2, 2), 0, 1, group=comm).is_first
        True
        >>> comm.destroy()
        """
        return self.stage_index == 0

    @property
    def is_last(self) -> bool:
        """Whether this stage computes the loss.

        >>> import nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import PipelineStage
        >>> comm = nbcoll.init()
        >>> PipelineStage(nn.Linear(2, 2), 0, 1, group=comm).is_last
        True
        >>> comm.destroy()
        """
        return self.stage_index == self.num_stages - 1


class _Schedule:
    """A schedule of micro-batch forwards and backwards over one :class:`PipelineStage` per rank."""

    name = ""

    def __init__(
        self, stage: PipelineStage, n_microbatches: int, loss_fn: Callable[[Tensor, Any], Tensor] | None = None
    ) -> None:
        if not isinstance(stage, PipelineStage):
            raise TypeError(f"stage: expected a PipelineStage, got {type(stage).__name__}")
        if loss_fn is None:
            raise ValueError("loss_fn: expected the loss of the last stage's output (forward-only runs are not built)")
        self.stage, self.n_microbatches, self.loss_fn = stage, n_microbatches, loss_fn
        self._pipe = Pipeline.for_stage(stage.submod, stage.group, n_microbatches, self.name)
        self.loss: float | None = None

    def step(self, *args: Any, target: Any = None, losses: list | None = None) -> Tensor | None:
        """One forward and backward of every micro-batch: inputs on the first stage, ``target`` on the last.

        Returns the last stage's output (the micro-batches' outputs put back together along dim 0) there, and
        ``None`` on the other stages; ``losses``, if given on the last stage, receives each micro-batch's loss.

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import PipelineStage, ScheduleGPipe
        >>> comm = nbcoll.init()
        >>> schedule = ScheduleGPipe(PipelineStage(nn.Linear(3, 1), 0, 1, group=comm), 2, loss_fn=nn.MSELoss())
        >>> out = schedule.step(np.ones((4, 3), np.float32), target=np.zeros((4, 1), np.float32))
        >>> out.shape, schedule.loss >= 0
        ((4, 1), True)
        >>> comm.destroy()
        """
        if len(args) > 1:
            raise ValueError(f"args: expected one input batch (on the first stage), got {len(args)}")
        if losses is not None and not isinstance(losses, list):
            raise TypeError(f"losses: expected a list to append the micro-batch losses to, got {type(losses)}")
        inputs = args[0] if args else None
        self.loss = self._pipe.step(inputs, target, self.loss_fn)
        if not self.stage.is_last:
            return None
        if losses is not None:
            losses.extend(self._pipe.losses)
        return Tensor(np.concatenate([out.numpy() for out in self._pipe.outputs]))

    @property
    def peak_in_flight(self) -> int:
        """The most micro-batches whose activations this stage held at once in the last step.

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import PipelineStage, ScheduleGPipe
        >>> comm = nbcoll.init()
        >>> schedule = ScheduleGPipe(PipelineStage(nn.Linear(3, 1), 0, 1, group=comm), 2, loss_fn=nn.MSELoss())
        >>> out = schedule.step(np.ones((4, 3), np.float32), target=np.zeros((4, 1), np.float32))
        >>> schedule.peak_in_flight                    # GPipe holds every micro-batch
        2
        >>> comm.destroy()
        """
        return self._pipe.peak_in_flight

    @property
    def peak_activation_bytes(self) -> int:
        """The peak of the bytes allocated on this rank during the last step, over what it held before.

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import PipelineStage, ScheduleGPipe
        >>> comm = nbcoll.init()
        >>> schedule = ScheduleGPipe(PipelineStage(nn.Linear(3, 1), 0, 1, group=comm), 2, loss_fn=nn.MSELoss())
        >>> out = schedule.step(np.ones((4, 3), np.float32), target=np.zeros((4, 1), np.float32))
        >>> schedule.peak_activation_bytes > 0
        True
        >>> comm.destroy()
        """
        return self._pipe.peak_activation_bytes

    def gather_actions(self) -> list[list[Action]]:
        """Collective: the actions every stage ran in the last step, for
        :func:`~nbcoll.parallel.pipeline_schedule.timeline`.

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import PipelineStage, ScheduleGPipe
        >>> comm = nbcoll.init()
        >>> schedule = ScheduleGPipe(PipelineStage(nn.Linear(3, 1), 0, 1, group=comm), 2, loss_fn=nn.MSELoss())
        >>> out = schedule.step(np.ones((4, 3), np.float32), target=np.zeros((4, 1), np.float32))
        >>> schedule.gather_actions()
        [[('F', 0), ('F', 1), ('B', 0), ('B', 1)]]
        >>> comm.destroy()
        """
        return self._pipe.gather_actions()


class ScheduleGPipe(_Schedule):
    """GPipe: every micro-batch's forward, then every backward (``m`` activations held per stage).

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import PipelineStage, ScheduleGPipe
        >>> comm = nbcoll.init()                       # one rank: the only stage is first and last
        >>> stage = PipelineStage(nn.Linear(3, 1), comm.rank, comm.size, group=comm)
        >>> schedule = ScheduleGPipe(stage, n_microbatches=2, loss_fn=nn.MSELoss())
        >>> x, y = np.ones((4, 3), np.float32), np.zeros((4, 1), np.float32)
        >>> losses = []
        >>> schedule.step(x, target=y, losses=losses).shape, len(losses)
        ((4, 1), 2)
        >>> schedule.gather_actions()
        [[('F', 0), ('F', 1), ('B', 0), ('B', 1)]]
        >>> comm.destroy()
    """

    name = "gpipe"


class Schedule1F1B(_Schedule):
    """1F1B: ``p - 1 - s`` forwards to fill the pipe, then one forward and one backward in turn (at most ``p``
    activations held per stage).

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll import nn
        >>> from nbcoll.parallel import PipelineStage, Schedule1F1B
        >>> comm = nbcoll.init()
        >>> stage = PipelineStage(nn.Linear(3, 1), comm.rank, comm.size, group=comm)
        >>> schedule = Schedule1F1B(stage, n_microbatches=2, loss_fn=nn.MSELoss())
        >>> out = schedule.step(np.ones((4, 3), np.float32), target=np.zeros((4, 1), np.float32))
        >>> schedule.gather_actions(), schedule.peak_in_flight
        ([[('F', 0), ('B', 0), ('F', 1), ('B', 1)]], 1)
        >>> comm.destroy()
    """

    name = "1f1b"


__all__ = ["PipelineStage", "Schedule1F1B", "ScheduleGPipe"]
