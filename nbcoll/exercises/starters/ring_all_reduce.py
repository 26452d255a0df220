"""Exercise ring_all_reduce: write the ring all-reduce in nbcoll's primitives (tutorial 08 shows it run).

An algorithm is a generator: it yields one primitive per step of this rank's part, and the communicator runs
each when its peers are ready. ``ctx`` has ``rank``, ``nranks``, ``chunk_elems``, ``op`` and ``post``;
``ctx.prims(local, out, recv_from=[prev], send_to=[nxt], op=ctx.op, post=ctx.post)`` gives the primitives, bound
once to the two buffers and the neighbours, each call taking only the element range ``[lo, hi)`` it moves::

    prims.send(lo, hi)                    slot(next) = local[lo:hi]
    prims.recv_reduce_send(lo, hi)        slot(next) = local[lo:hi] + slot(prev)
    prims.recv_reduce_copy_send(lo, hi)   out[lo:hi] = local[lo:hi] + slot(prev); slot(next) = out[lo:hi]
    prims.recv_copy_send(lo, hi)          out[lo:hi] = slot(prev); slot(next) = out[lo:hi]
    prims.recv(lo, hi)                    out[lo:hi] = slot(prev)

``rounds(local.size, n, ctx.chunk_elems)`` cuts the buffer into rounds of n blocks (a list of n ``(lo, hi)``
spans, some maybe empty), each at most one chunk. The check runs your function as nbcoll's ring all-reduce on 2,
3 and 4 ranks, beside the reference, and reports the first step whose chunk or peer differs. Check your work
with::

    python -m nbcoll exercise ring_all_reduce --check ring_all_reduce.py
"""

from nbcoll.comm.algorithms.common import rounds  # noqa: F401


def all_reduce(ctx, local, out):
    # Plan, for rank r of n (prev = r - 1, nxt = r + 1, modulo n), for each round's blocks:
    #   reduce-scatter, n - 1 steps: send block r - 1; then for j = 2 .. n - 1, recv_reduce_send block r - j;
    #     then block r arrives with every other rank's part: recv_reduce_copy_send it into out (it is final)
    #   all-gather, n - 1 steps: for j = 1 .. n - 2, recv_copy_send block r - j; then recv block r + 1
    raise NotImplementedError("all_reduce: yield the ring's primitives")
    yield  # a generator, like every algorithm
