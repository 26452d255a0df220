"""Collectives inside one kernel: NCCL's device primitives, written as Numba CUDA device functions.

:mod:`nbcoll.comm.primitives` steps a collective from Python, one chunk per launch. Here the same primitives are
device functions that spin on head and tail counters in memory the peer can see, so that a whole collective is
one launch (:mod:`.prims`; the ring all-reduce built on them is :mod:`nbcoll.comm.algorithms.ring_device`).
"""
