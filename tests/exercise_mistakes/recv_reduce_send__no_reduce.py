"""A typical mistake: the chunk is passed on as it came, without this rank's own elements folded in."""

from numba import cuda

from nbcoll.comm.device import prims as dp

counter_at = dp._counter_at  # where rank r's counter of channel c is in tail or head (a device function)
PUBLISHED = dp._STATUS  # the word of a group's sync words in which its thread 0 publishes what it saw


@cuda.jit(device=True)
def recv_reduce_send(prims, local, out, lo, hi):
    # Every thread of rank `rank`'s group: slot(next) = op(local[rank, lo:hi], slot(prev)), one chunk, one hop.
    fifo, tail, head, abort, sync, state, ids = prims
    channel, rank, nxt, thread, nthreads, group, op, scope, spins = ids
    if state[dp.CODE] != dp.OK:  # an earlier primitive gave up: so does this one
        return
    state[dp.STEPS] += 1
    nranks, nsteps = fifo.shape[1], fifo.shape[2]
    sent, received = state[dp.SENT], state[dp.RECEIVED]
    if thread == 0:  # one thread polls for the group
        code = dp.OK
        if not dp.wait_peer(tail, counter_at(channel, rank, nranks), received + 1, abort, spins):
            code = dp.ABORTED_RECV  # the chunk from prev never came
        elif not dp.wait_peer(head, counter_at(channel, nxt, nranks), sent + 1 - nsteps, abort, spins):
            code = dp.ABORTED_SEND  # next never freed a slot
        dp.fence(scope)  # the chunk is read only after its counter was seen
        sync[group * dp.SYNC_WORDS + PUBLISHED] = code
    dp.group_sync(sync, group, nthreads)  # the group learns what thread 0 saw
    code = sync[group * dp.SYNC_WORDS + PUBLISHED]
    if code != dp.OK:
        state[dp.CODE] = code
        return
    slot_in, slot_out = received % nsteps, sent % nsteps
    for i in range(thread, hi - lo, nthreads):
        v = fifo[channel, rank, slot_in, i]
        fifo[channel, nxt, slot_out, i] = v
    dp.group_sync(sync, group, nthreads)  # every element moved before thread 0 announces it
    if thread == 0:
        dp.post_peer(tail, counter_at(channel, nxt, nranks), sent + 1, scope)  # the chunk is in next's slot
        dp.post_peer(head, counter_at(channel, rank, nranks), received + 1, scope)  # my slot is free again
    state[dp.SENT] = sent + 1
    state[dp.RECEIVED] = received + 1
