"""Communicators under mpiexec with 1 to 4 ranks: point-to-point, split and shrink, faults, logging.

Every launched script prints ``pid=...`` on each rank; after each run no ``/dev/shm/nbcoll_<pid>_*`` name of
those ranks may be left.
"""

import glob
import os
import re
import sys

import pytest

from nbcoll.testing import run_ranks

pytestmark = pytest.mark.mpi

SCRIPTS = os.path.join(os.path.dirname(__file__), "mpi_scripts")
P2P = os.path.join(SCRIPTS, "comm_p2p.py")
SPLIT = os.path.join(SCRIPTS, "comm_split.py")
FAULTS = os.path.join(SCRIPTS, "comm_faults.py")
PIPELINE = os.path.join(SCRIPTS, "mpi_pipeline.py")


def run(nprocs, script, *args, timeout=150, **env):
    env = {"NBCOLL_TIMEOUT": "20", **{k: str(v) for k, v in env.items()}}
    result = run_ranks(nprocs, script, *args, env=env, timeout=timeout)
    assert_no_shared_memory_left(result.outputs)
    return result


def assert_no_shared_memory_left(outputs):
    pids = [int(p) for out in outputs for p in re.findall(r"^pid=(\d+)$", out, re.M)]
    assert pids, "the script printed no pid= line"
    left = [name for pid in pids for name in glob.glob(f"/dev/shm/nbcoll_{pid}_*")]
    assert not left, f"shared memory left behind: {left}"


def every_rank_says(result, text):
    missing = [r for r, out in enumerate(result.outputs) if text not in out]
    assert not missing, f"ranks {missing} did not print {text!r}\n{result.report()}"


# -- point-to-point --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_p2p_every_dtype_and_size_on_numpy(nprocs):
    every_rank_says(run(nprocs, P2P, NBCOLL_BACKEND="numpy"), "p2p ok")


def test_p2p_on_the_simulator():
    """Two ranks: the kernels of a send and a receive; every rank count runs on numpy above."""
    every_rank_says(run(2, P2P, NBCOLL_BACKEND="sim"), "p2p ok")


@pytest.mark.gpu
def test_p2p_over_cuda_ipc_and_staged_mpi_on_a_gpu():
    result = run(2, P2P, NBCOLL_BACKEND="cuda", timeout=30)  # both fit the 70 s gpu_check.sh gives a gpu test
    every_rank_says(result, "p2p ok")
    result = run(2, P2P, "mpi|mpi", NBCOLL_BACKEND="cuda", NBCOLL_TRANSPORT="mpi", timeout=30)
    every_rank_says(result, "p2p ok")


FAKE_NODES = "ipc,mpi,mpi|ipc,mpi,mpi|mpi,mpi,ipc|mpi,mpi,ipc"


@pytest.mark.parametrize("backend", ["numpy", "sim"])
def test_ipc_inside_and_mpi_across_pretend_nodes(backend):
    result = run(4, P2P, FAKE_NODES, NBCOLL_BACKEND=backend, NBCOLL_RANKS_PER_NODE=2)
    every_rank_says(result, "p2p ok")
    assert "node 1 of 2 (local rank 1 of 2)" in result.outputs[3]


@pytest.mark.parametrize(("nprocs", "ranks_per_node"), [(2, 1), (3, 2), (4, 2)])
def test_mpi_connections_keep_every_receive_posted_and_collectives_stay_exact(nprocs, ranks_per_node):
    # 256-byte chunks in 4 slots: every larger message is many chunks, so the pipeline fills up.
    env = {"NBCOLL_BACKEND": "numpy", "NBCOLL_RANKS_PER_NODE": ranks_per_node, "NBCOLL_BUFFSIZE": 1024}
    result = run(nprocs, PIPELINE, NBCOLL_STEPS=4, **env)
    every_rank_says(result, "pipeline ok")
    assert "kept 4 receives posted" in result.outputs[-1]


@pytest.mark.parametrize(
    ("transport", "expected"), [("mpi", "mpi,mpi|mpi,mpi|mpi,mpi"), ("ipc", "ipc,ipc|ipc,ipc|ipc,ipc")]
)
def test_a_forced_transport_joins_every_pair(transport, expected):
    # Pretend nodes of one rank each: without the forced transport every pair would be mpi.
    result = run(3, P2P, expected, NBCOLL_BACKEND="numpy", NBCOLL_TRANSPORT=transport, NBCOLL_RANKS_PER_NODE=1)
    every_rank_says(result, "p2p ok")


# -- new communicators -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_split_dup_and_shrink(nprocs):
    result = run(nprocs, SPLIT, NBCOLL_BACKEND="numpy", NBCOLL_RANKS_PER_NODE=2)
    every_rank_says(result, "split ok")
    if nprocs > 1:
        assert all("shrink ok" in out for out in result.outputs[:-1])


def test_debug_logging_is_rank_prefixed_and_filtered_by_subsystem():
    result = run(2, SPLIT, NBCOLL_BACKEND="numpy", NBCOLL_DEBUG="INFO", NBCOLL_DEBUG_SUBSYS="INIT,P2P")
    assert "[nbcoll rank 1] INFO INIT  communicator ready" in result.outputs[1]
    assert "[nbcoll rank 0] INFO P2P   send #" in result.outputs[0]
    assert "IPC" not in result.outputs[0] and "TRACE" not in result.outputs[0]


# -- faults ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["ipc", "mpi"])
def test_a_receive_never_posted_makes_the_sender_time_out(transport):
    env = {"NBCOLL_TRANSPORT": transport, "NBCOLL_TIMEOUT": 2, "NBCOLL_BUFFSIZE": 1 << 16}
    result = run(2, FAULTS, "norecv", NBCOLL_BACKEND="numpy", **env)
    assert "norecv ok" in result.outputs[0]
    assert "CommTimeoutError" in result.outputs[0] and "flight recorder" in result.outputs[0]


@pytest.mark.parametrize("transport", ["ipc", "mpi"])
def test_a_peer_that_exits_mid_transfer_fails_its_peer_within_the_timeout(transport, mpiexec_keeping_survivors):
    env = {"NBCOLL_TRANSPORT": transport, "NBCOLL_TIMEOUT": 20, "NBCOLL_BUFFSIZE": 1 << 16}
    result = run(4, FAULTS, "exit", NBCOLL_BACKEND="numpy", **env)
    for rank in (0, 3):
        assert "exit ok" in result.outputs[rank], result.report()
        assert "CommPeerLostError" in result.outputs[rank]


@pytest.mark.parametrize("transport", ["ipc", "mpi"])
def test_abort_on_one_rank_releases_the_others_who_then_shrink_it_away(transport):
    result = run(3, FAULTS, "abort", NBCOLL_BACKEND="numpy", NBCOLL_TRANSPORT=transport, NBCOLL_TIMEOUT=30)
    every_rank_says(result, "abort ok")
    assert all("shrunk communicator passed a ring" in out for out in result.outputs[1:])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
