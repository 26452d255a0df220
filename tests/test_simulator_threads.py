"""Kernels launched from two threads at once on the simulator (a progress thread and the main thread) stay correct."""

import threading

import numpy as np
import pytest

import nbcoll
from nbcoll.backend import device_backend
from nbcoll.kernels import copy as copy_kernels


@pytest.mark.skipif(device_backend() != "sim", reason="the simulator's launch state is what this checks")
def test_the_same_kernel_launched_from_two_threads_keeps_each_launch_s_grid():
    failures = []

    def copy_many(size: int) -> None:
        src = nbcoll.to_device(np.arange(size, dtype=np.float32))
        for _ in range(6):
            dst = nbcoll.zeros(size, np.float32)
            try:
                copy_kernels.copy(dst, src)  # the grid depends on size: 1 block against 2
            except Exception as exc:  # a launch run inside the other thread's launch fails
                failures.append(f"{size}: {exc!r}")
                return
            if not np.array_equal(nbcoll.to_host(dst), np.arange(size)):
                failures.append(f"{size}: wrong elements")

    with nbcoll.use_backend("sim"):
        threads = [threading.Thread(target=copy_many, args=(size,)) for size in (35, 300)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert not failures, failures
