"""Exercise batched_copy: many copies in one launch, driven by a table of descriptors, as a DMA engine does::

    for i < total: k = the segment holding i; j = i - starts[k]
                   dst[dst_offsets[k] + j] = src[src_offsets[k] + j]

Segment k copies ``lengths[k]`` elements; ``starts`` holds the exclusive prefix sums of the lengths (``starts[0]
== 0``; empty segments are dropped), so thread i's segment is the last k with ``starts[k] <= i``. nbcoll packs
gradient buckets this way (``nbcoll.kernels.copy.flatten``). The check launches
``batched_copy_kernel[ceil(total / 32), 32](dst, src, src_offsets, dst_offsets, starts, total)`` (at least one
block); elements of ``dst`` outside every segment must stay as they are. Check your work with::

    python -m nbcoll exercise batched_copy --check batched_copy.py
"""

from numba import cuda


@cuda.jit
def batched_copy_kernel(dst, src, src_offsets, dst_offsets, starts, total):
    # Plan, for one thread:
    #   1. i = cuda.grid(1); threads with i >= total return at once
    #   2. find k, the last segment with starts[k] <= i (a loop over starts, or a binary search)
    #   3. j = i - starts[k]; dst[dst_offsets[k] + j] = src[src_offsets[k] + j]
    pass
