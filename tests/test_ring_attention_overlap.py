"""Ring attention overlaps each hop with compute, double-buffers what it receives, and never hangs on a failure.

On loopback worlds (numpy, float64) :func:`nbcoll.parallel.ring_attention_hops.watch` records every post,
compute and wait of the forward and backward passes. For every hop the check wants the order post, compute of
the block it travels under, end of that compute, wait; a serial schedule (send, then compute) is shown to fail
it. A watcher that holds each compute until the hops in flight have landed makes a receive into the wrong buffer
visible in the result: with the two buffer sets the result is bit for bit the unwatched one, with one set it is
wrong. A rank that raises before or between its hops releases the others (an abort), and a rank that stops
answering makes its peer's wait end in the watchdog's timeout, naming the operation, the rank and the peer.
"""

import threading
import time

import numpy as np
import pytest

import nbcoll
from nbcoll.comm import CommConfig, loopback
from nbcoll.comm.errors import CommTimeoutError
from nbcoll.nn.attention import causal_mask, scaled_dot_product_attention
from nbcoll.parallel import ring_attention, zigzag_split
from nbcoll.parallel.ring_attention_hops import HopEvent, RingHops, watch
from nbcoll.tensors import tensor

BATCH, HEADS, HEAD_DIM = 1, 2, 3


@pytest.fixture(autouse=True)
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


def _inputs(seq_len):
    rng = np.random.default_rng(seq_len)
    return [rng.standard_normal((BATCH, HEADS, seq_len, HEAD_DIM)) for _ in range(4)]


def _ring(nranks, seq_len, causal, backward=True, config=None):
    """Every rank's output and q, k, v gradients of ring attention over the zig-zag split of ``seq_len``."""
    q, k, v, g = _inputs(seq_len)

    def body(comm):
        local = [tensor(zigzag_split(x, comm.size, comm.rank), requires_grad=True) for x in (q, k, v)]
        out = ring_attention(*local, comm, causal=causal)
        if not backward:
            return [out.numpy()]
        (out * tensor(zigzag_split(g, comm.size, comm.rank))).sum().backward()
        return [out.numpy()] + [t.grad.numpy() for t in local]

    return loopback.run(nranks, body, config=config)


def _one_process(seq_len, causal, nranks):
    q, k, v, _ = _inputs(seq_len)
    out, _ = scaled_dot_product_attention(*map(tensor, (q, k, v)), causal_mask(seq_len, seq_len) if causal else None)
    return [zigzag_split(out.numpy(), nranks, r) for r in range(nranks)]


def _overlap_faults(events, nranks):
    """Every hop whose transfer is not in flight across the compute it should hide behind, in words.

    A key/value hop bringing block ``s`` must be posted before the compute on block ``s - 1`` starts and waited
    for after it ends; in backward the gradients hop bringing block ``s``'s accumulators must be in flight across
    the compute on block ``s`` (the last, which takes them home, only posted before it is waited for).
    """
    faults = []
    for rank in range(nranks):
        for ring in sorted({e.ring for e in events}):
            order = [(e.name, e.what, e.step) for e in events if e.rank == rank and e.ring == ring]
            at = {key: i for i, key in enumerate(order)}
            hops = [("kv", s, s - 1) for s in range(1, nranks)]
            if ring == "backward" and nranks > 1:  # one rank keeps its gradients: no hop
                hops += [("grads", s, s if s < nranks else None) for s in range(1, nranks + 1)]
            for what, step, under in hops:
                marks = [("post", what, step)]
                marks += [] if under is None else [("compute", "block", under), ("computed", "block", under)]
                marks += [("wait", what, step)]
                seen = [at.get(mark) for mark in marks]
                if None in seen or seen != sorted(seen):
                    got = [None if i is None else order[i] for i in seen]
                    faults.append(f"rank {rank} {ring}: {what} hop {step}: {got}")
    return faults


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_every_hop_is_in_flight_while_the_block_before_it_is_computed(nranks, causal):
    events = []
    seq_len = 4 * nranks + 3  # uneven: the blocks differ in length
    with watch(events.append):
        got = _ring(nranks, seq_len, causal)
    assert _overlap_faults(events, nranks) == []
    posts = [e for e in events if e.name == "post"]
    assert len(posts) == nranks * ((nranks - 1) + (2 * nranks - 1 if nranks > 1 else 0))  # kv both ways, grads
    for e in events:  # the schedule's own view: at each compute but the last, the next block's hop is unwaited
        if e.name == "compute" and e.step < nranks - 1:
            assert [(h.what, h.step) for h in e.in_flight if h.what == "kv"] == [("kv", e.step + 1)]
    for rank, want in enumerate(_one_process(seq_len, causal, nranks)):
        np.testing.assert_allclose(got[rank][0], want, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("ring", ["forward", "backward"])
def test_a_block_is_computed_on_while_the_next_one_provably_has_not_arrived(ring):
    # The rank that sends block 2 to rank 1 is held back until rank 1 computes on block 1: the compute can only
    # run while that hop is in flight. A hop that ran to its end inside post() would block rank 1 there for good.
    sender = 0 if ring == "forward" else 2
    released, seen = threading.Event(), []

    def hold(event):
        if (event.rank, event.ring, event.name, event.step) == (sender, ring, "wait", 1) and event.what == "kv":
            assert released.wait(timeout=20), "rank 1 never computed on block 1 with block 2 on its way"
        if (event.rank, event.ring, event.name, event.step) == (1, ring, "compute", 1):
            seen.extend((h.what, h.step, h.landed()) for h in event.in_flight if h.what == "kv")
            released.set()

    with watch(hold):
        _ring(3, 11, causal=True)
    assert seen == [("kv", 2, False)]


def test_the_overlap_check_fails_on_a_schedule_that_hops_after_computing():
    serial = []
    for rank in range(3):
        for step in range(3):
            serial += [HopEvent(rank, "forward", name, "block", step) for name in ("compute", "computed")]
            if step < 2:  # send and receive the next block only once this one is done, as a blocking hop does
                serial += [HopEvent(rank, "forward", name, "kv", step + 1) for name in ("post", "wait")]
    faults = _overlap_faults(serial, 3)
    assert len(faults) == 3 * 2 and "kv hop 1" in faults[0]


def _landing_first(seen_aliases):
    """A watcher that lets every hop in flight land before a compute reads its block, noting any receive buffer
    that shares memory with that block or with what its hop sends."""

    def hold(event):
        if event.name != "compute":
            return
        for hop in event.in_flight:
            assert hop.landed(timeout=30), f"rank {event.rank}: {hop} did not land"
            for received in hop.received:
                if any(nbcoll.memory.overlaps(received, a) for a in (*event.block, *hop.sent)):
                    seen_aliases.append((event.rank, event.ring, hop.what, hop.step))

    return hold


@pytest.mark.parametrize("nranks", [3, 4])
def test_a_received_block_never_lands_on_the_block_being_computed_or_sent(nranks):
    seq_len, aliases = 3 * nranks + 2, []
    plain = _ring(nranks, seq_len, causal=True)
    with watch(_landing_first(aliases)):
        held = _ring(nranks, seq_len, causal=True)
    assert aliases == []
    for a, b in zip(plain, held, strict=True):  # bit for bit: what landed early overwrote nothing in use
        for x, y in zip(a, b, strict=True):
            assert x.tobytes() == y.tobytes()


def test_one_buffer_set_for_every_hop_would_be_visible(monkeypatch):
    # The check above can fail: receiving every hop into buffer set 0 lands block s + 1 on block s, mid-compute.
    receive_buffers = RingHops._receive_buffers
    monkeypatch.setattr(
        RingHops, "_receive_buffers", lambda self, what, step, *rest: receive_buffers(self, what, 0, *rest)
    )
    seq_len, aliases = 11, []
    with watch(_landing_first(aliases)):
        got = _ring(3, seq_len, causal=True, backward=False)
    assert ("kv", 2) in {(what, step) for _, _, what, step in aliases}
    want = _one_process(seq_len, True, 3)
    assert not all(np.allclose(got[r][0], want[r]) for r in range(3))


def _fail_on(rank, ring, name, step, error):
    def fail(event):
        if (event.rank, event.ring, event.name, event.step) == (rank, ring, name, step):
            raise error

    return fail


@pytest.mark.parametrize(
    "ring, moment",
    [("forward", "wait"), ("backward", "computed")],
    ids=["before-its-hop", "with-hops-in-flight"],
)
def test_a_rank_that_raises_mid_ring_releases_the_others(ring, moment):
    # forward: rank 1 has its first block in and raises before it posts the next hop; backward: it raises after
    # computing on block 1, with that block's gradients and the next block in flight.
    config = CommConfig(timeout=60)
    start = time.monotonic()
    with watch(_fail_on(1, ring, moment, 1, RuntimeError("rank 1 gives up"))):
        with pytest.raises(RuntimeError, match="rank 1 gives up") as info:
            _ring(3, 11, causal=True, config=config)
    assert time.monotonic() - start < 30  # released by the abort, not by the 60 s timeout
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "raised on rank 1" in notes and "CommAbortedError" in notes


class _Gone(Exception):
    """Raised by the watcher on the rank that then leaves the ring without a word."""


def test_a_peer_that_stops_answering_ends_the_wait_with_a_timeout_naming_rank_and_peer():
    x = _inputs(11)[0]
    stop = _fail_on(1, "forward", "wait", 1, _Gone())

    def body(comm):
        local = tensor(np.ascontiguousarray(zigzag_split(x, comm.size, comm.rank)))
        try:
            return ring_attention(local, local, local, comm, causal=True).numpy()
        except _Gone:
            return None  # rank 1 leaves quietly: its peers are not told (no abort)

    with watch(stop), pytest.raises(CommTimeoutError, match=r"rank 2: recv from peer 1 made no progress for 2 s"):
        loopback.run(3, body, config=CommConfig(timeout=2))
