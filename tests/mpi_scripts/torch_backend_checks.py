"""Every collective of the "nbcoll" torch backend against gloo's, then DDP and FSDP2 training on both.

Run under ``mpiexec -n 4 python torch_backend_checks.py`` or ``torchrun --nproc-per-node 4 torch_backend_checks.py``:
every rank builds the default group on "nbcoll" and a gloo group of the same ranks, runs each case on both with
the same inputs (sync, then ``async_op=True``), and compares (integers exactly, float32 within 1e-6). Then it
trains the same model 5 steps with DistributedDataParallel and with ``fully_shard`` on each backend and compares
every parameter within 1e-6. Each rank prints one line per case and ends with ``torch backend ok: N cases``.
"""

from __future__ import annotations

import os
import sys
import time
import warnings

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard

import nbcoll.torch_backend  # noqa: F401  (registers "nbcoll")

OPS = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]
COUNT = 7  # elements of each rank's block: odd, and no rank count divides it
STEPS = 5


def say(line: str) -> None:
    """One write per line: the ranks of torchrun share one pipe."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def close(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    if a.dtype.is_floating_point:
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6, msg=lambda m: f"{what}: {m}")
    elif not torch.equal(a, b):
        raise AssertionError(f"{what}: {a.tolist()} != {b.tolist()}")


def data(seed: int, shape: tuple[int, ...], dtype: torch.dtype, rank: int | None = None) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1000 * seed + (dist.get_rank() if rank is None else rank))
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=gen) + 0.5).to(dtype)  # in [0.5, 1.5): products stay small
    return torch.randint(-3, 4, shape, generator=gen).to(dtype)


def cases(n: int, rank: int) -> dict:
    """name -> fn(group, async_op) -> the tensors to compare (each case makes its own inputs)."""

    def run(work, async_op):
        if async_op:
            assert work is not None and not isinstance(work, bool), "async_op=True returned no Work"
            work.wait()
        return work

    def all_reduce(op, dtype, contiguous=True):
        def case(group, async_op):
            t = data(1, (COUNT, 3), dtype)
            t = t if contiguous else t.t()  # a transposed view: staged and written back
            run(dist.all_reduce(t, op=op, group=group, async_op=async_op), async_op)
            return [t]

        return case

    def broadcast(group, async_op):
        t = data(2, (COUNT,), torch.float32)
        run(dist.broadcast(t, src=n - 1, group=group, async_op=async_op), async_op)
        return [t]

    def reduce(group, async_op):
        t = data(3, (COUNT,), torch.int64)
        run(dist.reduce(t, dst=0, op=dist.ReduceOp.SUM, group=group, async_op=async_op), async_op)
        return [t] if rank == 0 else []

    def all_gather(group, async_op):
        out = [torch.zeros(COUNT, dtype=torch.float32) for _ in range(n)]
        run(dist.all_gather(out, data(4, (COUNT,), torch.float32), group=group, async_op=async_op), async_op)
        return out

    def all_gather_into_tensor(group, async_op):
        out = torch.zeros(n * COUNT, dtype=torch.int32)
        run(dist.all_gather_into_tensor(out, data(5, (COUNT,), torch.int32), group=group, async_op=async_op), async_op)
        return [out]

    def reduce_scatter(group, async_op):
        out = torch.zeros(COUNT, dtype=torch.float32)
        ins = [data(6 + p, (COUNT,), torch.float32) for p in range(n)]
        run(dist.reduce_scatter(out, ins, op=dist.ReduceOp.SUM, group=group, async_op=async_op), async_op)
        return [out]

    def reduce_scatter_tensor(group, async_op):
        out = torch.zeros(COUNT, 2, dtype=torch.int64)
        inp = data(7, (n * COUNT, 2), torch.int64)
        run(dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.MAX, group=group, async_op=async_op), async_op)
        return [out]

    def all_to_all_single(group, async_op):
        out = torch.zeros(n * COUNT, dtype=torch.float32)
        run(dist.all_to_all_single(out, data(8, (n * COUNT,), torch.float32), group=group, async_op=async_op), async_op)
        return [out]

    def all_to_all_single_splits(group, async_op):
        # rank r sends p + r + 1 rows of 3 to rank p (some uneven, none empty on 2 ranks, one empty block below)
        send_rows = [(p + rank) % 3 for p in range(n)]
        recv_rows = [(rank + p) % 3 for p in range(n)]
        out = torch.zeros(sum(recv_rows), 3, dtype=torch.int64)
        inp = data(9, (sum(send_rows), 3), torch.int64)
        work = dist.all_to_all_single(out, inp, recv_rows, send_rows, group=group, async_op=async_op)
        run(work, async_op)
        return [out]

    def all_to_all(group, async_op):
        outs = [torch.zeros(COUNT, dtype=torch.float32) for p in range(n)]  # gloo's takes equal sizes only
        ins = [data(10 + p, (COUNT,), torch.float32) for p in range(n)]
        run(dist.all_to_all(outs, ins, group=group, async_op=async_op), async_op)
        return outs

    def gather(group, async_op):
        out = [torch.zeros(COUNT, dtype=torch.int64) for _ in range(n)] if rank == 1 % n else None
        run(dist.gather(data(11, (COUNT,), torch.int64), out, dst=1 % n, group=group, async_op=async_op), async_op)
        return out or []

    def scatter(group, async_op):
        ins = [data(12 + p, (COUNT,), torch.float32) for p in range(n)] if rank == n - 1 else None
        out = torch.zeros(COUNT, dtype=torch.float32)
        run(dist.scatter(out, ins, src=n - 1, group=group, async_op=async_op), async_op)
        return [out]

    def send_recv(group, async_op):
        t = data(13, (COUNT,), torch.float32) if rank % 2 == 0 else torch.zeros(COUNT)
        if rank % 2 == 0 and rank + 1 < n:
            run(dist.isend(t, rank + 1, group=group) if async_op else dist.send(t, rank + 1, group=group), async_op)
        elif rank % 2 == 1:
            run(dist.irecv(t, rank - 1, group=group) if async_op else dist.recv(t, rank - 1, group=group), async_op)
        return [t]

    def barrier(group, async_op):
        run(dist.barrier(group=group, async_op=async_op), async_op)
        return []

    table = {f"all_reduce {op} {dtype}": all_reduce(op, dtype) for op in OPS for dtype in (torch.float32, torch.int64)}
    table["all_reduce SUM transposed view"] = all_reduce(dist.ReduceOp.SUM, torch.float32, contiguous=False)
    table.update(
        broadcast=broadcast, reduce=reduce, all_gather=all_gather, all_gather_into_tensor=all_gather_into_tensor,
        reduce_scatter=reduce_scatter, reduce_scatter_tensor=reduce_scatter_tensor,
        all_to_all_single=all_to_all_single, all_to_all_single_splits=all_to_all_single_splits,
        all_to_all=all_to_all, gather=gather, scatter=scatter, send_recv=send_recv, barrier=barrier,
    )  # fmt: skip
    return table


def check_collectives(gloo: dist.ProcessGroup, n: int, rank: int) -> int:
    checked = 0
    for name, case in cases(n, rank).items():
        expected = case(gloo, False)
        for async_op in (False, True):
            got = case(None, async_op)
            assert len(got) == len(expected), name
            for i, (a, b) in enumerate(zip(got, expected, strict=True)):
                close(a, b, f"{name} (async_op={async_op}) tensor {i}")
            checked += 1
        say(f"rank {rank}: {name} ok")
    # AVG, which gloo does not compute: against gloo's SUM divided by the ranks.
    for async_op in (False, True):
        mine, theirs = data(14, (COUNT,), torch.float32), data(14, (COUNT,), torch.float32)
        work = dist.all_reduce(mine, op=dist.ReduceOp.AVG, async_op=async_op)
        if async_op:
            work.wait()
        dist.all_reduce(theirs, group=gloo)
        close(mine, theirs / n, f"all_reduce AVG (async_op={async_op})")
        checked += 1
    say(f"rank {rank}: all_reduce AVG ok")
    return checked


def check_refusals_and_groups(n: int, rank: int) -> int:
    try:
        dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist.ReduceOp.BAND)
    except ValueError as exc:
        assert "nbcoll backend: ReduceOp.BAND is not supported" in str(exc), exc
    else:
        raise AssertionError("ReduceOp.BAND was not refused")
    try:
        dist.all_reduce(torch.ones(3, dtype=torch.int16))
    except TypeError as exc:
        assert "torch.int16" in str(exc), exc
    else:
        raise AssertionError("int16 was not refused")
    low = torch.full((5,), 1.5, dtype=torch.bfloat16)  # reduced in float32, rounded once a step
    dist.all_reduce(low)
    assert low.float().tolist() == [1.5 * n] * 5, low
    # new_group: every rank calls it for both groups; only members build (and use) a communicator.
    evens, odds = list(range(0, n, 2)), list(range(1, n, 2))
    groups = {tuple(ranks): dist.new_group(ranks) for ranks in (evens, odds)}
    mine = evens if rank % 2 == 0 else odds
    group = groups[tuple(mine)]
    t = torch.full((COUNT,), rank + 1, dtype=torch.int64)
    dist.all_reduce(t, group=group)
    assert t.tolist() == [sum(r + 1 for r in mine)] * COUNT, (mine, t)
    assert dist.get_backend(group) == "nbcoll" and dist.get_world_size(group) == len(mine)
    say(f"rank {rank}: refusals and new_group ok")
    return 3


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))


def train(model: torch.nn.Module, rank: int) -> list[torch.Tensor]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(STEPS):
        gen = torch.Generator().manual_seed(100 * step + rank)  # each rank its own micro-batch
        x, y = torch.randn(3 + rank, 5, generator=gen), torch.randn(3 + rank, 3, generator=gen)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return [p.full_tensor() if hasattr(p, "full_tensor") else p.detach().clone() for p in model.parameters()]


def check_training(gloo: dist.ProcessGroup, n: int, rank: int, nbcoll_group: dist.ProcessGroup | None = None) -> int:
    """DDP and fully_shard on the "nbcoll" group (the world by default) against the same training on gloo."""
    ddp = {}
    for name, group in (("nbcoll", nbcoll_group), ("gloo", gloo)):
        # buckets of about 100 bytes: several all-reduces in flight during one backward
        model = torch.nn.parallel.DistributedDataParallel(make_model(), process_group=group, bucket_cap_mb=1e-4)
        ddp[name] = train(model, rank)
    world_mesh = init_device_mesh("cpu", (n,)) if nbcoll_group is None else DeviceMesh.from_group(nbcoll_group, "cpu")
    meshes = {"nbcoll": world_mesh, "gloo": DeviceMesh.from_group(gloo, "cpu")}
    fsdp = {}
    for name, mesh in meshes.items():
        model = make_model()
        for layer in (model[0], model[2]):
            fully_shard(layer, mesh=mesh)
        fsdp[name] = train(fully_shard(model, mesh=mesh), rank)
    group = meshes["nbcoll"].get_group()
    assert dist.get_backend(group) == "nbcoll" and group.comm.counters.bytes_sent > 0, "FSDP2 ran elsewhere"
    for what, runs in (("DistributedDataParallel", ddp), ("fully_shard", fsdp)):
        for i, (a, b) in enumerate(zip(runs["nbcoll"], runs["gloo"], strict=True)):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=lambda m, w=what, i=i: f"{w} parameter {i}: {m}")
        say(f"rank {rank}: {what} after {STEPS} steps on {n} ranks equals gloo's within 1e-6")
    initial = list(make_model().parameters())[0].detach()
    assert not torch.allclose(ddp["nbcoll"][0], initial) and not torch.allclose(fsdp["nbcoll"][0], initial)
    return 2


def main() -> None:
    start = time.monotonic()
    warnings.filterwarnings("ignore", "`torch.distributed.(all_gather_into|reduce_scatter)_tensor` is deprecated")
    say(f"pid={os.getpid()}")
    dist.init_process_group("nbcoll")
    n, rank = dist.get_world_size(), dist.get_rank()
    assert dist.get_backend() == "nbcoll", dist.get_backend()
    gloo = dist.new_group(backend="gloo")
    checked = check_collectives(gloo, n, rank) + check_refusals_and_groups(n, rank) + check_training(gloo, n, rank)
    if n == 4:  # the same training on 2 ranks, in the same launch: each half of the world is a 2-rank group
        pairs = [(dist.new_group([0, 1]), dist.new_group([0, 1], backend="gloo"))]
        pairs.append((dist.new_group([2, 3]), dist.new_group([2, 3], backend="gloo")))
        mine, gloo_pair = pairs[rank // 2]
        checked += check_training(gloo_pair, 2, rank % 2, nbcoll_group=mine)
    dist.destroy_process_group()
    say(f"rank {rank}: torch backend ok: {checked} cases in {time.monotonic() - start:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
