"""Channels: several connection sets per pair of ranks, a collective split across them, their steps interleaved.

Every case runs on a loopback world (ranks as threads, no mpiexec) with FIFOs of 4 slots of 16 bytes (two int64),
so that a few dozen elements span many chunks on every channel. Integer results must match exactly.
"""

import numpy as np
import pytest

import nbcoll
from nbcoll.comm import CommConfig, CommTimeoutError, loopback, trace_view
from nbcoll.comm.algorithms import channels_for

TINY = {"buffsize": 64, "steps": 4, "timeout": 60.0}
"""Chunks of 16 bytes: 2 x int64."""


@pytest.fixture(autouse=True)
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


def test_nchannels_is_read_once_and_checked_with_the_variable_named():
    assert CommConfig.from_env({}).nchannels == 2
    assert CommConfig.from_env({"NBCOLL_NCHANNELS": "3"}).nchannels == 3
    for bad in ("0", "17", "two"):
        with pytest.raises(ValueError, match="NBCOLL_NCHANNELS"):
            CommConfig.from_env({"NBCOLL_NCHANNELS": bad})
    with pytest.raises(ValueError, match="NBCOLL_NCHANNELS"):
        CommConfig(nchannels=0)


def test_a_channel_is_used_only_with_a_chunk_of_its_own_except_for_the_two_trees():
    assert channels_for("broadcast", "ring", count=100, chunk_elems=10, nchannels=4, nranks=4) == 4
    assert channels_for("all_gather", "ring", count=15, chunk_elems=10, nchannels=4, nranks=4) == 2
    assert channels_for("reduce", "tree", count=0, chunk_elems=10, nchannels=4, nranks=4) == 1
    # A ring all-reduce's unit is a round of one chunk per rank.
    assert channels_for("all_reduce", "ring", count=79, chunk_elems=10, nchannels=4, nranks=4) == 2
    assert channels_for("all_reduce", "ring", count=40, chunk_elems=10, nchannels=4, nranks=4) == 1
    assert channels_for("all_reduce", "tree", count=1, chunk_elems=10, nchannels=4, nranks=4) == 2
    assert channels_for("all_reduce", "tree", count=1, chunk_elems=10, nchannels=1, nranks=4) == 1
    assert channels_for("all_reduce", "direct", 100, 10, 4, 4) == 1  # windows, not FIFOs


CASES = [
    ("all_reduce", "ring"),
    ("all_reduce", "tree"),
    ("broadcast", "ring"),
    ("broadcast", "tree"),
    ("reduce", "ring"),
    ("reduce", "tree"),
    ("all_gather", "ring"),
    ("reduce_scatter", "ring"),
    ("all_reduce", "halving_doubling"),  # one channel: it shares the connections with the others
]


def _every_case(comm, counts):
    """Run every collective of CASES at every count on this rank; return the mismatches, described."""
    n, r = comm.size, comm.rank
    wrong = []
    for count in counts:
        base = np.arange(count, dtype=np.int64)
        total = base * n + n * (n - 1) // 2 * 1000  # sum over ranks of base + 1000 * rank
        for coll, algo in CASES:
            x = base + 1000 * r
            if coll == "all_reduce":
                got, want = comm.all_reduce(x, algo=algo), total
            elif coll == "broadcast":
                got, want = comm.broadcast(x, root=n - 1, algo=algo), base + 1000 * (n - 1)
            elif coll == "reduce":
                out = np.zeros(count, np.int64)
                comm.reduce(x, out, root=n // 2, algo=algo)
                got, want = out, total if r == n // 2 else np.zeros(count, np.int64)
            elif coll == "all_gather":
                got = comm.all_gather(x, np.zeros(n * count, np.int64), algo=algo)
                want = np.concatenate([base + 1000 * p for p in range(n)])
            else:
                blocks = np.arange(n * count, dtype=np.int64) + 1000 * r
                got = comm.reduce_scatter(blocks, np.zeros(count, np.int64), algo=algo)
                want = np.arange(r * count, (r + 1) * count) * n + n * (n - 1) // 2 * 1000
            if not np.array_equal(got, want):
                wrong.append(f"{coll} via {algo}, {count} elements on rank {r}: {got} != {want}")
        # Two collectives fused in one group: each runs on its channels, one after the other.
        y, z = base + r, base * (r + 1)
        with comm.group():
            comm.all_reduce(y, algo="ring")
            comm.all_reduce(z, algo="tree")
        if not (np.array_equal(y, base * n + n * (n - 1) // 2) and np.array_equal(z, base * n * (n + 1) // 2)):
            wrong.append(f"a group of two all-reduces of {count} elements on rank {r}: {y}, {z}")
    return wrong


@pytest.mark.parametrize("nchannels", [1, 2, 3])
def test_every_split_collective_is_exact_on_1_to_4_ranks(nchannels):
    for nranks in (1, 2, 3, 4):
        # 0 and 1 elements, and counts that no product of channels and ranks divides
        counts = [0, 1, nchannels * nranks + 1, 4 * nchannels * nranks + 3]
        with loopback(nranks, CommConfig(**TINY, nchannels=nchannels)) as world:
            wrong = world.run(_every_case, counts)
            assert not any(wrong), [w for ws in wrong for w in ws][:5]
            if nranks > 1:
                # The last channel carried chunks too: the buffer really was split.
                last = world[0].send_connection(1, nchannels - 1)
                assert last.step > 0, f"channel {nchannels - 1} to rank 1 never sent a chunk"


@pytest.mark.simulator
def test_channels_run_the_kernels_on_the_simulator():
    """The same split on the simulator: copy and combine kernels write each channel's slots (2 ranks, 9 int64)."""

    def both_algorithms(comm):
        outs = []
        for algo in ("tree", "ring"):
            x = nbcoll.to_device(np.arange(9, dtype=np.int64) + comm.rank)
            comm.all_reduce(x, algo=algo)
            outs.append(nbcoll.to_host(x))
        return outs, comm.send_connection(1 - comm.rank, 1).step

    with nbcoll.use_backend("sim"):
        results = loopback.run(2, both_algorithms, config=CommConfig(**TINY, nchannels=2))
    for outs, channel_1_chunks in results:
        assert all(np.array_equal(out, 2 * np.arange(9) + 1) for out in outs), outs
        assert channel_1_chunks > 0


def test_channels_run_over_the_mpi_transport_each_on_its_own_mpi_communicator():
    config = CommConfig(**TINY, nchannels=2, transport="mpi")
    with loopback(3, config) as world:
        wrong = world.run(_every_case, [0, 1, 23])
        assert not any(wrong), [w for ws in wrong for w in ws][:5]
        assert {world[0].send_connection(1, c).transport for c in (0, 1)} == {"mpi"}
        assert world[0].send_connection(1, 1).step > 0


def test_a_channel_outside_the_communicator_is_refused_by_name():
    with loopback(2, CommConfig(**TINY, nchannels=2)) as world:
        with pytest.raises(ValueError, match=r"channel: expected 0 to 1 \(NBCOLL_NCHANNELS\), got 2"):
            world[0].send_connection(1, 2)


@pytest.fixture(scope="module")
def double_tree_trace(tmp_path_factory):
    directory = tmp_path_factory.mktemp("channels") / "trace"
    config = CommConfig(**TINY, nchannels=2, trace=str(directory))
    with nbcoll.use_backend("numpy"):
        loopback.run(
            4, lambda comm: comm.all_reduce(np.arange(40, dtype=np.int64) + comm.rank, algo="tree"), config=config
        )
    return directory


def test_the_two_trees_run_at_once_tree_1_starts_before_tree_0_ends(double_tree_trace):
    records = trace_view.load(double_tree_trace)
    assert {trace_view.channel_of(rec) for rec in records} == {0, 1}
    for rank in range(4):
        steps = [rec for rec in records if rec["rank"] == rank]
        tree0 = [rec["step"] for rec in steps if rec["channel"] == 0]
        tree1 = [rec["step"] for rec in steps if rec["channel"] == 1]
        assert tree0 and tree1, f"rank {rank} ran steps on one tree only"
        assert min(tree1) < max(tree0), f"rank {rank}: tree 1 started only after tree 0 had ended"
        # Each channel holds its own half of the buffer (20 elements each).
        assert all(rec["span"][1] <= 20 for rec in steps if rec["channel"] == 0)
        assert all(rec["span"][0] >= 20 for rec in steps if rec["channel"] == 1)


def test_trace_arrows_pair_chunks_within_one_channel(double_tree_trace):
    records = trace_view.load(double_tree_trace)
    pairs = trace_view.arrows(records)
    assert len(pairs) > 20
    for src, dst in pairs:
        assert src["channel"] == dst["channel"] and src["span"] == dst["span"], (src, dst)
    column = trace_view.columns(records)
    assert all(column[id(dst)] > column[id(src)] for src, dst in pairs)


def test_the_diagram_labels_each_step_with_its_channel(double_tree_trace, tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    shown = []
    real_savefig = plt.Figure.savefig

    def keep_text(figure, *args, **kwargs):
        shown.extend(text.get_text() for ax in figure.axes for text in ax.texts)
        shown.extend(text.get_text() for ax in figure.axes if ax.get_legend() for text in ax.get_legend().texts)
        return real_savefig(figure, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plt.Figure, "savefig", keep_text)
        out = trace_view.draw(double_tree_trace, tmp_path / "trees.png")
    assert out.stat().st_size > 0
    assert any("ch 0" in text for text in shown) and any("ch 1" in text for text in shown)
    assert "channel 1" in shown


def test_a_stuck_collective_names_every_channel_it_waits_on():
    config = CommConfig(**{**TINY, "timeout": 1.0}, nchannels=2)

    def only_rank_0_calls(comm):
        if comm.rank == 0:
            comm.all_reduce(np.arange(40, dtype=np.int64), algo="tree")

    with pytest.raises(CommTimeoutError) as caught:
        loopback.run(2, only_rank_0_calls, config=config)
    message = str(caught.value)
    assert "channel 0:" in message and "channel 1:" in message, message
