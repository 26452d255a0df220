"""Faults on the one-shot path, LL lines and direct windows alike: a rank that dies (or stops) mid-round, a bad
argument on one rank, an abort with async work in flight. Nothing hangs, no rank returns a wrong result, every
error names the rank, the peer and the operation, and no ``/dev/shm/nbcoll_<pid>_*`` name of the launched ranks
is left behind.

The cases live in ``mpi_scripts/direct_deaths.py`` (each death ends a rank, so one launch deals its ranks out to
several cases side by side, and the survivors carry on to the next stage: 4, 3 and 2 ranks in one run) and
``mpi_scripts/direct_refusals.py`` (every case in one launch per rank count).
"""

import glob
import re
from pathlib import Path

import pytest

from nbcoll.launch import launch

pytestmark = pytest.mark.mpi

SCRIPTS = Path(__file__).parent / "mpi_scripts"
# 8 int32 go by LL, 40 take one window round and 200 four: several rounds from small buffers.
ENV = {"NBCOLL_BACKEND": "numpy", "NBCOLL_LL_BYTES": "64", "NBCOLL_BUFFSIZE": "256"}


def assert_no_shared_memory_left(result):
    pids = [int(p) for out in result.outputs for p in re.findall(r"^pid=(\d+)$", out, re.M)]
    assert len(pids) == result.nprocs, result.report()
    left = [name for pid in pids for name in glob.glob(f"/dev/shm/nbcoll_{pid}_*")]
    assert not left, f"shared memory left behind: {left}"


# Each stage deals the live ranks out to its cases (name@ranks); every case ends one rank. Between them, the two
# runs cover every case at 2, 3 or 4 ranks: LL and windows, registered and staged inputs, outputs the root writes
# into, five collectives.
DEATH_STAGES = {
    "ll-and-lenders": [
        "ll_all_reduce_never_comes@4+registered_all_reduce_dies_mid_rounds@3"
        "+registered_all_gather_reader_dies_before_release@2+ll_all_reduce_dies_after_writing@2"
        "+registration_never_comes@2",
        "ll_all_gather_dies_before_writing@3+staged_all_reduce_dies_mid_rounds@4+ll_setup_dies_holding_its_window@2",
        "ll_async_all_reduce_in_flight@2+registered_broadcast_root_dies_mid_rounds@4",
        "staged_all_gather_dies_mid_rounds@4",
        "lent_by_victim_all_gather_dies_after_posting@3",
        "ll_all_reduce_dies_halfway_through_its_lines@2",
    ],
    "windows-stops-and-setup": [
        "registered_all_reduce_stops_mid_rounds@3+registered_all_gather_reader_stops_before_release@3"
        "+ll_all_gather_stops_before_writing@4+ll_all_gather_dies_after_writing@3"
        "+written_broadcast_reader_dies_mid_rounds@3",
        "registered_all_gather_dies_mid_rounds@4+ll_all_to_all_dies_before_writing@3"
        "+registered_all_reduce_reader_dies_before_release@2+written_broadcast_root_dies_before_writing@2",
        "registered_all_to_all_dies_mid_rounds@2+staged_broadcast_root_dies_mid_rounds@2"
        "+staged_all_gather_reader_dies_after_posting@2+ll_reduce_scatter_dies_before_writing@2",
        "staged_all_to_all_never_comes@2+window_setup_dies_once_mapped@2",
        "ll_setup_never_comes@2",
        "by_address_all_gather_dies_mid_rounds@2",
    ],
}


@pytest.mark.parametrize("run", list(DEATH_STAGES))
def test_a_rank_that_dies_mid_round_fails_its_peers_at_once_or_leaves_them_the_exact_result(
    run, mpiexec_keeping_survivors
):
    stages = DEATH_STAGES[run]
    cases = [entry.split("@")[0] for stage in stages for entry in stage.split("+")]
    nprocs = len(cases) + 1  # each case ends one rank
    env = {**ENV, "NBCOLL_TIMEOUT": "10"}
    if run == "windows-stops-and-setup":  # outputs, staged pieces and LL lines streamed: the same faults, other copies
        env["NBCOLL_STREAM_BYTES"] = env["NBCOLL_STREAM_SHARED_BYTES"] = "8"
    result = launch(nprocs, SCRIPTS / "direct_deaths.py", args=stages, env=env, timeout=120)
    assert not result.timed_out, result.report()
    outputs = "".join(result.outputs)
    assert "Traceback" not in outputs, result.report()
    # MPICH signals every rank's process group when one dies: the resource tracker of a survivor must live on.
    assert "resource_tracker: process died unexpectedly" not in outputs, result.report()
    survivors = [r for r, out in enumerate(result.outputs) if "direct deaths ok" in out]
    assert len(survivors) == 1, result.report()  # every case took one rank away
    assert set(re.findall(r"^case (\w+) n=\d", outputs, re.M)) == set(cases), result.report()
    assert_no_shared_memory_left(result)


@pytest.mark.parametrize(("nprocs", "compiled"), [(2, "0"), (3, "0"), (4, "0"), (3, "1")])
def test_a_bad_argument_on_one_rank_makes_every_rank_raise_and_an_abort_fails_work_in_flight(nprocs, compiled):
    """5 collectives x LL, registered, staged inputs, each with one of the three bad arguments (wrong size, dtype,
    read-only), in turn: the three rank counts together refuse every combination once; and 3 ranks again with the
    compiled LL step (NBCOLL_LL_COMPILED)."""
    args, env = [str(nprocs % 3)], {**ENV, "NBCOLL_TIMEOUT": "20", "NBCOLL_LL_COMPILED": compiled}
    result = launch(nprocs, SCRIPTS / "direct_refusals.py", args=args, env=env, timeout=180)
    assert result.ok, result.report()
    for rank, out in enumerate(result.outputs):
        assert "direct refusals ok" in out, result.report()
        assert len(re.findall(rf"^rank {rank}: refuse/", out, re.M)) == 15, result.report()
    assert_no_shared_memory_left(result)


def test_a_bad_argument_on_the_first_one_shot_call_is_heard_while_the_others_set_the_windows_up():
    """The refused call is the communicator's first one-shot collective: the others are setting up the LL buffers or
    the windows, a collective exchange, when the refusal comes. The refuser will never join it, so the refusal is a
    conflict there (``Refusals.setting_up``): every rank raises at once, as above, not at NBCOLL_TIMEOUT."""
    result = launch(2, SCRIPTS / "direct_refusals.py", args=["cold"], env={**ENV, "NBCOLL_TIMEOUT": "3"}, timeout=120)
    assert result.ok, result.report()
    assert "made no progress" not in "".join(result.outputs), result.report()
    assert_no_shared_memory_left(result)
