"""The process group of the ``"nbcoll"`` backend: every collective of ``torch.distributed`` on a communicator.

torch calls a backend with lists (one tensor per device; nbcoll has one device per rank) and option objects; each
method below turns its tensors into nbcoll arrays (:mod:`nbcoll.torch_backend.tensors`), starts nbcoll's
collective with ``async_op=True`` and returns an :class:`~nbcoll.torch_backend.work.NbcollWork`::

    torch.distributed                       this group             nbcoll's communicator
    all_reduce(t, op)                       allreduce              all_reduce(t, op=sum|prod|min|max|avg)
    broadcast(t, src)                       broadcast              broadcast(t, root=src)
    reduce(t, dst, op)                      reduce                 reduce(t, op, root=dst)
    all_gather(list, t)                     allgather              all_gather(t, staged), copied into the list
    all_gather_into_tensor(out, t)          _allgather_base        all_gather(t, out)
    reduce_scatter(t, list, op)             reduce_scatter         reduce_scatter(concatenated list, t)
    reduce_scatter_tensor(t, inp, op)       _reduce_scatter_base   reduce_scatter(inp, t)
    all_to_all_single(out, inp)             alltoall_base          all_to_all(inp, out)
    all_to_all_single(..., split sizes)     alltoall_base          grouped send and recv, one pair per peer
    all_to_all(outs, inps)                  alltoall               grouped send and recv
    gather(t, list, dst) / scatter          gather / scatter       gather(t, staged, root) / scatter
    send / recv                             send / recv            send / recv (tag 0 only)
    barrier()                               barrier                barrier()

Sends and receives (and the all-to-alls built on them) run to their end before the call returns: nbcoll's
point-to-point has no asynchronous form, so their ``Work`` is complete at once.

An argument this group refuses on one rank only (tensors of the wrong size, say) is told to the other ranks as
nbcoll's own refusals are (:mod:`nbcoll.comm.refusal`): they raise at once instead of waiting for this rank, and
no later call reads what they sent.

Example::

    import nbcoll.torch_backend                   # registers "nbcoll"
    dist.init_process_group("nbcoll")             # under mpiexec or torchrun
    dist.all_reduce(torch.ones(4), op=dist.ReduceOp.MAX)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from nbcoll.comm.communicator import Communicator
from nbcoll.kernels import copy as copy_kernels
from nbcoll.torch_backend.split_agreement import agree_on_sizes
from nbcoll.torch_backend.tensors import Staged, as_array, reduce_op
from nbcoll.torch_backend.work import NbcollWork, done

Method = TypeVar("Method", bound=Callable[..., NbcollWork])


def _refused_on_every_rank(collective: str) -> Callable[[Method], Method]:
    """A check of this group that fails before nbcoll has numbered the call becomes nbcoll's refusal of it.

    Without it, the peers would run ``collective`` and wait for this rank until their timeout; with it they hear
    of the refusal, as of one made by nbcoll's own checks, and raise at once.
    """

    def wrap(method: Method) -> Method:
        @functools.wraps(method)
        def checked(self: ProcessGroupNbcoll, *args: Any, **kwargs: Any) -> NbcollWork:
            numbered = self.comm.engine.refusals.calls
            try:
                return method(self, *args, **kwargs)
            except (TypeError, ValueError):
                if self.comm.engine.refusals.calls != numbered:
                    raise  # nbcoll's own checks refused it, and told the peers
                with self.comm.engine.call(collective):  # the refusal takes the call's number
                    raise

        return checked  # type: ignore[return-value]

    return wrap


def _finish_all(staged: list[Staged], then: Any = None) -> Any:
    def finish() -> None:
        for s in staged:
            s.write_back()
        if then is not None:
            then()

    return finish


def _same_numel(tensors: list[torch.Tensor], count: int, arg: str, what: str) -> None:
    for i, t in enumerate(tensors):
        if t.numel() != count:
            raise ValueError(f"nbcoll backend: {arg}[{i}] has {t.numel()} elements; expected {count} ({what})")


def _flat_like(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The tensors one after the other in one new flat tensor (what a list-taking collective moves)."""
    return torch.cat([t.detach().reshape(-1) for t in tensors]) if tensors else torch.empty(0)


def _copy_out(flat: torch.Tensor, outputs: list[torch.Tensor]) -> Any:
    def copy_out() -> None:
        with torch.no_grad():
            offset = 0
            for t in outputs:
                t.copy_(flat[offset : offset + t.numel()].view(t.shape))
                offset += t.numel()

    return copy_out


class ProcessGroupNbcoll(dist.ProcessGroup):
    """A ``torch.distributed`` process group whose collectives run on an nbcoll communicator.

    Example::

        import torch, torch.distributed as dist
        import nbcoll.torch_backend
        dist.init_process_group("nbcoll")             # every rank; the group is this class
        t = torch.full((3,), float(dist.get_rank()))
        dist.all_reduce(t)                            # t = 0 + 1 + ... + (n - 1) on every rank
        dist.get_backend()                            # 'nbcoll'

    ``comm`` is the communicator of exactly the group's ranks, in the group's rank order.
    """

    def __init__(self, comm: Communicator, rank: int, size: int) -> None:
        super().__init__(rank, size)
        if (comm.rank, comm.size) != (rank, size):
            raise ValueError(
                f"comm: rank {comm.rank} of {comm.size} ranks, but the process group is rank {rank} of {size}"
            )
        self.comm = comm
        self._group_name = ""

    # torch keeps a group's name on its C++ backends, and this group has none: the name is kept here.
    def _set_group_name(self, name: str) -> None:
        self._group_name = name
        super()._set_group_name(name)

    @property
    def group_name(self) -> str:
        return self._group_name

    def getBackendName(self) -> str:  # noqa: N802 (torch's name)
        return "nbcoll"

    def __repr__(self) -> str:
        return f"ProcessGroupNbcoll(rank={self.rank()}, size={self.size()}, {self.comm!r})"

    def shutdown(self) -> None:
        """Destroy the communicator (``torch.distributed.destroy_process_group`` calls this)."""
        if not self.comm.closed:
            self.comm.destroy()

    # -- reductions ---------------------------------------------------------------------------------------------

    @_refused_on_every_rank("all_reduce")
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> NbcollWork:
        op = reduce_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        staged = [as_array(t, "tensor", reduced=True) for t in tensors]
        pending = [self.comm.all_reduce(s.array, op=op, async_op=True) for s in staged]
        return NbcollWork("all_reduce", pending, _finish_all(staged), tensors)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> NbcollWork:
        return self.allreduce(tensors, opts)

    @_refused_on_every_rank("reduce")
    def reduce(self, tensors: list[torch.Tensor], opts: Any) -> NbcollWork:
        op, root = reduce_op(opts.reduceOp), opts.rootRank
        staged = [as_array(t, "tensor", reduced=True) for t in tensors]
        pending = [self.comm.reduce(s.array, op=op, root=root, async_op=True) for s in staged]
        return NbcollWork("reduce", pending, _finish_all(staged), tensors)

    @_refused_on_every_rank("reduce_scatter")
    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> NbcollWork:
        op = reduce_op(opts.reduceOp)
        if input.numel() != output.numel() * self.size():
            raise ValueError(
                f"nbcoll backend: reduce_scatter_tensor input has {input.numel()} elements; expected "
                f"{self.size()} x output's {output.numel()}"
            )
        send, recv = as_array(input, "input", reduced=True), as_array(output, "output", reduced=True)
        pending = self.comm.reduce_scatter(send.array, recv.array, op=op, async_op=True)
        return NbcollWork("reduce_scatter", [pending], _finish_all([recv]), [output])

    @_refused_on_every_rank("reduce_scatter")
    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any) -> NbcollWork:
        works = []
        for out, ins in zip(outputs, inputs, strict=True):
            _same_numel(ins, out.numel(), "input_list", "one block per rank, each the output's size")
            works.append(self._reduce_scatter_base(out, _flat_like(ins), opts))
        return _joined("reduce_scatter", works, outputs)

    # -- data movement ------------------------------------------------------------------------------------------

    @_refused_on_every_rank("broadcast")
    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> NbcollWork:
        staged = [as_array(t, "tensor") for t in tensors]
        pending = [self.comm.broadcast(s.array, root=opts.rootRank, async_op=True) for s in staged]
        return NbcollWork("broadcast", pending, _finish_all(staged), tensors)

    @_refused_on_every_rank("all_gather")
    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> NbcollWork:
        if output.numel() != input.numel() * self.size():
            raise ValueError(
                f"nbcoll backend: all_gather_into_tensor output has {output.numel()} elements; expected "
                f"{self.size()} x input's {input.numel()}"
            )
        send, recv = as_array(input, "input"), as_array(output, "output")
        pending = self.comm.all_gather(send.array, recv.array, async_op=True)
        return NbcollWork("all_gather", [pending], _finish_all([recv]), [output])

    @_refused_on_every_rank("all_gather")
    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None) -> NbcollWork:
        works = []
        for outs, inp in zip(outputs, inputs, strict=True):
            _same_numel(outs, inp.numel(), "tensor_list", "one tensor per rank, each the input's size")
            flat = torch.empty(inp.numel() * self.size(), dtype=inp.dtype, device=inp.device)
            work = self._allgather_base(flat, inp)
            works.append(NbcollWork("all_gather", [work], _copy_out(flat, outs), outs))
        return _joined("all_gather", works, [t for outs in outputs for t in outs])

    def allgather_into_tensor_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> NbcollWork:
        works = [self._allgather_base(o, i) for o, i in zip(outputs, inputs, strict=True)]
        return _joined("all_gather", works, outputs)

    def reduce_scatter_tensor_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any
    ) -> NbcollWork:
        works = [self._reduce_scatter_base(o, i, opts) for o, i in zip(outputs, inputs, strict=True)]
        return _joined("reduce_scatter", works, outputs)

    @_refused_on_every_rank("gather")
    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any) -> NbcollWork:
        root, (inp,) = opts.rootRank, inputs
        send = as_array(inp, "tensor")
        if self.rank() != root:
            return NbcollWork("gather", [self.comm.gather(send.array, None, root=root, async_op=True)], _nothing, [])
        (outs,) = outputs
        _same_numel(outs, inp.numel(), "gather_list", "one tensor per rank, each the input's size")
        flat = torch.empty(inp.numel() * self.size(), dtype=inp.dtype, device=inp.device)
        recv = as_array(flat, "gather_list")
        pending = self.comm.gather(send.array, recv.array, root=root, async_op=True)
        return NbcollWork("gather", [pending], _finish_all([recv], _copy_out(flat, outs)), outs)

    @_refused_on_every_rank("scatter")
    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any) -> NbcollWork:
        root, (out,) = opts.rootRank, outputs
        recv = as_array(out, "tensor")
        send = None
        if self.rank() == root:
            (ins,) = inputs
            _same_numel(ins, out.numel(), "scatter_list", "one tensor per rank, each the output's size")
            send = as_array(_flat_like(ins), "scatter_list").array
        pending = self.comm.scatter(send, recv.array, root=root, async_op=True)
        return NbcollWork("scatter", [pending], _finish_all([recv]), [out])

    def alltoall_base(
        self, output: torch.Tensor, input: torch.Tensor, output_splits: list[int], input_splits: list[int], opts: Any
    ) -> NbcollWork:
        n = self.size()
        if not output_splits and not input_splits:
            return self._all_to_all_even(output, input)
        # nbcoll's all_to_all has equal blocks: uneven ones are grouped sends and receives, whose sizes every rank
        # agrees on first, so that a refusal on one rank is heard by all (split_agreement)
        ins = outs = send = recv = refusal = None
        try:
            ins = _split_rows(input, input_splits, n, "input_split_sizes")
            outs = _split_rows(output, output_splits, n, "output_split_sizes")
            send, recv = as_array(input, "input"), as_array(output, "output")
        except (TypeError, ValueError) as exc:
            refusal = exc
        sends = [b - a for a, b in ins] if refusal is None else []
        recvs = [b - a for a, b in outs] if refusal is None else []
        agree_on_sizes(self.comm, "all_to_all_single", sends, recvs, refusal)
        self._exchange([send.array[a:b] for a, b in ins], [recv.array[a:b] for a, b in outs])
        recv.write_back()
        return done("all_to_all", [output])

    @_refused_on_every_rank("all_to_all")
    def _all_to_all_even(self, output: torch.Tensor, input: torch.Tensor) -> NbcollWork:
        n = self.size()
        if input.numel() % n or input.numel() != output.numel():
            raise ValueError(
                f"nbcoll backend: all_to_all_single without split sizes needs input and output of one size, a "
                f"multiple of the {n} ranks; got {input.numel()} and {output.numel()} elements"
            )
        send, recv = as_array(input, "input"), as_array(output, "output")
        pending = self.comm.all_to_all(send.array, recv.array, async_op=True)
        return NbcollWork("all_to_all", [pending], _finish_all([recv]), [output])

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None) -> NbcollWork:
        n = self.size()
        sends = recvs = refusal = None
        try:  # every rank agrees on the sizes first (split_agreement), so that a refusal here is heard by all
            if len(outputs) != n or len(inputs) != n:
                raise ValueError(
                    f"nbcoll backend: all_to_all needs {n} input and {n} output tensors (one per rank), got "
                    f"{len(inputs)} and {len(outputs)}"
                )
            sends = [as_array(t, f"input_tensor_list[{p}]") for p, t in enumerate(inputs)]
            recvs = [as_array(t, f"output_tensor_list[{p}]") for p, t in enumerate(outputs)]
        except (TypeError, ValueError) as exc:
            refusal = exc
        sizes = [[s.array.size for s in staged] if refusal is None else [] for staged in (sends, recvs)]
        agree_on_sizes(self.comm, "all_to_all", *sizes, refusal)
        self._exchange([s.array for s in sends], [r.array for r in recvs])
        for r in recvs:
            r.write_back()
        return done("all_to_all", outputs)

    def _exchange(self, sends: list[Any], recvs: list[Any]) -> None:
        """Block ``p`` of ``sends`` to rank ``p``, block ``p`` of ``recvs`` from it: one group of sends and
        receives (no pair can deadlock), this rank's own block copied."""
        me = self.rank()  # the sizes are agreed (agree_on_sizes): every pair matches, this rank's own block too
        if sends[me].size:
            copy_kernels.copy(recvs[me], sends[me])
        with self.comm.group():
            for p in range(self.size()):
                if p != me and sends[p].size:
                    self.comm.send(sends[p], p)
                if p != me and recvs[p].size:
                    self.comm.recv(recvs[p], p)

    # -- point to point and barrier -----------------------------------------------------------------------------

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> NbcollWork:
        _no_tag(tag)  # dist.isend returns this Work at once; dist.send waits on it
        pending = [self.comm.isend(as_array(t, "tensor").array, dst) for t in tensors]
        return NbcollWork("send", pending, _nothing, tensors)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> NbcollWork:
        _no_tag(tag)
        staged = [as_array(t, "tensor") for t in tensors]
        pending = [self.comm.irecv(s.array, src) for s in staged]
        return NbcollWork("recv", pending, _finish_all(staged), tensors)

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int = 0) -> NbcollWork:
        raise ValueError("nbcoll backend: recv without src (any source) is not supported; name the sending rank")

    def barrier(self, opts: Any = None) -> NbcollWork:
        return NbcollWork("barrier", [self.comm.barrier(async_op=True)], _nothing, [])

    # torch calls some methods by two names: its C++ callers (DDP, functional collectives) by the first ones
    # above, its Python functions (all_gather_into_tensor, the coalescing manager, ...) by these.
    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base
    all_to_all_single = alltoall_base
    all_gather_single_coalesced = allgather_into_tensor_coalesced
    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    def allgather_coalesced(
        self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None
    ) -> NbcollWork:
        return self.allgather(outputs, inputs, opts)


def _nothing() -> None:
    pass


def _joined(name: str, works: list[NbcollWork], tensors: list[torch.Tensor]) -> NbcollWork:
    """One work for several (a list-taking call): waiting on it waits on each, in order."""
    return NbcollWork(name, works, _nothing, tensors)


def _no_tag(tag: int) -> None:
    if tag != 0:
        raise ValueError(
            f"nbcoll backend: send/recv tag={tag} is not supported: messages between two ranks arrive in the order "
            "they were sent; use tag 0"
        )


def _split_rows(tensor: torch.Tensor, splits: list[int], n: int, arg: str) -> list[tuple[int, int]]:
    """(start, stop) in elements of each rank's block of ``tensor``, ``splits`` counting rows (dimension 0)."""
    rows = tensor.shape[0] if tensor.dim() else 1
    per_row = tensor.numel() // rows if rows else 0
    splits = list(splits) if splits else [rows // n] * n
    if len(splits) != n or sum(splits) != rows or any(s < 0 for s in splits):
        raise ValueError(
            f"nbcoll backend: {arg}: expected {n} sizes >= 0 summing to the {rows} rows of the tensor, got {splits}"
        )
    bounds, start = [], 0
    for s in splits:
        bounds.append((start * per_row, (start + s) * per_row))
        start += s
    return bounds
