"""Tutorial 21 (the collective as one kernel) runs at its toy sizes on the simulator and checks itself."""

from helpers import TUTORIALS, run_python


def test_tutorial_21_runs_the_ring_as_one_kernel_and_shows_the_spin_in_ptx():
    proc = run_python([str(TUTORIALS / "21_collective_as_one_kernel.py")], "sim", timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    out = proc.stdout
    assert out.startswith("Tutorial 21 on the 'sim' backend (device: sim), 3 ranks")
    # Each rank's round on two lines: the reduce-scatter half, then the all-gather half.
    assert "rank 0: send [4:6), recv_reduce_send [2:4), recv_reduce_copy_send [0:2),\n" in out
    assert "\n             recv_copy_send [4:6), recv [2:4)\n" in out
    # The counters only grow: 8 steps a call into each FIFO, and head always catches up with tail.
    for call, count in enumerate((8, 16, 24)):
        assert f"after call {call} " in out and out.count(f"tail {count:2d} head {count:2d}") == 3, out
    assert out.count("over the ranks: ok") == 3
    assert "rank 2 (channel 0) never ran" in out
    # The PTX of the spin: a loop with the volatile load inside it (or, without a compiler, a sentence saying so).
    assert "4. the spin of wait_peer in the kernel's PTX for sm_90" in out, out
    spin = out.split("4. the spin", 1)[1]
    assert "ld.volatile.global.u64" in spin and "bra" in spin
    assert "Done: one kernel ran the whole ring" in out
