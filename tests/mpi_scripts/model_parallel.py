"""Every model-parallel case in one launch (one start of the ranks instead of one per strategy).

``mpiexec -n 4 python model_parallel.py [--out DIR]`` runs the mesh and tensor-parallel cases, the pipeline
cases, the expert-parallel cases and, on 4 ranks, the hybrids; prints ``<name> ok: N cases`` for each on every rank.
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
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", default="", help="a folder for the pipeline timelines rank 0 draws")
    parser.add_argument("--toy", action="store_true", help="the float32 toy case of each strategy (simulator)")
    args = parser.parse_args()
    nbcoll.set_default_dtype(np.float64)
    comm = nbcoll.init()
    if args.toy:
        for name, module in [("tensor", tensor_parallel), ("pipeline", pipeline), ("expert", expert_parallel)]:
            print(f"rank {comm.rank}: {name} float32 toy ok: {module.check_toy_float32(comm)} cases", flush=True)
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
