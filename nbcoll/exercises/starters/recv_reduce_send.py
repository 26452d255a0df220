"""Exercise recv_reduce_send: write NCCL's recvReduceSend as a device function (tutorial 21 shows the ring).

One hop of the ring's reduce-scatter: the chunk the previous rank put in this rank's FIFO slot is folded with
this rank's own elements and put in the next rank's slot::

    slot(next)[i] = op(local[rank, lo + i], slot(prev)[i])      for i in [0, hi - lo)

Every thread of the rank's group calls it (``nthreads`` of them; thread ``thread`` takes elements ``thread,
thread + nthreads, ...``). What it has, unpacked from ``prims`` (see nbcoll.comm.device.prims)::

    fifo[channel, r, slot, i]    rank r's incoming FIFO: step s is in slot s % nsteps (nsteps = fifo.shape[2])
    tail[counter_at(c, r, n)]    steps posted into rank r's FIFO (written by its previous rank)
    head[counter_at(c, r, n)]    steps rank r has consumed from its FIFO (written by rank r)
    state[dp.SENT], state[dp.RECEIVED]   this rank's steps sent and received so far (every thread keeps a copy)
    state[dp.CODE], state[dp.STEPS]      its failure code (dp.OK while all is well), and the steps it started

and the device functions to build it from: ``dp.wait_peer(counter, at, target, abort, spins)`` (spin until
``counter[at] >= target``; False once the abort word is set), ``dp.post_peer(counter, at, value, scope)``
(fence, then store), ``dp.group_sync(sync, group, nthreads)``, ``dp.fence(scope)``, ``dp.apply_op(op, a, b)``.

The check builds the ring all-reduce kernel with your function in place of ``dp.recv_reduce_send`` and runs it on
2, 3 and 4 simulated ranks beside NumPy's copy of the ring's steps (exact for integers), then compiles your
function to PTX for sm_90. Check your work with::

    python -m nbcoll exercise recv_reduce_send --check recv_reduce_send.py
"""

from numba import cuda

from nbcoll.comm.device import prims as dp

counter_at = dp._counter_at  # where rank r's counter of channel c is in tail or head (a device function)
PUBLISHED = dp._STATUS  # the word of a group's sync words in which its thread 0 publishes what it saw


@cuda.jit(device=True)
def recv_reduce_send(prims, local, out, lo, hi):
    fifo, tail, head, abort, sync, state, ids = prims
    channel, rank, nxt, thread, nthreads, group, op, scope, spins = ids
    # Plan, for every thread of the group:
    #   0. if state[dp.CODE] != dp.OK: return (an earlier step gave up); state[dp.STEPS] += 1;
    #      sent, received = state[dp.SENT], state[dp.RECEIVED]
    #   1. thread 0 only: wait until tail of this rank >= received + 1 (the chunk is there; else dp.ABORTED_RECV),
    #      then until head of nxt >= sent + 1 - nsteps (a slot is free; else dp.ABORTED_SEND); dp.fence(scope);
    #      publish the code in sync[group * dp.SYNC_WORDS + PUBLISHED]
    #   2. dp.group_sync, then every thread reads the published code: not OK -> state[dp.CODE] = code; return
    #   3. for this thread's i: fifo[channel, nxt, sent % nsteps, i] =
    #      dp.apply_op(op, local[rank, lo + i], fifo[channel, rank, received % nsteps, i])
    #   4. dp.group_sync (every element moved), then thread 0: post tail of nxt = sent + 1, head of rank =
    #      received + 1 (dp.post_peer); every thread: state[dp.SENT] = sent + 1, state[dp.RECEIVED] = received + 1
    raise NotImplementedError("recv_reduce_send: follow the plan above")
