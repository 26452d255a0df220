"""Tutorials 07 to 10 (the collectives) run as ``python tutorials/NN_name.py`` and every rank reports its checks."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nbcoll.backend import device_backend

TUTORIALS = Path(__file__).resolve().parent.parent / "tutorials"
NRANKS = 4

pytestmark = pytest.mark.mpi

# Settings the tutorials choose themselves, or that would change what they print.
_CLEARED = ("NUMBA_ENABLE_CUDASIM", "NBCOLL_BUFFSIZE", "NBCOLL_STEPS", "NBCOLL_TRACE", "NBCOLL_ALGO", "NBCOLL_CHECK")


def _run(name: str, *args: str) -> list[str]:
    """Run a tutorial (with ``args``) on the process's device backend; return each rank's output block, in rank
    order."""
    env = {k: v for k, v in os.environ.items() if k not in _CLEARED}
    env["NBCOLL_BACKEND"] = device_backend()
    env["NBCOLL_TIMEOUT"] = "120"  # a hang fails in minutes, naming the stuck step
    proc = subprocess.run(
        [sys.executable, str(TUTORIALS / name), *args], env=env, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    blocks = re.split(r"^\[rank (\d+)\]\n", proc.stdout, flags=re.MULTILINE)
    ranks = [int(r) for r in blocks[1::2]]
    assert ranks == list(range(NRANKS)), proc.stdout
    return blocks[2::2]


def test_tutorial_07_rooted_collectives():
    outputs = _run("07_broadcast_scatter_gather_reduce.py")
    for rank, out in enumerate(outputs):
        for check in ("broadcast (ring)", "broadcast (tree)", "scatter", "gather"):
            assert f"{check} matches NumPy: ok" in out, (rank, check, out)
        for algo in ("ring", "tree"):
            for op in ("sum", "max"):
                assert re.search(rf"reduce \({algo}, {op}\): .*: ok", out), (rank, algo, op, out)
        assert f"Done: rank {rank} ok" in out
    # The tree from root 1 on 4 ranks: 1 -> 2, 3 and 2 -> 0; the ring chain 1 -> 2 -> 3 -> 0.
    assert "tree: receive from -, forward to 2, 3; sent 160 B" in outputs[1]
    assert "ring: receive from 3, forward to -; sent 0 B" in outputs[0]
    assert "rank 3 holds (first 3 of each block):\n      from rank 0: [0.0, 1.0, 2.0]\n" in outputs[3]
    assert "from rank 1: [100.0, 101.0, 102.0]" in outputs[3]


def test_tutorial_08_ring_all_reduce_step_by_step(tmp_path):
    outputs = _run("08_ring_all_reduce.py", "--out", str(tmp_path))  # keeps the trace, removed by default
    for rank, out in enumerate(outputs):
        assert f"rank {rank}: step-by-step ring all-reduce matches NumPy: ok" in out
        assert re.search(rf"rank {rank}: sent \d+ elements = .* traffic formula: ok", out), out
        assert f"rank {rank}: comm.all_reduce(algo='ring') gives the same result: ok" in out
        assert f"rank {rank}: Done: ok" in out
    narration = outputs[0]
    assert "round 1: blocks 0=[16:17)  1=[17:18)  2=[18:18)  3=[18:18)" in narration
    assert "14 primitives per rank: 2 rounds x 7 (2n-1)" in narration
    numbered = re.findall(r"^(\d)\. ", narration, flags=re.MULTILINE)
    assert numbered == ["1", "2", "3", "4"], numbered  # every section says its number, in order
    assert "recv_reduce_copy_send [ 0: 4) from 3 to 1 got [1110, 1110, 1110, 1110]" in narration
    assert "rank 1 buffer: 1111 1111 1111 1111 1111 1111 1111 1111 1111 1111" in narration
    png = Path(re.search(r"drawn to (\S+\.png)", narration).group(1))
    assert png == tmp_path / "ring_all_reduce.png" and png.stat().st_size > 0
    assert sorted(path.name for path in tmp_path.glob("rank*.jsonl")) == [f"rank{r}.jsonl" for r in range(NRANKS)]


def test_tutorial_09_algorithm_choice():
    outputs = _run("09_trees_and_algorithm_choice.py")
    for rank, out in enumerate(outputs):
        for algo in ("ring", "tree", "direct", "halving_doubling"):
            assert f"rank {rank}: all_reduce(algo={algo!r}) matches NumPy: ok" in out
        assert f"rank {rank}: every measured all-reduce matches NumPy: ok" in out
        assert f"Done: rank {rank} ok" in out
    narration = outputs[0]
    assert "first : 0->[1, 2], 1->[3, 4], 2->[5, 6], 3->[7]" in narration
    assert "mirror: 0->[7, 6], 5->[1], 6->[3, 2], 7->[5, 4]" in narration
    for nranks in (4, 8, 64):  # a long plan is printed one change a line
        plan = rf"n = {nranks:2d}: direct from 1 B,\s+then (ring|halving_doubling) from"
        assert re.search(plan, narration), narration
    # Section 6's table: a column per size, a row per algorithm of "measured (predicted)" ms, then the picks.
    measured = narration.split("6. measured")[1].split("every measured all-reduce")[0]
    assert re.search(r"^\s+256 B\s+16 KiB\s+1 MiB$", measured, flags=re.MULTILINE), measured
    for algo in ("ring", "tree", "direct", "halving_doubling"):
        assert re.search(rf"^   {algo}(\s+\d+\.\d+ \(\d+\.\d+\)){{3}}$", measured, flags=re.MULTILINE), measured
    picks = re.search(r"^   tuner picks\s+(.*)$", measured, flags=re.MULTILINE).group(1).split()
    fastest = re.search(r"^   fastest\s+(.*)$", measured, flags=re.MULTILINE).group(1).split()
    assert len(picks) == len(fastest) == 3, measured
    # Where the tuner's pick is not the fastest measured, the tutorial says so and by how much.
    if picks != fastest:
        assert re.search(r"missed the fastest algorithm at \d of 3 sizes", narration), narration
        assert re.search(r"took \d+\.\dx the time of", narration), narration
    else:
        assert "picked the fastest algorithm at every size" in narration


def test_tutorial_10_all_gather_reduce_scatter_all_to_all():
    outputs = _run("10_all_gather_reduce_scatter_all_to_all.py")
    for rank, out in enumerate(outputs):
        for check in ("ring: sent 120 B", "direct: sent 120 B", "in place"):
            assert re.search(rf"{re.escape(check)}.*: ok", out), (rank, check, out)
        if rank == 0:  # section 3's figures are the same on every rank: shown once
            assert "the same 40 sums either way: ok" in out
            assert "reduce-scatter + all-gather: sent 120 + 120 = 240 B" in out
            assert "the traffic is the same, byte for byte: ok" in out
        else:
            assert "the same sums and the same traffic as rank 0 shows: ok" in out
            assert " sent " not in out.split("3. all-reduce")[1].split("4. all-to-all")[0]
        assert "my column of the matrix: ok" in out
        assert f"my block: {[100 * rank + i for i in range(10)]}" in out  # the inputs are shown, not only results
        assert f"my 4 blocks start with {[100 * rank + 1000 * b for b in range(4)]}" in out
        assert f"I receive {[10 * p + rank for p in range(NRANKS)]}" in out
        assert f"Done: rank {rank} ok" in out
