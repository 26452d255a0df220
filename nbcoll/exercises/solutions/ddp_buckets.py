"""Exercise ddp_buckets, reference solution: group parameters into buckets as data-parallel training does."""


def ddp_buckets(sizes: list[int], cap: int) -> list[list[int]]:
    # Walk from the last registered parameter (its gradient is ready first) and close a bucket once it holds
    # at least cap bytes.
    buckets, current, filled = [], [], 0
    for index in range(len(sizes) - 1, -1, -1):
        current.append(index)
        filled += sizes[index]
        if filled >= cap:
            buckets.append(current)
            current, filled = [], 0
    if current:
        buckets.append(current)
    return buckets
