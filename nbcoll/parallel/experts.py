"""Expert parallelism: a mixture-of-experts layer whose experts live on different ranks, fed by all-to-all.

Each token picks its ``top_k`` experts by gate probability. An expert takes at most ``capacity`` tokens from
each rank, ``capacity = ceil(capacity_factor * tokens * top_k / num_experts)``; first choices are served before
second choices, tokens in order. An assignment past capacity is dropped: it adds nothing to the output (a
residual around the layer carries the token on). Drops are counted in ``stats`` and ``dropped``, never silent.

Expert ``e`` lives on rank ``e // (num_experts / comm.size)``. One forward, on each rank::

    probs = softmax(gate(x))                                  (tokens, experts), gate replicated
    choose the top_k experts of each token; keep those within capacity; sort the kept rows by expert
    counts: all_to_all of how many rows go to each expert     (every rank learns what it will receive)
    rows:   uneven all-to-all of the rows (send/recv per peer)
    each local expert runs on its rows, from every rank at once
    rows:   the reverse uneven all-to-all brings the results home
    y[t] = sum over kept (t, e) of probs[t, e] * expert_e(x[t])

The backward of each exchange is the reverse exchange. The load-balancing loss (Switch Transformer),
``aux_loss = num_experts * sum_e f_e * P_e`` with ``f_e`` the share of tokens whose first choice is ``e`` and
``P_e`` their mean probability, is kept on the layer for the caller to add.

Training: the gate is replicated (data parallel), each expert exists once. With each rank's loss ``L_r / n``,
the experts' gradients are already complete (their backward sums every rank's contribution); the gate's are
summed over ranks: :func:`all_reduce_shared_gradients`.

Example::

    moe = MixtureOfExperts(16, 32, num_experts=4, comm=comm, top_k=2, capacity_factor=1.25)  # 4 / n experts here
    y = moe(x)                                       # x (.., 16) -> (.., 16)
    loss = task_loss(y) + 0.01 * moe.aux_loss
    moe.stats                                        # {"tokens": .., "dropped": .., "capacity": .., ...}
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

import nbcoll.functional as F
from nbcoll import memory
from nbcoll.kernels import copy as copy_kernels
from nbcoll.nn import FeedForward, Linear, Module, ModuleList
from nbcoll.parallel.functional import _all_gather
from nbcoll.tensors import Tensor
from nbcoll.tensors.function import Context, Function

if TYPE_CHECKING:
    from nbcoll.comm import Communicator


def _exchange_rows(comm: Communicator, x: Any, send_counts: np.ndarray, recv_counts: np.ndarray) -> Any:
    """Uneven all-to-all of rows: ``send_counts[p]`` rows of ``x`` (in rank order) go to rank ``p``;
    ``recv_counts[p]`` rows come from rank ``p``, stacked in rank order."""
    x = copy_kernels.contiguous(x)
    y = memory.empty((int(recv_counts.sum()),) + tuple(x.shape[1:]), x.dtype)
    send_at, recv_at = np.concatenate([[0], np.cumsum(send_counts)]), np.concatenate([[0], np.cumsum(recv_counts)])
    with comm.group():
        for peer in range(comm.size):
            if peer != comm.rank and send_counts[peer]:
                comm.send(x[send_at[peer] : send_at[peer + 1]], peer)
            if peer != comm.rank and recv_counts[peer]:
                comm.recv(y[recv_at[peer] : recv_at[peer + 1]], peer)
    me = comm.rank
    if send_counts[me]:
        copy_kernels.copy(y[recv_at[me] : recv_at[me + 1]], x[send_at[me] : send_at[me + 1]])
    return y


class AllToAllRows(Function):
    """``y = the rows every rank sent here``; backward sends each row's gradient back where the row came from."""

    @staticmethod
    def forward(ctx: Context, x: Any, send_counts: np.ndarray, recv_counts: np.ndarray, comm: Communicator) -> Any:
        ctx.comm, ctx.send_counts, ctx.recv_counts = comm, send_counts, recv_counts
        return _exchange_rows(comm, x, send_counts, recv_counts)

    @staticmethod
    def backward(ctx: Context, dy: Any) -> tuple:
        return _exchange_rows(ctx.comm, dy, ctx.recv_counts, ctx.send_counts), None, None, None


def _exchange_counts(comm: Communicator, per_expert: np.ndarray) -> np.ndarray:
    """All-to-all of row counts: ``per_expert`` (experts,) rows this rank sends to each expert; returns
    (ranks, local experts): the rows each rank sends to each expert of this rank."""
    received = memory.zeros(per_expert.size, np.int64)
    comm.all_to_all(memory.to_device(per_expert.astype(np.int64)), received)
    return memory.to_host(received).reshape(comm.size, -1)


class MixtureOfExperts(Module):
    """Top-k gated experts (transformer MLPs) split across ``comm``, with a capacity and a load-balancing loss.

    Example::

        >>> import numpy as np, nbcoll
        >>> from nbcoll.parallel import MixtureOfExperts
        >>> comm = nbcoll.init()                       # one rank holds every expert and exchanges nothing
        >>> moe = MixtureOfExperts(8, 16, num_experts=4, comm=comm, top_k=1)      # Switch routing
        >>> y = moe(nbcoll.tensor(np.random.default_rng(0).random((6, 8)).astype(np.float32)))
        >>> y.shape, len(moe.experts), moe.aux_loss.shape                         # output, experts here, balance loss
        ((6, 8), 4, ())
        >>> comm.destroy()

    ``experts`` holds this rank's experts only (``num_experts / comm.size`` of them); a one-rank ``comm`` holds
    them all and exchanges nothing, which is the reference the spread layer is checked against.
    """

    def __init__(
        self,
        dim: int,
        hidden_dim: int,
        num_experts: int,
        comm: Communicator,
        top_k: int = 2,
        capacity_factor: float = 1.25,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        if num_experts % comm.size:
            raise ValueError(f"num_experts: {num_experts} experts do not split evenly over {comm.size} ranks")
        if not 1 <= top_k <= num_experts:
            raise ValueError(f"top_k: expected 1 to num_experts={num_experts} experts per token, got {top_k}")
        if not capacity_factor > 0:
            raise ValueError(f"capacity_factor: expected a positive number, got {capacity_factor}")
        self.comm, self.num_experts, self.top_k, self.capacity_factor = comm, num_experts, top_k, capacity_factor
        self.local_experts = num_experts // comm.size
        self.gate = Linear(dim, num_experts, bias=False, dtype=dtype)
        self.experts = ModuleList([FeedForward(dim, hidden_dim, dtype=dtype) for _ in range(self.local_experts)])
        self.aux_loss: Tensor | None = None
        self.stats: dict[str, Any] = {}
        self.dropped = 0

    def _route(self, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """Kept (token, expert) assignments sorted by expert, first choices first; and the capacity."""
        tokens = probs.shape[0]
        capacity = math.ceil(self.capacity_factor * tokens * self.top_k / self.num_experts)
        choices = np.argsort(-probs, axis=1, kind="stable")[:, : self.top_k]
        filled = np.zeros(self.num_experts, np.int64)
        kept = []
        for rank_of_choice in range(self.top_k):
            for t in range(tokens):
                e = choices[t, rank_of_choice]
                if filled[e] < capacity:
                    filled[e] += 1
                    kept.append((t, e))
        kept = np.array(kept, np.int64).reshape(-1, 2)
        kept = kept[np.argsort(kept[:, 1], kind="stable")]
        return np.ascontiguousarray(kept[:, 0]), np.ascontiguousarray(kept[:, 1]), capacity

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        tokens, experts = x.shape[0], self.num_experts
        probs = self.gate(x).softmax(axis=-1)
        host_probs = probs.numpy()
        token_of, expert_of, capacity = self._route(host_probs)
        first_choice = np.bincount(host_probs.argmax(axis=1), minlength=experts) / tokens
        self.aux_loss = (probs.mean(axis=0) * Tensor(first_choice.astype(host_probs.dtype))).sum() * experts
        dropped = tokens * self.top_k - len(token_of)
        self.dropped += dropped
        per_expert = np.bincount(expert_of, minlength=experts)
        self.stats = {"tokens": tokens, "capacity": capacity, "dropped": dropped, "per_expert": per_expert.tolist()}

        # Dispatch: the counts first, so each rank knows how many rows it receives from whom, then the rows.
        incoming = _exchange_counts(self.comm, per_expert)  # (ranks, local experts)
        send_counts = per_expert.reshape(self.comm.size, -1).sum(axis=1)
        received = AllToAllRows.apply(x.index_select(0, token_of), send_counts, incoming.sum(axis=1), self.comm)

        # Each local expert runs once on its rows from every rank; the results go back in the received order.
        starts = np.cumsum(np.concatenate([[0], incoming.reshape(-1)]))[:-1].reshape(incoming.shape)
        outputs, order = [], []
        for i, expert in enumerate(self.experts):
            rows = np.concatenate([np.arange(starts[s, i], starts[s, i] + incoming[s, i]) for s in range(len(starts))])
            if rows.size:
                outputs.append(expert(received.index_select(0, rows)))
                order.append(rows)
        if outputs:
            done = outputs[0] if len(outputs) == 1 else F.concat(outputs, axis=0)
            done = done.index_select(0, np.argsort(np.concatenate(order)))
        else:
            done = received * 0.0  # no rows here: an empty result that still takes part in both exchanges
        back = AllToAllRows.apply(done, incoming.sum(axis=1), send_counts, self.comm)

        # Combine: each kept row, weighted by its gate probability, added to its token.
        weights = probs.reshape(-1).index_select(0, token_of * experts + expert_of).reshape(-1, 1)
        index = np.repeat(token_of.reshape(-1, 1), shape[-1], axis=1)
        y = Tensor(np.zeros((tokens, shape[-1]), host_probs.dtype)).scatter_add(index, back * weights, axis=0)
        return y.reshape(*shape)

    def expert_parameters(self) -> list:
        """The parameters of this rank's experts: each rank trains its own, so their gradients are not summed.

        >>> import nbcoll
        >>> from nbcoll.parallel import MixtureOfExperts
        >>> comm = nbcoll.init()
        >>> moe = MixtureOfExperts(8, 16, num_experts=2, comm=comm)
        >>> len(list(moe.expert_parameters())), len(list(moe.shared_parameters()))
        (8, 1)
        >>> comm.destroy()
        """
        return list(self.experts.parameters())

    def shared_parameters(self) -> list:
        """The replicated parameters (the gate): their gradients are summed over ranks after backward.

        >>> import nbcoll
        >>> from nbcoll.parallel import MixtureOfExperts
        >>> comm = nbcoll.init()
        >>> moe = MixtureOfExperts(8, 16, num_experts=2, comm=comm)
        >>> [p.shape for p in moe.shared_parameters()]
        [(2, 8)]
        >>> comm.destroy()
        """
        return list(self.gate.parameters())

    def extra_repr(self) -> str:
        return (
            f"experts {self.local_experts} of {self.num_experts} on this rank, top_k={self.top_k}, "
            f"capacity_factor={self.capacity_factor}"
        )


def all_reduce_shared_gradients(moe_model: Module, comm: Communicator) -> None:
    """Sum the gradients of every parameter that is not an expert's over ``comm`` (in place).

    >>> import numpy as np, nbcoll
    >>> from nbcoll.parallel import MixtureOfExperts, all_reduce_shared_gradients
    >>> comm = nbcoll.init()
    >>> moe = MixtureOfExperts(4, 8, num_experts=2, comm=comm, top_k=1)
    >>> moe(nbcoll.tensor(np.ones((3, 4), np.float32))).sum().backward()
    >>> all_reduce_shared_gradients(moe, comm)        # the gate is shared: its gradient summed over the ranks
    >>> moe.gate.weight.grad.shape
    (2, 4)
    >>> comm.destroy()
    """
    expert_ids = {id(p) for m in moe_model.modules() if isinstance(m, MixtureOfExperts) for p in m.experts.parameters()}
    for p in moe_model.parameters():
        if id(p) not in expert_ids and p.grad is not None:
            total = memory.empty(tuple(p.grad.shape), p.grad.dtype)
            comm.all_reduce(copy_kernels.contiguous(p.grad.data), total, op="sum")
            p.grad = Tensor(total)


def load_expert_state(moe: MixtureOfExperts, full_state: dict[str, Any], comm: Communicator) -> MixtureOfExperts:
    """Load the state of a layer holding every expert: this rank keeps its experts (renumbered from 0).

    >>> import nbcoll
    >>> from nbcoll.parallel import MixtureOfExperts, load_expert_state
    >>> comm = nbcoll.init()
    >>> full = MixtureOfExperts(4, 8, num_experts=2, comm=comm).state_dict()   # as one process holds it
    >>> moe = load_expert_state(MixtureOfExperts(4, 8, num_experts=2, comm=comm), full, comm)
    >>> len(moe.experts)
    2
    >>> comm.destroy()
    """
    first = comm.rank * moe.local_experts
    local = {}
    for name, value in full_state.items():
        if name.startswith("experts."):
            index, rest = name[len("experts.") :].split(".", 1)
            if not first <= int(index) < first + moe.local_experts:
                continue
            name = f"experts.{int(index) - first}.{rest}"
        local[name] = value
    moe.load_state_dict(local)
    return moe


def full_expert_state(moe: MixtureOfExperts, comm: Communicator) -> dict[str, np.ndarray]:
    """Every expert's parameters, gathered from the ranks, numbered as in one process (host arrays).

    >>> import nbcoll
    >>> from nbcoll.parallel import MixtureOfExperts, full_expert_state
    >>> comm = nbcoll.init()
    >>> state = full_expert_state(MixtureOfExperts(4, 8, num_experts=2, comm=comm), comm)
    >>> sorted(k for k in state if k.endswith("fc_in.weight"))
    ['experts.0.fc_in.weight', 'experts.1.fc_in.weight']
    >>> comm.destroy()
    """
    state = {}
    for name, value in moe.state_dict().items():
        if not name.startswith("experts."):
            state[name] = np.asarray(value)
            continue
        index, rest = name[len("experts.") :].split(".", 1)
        gathered = memory.to_host(_all_gather(comm, memory.to_device(np.ascontiguousarray(value)[None])))
        for s in range(comm.size):
            state[f"experts.{s * moe.local_experts + int(index)}.{rest}"] = gathered[s]
    return state


__all__ = [
    "AllToAllRows",
    "MixtureOfExperts",
    "all_reduce_shared_gradients",
    "full_expert_state",
    "load_expert_state",
]
