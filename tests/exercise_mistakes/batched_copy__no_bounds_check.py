"""Exercise batched_copy, mistake: threads past the total copy too.

The task: many copies in one launch, driven by a descriptor table::

for i < total: k = the segment holding i; j = i - starts[k]
               dst[dst_offsets[k] + j] = src[src_offsets[k] + j]
"""

from numba import cuda


@cuda.jit
def batched_copy_kernel(dst, src, src_offsets, dst_offsets, starts, total):
    # One thread copies one element. It finds its segment by binary search in starts (sorted, starts[0] == 0):
    # the last k with starts[k] <= i.
    i = cuda.grid(1)
    lo, hi = 0, starts.size - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= i:
            lo = mid
        else:
            hi = mid - 1
    j = i - starts[lo]
    dst[dst_offsets[lo] + j] = src[src_offsets[lo] + j]
