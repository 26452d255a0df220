"""The pieces of a communicator, in one process: settings, topology, counters, logging, and the FIFO protocol
of both transports (a connection from this process to itself)."""

import io
import os
import subprocess
import sys
import time
import weakref
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

import nbcoll
from nbcoll.comm.config import CommConfig
from nbcoll.comm.control import ControlPage
from nbcoll.comm.counters import Counters, PeerCounters
from nbcoll.comm.debug import FlightRecorder, Logger
from nbcoll.comm.errors import CommMismatchError, CommTimeoutError
from nbcoll.comm.p2p import RecvOp, SendOp
from nbcoll.comm.primitives import COPY, DIRECT, POST, RECV, REDUCE, SEND, Prims, Step, name_of
from nbcoll.comm.topology import Topology
from nbcoll.comm.transport.ipc import IpcRecvConnection, IpcSendConnection, create_fifo, open_fifo
from nbcoll.comm.transport.mpi import MpiRecvConnection, MpiSendConnection
from nbcoll.comm.watchdog import Watchdog, process_alive
from nbcoll.ipc_memory import IpcBuffer
from nbcoll.kernels import combine

STEPS, CHUNK = 4, 64

# -- settings --------------------------------------------------------------------------------------------------


def test_config_reads_every_variable():
    env = {
        "NBCOLL_TIMEOUT": "2.5",
        "NBCOLL_BUFFSIZE": "1024",
        "NBCOLL_STEPS": "4",
        "NBCOLL_TRANSPORT": "MPI",
        "NBCOLL_RANKS_PER_NODE": "2",
        "NBCOLL_MPI_CUDA_AWARE": "1",
        "NBCOLL_DEBUG": "info",
        "NBCOLL_DEBUG_SUBSYS": "init,p2p",
    }
    c = CommConfig.from_env(env)
    assert (c.timeout, c.buffsize, c.steps, c.chunk_bytes, c.transport) == (2.5, 1024, 4, 256, "mpi")
    assert (c.ranks_per_node, c.mpi_cuda_aware, c.debug, c.debug_subsys) == (2, True, "INFO", {"INIT", "P2P"})
    d = CommConfig.from_env({})
    assert (d.timeout, d.buffsize, d.steps, d.transport, d.ranks_per_node) == (300.0, 4 << 20, 8, None, None)


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("NBCOLL_TIMEOUT", "soon", "number"),
        ("NBCOLL_TIMEOUT", "0", "> 0"),
        ("NBCOLL_STEPS", "1", ">= 2"),
        ("NBCOLL_TRANSPORT", "tcp", "ipc, mpi"),
        ("NBCOLL_DEBUG", "LOUD", "WARN"),
        ("NBCOLL_BUFFSIZE", "1000", "multiple of 8"),
    ],
)
def test_config_names_the_bad_variable(name, value, words):
    with pytest.raises(ValueError, match=name) as info:
        CommConfig.from_env({name: value})
    assert words in str(info.value)


# -- topology --------------------------------------------------------------------------------------------------


def test_topology_ipc_inside_a_node_and_mpi_across():
    keys = [("m", 0), ("m", 0), ("m", 1), ("m", 1)]
    topo = Topology(rank=2, node_keys=keys, machine_keys=["m"] * 4)
    assert (topo.node, topo.nnodes, topo.local_rank, topo.local_size) == (1, 2, 0, 2)
    assert [topo.transport_to(p) for p in (0, 1, 3)] == ["mpi", "mpi", "ipc"]
    assert topo.machine_ranks == [0, 1, 2, 3]
    forced = Topology(rank=2, node_keys=keys, machine_keys=["m"] * 4, forced_transport="ipc")
    assert forced.transport_to(0) == "ipc"


def test_topology_refuses_ipc_between_machines():
    with pytest.raises(ValueError, match="NBCOLL_TRANSPORT=ipc"):
        Topology(rank=0, node_keys=[0, 1], machine_keys=["a", "b"], forced_transport="ipc")


# -- counters, logging, flight recorder ------------------------------------------------------------------------


def test_counters_are_a_snapshot_with_totals():
    live = {1: PeerCounters(bytes_sent=10, chunks_sent=1), 3: PeerCounters(bytes_received=7, chunks_received=2)}
    c = Counters(live)
    live[1].bytes_sent = 99
    assert (c.bytes_sent, c.bytes_received, c.chunks_sent, c.chunks_received) == (10, 7, 1, 2)
    assert c[1].bytes_sent == 10 and c[2] == PeerCounters() and c.peers == [1, 3]
    assert c.as_dict()["total"]["bytes_received"] == 7


def test_logger_prefixes_the_rank_and_filters_level_and_subsystem():
    out = io.StringIO()
    log = Logger(rank=3, level="INFO", subsystems={"P2P"}, stream=out)
    log.info("P2P", "hello")
    log.trace("P2P", "too detailed")
    log.info("NET", "other subsystem")
    assert out.getvalue() == "[nbcoll rank 3] INFO P2P   hello\n"
    silent = Logger(rank=0, level=None, subsystems={"ALL"}, stream=out)
    assert not silent.enabled("WARN", "INIT")


def test_a_finished_record_keeps_its_progress_text_not_the_operation():
    # a record's progress may be a callable of the running operation; once finished it is its last text, so the
    # recorder's last 32 operations (and the buffers they held) are not kept alive by it
    class Operation:
        def describe(self) -> str:
            return "7 steps done"

    operation = Operation()
    recorder = FlightRecorder(capacity=2)
    entry = recorder.record("all_reduce", -1, 64, "float32[16]")
    entry.progress = operation.describe
    entry.finish()
    alive = weakref.ref(operation)
    del operation
    assert alive() is None and entry.progress == "7 steps done"
    assert "7 steps done" in recorder.format()


def test_flight_recorder_keeps_the_last_operations():
    recorder = FlightRecorder(capacity=2)
    for peer in range(3):
        recorder.record("send", peer, 8 * peer, "float32[2]").finish()
    text = recorder.format(rank=5)
    assert "rank 5's last 2 of 3 operations" in text
    assert "#2" in text and "#3" in text and "#1 " not in text and "done" in text


def test_process_alive():
    import os

    assert process_alive(os.getpid())
    assert not process_alive(2**22 + 12345)


# -- the FIFO protocol, on both transports, from this process to itself -----------------------------------------


def _ipc_pair():
    control = ControlPage(IpcBuffer.create(ControlPage.words_needed(1, STEPS), np.int64, host=True), 1, STEPS)
    control.words[:] = 0
    fifo = create_fifo(STEPS * CHUNK, tag="unit")
    peer_view = open_fifo(fifo.handle)
    fifo.unlink()
    counters = control.pair(0, 0)
    send = IpcSendConnection(0, peer_view, counters, STEPS, CHUNK)
    recv = IpcRecvConnection(0, fifo, counters, STEPS, CHUNK)
    return send, recv, control.close


def _mpi_pair():
    comm = MPI.COMM_SELF.Dup()
    send = MpiSendConnection(0, comm, STEPS, CHUNK, cuda_aware=False)
    recv = MpiRecvConnection(0, comm, STEPS, CHUNK, cuda_aware=False)
    return send, recv, comm.Free


@pytest.fixture(params=["ipc", "mpi"])
def pair(request, backend):
    """A connection from this process to itself: (send end, recv end), on each transport and backend."""
    if request.param == "ipc" and backend == "cuda":
        pytest.skip("CUDA opens no IPC handle in the process that made it; ipc on a GPU is tested across ranks")
    send, recv, release = _ipc_pair() if request.param == "ipc" else _mpi_pair()
    yield send, recv
    send.close()
    recv.close()
    release()


def test_a_sender_runs_at_most_steps_chunks_ahead_and_credits_free_slots(pair):
    send, recv = pair
    chunks = [nbcoll.to_device(np.full(CHUNK // 4, k, np.float32)) for k in range(STEPS + 1)]
    for k in range(STEPS):
        assert send.ready()
        send.send_chunk(chunks[k], last=k == STEPS - 1)
    assert not send.ready(), "all slots are full: no credit left"
    for k in range(STEPS):
        assert recv.ready()
        with recv.recv_chunk() as chunk:
            assert chunk.nbytes == CHUNK and chunk.last == (k == STEPS - 1) and chunk.step == k
            assert np.all(nbcoll.to_host(chunk.view(np.float32)) == k)
    assert not recv.ready(), "everything sent was consumed"
    assert send.ready(), "consumed slots are credits again"
    assert "credit" in send.waiting_for() and "sender" in recv.waiting_for()


@pytest.mark.parametrize("count", [0, 1, 17, 40])
def test_send_and_recv_ops_move_a_message_through_a_small_fifo(pair, count):
    send, recv = pair
    data = np.arange(count, dtype=np.int32) * 3 - 7
    out = nbcoll.zeros(count, np.int32)
    recorder = FlightRecorder()
    sent, received = PeerCounters(), PeerCounters()
    ops = [
        SendOp(send, nbcoll.to_device(data), sent, recorder.record("send", 0, data.nbytes, "int32")),
        RecvOp(recv, out, received, recorder.record("recv", 0, data.nbytes, "int32")),
    ]
    Watchdog(0, 5.0, lambda: None, {}, recorder, Logger(0, None, set())).drive(ops)
    assert np.array_equal(nbcoll.to_host(out), data)
    chunks = max(1, -(-data.nbytes // CHUNK))
    assert sent == received.__class__(bytes_sent=data.nbytes, chunks_sent=chunks)
    assert (received.bytes_received, received.chunks_received) == (data.nbytes, chunks)


def test_a_receive_buffer_of_another_size_is_a_mismatch(pair):
    send, recv = pair
    recorder = FlightRecorder()
    watchdog = Watchdog(0, 5.0, lambda: None, {}, recorder, Logger(0, None, set()))
    message = nbcoll.to_device(np.ones(5, np.float32))
    ops = [
        SendOp(send, message, PeerCounters(), recorder.record("send", 0, 20, "float32[5]")),
        RecvOp(recv, nbcoll.zeros(6, np.float32), PeerCounters(), recorder.record("recv", 0, 24, "float32[6]")),
    ]
    with pytest.raises(CommMismatchError, match="20 bytes"):
        watchdog.drive(ops)


def test_a_wait_that_cannot_progress_times_out_with_the_operation_and_step(pair):
    send, recv = pair
    recorder = FlightRecorder()
    watchdog = Watchdog(7, 0.2, lambda: None, {}, recorder, Logger(0, None, set()))
    op = RecvOp(recv, nbcoll.zeros(3, np.float32), PeerCounters(), recorder.record("recv", 0, 12, "float32[3]"))
    with pytest.raises(CommTimeoutError) as info:
        watchdog.drive([op])
    text = str(info.value)
    for words in ("rank 7", "recv from peer 0", "step 0", "waiting for", "flight recorder", "timed out"):
        assert words in text


def test_the_comm_package_imports_without_mpi4py():
    """Only communicators over MPI need mpi4py: the package, its algorithms and its engine import without it."""
    code = (
        "import sys; sys.modules['mpi4py'] = None\n"
        "import nbcoll.comm, nbcoll.comm.algorithms.ring, nbcoll.comm.engine, nbcoll.comm.watchdog\n"
        "print('imported')"
    )
    env = {**os.environ, "NBCOLL_BACKEND": "numpy"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and "imported" in done.stdout, done.stderr


def test_every_setting_is_read_once_into_the_config():
    """No module of the comm package reads the environment itself: ``CommConfig.from_env`` is the one place."""
    package = Path(nbcoll.__file__).parent / "comm"
    readers = [
        f"{path.relative_to(package)}:{number}"
        for path in sorted(package.rglob("*.py"))
        if path.name != "config.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if ("os.environ" in line or "getenv" in line) and "NBCOLL_" in line
    ]
    assert not readers, f"settings read outside nbcoll/comm/config.py: {readers}"


def _wait_ready(step: Step) -> None:
    deadline = time.monotonic() + 30
    while not step.ready():
        assert time.monotonic() < deadline, step.waiting_for()


def test_prims_are_bound_once_and_each_call_is_one_step_with_its_flags(pair):
    """Prims over a connection to this process: ``send(2, 6)``, then ``recv_reduce_copy(2, 6)`` folds it in."""
    send, recv = pair
    local = nbcoll.to_device(np.arange(8, dtype=np.float32))
    out = nbcoll.zeros(8, np.float32)
    halve = lambda value: combine.divide(value, 2)  # noqa: E731 - avg's last step, on two ranks
    to_self = Prims(local, out, send=[send])
    from_self = Prims(local, out, recv=[recv], op="avg", post=halve)
    first = to_self.send(2, 6)
    assert (first.flags, first.name, first.span, first.nbytes) == (SEND, "send", (2, 6), 16)
    _wait_ready(first)
    first.run()
    fold = from_self.recv_reduce_copy(2, 6)
    assert fold.flags == RECV | REDUCE | COPY | POST and fold.name == "recv_reduce_copy"
    _wait_ready(fold)
    fold.run()
    assert np.array_equal(nbcoll.to_host(out), [0, 0, 2, 3, 4, 5, 0, 0])  # (x + x) / 2, only in [2, 6)
    resend = to_self.send(0, 3)
    _wait_ready(resend)
    resend.run()
    wrong = from_self.recv(0, 4)  # the peer sent 3 elements: the ranks disagree about the call
    _wait_ready(wrong)
    with pytest.raises(CommMismatchError, match="expected a chunk of 16 bytes"):
        wrong.run()


def test_a_primitive_name_is_its_flags():
    assert name_of(RECV | REDUCE | COPY | SEND) == "recv_reduce_copy_send"
    assert name_of(COPY | SEND) == "copy_send" and name_of(RECV | COPY) == "recv"
    assert name_of(DIRECT | RECV | REDUCE | COPY | POST) == "direct_recv_reduce_copy"
    assert name_of(DIRECT | SEND) == "direct_send"
