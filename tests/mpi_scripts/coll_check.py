"""Every collective with every algorithm that applies, checked against a NumPy reference built from all ranks' inputs.

Run under mpiexec: ``mpiexec -n 4 python coll_check.py --preset full``, or call :func:`check_all` on every rank
of a loopback world (``nbcoll.comm.loopback.run(4, check_all, "full")``). Every rank can generate every other
rank's input (a seeded generator per rank), so each rank builds the exact expected result locally.

Inputs and tolerance: integers are random over the whole range of the dtype, and results must be equal bit for
bit (wrap-around is order-independent). float16 inputs are small whole numbers, so sums and products are exact in
any order. float32 and float64 inputs are standard normal; a sum may differ from the reference's summation order
by at most ``n * eps * sum(|x_i|)`` per element, the textbook bound for reordering a sum of ``n`` terms, and a
product by ``n * eps * |product|``; max and min are exact.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import nbcoll
from nbcoll.comm import init
from nbcoll.comm.algorithms import ALGORITHMS, channels_for
from nbcoll.comm.algorithms.common import blocks, rounds
from nbcoll.kernels import combine

PRESETS = {
    # numpy backend: every dtype, every op.
    "full": {
        "dtypes": [str(d) for d in nbcoll.DTYPES],
        "ops": ["sum", "prod", "max", "min", "avg", "premul_sum"],
        "inplace": [False, True],
    },
    # the simulator: a few dtypes that cover ints, half and single precision.
    "small": {
        "dtypes": ["int8", "uint64", "float16", "float32"],
        "ops": ["sum", "max", "avg", "premul_sum"],
        "inplace": [False, True],
    },
    "tiny": {"dtypes": ["int32", "float32"], "ops": ["sum", "avg"], "inplace": [False]},
    # the simulator at 2 to 5 ranks: one half of "tiny" each
    "tiny_int": {"dtypes": ["int32"], "ops": ["sum"], "inplace": [False]},
    "tiny_float": {"dtypes": ["float32"], "ops": ["avg"], "inplace": [False]},
}


def rank_input(rank: int, count: int, dtype: np.dtype, tag: int) -> np.ndarray:
    rng = np.random.default_rng([rank, count, tag, dtype.num])
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=count, dtype=dtype, endpoint=True)
    if dtype == np.float16:
        return rng.integers(-3, 4, size=count).astype(dtype)
    return rng.standard_normal(count).astype(dtype)


def premul_scalar(dtype: np.dtype) -> float:
    return 3 if dtype.kind in "iu" else 0.5


def make_op(name: str, dtype: np.dtype):
    return combine.premul_sum(premul_scalar(dtype)) if name == "premul_sum" else name


def reduce_reference(inputs: list[np.ndarray], op_name: str) -> np.ndarray:
    dtype = inputs[0].dtype
    values = inputs
    if op_name == "premul_sum":
        values = [combine.scale_reference(x, dtype.type(premul_scalar(dtype))) for x in inputs]
    fold = combine.kernel_op(make_op(op_name, dtype))
    acc = values[0].copy()
    for x in values[1:]:
        acc = combine.combine_reference(fold, acc, x)
    if op_name == "avg":
        acc = combine.divide_reference(acc, len(inputs))
    return acc


def check_close(got: np.ndarray, expected: np.ndarray, inputs: list[np.ndarray], what: str, op: str = "sum") -> None:
    if got.dtype.kind in "iu" or got.dtype == np.float16:
        if not np.array_equal(got, expected):
            bad = np.flatnonzero(got != expected)[:5]
            raise AssertionError(f"{what}: mismatch at {bad}: got {got[bad]}, expected {expected[bad]}")
        return
    n = len(inputs)
    eps = np.finfo(got.dtype).eps
    if op == "prod":  # each of the n-1 multiplications rounds once: a relative bound
        bound = n * eps * np.abs(expected.astype(np.float64))
    else:
        bound = n * eps * np.sum([np.abs(x.astype(np.float64)) for x in inputs], axis=0)
    if bound.shape != expected.shape:  # reduce-scatter and friends: bound per output element
        bound = np.full(expected.shape, bound.max() if bound.size else 0.0)
    err = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    if np.any(err > bound + 1e-30):
        worst = int(np.argmax(err - bound))
        raise AssertionError(f"{what}: error {err[worst]} > bound {bound[worst]} at {worst}")


def run_case(
    comm, coll: str, algo: str, count: int, dtype: np.dtype, op_name: str, inplace: bool, root: int, tag: int
) -> None:
    n, r = comm.size, comm.rank
    what = f"{coll}/{algo} count={count} {dtype} op={op_name} inplace={inplace} root={root} ranks={n}"
    op = make_op(op_name, dtype)
    if coll in ("all_reduce", "reduce"):
        inputs = [rank_input(p, count, dtype, tag) for p in range(n)]
        expected = reduce_reference(inputs, op_name)
        send = nbcoll.to_device(inputs[r])
        recv = None if inplace else nbcoll.to_device(np.full(count, 7, dtype))
        if coll == "all_reduce":
            comm.all_reduce(send, recv, op=op, algo=algo)
        else:
            comm.reduce(send, recv, op=op, root=root, algo=algo)
        result = nbcoll.to_host(send if inplace else recv)
        if coll == "all_reduce" or r == root:
            check_close(result, expected, inputs, what, op_name)
        elif not inplace:
            assert np.all(result == dtype.type(7)), f"{what}: a non-root recvbuf was written"
    elif coll == "broadcast":
        data = rank_input(root, count, dtype, tag)
        mine = data if r == root else np.zeros(count, dtype)
        send = nbcoll.to_device(mine)
        recv = None if inplace else nbcoll.to_device(np.zeros(count, dtype))
        comm.broadcast(send, recv, root=root, algo=algo)
        check_close(nbcoll.to_host(send if inplace else recv), data, [data], what)
    elif coll == "all_gather":
        inputs = [rank_input(p, count, dtype, tag) for p in range(n)]
        expected = np.concatenate(inputs) if count else np.zeros(0, dtype)
        start = np.zeros(n * count, dtype)
        start[r * count : (r + 1) * count] = inputs[r]  # in place: the input already sits in its block
        recv = nbcoll.to_device(start)
        send = recv[r * count : (r + 1) * count] if inplace else nbcoll.to_device(inputs[r])
        comm.all_gather(send, recv, algo=algo)
        check_close(nbcoll.to_host(recv), expected, [expected], what)
    elif coll == "reduce_scatter":
        inputs = [rank_input(p, n * count, dtype, tag) for p in range(n)]
        full = reduce_reference(inputs, op_name)
        expected = full[r * count : (r + 1) * count]
        send = nbcoll.to_device(inputs[r])
        recv = send[r * count : (r + 1) * count] if inplace else nbcoll.to_device(np.zeros(count, dtype))
        comm.reduce_scatter(send, recv, op=op, algo=algo)
        check_close(nbcoll.to_host(recv), expected, [x[r * count : (r + 1) * count] for x in inputs], what, op_name)
    elif coll == "all_to_all":
        inputs = [rank_input(p, n * count, dtype, tag) for p in range(n)]
        expected = np.concatenate([inputs[p][r * count : (r + 1) * count] for p in range(n)]) if count else inputs[r]
        recv = nbcoll.to_device(np.zeros(n * count, dtype))
        comm.all_to_all(nbcoll.to_device(inputs[r]), recv, algo=algo)
        check_close(nbcoll.to_host(recv), expected, [expected], what)
    elif coll == "gather":
        inputs = [rank_input(p, count, dtype, tag) for p in range(n)]
        recv = nbcoll.to_device(np.zeros(n * count, dtype)) if r == root else None
        comm.gather(nbcoll.to_device(inputs[r]), recv, root=root, algo=algo)
        if r == root:
            expected = np.concatenate(inputs) if count else np.zeros(0, dtype)
            check_close(nbcoll.to_host(recv), expected, [expected], what)
    elif coll == "scatter":
        data = rank_input(root, n * count, dtype, tag)
        send = nbcoll.to_device(data) if r == root else None
        recv = nbcoll.to_device(np.zeros(count, dtype))
        comm.scatter(send, recv, root=root, algo=algo)
        check_close(nbcoll.to_host(recv), data[r * count : (r + 1) * count], [data], what)


def check_ring_traffic(comm, count: int) -> str:
    """Ring all-reduce: each rank sends exactly 2 * round - |block r| - |block r+1| per round (see ring.py), in
    the rounds of each channel's part of the buffer."""
    n, r = comm.size, comm.rank
    if n == 1:
        return ""
    dtype = np.dtype(np.float32)
    chunk_elems = comm.config.chunk_bytes // dtype.itemsize
    nchannels = channels_for("all_reduce", "ring", count, chunk_elems, comm.config.nchannels, n)
    sends = receives = 0
    for lo, hi in blocks(0, count, nchannels):
        for block in rounds(hi - lo, n, chunk_elems, start=lo):
            total = block[-1][1] - block[0][0]
            size = [hi - lo for lo, hi in block]
            sends += 2 * total - size[r] - size[(r + 1) % n]
            receives += 2 * total - size[(r - 1) % n] - size[r]
    comm.reset_counters()
    comm.all_reduce(nbcoll.to_device(np.ones(count, dtype)), algo="ring")
    sent, received = comm.counters.bytes_sent, comm.counters.bytes_received
    assert sent == sends * dtype.itemsize, f"ring traffic: rank {r} sent {sent} bytes, expected {sends * 4}"
    assert received == receives * dtype.itemsize, f"ring traffic: rank {r} received {received}, expected {receives * 4}"
    talked = {p for p in comm.counters.peers if comm.counters[p].bytes_sent or comm.counters[p].bytes_received}
    assert talked <= {(r - 1) % n, (r + 1) % n}, f"ring traffic: rank {r} talked to non-neighbours {talked}"
    ideal = 2 * (n - 1) / n * count * dtype.itemsize
    return f"rank {r}: ring all-reduce of {count} floats sent {sent} bytes; 2(n-1)/n x buffer = {ideal:.0f}\n"


ALL_COLLECTIVES = ",".join(c for c in ALGORITHMS if c != "barrier")


def check_all(comm, preset_name: str = "full", collectives: str = ALL_COLLECTIVES, big: int = 0) -> str:
    """Every case of the preset on ``comm`` (under mpiexec or in a loopback world); returns what a rank prints."""
    preset = PRESETS[preset_name]
    n = comm.size
    counts = sorted({0, 1, max(n - 1, 0), 2 * n + 1} | ({big} if big else set()))
    cases = 0
    tag = 0
    for coll in collectives.split(","):
        for algo in ALGORITHMS[coll]:
            reduces = coll in ("all_reduce", "reduce", "reduce_scatter")
            rooted = coll in ("broadcast", "reduce", "gather", "scatter")
            inplace_options = preset["inplace"] if coll not in ("all_to_all", "gather", "scatter") else [False]
            for dtype_name in preset["dtypes"]:
                dtype = np.dtype(dtype_name)
                for op_name in preset["ops"] if reduces else ["-"]:
                    for count in counts:
                        for inplace in inplace_options:
                            tag += 1
                            root = (tag % n) if rooted else -1
                            run_case(comm, coll, algo, count, dtype, op_name, inplace, root, tag)
                            cases += 1
    comm.barrier()
    out = check_ring_traffic(comm, big or 5 * n + 3) if "all_reduce" in collectives else ""
    return out + f"rank {comm.rank}: {cases} collective cases ok"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="full", choices=PRESETS)
    parser.add_argument("--collectives", default=ALL_COLLECTIVES)
    parser.add_argument("--big", type=int, default=0, help="one extra count, larger than the FIFO")
    args = parser.parse_args()
    comm = init()
    print(check_all(comm, args.preset, args.collectives, args.big))
    comm.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
