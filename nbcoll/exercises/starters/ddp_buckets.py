"""Exercise ddp_buckets: group parameters into gradient buckets, as data-parallel training (DDP) does.

Data-parallel training all-reduces every gradient. One all-reduce per parameter pays the fixed cost of a
collective many times; one for the whole model waits for the whole backward. Buckets sit between: gradients
are packed into buckets of about ``cap`` bytes, and a bucket's all-reduce starts as soon as its last gradient
is ready, while backward goes on with earlier layers.

Given each parameter's size in bytes, in registration order (``sizes[0]`` is the first layer's), return the
buckets as lists of parameter indices::

    walk the parameters from the last registered to the first (backward makes their gradients in that order)
    add each to the open bucket; once the bucket holds at least cap bytes (>= cap), close it
    the last bucket may hold less than cap; no parameters -> no buckets

Example: ``ddp_buckets([10, 20, 30], 40) == [[2, 1], [0]]``. Check your work with::

    python -m nbcoll exercise ddp_buckets --check ddp_buckets.py
"""


def ddp_buckets(sizes: list[int], cap: int) -> list[list[int]]:
    # Plan: one loop over the indices from len(sizes) - 1 down to 0, keeping the open bucket and its bytes;
    # after adding a parameter, close the bucket when its bytes reach cap; at the end keep a non-empty bucket.
    raise NotImplementedError("ddp_buckets: return the buckets")
