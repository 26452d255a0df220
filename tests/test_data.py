"""Datasets, the loader (with and without prefetch), clean thread shutdown, and the distributed sampler's shards."""

import gc
import threading
import traceback

import numpy as np
import pytest

import nbcoll
from nbcoll.data import DataLoader, Dataset, DistributedSampler, PrefetchIterator, TensorDataset, collate


def prefetch_threads():
    return [t for t in threading.enumerate() if t.name == "nbcoll-prefetch"]


@pytest.fixture(autouse=True)
def no_thread_left():
    assert not prefetch_threads()
    yield
    assert not prefetch_threads(), "a prefetch thread outlived its loop"


def dataset(n=23):
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    return TensorDataset(x, np.arange(n))


def as_host(batches):
    return [tuple(t.numpy() if isinstance(t, nbcoll.Tensor) else t for t in b) for b in batches]


def test_tensor_dataset_rows_and_checks():
    ds = dataset(5)
    assert len(ds) == 5
    x, y = ds[2]
    np.testing.assert_array_equal(x, [6, 7, 8])
    assert y == 2
    with pytest.raises(ValueError, match=r"arrays\[1\]: first dimension 4 differs"):
        TensorDataset(np.zeros((5, 2)), np.zeros(4))
    ds2 = TensorDataset(nbcoll.tensor(np.ones((2, 2))))
    assert isinstance(ds2.arrays[0], np.ndarray)


def test_batches_in_order_with_short_last_batch_or_dropped():
    loader = DataLoader(dataset(), batch_size=5)
    batches = as_host(loader)
    assert len(batches) == len(loader) == 5
    assert [len(b[1]) for b in batches] == [5, 5, 5, 5, 3]
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), np.arange(23))
    assert isinstance(next(iter(loader))[0], nbcoll.Tensor)
    dropped = DataLoader(dataset(), batch_size=5, drop_last=True)
    assert len(dropped) == 4 and [len(b[1]) for b in as_host(dropped)] == [5] * 4


def test_shuffle_is_a_new_permutation_each_epoch_reproducible_by_seed():
    a = DataLoader(dataset(), batch_size=4, shuffle=True, seed=7, device=False)
    b = DataLoader(dataset(), batch_size=4, shuffle=True, seed=7, device=False)
    epoch0 = np.concatenate([y for _, y in a])
    epoch1 = np.concatenate([y for _, y in a])
    assert sorted(epoch0) == list(range(23)) and sorted(epoch1) == list(range(23))
    assert not np.array_equal(epoch0, epoch1)
    np.testing.assert_array_equal(np.concatenate([y for _, y in b]), epoch0)
    b.set_epoch(1)
    np.testing.assert_array_equal(np.concatenate([y for _, y in b]), epoch1)


def test_without_a_seed_manual_seed_makes_the_order_reproducible():
    def first_epoch():
        return np.concatenate([y for _, y in DataLoader(dataset(), batch_size=5, shuffle=True, device=False)])

    nbcoll.manual_seed(11)
    a = first_epoch()
    nbcoll.manual_seed(11)
    np.testing.assert_array_equal(first_epoch(), a)


def test_generic_dataset_is_collated():
    class Squares(Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return {"x": np.float32(i), "pair": (i, i * i)}

    batch = next(iter(DataLoader(Squares(), batch_size=3, device=False)))
    np.testing.assert_array_equal(batch["x"], [0, 1, 2])
    np.testing.assert_array_equal(batch["pair"][1], [0, 1, 4])


@pytest.mark.parametrize("depth", [1, 3])
def test_prefetch_yields_the_same_batches(depth):
    plain = DataLoader(dataset(), batch_size=4, shuffle=True, seed=3)
    ahead = DataLoader(dataset(), batch_size=4, shuffle=True, seed=3, prefetch=depth)
    for _ in range(2):  # two epochs: the same per-epoch orders
        got, want = as_host(ahead), as_host(plain)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g[0], w[0])
            np.testing.assert_array_equal(g[1], w[1])


def test_prefetch_thread_stops_on_break_and_on_garbage_collection():
    loader = DataLoader(dataset(200), batch_size=2, prefetch=2)
    for i, _ in enumerate(loader):
        if i == 1:
            break
    assert not prefetch_threads()
    it = iter(loader)
    next(it)
    assert prefetch_threads()
    del it
    gc.collect()
    assert not prefetch_threads()
    with iter(loader) as it:
        next(it)
    assert not prefetch_threads()


def test_prefetch_thread_stops_when_the_loop_body_raises():
    loader = DataLoader(dataset(200), batch_size=2, prefetch=2)
    with pytest.raises(KeyError):
        for _ in loader:
            raise KeyError("the training step failed")
    assert not prefetch_threads()


class FailsAt(Dataset):
    def __init__(self, bad):
        self.bad = bad

    def __len__(self):
        return 10

    def __getitem__(self, i):
        if i == self.bad:
            raise_deep_inside(i)
        return np.float32(i)


def raise_deep_inside(i):
    raise ValueError(f"example {i} is unreadable")


def test_a_worker_error_is_re_raised_in_the_caller_with_its_traceback():
    loader = DataLoader(FailsAt(bad=5), batch_size=2, prefetch=2)
    seen = []
    with pytest.raises(ValueError, match="example 5 is unreadable") as info:
        for batch in loader:
            seen.append(batch.numpy().tolist())
    assert seen == [[0, 1], [2, 3]]  # the batches before the bad one arrive first
    text = "".join(traceback.format_exception(info.value))
    assert "raise_deep_inside" in text and "__getitem__" in text  # the thread's frames
    assert "prefetch thread" in text
    assert not prefetch_threads()


def test_bad_arguments():
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(dataset(), batch_size=0)
    with pytest.raises(ValueError, match="prefetch"):
        DataLoader(dataset(), prefetch=-1)
    with pytest.raises(ValueError, match="shuffle"):
        DataLoader(dataset(), sampler=range(3), shuffle=True)
    with pytest.raises(ValueError, match=r"rank: expected an integer in \[0, 2\)"):
        DistributedSampler(10, num_replicas=2, rank=2)


@pytest.mark.parametrize("n", [0, 1, 7, 12, 13, 14, 15])
@pytest.mark.parametrize("replicas", [1, 2, 3, 4])
@pytest.mark.parametrize("shuffle", [False, True])
def test_distributed_sampler_shards(n, replicas, shuffle):
    def shards(**kw):
        samplers = [DistributedSampler(n, replicas, r, shuffle=shuffle, seed=5, **kw) for r in range(replicas)]
        for s in samplers:
            s.set_epoch(3)
        return [list(s) for s in samplers], samplers

    # drop_last: disjoint, equal shards; each kept index once, exactly n % replicas dropped.
    parts, samplers = shards(drop_last=True)
    flat = [i for p in parts for i in p]
    assert len(flat) == len(set(flat)) == n - n % replicas
    assert all(len(p) == len(s) == n // replicas for p, s in zip(parts, samplers, strict=True))

    # no padding: every index exactly once, shard sizes differ by at most one.
    parts, samplers = shards(pad=False)
    assert sorted(i for p in parts for i in p) == list(range(n))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    assert [len(p) for p in parts] == [len(s) for s in samplers]

    # padding (the default): equal shards, every index at least once, the extra ones fewer than replicas.
    parts, samplers = shards()
    flat = [i for p in parts for i in p]
    assert all(len(p) == -(-n // replicas) for p in parts)
    if n:
        assert set(flat) == set(range(n)) and len(flat) - n < replicas


def test_distributed_sampler_epochs_and_loader():
    a = DistributedSampler(10, 2, 0, seed=1)
    first = list(a)
    a.set_epoch(1)
    assert first != list(a) and first != list(range(0, 10, 2))  # shuffled, and differently per epoch
    loader = DataLoader(dataset(10), batch_size=2, sampler=DistributedSampler(10, 2, 1, shuffle=False))
    assert [b[1].numpy().tolist() for b in loader] == [[1, 3], [5, 7], [9]]
    assert len(loader) == 3


class StopsAt(Dataset):
    """A dataset whose example ``bad`` raises StopIteration, from ``__getitem__`` or from ``get_batch``."""

    def __init__(self, bad, in_get_batch=False):
        self.bad, self.in_get_batch = bad, in_get_batch

    def __len__(self):
        return 10

    def __getitem__(self, i):
        if i == self.bad and not self.in_get_batch:
            raise StopIteration
        return np.float32(i)

    def get_batch(self, indices):
        if self.in_get_batch and self.bad in indices:
            raise StopIteration
        return super().get_batch(indices)


@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize("in_get_batch", [False, True])
def test_stop_iteration_in_the_dataset_is_an_error_at_its_batch_not_the_end_of_the_epoch(prefetch, in_get_batch):
    loader = DataLoader(StopsAt(bad=5, in_get_batch=in_get_batch), batch_size=2, prefetch=prefetch, device=False)
    seen = []
    with pytest.raises(RuntimeError, match=r"dataset: .*StopIteration.* batch 2 ") as info:
        for batch in loader:
            seen.append(batch.tolist())
    assert seen == [[0, 1], [2, 3]]  # the batches before the bad one, then the error, not a shorter epoch
    assert isinstance(info.value.__cause__, StopIteration)
    assert not prefetch_threads()


@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize("bad", [0, 5, 9])
def test_a_dataset_error_is_raised_at_its_batch_with_and_without_prefetch(prefetch, bad):
    loader = DataLoader(FailsAt(bad=bad), batch_size=2, prefetch=prefetch, device=False)
    seen = []
    with pytest.raises(ValueError, match=f"example {bad} is unreadable"):
        for batch in loader:
            seen.append(batch.tolist())
    assert len(seen) == bad // 2  # neither lost nor raised early
    assert not prefetch_threads()


def test_prefetch_iterator_turns_a_stop_iteration_of_make_into_an_error():
    def make(i):
        if i == 3:
            raise StopIteration
        return i

    got = []
    with pytest.raises(RuntimeError, match="StopIteration") as info:
        for value in PrefetchIterator(make, range(6), depth=2):
            got.append(value)
    assert got == [0, 1, 2] and isinstance(info.value.__cause__, StopIteration)
    assert not prefetch_threads()


class Plain:
    """Not an nbcoll Dataset: only ``len()`` and indexing, as a PyTorch map-style dataset."""

    def __len__(self):
        return 7

    def __getitem__(self, i):
        return np.full(2, i, np.float32), i


@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize("shuffle", [False, True])
def test_any_object_with_len_and_indexing_is_a_dataset(prefetch, shuffle):
    def batches(data, device=False):
        return list(DataLoader(data, batch_size=3, shuffle=shuffle, seed=4, prefetch=prefetch, device=device))

    order = np.concatenate([b[0] for b in batches(TensorDataset(np.arange(7)))])  # the loader's order of 0..6

    numbers = batches([10 * i for i in range(7)])
    assert all(isinstance(b, np.ndarray) for b in numbers)
    np.testing.assert_array_equal(np.concatenate(numbers), 10 * order)

    arrays = batches([np.full((2, 2), i) for i in range(7)])
    assert [b.shape for b in arrays] == [(3, 2, 2), (3, 2, 2), (1, 2, 2)]
    np.testing.assert_array_equal(np.concatenate(arrays)[:, 0, 0], order)

    pairs = batches([(np.float32(i), i % 2) for i in range(7)])
    assert all(isinstance(b, tuple) and len(b) == 2 for b in pairs)
    np.testing.assert_array_equal(np.concatenate([y for _, y in pairs]), order % 2)

    dicts = batches([{"x": np.arange(3) + i, "y": i} for i in range(7)])
    np.testing.assert_array_equal(np.concatenate([d["x"][:, 0] for d in dicts]), order)
    np.testing.assert_array_equal(np.concatenate([d["y"] for d in dicts]), order)

    plain = batches(Plain(), device=True)
    assert isinstance(plain[0][0], nbcoll.Tensor) and plain[0][0].shape == (3, 2)
    np.testing.assert_array_equal(np.concatenate([y.numpy() for _, y in plain]), order)


def test_collate_follows_default_collate():
    np.testing.assert_array_equal(collate([1, 2, 3]), [1, 2, 3])
    lists = collate([[1, 2.0], [3, 4.0]])
    assert isinstance(lists, list) and [b.tolist() for b in lists] == [[1, 3], [2.0, 4.0]]
    assert collate(["a", "b"]) == ["a", "b"]  # strings stay a list, as default_collate leaves them
    with pytest.raises(ValueError, match=r"items: every example must have as many fields as the first \(2\), got 3"):
        collate([(1, 2), (1, 2, 3)])


@pytest.mark.parametrize("bad", [iter(range(3)), 5, None, Plain])
def test_an_object_without_len_and_indexing_is_refused(bad):
    with pytest.raises(TypeError, match=r"dataset: expected .*len\(\) and indexing"):
        DataLoader(bad)
