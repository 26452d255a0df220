"""The loopback world: ranks as threads of this process, with real communicators and no mpiexec."""

import glob
import os
import threading
import time

import numpy as np
import pytest

import nbcoll
from nbcoll.comm import CommAbortedError, CommConfig, CommTimeoutError, Loopback, loopback
from nbcoll.comm.inprocess import Fabric, ThreadComm
from nbcoll.comm.local_memory import LocalBuffer

SMALL = CommConfig(buffsize=256, steps=8, timeout=30)


@pytest.fixture(autouse=True)
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


def own_segments() -> set[str]:
    return set(glob.glob(f"/dev/shm/nbcoll_{os.getpid()}_*"))


def test_run_returns_every_rank_result_in_rank_order():
    before = own_segments()
    x = np.arange(5, dtype=np.int64)
    results = loopback.run(4, lambda comm: comm.all_reduce(x + comm.rank), config=SMALL)
    for result in results:
        assert np.array_equal(result, 4 * x + 6)
    assert own_segments() <= before, "a loopback world put its FIFOs in /dev/shm"


def test_a_world_keeps_its_communicators_between_runs():
    with nbcoll.loopback(3, SMALL) as world:
        assert len(world) == 3 and [comm.rank for comm in world] == [0, 1, 2]
        gathered = world.run(lambda comm: comm.all_gather(np.full(2, comm.rank, np.int32), np.zeros(6, np.int32)))
        assert all(np.array_equal(g, [0, 0, 1, 1, 2, 2]) for g in gathered)
        world.run(lambda comm: comm.broadcast(np.arange(40, dtype=np.float64), root=1, algo="ring"))
        assert world[1].counters.bytes_sent > 0 and world[0].transport_to(1) == "ipc"
        sizes = world.run(lambda comm, k: comm.split(color=comm.rank % k).size, 2)
        assert sizes == [2, 1, 2]
    assert world[0].closed
    with pytest.raises(ValueError, match="closed"):
        world.run(lambda comm: None)


def test_point_to_point_and_groups_over_either_transport():
    def ring(comm):
        y = np.zeros(100, np.float32)
        with comm.group():
            comm.send(np.full(100, comm.rank, np.float32), (comm.rank + 1) % comm.size)
            comm.recv(y, (comm.rank - 1) % comm.size)
        return y

    for transport in ("ipc", "mpi"):
        config = CommConfig(buffsize=256, steps=8, timeout=30, transport=transport)
        results = loopback.run(3, ring, config=config)
        assert [int(y[0]) for y in results] == [2, 0, 1] and all(np.all(y == y[0]) for y in results)


def test_split_dup_and_shrink():
    def body(comm):
        left_out = comm.split(color=nbcoll.NOCOLOR if comm.rank == 0 else 1)
        twin = comm.dup()
        total = twin.all_reduce(np.ones(3, np.int32))
        survivors = comm.shrink([2]) if comm.rank != 2 else None
        summed = survivors.all_reduce(np.full(2, comm.rank, np.int32)) if survivors else None
        return left_out, twin.size, total, survivors and survivors.size, summed

    results = loopback.run(4, body, config=SMALL)
    assert results[0][0] is None and results[1][0].size == 3
    assert all(r[1] == 4 and np.all(r[2] == 4) for r in results)
    assert [r[3] for r in results] == [3, 3, None, 3]
    assert np.all(results[3][4] == 0 + 1 + 3)


def test_an_error_on_one_rank_releases_the_others_and_is_raised():
    def body(comm):
        if comm.rank == 1:
            raise RuntimeError("rank one gives up")
        comm.all_reduce(np.ones(4, np.float32))  # would wait for rank 1 until the 30 s timeout

    start = time.monotonic()
    with pytest.raises(RuntimeError, match="rank one gives up") as info:
        loopback.run(3, body, config=SMALL)
    assert time.monotonic() - start < 20
    notes = "\n".join(info.value.__notes__)
    assert "raised on rank 1" in notes and "CommAbortedError" in notes


def test_an_error_while_building_releases_the_others():
    real_init = nbcoll.comm.communicator.Communicator.__init__

    def flaky_init(self, mpi_comm, *args, **kwargs):
        if mpi_comm.Get_rank() == 2:
            raise OSError("no memory for the FIFOs")
        real_init(self, mpi_comm, *args, **kwargs)

    nbcoll.comm.communicator.Communicator.__init__ = flaky_init
    try:
        with pytest.raises(OSError, match="no memory"):
            Loopback(3, SMALL)
    finally:
        nbcoll.comm.communicator.Communicator.__init__ = real_init


def test_bad_arguments_name_what_was_expected():
    with pytest.raises(ValueError, match=r"nranks: expected an int >= 1, got 0"):
        loopback(0)
    with pytest.raises(TypeError, match="config: expected a CommConfig"):
        loopback(2, config={"timeout": 1})
    with loopback(1, SMALL) as world:
        with pytest.raises(TypeError, match="fn: expected a function"):
            world.run(42)


def test_a_wait_in_the_wiring_names_the_call_the_rank_and_the_late_peers():
    fabric = Fabric(nranks=3, timeout=0.3)
    comm = ThreadComm(fabric, ("t",), rank=0, size=3)
    with pytest.raises(CommTimeoutError, match=r"rank 0: allgather waited 0.3 s .* rank\(s\) \[1, 2\] to call"):
        comm.allgather(1)
    fabric.fail("rank 2 raised KeyError")
    with pytest.raises(CommAbortedError, match="rank 0: barrier stopped: rank 2 raised KeyError"):
        comm.Barrier()


def test_messages_match_in_order_and_synchronous_sends_wait_for_a_receive():
    fabric = Fabric(nranks=2, timeout=5)
    a, b = (ThreadComm(fabric, ("t",), rank, 2) for rank in range(2))
    first, second = np.array([1, 2], np.int64), np.array([3, 4], np.int64)
    sync = a.Issend([first, None], dest=1, tag=5)
    a.Isend([second, None], dest=1, tag=6)
    assert not sync.Test()
    got = [np.zeros(2, np.int64), np.zeros(2, np.int64)]
    requests = [b.Irecv([buf, None], source=0) for buf in got]
    assert sync.Test() and all(r.Test() for r in requests)
    assert got[0].tolist() == [1, 2] and got[1].tolist() == [3, 4]
    # A receive from a rank that has sent nothing does not hold up one from a rank that has.
    c = ThreadComm(fabric, ("t",), 2, 3)
    waiting = b.Irecv([np.zeros(2, np.int64), None], source=0)
    later = b.Irecv([got[0], None], source=2)
    c.Isend([second, None], dest=1)
    assert later.Test() and not waiting.Test()
    a.Isend([first, None], dest=1)
    assert waiting.Test()
    a.Isend([np.zeros(3, np.int64), None], dest=1, tag=7)
    too_small = b.Irecv([np.zeros(2, np.int64), None], source=0)
    with pytest.raises(ValueError, match="24 bytes does not fit the receive buffer of 16 bytes"):
        too_small.Test()


def test_a_receive_completes_only_once_its_bytes_are_in_the_buffer(monkeypatch):
    """The sender's thread copies into a posted receive; the receiver tests it without the fabric's lock, so the
    receive must not look complete while the copy is still under way."""
    from nbcoll.comm import fabric as fabric_module

    copying, finish = threading.Event(), threading.Event()
    real_copy = fabric_module.copy_into

    def slow_copy(buffer, payload, what):
        buffer[:1] = payload[:1]  # a first byte lands, then the copy stalls
        copying.set()
        assert finish.wait(5)
        real_copy(buffer, payload, what)

    fabric = Fabric(nranks=2, timeout=5)
    a, b = (ThreadComm(fabric, ("t",), rank, 2) for rank in range(2))
    got = np.zeros(4, np.int64)
    request = b.Irecv([got, None], source=0)
    monkeypatch.setattr(fabric_module, "copy_into", slow_copy)
    sender = threading.Thread(target=a.Isend, args=([np.array([1, 2, 3, 4], np.int64), None],), kwargs={"dest": 1})
    sender.start()
    assert copying.wait(5)
    assert not request.Test()  # mid-copy: not complete, so the receiver cannot read a half-written buffer
    finish.set()
    sender.join(5)
    assert request.Test() and got.tolist() == [1, 2, 3, 4]


def test_a_cancelled_receive_completes_and_leaves_the_message_to_the_next_one():
    """The MPI transport cancels its unmatched receives when a connection closes, as MPI allows."""
    fabric = Fabric(nranks=2, timeout=5)
    a, b = (ThreadComm(fabric, ("t",), rank, 2) for rank in range(2))
    twin, other = np.zeros(2, np.int64), np.zeros(2, np.int64)  # equal buffers: cancel must pick by identity
    cancelled, kept = b.Irecv([twin, None], source=0), b.Irecv([other, None], source=0)
    cancelled.Cancel()
    assert cancelled.Test() and not kept.Test()
    a.Isend([np.array([7, 8], np.int64), None], dest=1)
    assert kept.Test() and other.tolist() == [7, 8] and twin.tolist() == [0, 0]
    kept.Cancel()  # already matched: nothing changes
    assert kept.Test() and other.tolist() == [7, 8]


def test_local_buffers_live_by_handle_until_unlinked():
    owner = LocalBuffer.create(8, np.uint8, tag="t", host=True)
    peer = LocalBuffer.open(owner.handle)
    peer.array[3] = 7
    assert owner.array[3] == 7
    owner.unlink()
    with pytest.raises(FileNotFoundError, match="closed or unlinked"):
        LocalBuffer.open(owner.handle)
    owner.close()
    with pytest.raises(ValueError, match="closed"):
        _ = owner.array


@pytest.mark.simulator
def test_collectives_on_the_simulator():
    with nbcoll.use_backend("sim"):
        outs = loopback.run(
            3,
            lambda comm: nbcoll.to_host(comm.all_reduce(nbcoll.to_device(np.arange(7, dtype=np.float32)), algo="tree")),
            config=SMALL,
        )
    assert all(np.array_equal(out, 3 * np.arange(7)) for out in outs)


def test_threads_are_named_after_their_rank():
    names = loopback.run(2, lambda comm: threading.current_thread().name, config=SMALL)
    assert names == ["nbcoll-loopback-rank0", "nbcoll-loopback-rank1"]
