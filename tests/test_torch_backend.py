"""The "nbcoll" torch.distributed backend.

In this process, on loopback worlds of 1 to 4 ranks (threads): the process group's collectives against results
computed with torch, the store-backed MPI stand-in torchrun's ranks use, and the refusals. Then one 4-rank launch
per launcher (mpiexec, torchrun) runs tests/mpi_scripts/torch_backend_checks.py: every collective against gloo's
on the same inputs, sync and async, and DistributedDataParallel and fully_shard trained 5 steps on both backends
(parameters within 1e-6), on the 4 ranks and again on each 2-rank half of them.
"""

import doctest
import glob
import importlib
import os
import re
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch backend needs PyTorch, which is not installed")

import torch.distributed as dist  # noqa: E402
from mpi4py import MPI  # noqa: E402

import nbcoll  # noqa: E402
from nbcoll.comm import loopback  # noqa: E402
from nbcoll.testing import run_ranks  # noqa: E402
from nbcoll.torch_backend import ProcessGroupNbcoll  # noqa: E402
from nbcoll.torch_backend.store_comm import StoreComm  # noqa: E402
from nbcoll.torch_backend.tensors import as_array, reduce_op  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(__file__), "mpi_scripts", "torch_backend_checks.py")
CASES = 51  # what the script counts on every rank


@pytest.fixture(autouse=True)
def numpy_backend():
    with nbcoll.use_backend("numpy"):
        yield


def on_ranks(n, fn):
    """fn(pg, rank) on every rank of a loopback world, each with a ProcessGroupNbcoll over its communicator."""
    return loopback.run(n, lambda comm: fn(ProcessGroupNbcoll(comm, comm.rank, comm.size), comm.rank))


def rank_data(rank, shape, dtype=torch.int64, seed=0):
    gen = torch.Generator().manual_seed(100 * seed + rank)
    return torch.randint(-4, 5, shape, generator=gen).to(dtype)


def options(kind, **fields):
    opts = getattr(dist, kind)()
    for name, value in fields.items():
        setattr(opts, name, value)
    return opts


# -- tensors and ops ---------------------------------------------------------------------------------------------


def test_contiguous_cpu_tensors_are_used_in_place_and_views_are_written_back():
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    staged = as_array(t, "tensor")
    assert np.shares_memory(staged.array, t.numpy()) and staged.array.shape == (12,)
    view = t.t()  # not contiguous: a staged copy, in the view's element order
    staged = as_array(view, "tensor")
    assert not np.shares_memory(staged.array, t.numpy())
    staged.array[:] = -staged.array
    staged.write_back()
    assert torch.equal(t, -torch.arange(12, dtype=torch.float32).reshape(3, 4))


@pytest.mark.parametrize("op", ["BAND", "BOR", "BXOR", "PREMUL_SUM"])
def test_reduce_ops_nbcoll_does_not_compute_are_refused_by_name(op):
    with pytest.raises(ValueError, match=f"nbcoll backend: ReduceOp.{op} is not supported"):
        reduce_op(getattr(dist.ReduceOp, op))


def test_unsupported_tensors_are_refused_naming_the_argument():
    with pytest.raises(TypeError, match="tensor has dtype torch.complex64"):
        as_array(torch.zeros(2, dtype=torch.complex64), "tensor")
    with pytest.raises(TypeError, match="input: expected a torch.Tensor, got list"):
        as_array([1.0], "input")
    with pytest.raises(TypeError, match="dtype torch.bool"):
        as_array(torch.zeros(2, dtype=torch.bool), "tensor", reduced=True)


@pytest.mark.parametrize("module", ["nbcoll.torch_backend", "nbcoll.torch_backend.tensors"])
def test_the_examples_in_the_docstrings_run(module):
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted and not result.failed


# -- the process group on loopback worlds ------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_reductions_match_torch_on_every_rank(n):
    shape = (5, 3)  # 15 elements: no rank count from 2 to 4 divides it
    everyone = [rank_data(r, shape) for r in range(n)]
    expected = {
        "SUM": sum(everyone), "PRODUCT": torch.stack(everyone).prod(0),
        "MIN": torch.stack(everyone).amin(0), "MAX": torch.stack(everyone).amax(0),
    }  # fmt: skip

    def fn(pg, rank):
        out = {}
        for name in expected:
            t = rank_data(rank, shape)
            pg.allreduce([t], options("AllreduceOptions", reduceOp=getattr(dist.ReduceOp, name))).wait()
            out[name] = t
        avg = rank_data(rank, shape, torch.float64)
        work = pg.allreduce([avg], options("AllreduceOptions", reduceOp=dist.ReduceOp.AVG))
        assert work.get_future().wait()[0] is avg
        out["AVG"] = avg
        root = torch.zeros(7, dtype=torch.int32) + rank
        pg.reduce([root], options("ReduceOptions", reduceOp=dist.ReduceOp.MAX, rootRank=n - 1)).wait()
        out["reduce"] = root
        return out

    for rank, out in enumerate(on_ranks(n, fn)):
        for name, value in expected.items():
            assert torch.equal(out[name], value), (name, rank)
        torch.testing.assert_close(out["AVG"], sum(e.double() for e in everyone) / n, rtol=1e-12, atol=1e-12)
        if rank == n - 1:
            assert out["reduce"].tolist() == [n - 1] * 7


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_data_movement_matches_torch_on_every_rank(n):
    count = 5

    def fn(pg, rank):
        got = {}
        t = rank_data(rank, (count,), seed=1)
        pg.broadcast([t], options("BroadcastOptions", rootRank=n - 1)).wait()
        got["broadcast"] = t
        outs = [torch.zeros(count, dtype=torch.int64) for _ in range(n)]
        pg.allgather([outs], [rank_data(rank, (count,), seed=2)]).wait()
        got["all_gather"] = torch.cat(outs)
        flat = torch.zeros(n, count, dtype=torch.int64)
        pg.all_gather_single(flat, rank_data(rank, (count,), seed=2)).wait()
        got["all_gather_into_tensor"] = flat.reshape(-1)
        out = torch.zeros(count, dtype=torch.int64)
        ins = [rank_data(rank, (count,), seed=3 + p) for p in range(n)]
        pg.reduce_scatter([out], [ins], options("ReduceScatterOptions", reduceOp=dist.ReduceOp.SUM)).wait()
        got["reduce_scatter"] = out
        out = torch.zeros(count, dtype=torch.int64)
        pg.reduce_scatter_single(out, torch.cat(ins), options("ReduceScatterOptions")).wait()
        got["reduce_scatter_tensor"] = out
        # rank r sends (r + p) % 3 rows of 2 to rank p: uneven, some empty
        send_rows, recv_rows = [(rank + p) % 3 for p in range(n)], [(p + rank) % 3 for p in range(n)]
        inp = torch.arange(2 * sum(send_rows), dtype=torch.int64).reshape(-1, 2) + 100 * rank
        out = torch.zeros(sum(recv_rows), 2, dtype=torch.int64)
        pg.all_to_all_single(out, inp, recv_rows, send_rows, options("AllToAllOptions")).wait()
        got["all_to_all_splits"] = out
        out = torch.zeros(n * count, dtype=torch.int64)
        pg.all_to_all_single(out, torch.arange(n * count) + 100 * rank, [], [], options("AllToAllOptions")).wait()
        got["all_to_all"] = out
        gathered = [torch.zeros(count, dtype=torch.int64) for _ in range(n)] if rank == 0 else []
        pg.gather([gathered] if rank == 0 else [], [torch.full((count,), rank)], options("GatherOptions")).wait()
        got["gather"] = torch.cat(gathered) if rank == 0 else None
        mine = torch.zeros(count, dtype=torch.int64)
        blocks = [[torch.full((count,), 10 + p) for p in range(n)]] if rank == 0 else []
        pg.scatter([mine], blocks, options("ScatterOptions")).wait()
        got["scatter"] = mine
        pg.barrier().wait()
        return got

    results = on_ranks(n, fn)
    everyone = torch.cat([rank_data(r, (count,), seed=2) for r in range(n)])
    for rank, got in enumerate(results):
        assert torch.equal(got["broadcast"], rank_data(n - 1, (count,), seed=1))
        assert torch.equal(got["all_gather"], everyone) and torch.equal(got["all_gather_into_tensor"], everyone)
        reduced = sum(rank_data(p, (count,), seed=3 + rank) for p in range(n))
        assert torch.equal(got["reduce_scatter"], reduced) and torch.equal(got["reduce_scatter_tensor"], reduced)
        expected = []
        for p in range(n):
            before = sum((p + q) % 3 for q in range(rank))  # rows rank p sends to ranks below this one
            expected.append(torch.arange(2 * before, 2 * (before + (p + rank) % 3)) + 100 * p)
        assert got["all_to_all_splits"].reshape(-1).tolist() == torch.cat(expected).tolist()
        assert got["all_to_all"].tolist() == [100 * p + rank * count + i for p in range(n) for i in range(count)]
        if rank == 0:
            assert got["gather"].tolist() == [p for p in range(n) for _ in range(count)]
        assert got["scatter"].tolist() == [10 + rank] * count


def test_async_works_finish_in_the_background_and_send_recv_pairs_ranks():
    def fn(pg, rank):
        big = torch.full((4099,), float(rank + 1))
        work = pg.allreduce([big], options("AllreduceOptions"))
        future = work.get_future()
        assert future.wait()[0] is big and work.is_completed() and work.wait()
        t = torch.arange(6.0) if rank == 0 else torch.zeros(6)
        (pg.send([t], 1) if rank == 0 else pg.recv([t], 0)).wait()
        with pytest.raises(ValueError, match="tag=5 is not supported"):
            pg.send([t], 1 - rank, tag=5)
        with pytest.raises(ValueError, match="any source"):
            pg.recv_anysource([t])
        return big, t

    for big, t in on_ranks(2, fn):
        assert big.tolist() == [3.0] * 4099 and t.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_mismatched_sizes_are_refused_naming_the_argument():
    def fn(pg, rank):
        with pytest.raises(ValueError, match=r"tensor_list\[1\] has 4 elements; expected 3"):
            pg.allgather([[torch.zeros(3), torch.zeros(4)]], [torch.zeros(3)])
        with pytest.raises(ValueError, match="input_split_sizes: expected 2 sizes >= 0 summing to the 3 rows"):
            pg.all_to_all_single(torch.zeros(3), torch.zeros(3), [1, 2], [1, 1], options("AllToAllOptions"))
        return True

    assert on_ranks(2, fn) == [True, True]


@pytest.mark.parametrize("n", [2, 3, 4])
def test_a_size_refused_on_one_rank_makes_every_rank_raise_at_once_and_writes_nothing(n):
    # rank n - 1 passes an output of the wrong size; the others' calls are right and would wait for it without
    # being told: they must raise long before the 30 s timeout, and leave their outputs untouched
    config = nbcoll.comm.CommConfig(timeout=30.0)

    def fn(comm):
        pg, rank = ProcessGroupNbcoll(comm, comm.rank, comm.size), comm.rank
        out = torch.full((4 * n - (rank == n - 1),), -7)
        started = time.monotonic()
        try:
            pg.all_gather_single(out, torch.arange(4) + 10 * rank).wait()
            raised = None
        except Exception as exc:  # noqa: BLE001 (what each rank raised is the result)
            raised = exc
        return raised, time.monotonic() - started, out

    for rank, (raised, seconds, out) in enumerate(loopback.run(n, fn, config=config)):
        if rank == n - 1:
            assert isinstance(raised, ValueError) and "all_gather_into_tensor output has" in str(raised)
        else:
            assert isinstance(raised, nbcoll.comm.CommError), (rank, raised)
        assert seconds < 10, (rank, seconds, raised)
        assert out.tolist() == [-7] * out.numel(), rank  # nothing half-written


def test_an_abort_fails_async_work_in_flight_on_every_rank():
    # rank 1 never joins the all-reduce rank 0 started with async_op=True: it aborts the communicator instead,
    # and rank 0's Work raises (well before the 30 s timeout) and leaves the tensor as it was
    config = nbcoll.comm.CommConfig(timeout=30.0)

    def fn(comm):
        pg = ProcessGroupNbcoll(comm, comm.rank, comm.size)
        t = torch.full((4099,), 5.0)
        if comm.rank == 1:
            time.sleep(0.3)
            comm.abort()
            return None, t
        work = pg.allreduce([t], options("AllreduceOptions"))
        started = time.monotonic()
        with pytest.raises(nbcoll.comm.CommAbortedError):
            work.wait()
        return (work.is_completed(), work.is_success(), time.monotonic() - started < 10), t

    (states, t), _ = loopback.run(2, fn, config=config)
    assert states == (True, False, True)  # finished, with its error, at once
    assert t.tolist() == [5.0] * 4099


def test_a_size_refused_on_every_rank_leaves_the_group_usable():
    def fn(pg, rank):
        with pytest.raises(ValueError, match="reduce_scatter_tensor input has 5 elements"):
            pg.reduce_scatter_single(torch.zeros(2), torch.zeros(5), options("ReduceScatterOptions"))
        t = torch.full((3,), float(rank + 1))
        pg.allreduce([t]).wait()
        return t.tolist()

    assert on_ranks(3, fn) == [[6.0] * 3] * 3


# -- the store-backed stand-in for MPI (torchrun) ---------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_store_comm_answers_a_communicators_mpi_calls_through_the_store(n):
    store = dist.HashStore()
    results, errors = [None] * n, []

    def rank_main(rank):
        try:
            comm = StoreComm(store, rank, n, timeout=20.0)
            everyone = comm.allgather(rank * 10)
            root = comm.bcast(f"from {rank}", root=n - 1)
            child = comm.Split(color=rank % 2, key=-rank)  # reversed order inside each colour
            ring = np.zeros(2, np.int64)
            if n > 1:
                request = comm.Irecv([ring, MPI.INT64_T], source=(rank - 1) % n, tag=3)
                sent = comm.Issend([np.array([rank, 7], np.int64), MPI.INT64_T], dest=(rank + 1) % n, tag=3)
                while not request.Test():
                    pass
                while not sent.Test():  # complete once the peer's receive has taken it
                    pass
                comm.isend({"hello": rank}, dest=(rank + 1) % n, tag=4)
                status = MPI.Status()
                while not comm.Iprobe(tag=4, status=status):
                    pass
                note = comm.recv(source=status.Get_source(), tag=4)
                assert comm.Improbe(tag=4) is None
            else:
                note = {"hello": 0}
            survivors = comm.Create_group(comm.Get_group().Excl([0])) if rank and n > 1 else None
            comm.Barrier()
            results[rank] = (everyone, root, child.Get_size(), child.Get_rank(), ring.tolist(), note,
                             survivors and survivors.allgather(rank))  # fmt: skip
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for rank, (everyone, root, size, child_rank, ring, note, survivors) in enumerate(results):
        assert everyone == [10 * r for r in range(n)] and root == f"from {n - 1}"
        colour = [r for r in range(n) if r % 2 == rank % 2]
        assert size == len(colour) and child_rank == sorted(colour, reverse=True).index(rank)
        if n > 1:
            assert ring == [(rank - 1) % n, 7] and note == {"hello": (rank - 1) % n}
            assert survivors == (list(range(1, n)) if rank else None)


def test_store_comm_times_out_naming_the_missing_ranks():
    comm = StoreComm(dist.HashStore(), 0, 3, timeout=0.2)
    with pytest.raises(nbcoll.comm.CommTimeoutError, match=r"allgather waited 0.2 s .* rank\(s\) \[1, 2\]"):
        comm.allgather(1)
    with pytest.raises(nbcoll.comm.CommTimeoutError, match="a message from rank 2"):
        comm.recv(source=2)


# -- one launch per launcher and world size ----------------------------------------------------------------------


def check_every_rank(outputs, n):
    for rank in range(n):
        said = [out for out in outputs if f"rank {rank}: torch backend ok: {CASES + 2} cases" in out]
        assert said, f"rank {rank} did not finish\n" + "\n".join(outputs)[-6000:]
    joined = "\n".join(outputs)
    for what in ("DistributedDataParallel", "fully_shard"):  # on the world and on each 2-rank half of it
        for size in (n, 2):
            assert joined.count(f"{what} after 5 steps on {size} ranks equals gloo's within 1e-6") == n
    pids = [int(p) for p in re.findall(r"pid=(\d+)", joined)]
    assert len(pids) == n and not [g for p in pids for g in glob.glob(f"/dev/shm/nbcoll_{p}_*")]


@pytest.mark.mpi
@pytest.mark.parametrize("n", [4])  # the 4-rank launch also trains on each 2-rank half: one launch, both sizes
def test_every_collective_ddp_and_fully_shard_match_gloo_under_mpiexec(n):
    env = {"NBCOLL_BACKEND": "numpy", "NBCOLL_TIMEOUT": "60", "OMP_NUM_THREADS": "1"}  # as torchrun sets it
    result = run_ranks(n, SCRIPT, env=env, timeout=300)
    check_every_rank(result.outputs, n)


@pytest.mark.parametrize("n", [4])
def test_every_collective_ddp_and_fully_shard_match_gloo_under_torchrun(n):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "OMPI_", "MPI_LOCAL"))}
    env.update(NBCOLL_BACKEND="numpy", NBCOLL_TIMEOUT="60", OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}", SCRIPT]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
    check_every_rank([proc.stdout], n)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_an_uneven_all_to_all_refused_on_one_rank_makes_every_rank_raise_at_once_and_writes_nothing(n):
    # rank n - 1 gives split sizes that do not add up to its rows: its peers hear of it before sending anything
    config = nbcoll.comm.CommConfig(timeout=30.0)

    def fn(comm):
        pg, rank = ProcessGroupNbcoll(comm, comm.rank, comm.size), comm.rank
        out = torch.full((n,), -7)
        splits = [1] * n if rank != n - 1 else [2] + [1] * (n - 1)
        started = time.monotonic()
        try:
            pg.all_to_all_single(out, torch.arange(n) + 10 * rank, [1] * n, splits, options("AllToAllOptions"))
            raised = None
        except Exception as exc:  # noqa: BLE001 (what each rank raised is the result)
            raised = exc
        return raised, time.monotonic() - started, out

    for rank, (raised, seconds, out) in enumerate(loopback.run(n, fn, config=config)):
        expected = "input_split_sizes: expected" if rank == n - 1 else f"refused on rank {n - 1}"
        assert isinstance(raised, ValueError) and expected in str(raised), (rank, raised)
        assert seconds < 10, (rank, seconds)
        assert out.tolist() == [-7] * n, rank


def test_an_uneven_all_to_all_whose_pair_sizes_differ_is_refused_on_every_rank():
    # rank 0 sends 2 rows to rank 1, which expects 1 from it: every rank names the pair, nothing moves
    def fn(pg, rank):
        out = torch.full((3,), -7)
        send_splits = [1, 2] if rank == 0 else [1, 1]
        rows = torch.arange(sum(send_splits))
        recv_splits = [1, 2] if rank == 0 else [1, 1]
        with pytest.raises(ValueError, match="rank 0 sends 2 elements to rank 1, which expects 1"):
            pg.all_to_all_single(out[: sum(recv_splits)], rows, recv_splits, send_splits, options("AllToAllOptions"))
        return out.tolist()

    assert on_ranks(2, fn) == [[-7] * 3] * 2


def test_an_uneven_all_to_all_moves_every_block_to_its_rank():
    # rank r sends r + 1 copies of (10 r + p) to rank p: p receives rows of every rank, each rank's count its own
    n = 3

    def fn(pg, rank):
        send_splits = [rank + 1] * n
        inp = torch.cat([torch.full((rank + 1,), 10 * rank + p) for p in range(n)])
        recv_splits = [q + 1 for q in range(n)]
        out = torch.full((sum(recv_splits),), -7)
        pg.all_to_all_single(out, inp, recv_splits, send_splits, options("AllToAllOptions")).wait()
        return out.tolist()

    for p, got in enumerate(on_ranks(n, fn)):
        assert got == [10 * q + p for q in range(n) for _ in range(q + 1)], (p, got)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_low_precision_tensors_reduce_bit_for_bit_as_nbcoll_does(n, dtype):
    # the same values through the process group and through nbcoll's own all-reduce of ml_dtypes arrays: the same
    # bits (nbcoll's reduction of these types is checked against ml_dtypes elsewhere); an all-gather moves them as
    # they are
    np_dtype, torch_dtype = getattr(nbcoll, dtype), getattr(torch, dtype)

    def values(rank):
        return (np.random.default_rng(rank).standard_normal(37) * 4).astype(np_dtype)

    def fn(comm):
        pg, rank = ProcessGroupNbcoll(comm, comm.rank, comm.size), comm.rank
        mine = values(rank)
        t = torch.from_numpy(mine.view(np.uint8 if mine.itemsize == 1 else np.uint16).copy()).view(torch_dtype)
        pg.allreduce([t], options("AllreduceOptions")).wait()
        gathered = torch.zeros(37 * n, dtype=torch_dtype)
        pg.all_gather_single(gathered, torch.from_numpy(mine.view(np.uint8 if mine.itemsize == 1 else np.uint16))
                             .view(torch_dtype)).wait()  # fmt: skip
        reference = comm.all_reduce(nbcoll.to_device(mine.copy()))
        words = torch.uint8 if mine.itemsize == 1 else torch.uint16
        return t.view(words).numpy().tobytes(), nbcoll.to_host(reference).tobytes(), gathered.view(words).numpy()

    for got, reference, gathered in loopback.run(n, fn):
        assert got == reference
        expected = np.concatenate([values(r) for r in range(n)])
        assert gathered.tobytes() == expected.tobytes()
