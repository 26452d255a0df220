"""Plain inputs lent by address: the peers copy them straight out of the owner's process (``process_vm_readv``).

From ``NBCOLL_CMA_BYTES`` up, the unregistered input of a direct all-gather, all-to-all or (from three ranks) a
broadcast root's is read by the kernel out of its owner's process, one copy per hop, instead of being staged
through the owner's window. The cases of ``mpi_scripts/direct_path.py`` run here with the threshold at 8 bytes,
so every plain input of those collectives goes by address, and check exact results and the traffic counters
(nothing staged: only a rank's own block is copied within it). A loopback world's ranks are threads of one
process, which reads its own memory the same way; tests/test_direct_path.py runs the same cases under mpiexec
across processes. The rest: what the windows do where the kernel refuses, and a read that fails mid-round.
"""

import errno
import importlib.util
import os

import numpy as np
import pytest

import nbcoll
from nbcoll.comm import CommConfig, CommError, CommPeerLostError, loopback
from nbcoll.comm.transport import cross_memory


def _reads_itself() -> bool:
    """Whether this process may read its own memory with process_vm_readv (a seccomp filter may forbid it)."""
    probe = np.arange(8, dtype=np.int64)
    return cross_memory.probe(os.getpid(), probe.__array_interface__["data"][0], probe)


pytestmark = pytest.mark.skipif(not _reads_itself(), reason="process_vm_readv is missing or forbidden here")

BY_ADDRESS = CommConfig(buffsize=256, timeout=60, ll_bytes=0, cma_bytes=8)

SCRIPT = os.path.join(os.path.dirname(__file__), "mpi_scripts", "direct_path.py")
_spec = importlib.util.spec_from_file_location("direct_path_cases", SCRIPT)
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)


@pytest.fixture(autouse=True)
def numpy_backend(request):
    if "simulator" in request.node.name:  # that test runs on the device backend itself
        yield
        return
    with nbcoll.use_backend("numpy"):
        yield


def test_read_copies_bytes_out_of_a_process_and_names_what_failed():
    source = np.arange(1000, dtype=np.int32)
    into = np.zeros(1000, np.int32)
    cross_memory.read(os.getpid(), source.__array_interface__["data"][0], into)
    assert np.array_equal(into, source)
    empty = np.zeros(0, np.int32)
    cross_memory.read(os.getpid(), 0, empty)  # nothing to read: no call at all
    with pytest.raises(OSError, match="process_vm_readv of 4000 bytes from process") as caught:
        cross_memory.read(os.getpid(), 8, into)  # page zero is never mapped
    assert caught.value.errno == errno.EFAULT
    assert not cross_memory.probe(os.getpid(), 8, source[:8])


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_plain_inputs_lent_by_address_are_exact_and_copied_once_per_hop(nranks):
    def body(comm):
        windows = comm.engine.direct_windows()
        return cases.check_rank(comm), windows is not None and windows.pids is not None

    for problems, by_address in loopback.run(nranks, body, config=BY_ADDRESS):
        assert problems == []
        assert by_address == (nranks > 1)  # one rank has no windows


def _gather_twice(comm):
    """An all-gather of a plain input lent by address, then the same call again (a replay); what it copied within
    this rank."""
    x = np.arange(100, dtype=np.int64) + 1000 * comm.rank
    y = np.zeros(100 * comm.size, np.int64)
    outs = []
    for _ in range(2):
        comm.reset_counters()
        comm.all_gather(x, y, algo="direct")
        outs.append((y.copy(), comm.counters[comm.rank].bytes_copied))
    return outs, comm.engine.replays.hits


def test_a_replayed_call_reads_the_same_input_by_address_again():
    expected = np.concatenate([np.arange(100) + 1000 * p for p in range(3)])
    for outs, hits in loopback.run(3, _gather_twice, config=BY_ADDRESS):
        assert hits == 1
        for y, own in outs:
            assert np.array_equal(y, expected)
            assert own == 800  # this rank's own block only: nothing staged


@pytest.mark.parametrize("collective", ["all_gather", "all_to_all"])
def test_a_rank_copies_its_own_block_itself_and_reads_only_its_peers_by_address(monkeypatch, collective):
    from nbcoll.comm import window_step

    reads, original = [], window_step.WindowStep._read_lent

    def recorded(step, rank, into):
        reads.append((step.w.rank, rank))
        original(step, rank, into)

    monkeypatch.setattr(window_step.WindowStep, "_read_lent", recorded)

    def one_call(comm):
        n = comm.size
        x = np.arange(100 * n, dtype=np.int64) + 1000 * comm.rank
        y = np.zeros(100 * n, np.int64)
        getattr(comm, collective)(x[:100] if collective == "all_gather" else x, y, algo="direct")
        return y

    outs = loopback.run(3, one_call, config=BY_ADDRESS)
    for r, y in enumerate(outs):
        blocks = [np.arange(100) + 1000 * p + (0 if collective == "all_gather" else 100 * r) for p in range(3)]
        assert np.array_equal(y, np.concatenate(blocks))
    assert sorted(set(reads)) == [(r, p) for r in range(3) for p in range(3) if p != r]


def test_below_the_threshold_or_at_zero_a_plain_input_is_staged():
    for config in (CommConfig(buffsize=4096, ll_bytes=0, cma_bytes=801), CommConfig(buffsize=4096, ll_bytes=0,
                                                                                    cma_bytes=0)):  # fmt: skip
        for outs, _ in loopback.run(2, _gather_twice, config=config):
            assert all(own == 1600 for _, own in outs)  # the own block and the staging copy


def test_where_one_rank_cannot_read_its_peers_every_rank_stages(monkeypatch):
    real = cross_memory.probe

    def refused_on_rank_1(pid, address, expected):
        return False if expected[0] != 1000 and threading_rank() == 1 else real(pid, address, expected)

    monkeypatch.setattr(cross_memory, "probe", refused_on_rank_1)
    for outs, _ in loopback.run(3, _gather_twice, config=BY_ADDRESS):
        for y, own in outs:
            assert np.array_equal(y, np.concatenate([np.arange(100) + 1000 * p for p in range(3)]))
            assert own == 1600  # staged: the probe failed on one rank, so no rank lends by address


def threading_rank() -> int:
    import threading

    return int(threading.current_thread().name.rsplit("rank", 1)[1])


def test_a_read_that_fails_mid_round_raises_on_every_rank_naming_the_peer(monkeypatch):
    real = cross_memory.read

    def rank_0_is_gone(pid, address, into):  # as the kernel answers for a process that has exited
        if threading_rank() == 1 and into.nbytes > 64:  # the set-up's probes (64 bytes) went well
            raise OSError(errno.ESRCH, "No such process")
        real(pid, address, into)

    monkeypatch.setattr(cross_memory, "read", rank_0_is_gone)

    def body(comm):
        x = np.arange(64, dtype=np.int64)
        y = np.full(192, -7, np.int64)
        try:
            comm.all_gather(x, y, algo="direct")
        except CommError as exc:
            return type(exc), str(exc)
        return None, ""

    outcomes = loopback.run(3, body, config=CommConfig(buffsize=256, timeout=2, ll_bytes=0, cma_bytes=8))
    kind, message = outcomes[1]
    assert kind is CommPeerLostError, outcomes
    assert "rank 1: all_gather (direct) failed: peer rank 0 (pid" in message, message
    assert "has exited; this rank was reading its input out of its process (direct_recv, round 1)" in message
    for kind, message in (outcomes[0], outcomes[2]):  # no rank returns as if all went well
        assert kind is not None and issubclass(kind, CommError), outcomes
        assert "all_gather #1 (direct)" in message and "ranks [1]" in message, message


def test_plain_device_arrays_are_read_by_address_on_the_simulator():
    # A few elements only: the own-block copy is a simulated kernel launch; the peers' blocks come by address.
    from nbcoll.backend import device_backend

    if device_backend() != "sim":
        pytest.skip("the loopback world runs on numpy and sim")

    def body(comm):
        n, r = comm.size, comm.rank
        x = nbcoll.to_device(np.arange(2 * n, dtype=np.int64) + 10 * r)
        out = nbcoll.zeros(2 * n, np.int64)
        comm.reset_counters()
        comm.all_to_all(x, out, algo="direct")
        return nbcoll.to_host(out), comm.counters[r].bytes_copied, comm.engine.direct_windows().pids is not None

    with nbcoll.use_backend("sim"):
        outs = loopback.run(3, body, config=BY_ADDRESS)
    for rank, (out, own, by_address) in enumerate(outs):
        assert by_address
        assert out.tolist() == [2 * rank + i + 10 * p for p in range(3) for i in range(2)]
        assert own == 16  # its own block of two int64 only: nothing staged
