"""Every model-parallel case in one launch (one start of the ranks instead of one per strategy).

``mpiexec -n 4 python model_parallel.py [--out DIR]`` runs the mesh and tensor-parallel cases, the pipeline
cases, the expert-parallel cases and, on 4 ranks, the hybrids; prints ``<name> ok: N cases`` for each on every rank.

``--toy`` (4 ranks, for the simulator) runs the float32 toy cases: a split head and the vocabulary-parallel loss
on ranks 0-1 while ranks 2-3 train the experts spread against one process, then on all four one step of each
hybrid, DP x TP, DP x PP (a GPipe pipeline) and TP x PP (a 1F1B pipeline), which between them train tensor
parallel layers and both pipeline schedules; prints ``<name> float32 toy ok: N cases``.
"""

from __future__ import annotations

import argparse

import expert_parallel
import hybrid_parallel
import numpy as np
import pipeline
import tensor_parallel

import nbcoll


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--out", default="", help="a folder for the pipeline timelines rank 0 draws")
    parser.add_argument("--toy", action="store_true", help="the float32 toy case of each strategy (simulator)")
    args = parser.parse_args()
    nbcoll.set_default_dtype(np.float64)
    comm = nbcoll.init()
    if args.toy:  # 4 ranks: two pairs share the 2-rank strategies, then all four run the hybrids
        pair = comm.split(comm.rank // 2)
        name, module = ("tensor", tensor_parallel) if comm.rank < 2 else ("expert", expert_parallel)
        print(f"rank {comm.rank}: {name} float32 toy ok: {module.check_toy_float32(pair)} cases", flush=True)
        pair.destroy()
        cases = hybrid_parallel.check_toy_float32(comm)  # DP x TP, DP x PP under GPipe, TP x PP under 1F1B
        print(f"rank {comm.rank}: hybrid float32 toy ok: {cases} cases", flush=True)
        comm.destroy()
        return
    for name, run in [
        ("tensor parallel", lambda: tensor_parallel.run(comm, args.steps)),
        ("pipeline", lambda: pipeline.run(comm, args.steps, args.out)),
        ("expert parallel", lambda: expert_parallel.run(comm, args.steps)),
        ("hybrid parallel", lambda: hybrid_parallel.run(comm, args.steps)),  # 4 ranks: DP x TP, DP x PP, TP x PP
    ]:
        print(f"rank {comm.rank}: {name} ok: {run()} cases", flush=True)
    comm.destroy()


if __name__ == "__main__":
    main()
