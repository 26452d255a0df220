"""Collectives inside one kernel: NCCL's device primitives, written as Numba CUDA device functions.

:mod:`nbcoll.comm.primitives` steps a collective from Python, one chunk per launch. Here the same primitives are
device functions that spin on counters or flags in memory the peer can see, so that a whole collective is one
launch. The device side of each protocol:

* :mod:`.prims`: the simple protocol (NCCL's ``prims_simple.h``): FIFO slots, ``head``/``tail`` counters that only
  grow, ``wait_peer``/``post_peer``, and ``send`` ... ``copy_send``;
* :mod:`.ll`: the LL protocol (``prims_ll.h``): 8-byte lines of 4 bytes of data and a 4-byte flag, one store each;
* :mod:`.signal_pads`: PyTorch SymmetricMemory's signal pads (put 0 -> 1, wait 1 -> 0), the barrier of the
  one-shot and two-shot all-reduces;
* :mod:`.ring_launch`: launching the ring kernel without a synchronising status copy, and the seam an exercise
  plugs its own ``recv_reduce_send`` into.

The kernels built on them sit beside their host versions in :mod:`nbcoll.comm.algorithms`: ``ring_device``
(all-reduce), ``ring_device_collectives`` and ``ring_device_world`` (all-gather, reduce-scatter, broadcast,
reduce), ``direct_device`` (one-shot and two-shot), ``ll_device`` (LL all-reduce and all-gather), all for one
process driving a whole world on one GPU (ranks are thread groups of one block), and ``ring_device_rank``, one
rank's kernel per process, which :mod:`nbcoll.comm.device_collective` runs for ``all_reduce(proto="device")``.
"""
