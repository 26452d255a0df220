"""copy, strided_copy, cast, batched_copy, flatten and unflatten, against NumPy; copies must be exact."""

import numpy as np
import pytest

import nbcoll
from nbcoll.kernels import batched_copy as batched
from nbcoll.kernels import copy as cp
from nbcoll.kernels.indexing import launch_1d

DTYPES = [dt.name for dt in nbcoll.DTYPES]


def sizes_for(backend):
    return [0, 1, 31, 257] + ([100_003] if backend == "numpy" else [])


def sample(rng, dtype, shape):
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_copy_is_exact_for_every_dtype(backend, rng, dtype):
    for n in sizes_for(backend):
        src = sample(rng, dtype, n)
        dst = nbcoll.zeros(n, dtype)
        assert cp.copy(dst, nbcoll.to_device(src)) is dst
        np.testing.assert_array_equal(nbcoll.to_host(dst), src, err_msg=f"n={n}")


def test_copy_of_multidimensional_arrays_and_slices(backend, rng):
    src = sample(rng, "float64", (3, 4, 5))
    dst = nbcoll.zeros((3, 4, 5), np.float64)
    cp.copy(dst, nbcoll.to_device(src))
    np.testing.assert_array_equal(nbcoll.to_host(dst), src)
    flat = nbcoll.zeros(10, np.int32)
    cp.copy(flat[2:5], nbcoll.to_device(np.array([7, 8, 9], np.int32)))
    np.testing.assert_array_equal(nbcoll.to_host(flat), [0, 0, 7, 8, 9, 0, 0, 0, 0, 0])


def permuted_view(x, axes):
    """``x.transpose(axes)`` as a strided view on every backend.

    Numba's ``DeviceNDArray.transpose`` copies a 2-D array and refuses 3-D ones on a real GPU; a view with the
    strides permuted keeps these tests about strided reads there too.
    """
    if isinstance(x, np.ndarray) or nbcoll.get_backend() != "cuda":
        return x.transpose(axes)
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    shape, strides = tuple(x.shape[a] for a in axes), tuple(x.strides[a] for a in axes)
    return DeviceNDArray(shape=shape, strides=strides, dtype=x.dtype, gpu_data=x.gpu_data)


VIEWS = {
    "every other row": lambda x: x[::2],
    "column slice": lambda x: x[:, 1:3],
    "transpose": lambda x: permuted_view(x, (1, 0)),
    "rows and columns stepped": lambda x: x[1:6:2, ::3],
    "one column": lambda x: x[:, 4],
    "reversed rows": lambda x: x[::-1],
    "reversed stepped columns": lambda x: x[2:, ::-2],
    "empty": lambda x: x[:, 3:3],
}


NEGATIVE_STRIDES = pytest.mark.sim_only(
    reason="negative strides are refused on cuda, where a view starts at its first element "
    "(test_negative_strides_are_refused_on_cuda checks that)"
)
VIEW_CASES = [pytest.param(name, marks=NEGATIVE_STRIDES) if "reversed" in name else name for name in VIEWS]


@pytest.mark.parametrize("view", VIEW_CASES)
@pytest.mark.parametrize("dtype", ["float32", "int8", "uint64", "float16"])
def test_strided_copy_of_2d_views(backend, rng, dtype, view):
    host = sample(rng, dtype, (7, 9))
    expected = VIEWS[view](host)
    out = cp.strided_copy(VIEWS[view](nbcoll.to_device(host)))
    assert tuple(out.shape) == expected.shape and out.dtype == expected.dtype
    assert nbcoll.memory.is_contiguous(out)
    np.testing.assert_array_equal(nbcoll.to_host(out), expected)


def test_strided_copy_into_of_3d_views(backend, rng):
    host = sample(rng, "float64", (3, 4, 5))
    x = nbcoll.to_device(host)
    for view, expected in ((x[:, ::2, 1:], host[:, ::2, 1:]), (permuted_view(x, (2, 0, 1)), host.transpose(2, 0, 1))):
        dst = nbcoll.zeros(expected.shape, np.float64)
        assert cp.strided_copy_into(dst, view) is dst
        np.testing.assert_array_equal(nbcoll.to_host(dst), expected)
    if backend == "numpy":
        big = sample(rng, "int32", (300, 400))
        np.testing.assert_array_equal(cp.strided_copy(big[::3, 7::2].T), big[::3, 7::2].T)


def test_storage_view_reaches_every_element_from_base_and_strides():
    host = np.arange(60, dtype=np.int16).reshape(5, 12)
    for view in (host[::-2, 1::3], host.T[::-1], host[4:1:-1, 10]):
        storage, base, strides = cp.storage_view(view)
        for index in np.ndindex(view.shape):
            assert storage[base + sum(i * s for i, s in zip(index, strides, strict=True))] == view[index]


CAST_PAIRS = [
    ("float32", "float16", [0.1, -2.5, 65504.0, 1e-3, 3.14159]),
    ("float64", "float32", [0.1, -1e30, 1 / 3, 2.0**-130, 7.0]),
    ("float32", "int32", [1.9, -1.9, 0.0, 1e9, -2.5e9 / 2]),  # truncation toward zero
    ("float16", "int8", [127.0, -128.0, 3.75, -0.5, 42.0]),
    ("int32", "int8", [300, -129, 127, -128, 255]),  # integer narrowing wraps around
    ("int8", "uint8", [-1, -128, 0, 127, 5]),
    ("uint64", "int32", [2**64 - 1, 2**40 + 5, 0, 7, 2**31]),
    ("uint64", "int64", [2**64 - 1, 2**63, 1, 0, 5]),
    ("int8", "uint64", [-1, -128, 0, 127, 5]),  # widening sign-extends first, as NumPy does
    ("uint8", "float16", [0, 255, 1, 128, 7]),
    ("int64", "float64", [2**53 + 1, -(2**62), 3, 0, -1]),
    ("uint64", "float32", [2**64 - 1, 2**63, 1, 0, 12345678901]),
    ("float32", "bool", [0.0, -0.0, 0.5, -3.0, 1e-30]),
    ("bool", "float32", [True, False, True, True, False]),
]


@pytest.mark.parametrize("src_dtype,dst_dtype,values", CAST_PAIRS, ids=[f"{a}-{b}" for a, b, _ in CAST_PAIRS])
def test_cast_matches_numpy_astype_for_values_in_range(backend, rng, src_dtype, dst_dtype, values):
    src = np.resize(np.array(values, dtype=src_dtype), 31)
    out = cp.cast(nbcoll.to_device(src), dst_dtype)
    assert out.dtype == np.dtype(dst_dtype)
    np.testing.assert_array_equal(nbcoll.to_host(out), src.astype(dst_dtype))
    dst = nbcoll.zeros((31,), dst_dtype)
    cp.cast_into(dst, nbcoll.to_device(src))
    np.testing.assert_array_equal(nbcoll.to_host(dst), src.astype(dst_dtype))


def test_a_float16_goes_through_float32_on_its_way_to_an_integer(monkeypatch):
    # numba-cuda rounds a float16 to the nearest integer (test_ptx shows its cvt.rni); float32 truncates, as NumPy.
    launched = []

    def recording_launch(kernel, n, *arrays):
        launched.append(tuple(str(a.dtype) for a in arrays[:2]))
        return launch_1d(kernel, n, *arrays)

    monkeypatch.setattr(cp, "launch_1d", recording_launch)
    src = np.array([3.75, -3.75, -0.5, 127.0, 0.0], np.float16)
    for dst_dtype in ("int8", "uint8", "int32", "int64", "uint64"):
        launched.clear()
        out = cp.cast(nbcoll.to_device(np.abs(src) if dst_dtype.startswith("u") else src), dst_dtype)
        assert launched == [("float32", "float16"), (dst_dtype, "float32")], dst_dtype
        expected = (np.abs(src) if dst_dtype.startswith("u") else src).astype(dst_dtype)
        np.testing.assert_array_equal(nbcoll.to_host(out), expected)
    launched.clear()
    cp.cast(nbcoll.to_device(src), "float32")
    assert launched == [("float32", "float16")]


def uneven_segments(rng, count, src_size):
    lengths = rng.integers(0, 12, count)
    lengths[[3, 10]] = 0  # empty segments are allowed and copy nothing
    src_offsets = rng.integers(0, src_size - 12, count)
    order = rng.permutation(count)  # destinations in shuffled order, with gaps between them
    dst_offsets = np.zeros(count, np.int64)
    cursor = 0
    for k in order:
        dst_offsets[k] = cursor
        cursor += lengths[k] + rng.integers(0, 3)
    return src_offsets, dst_offsets, lengths, cursor


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "uint64", "float64"])
def test_batched_copy_of_many_uneven_segments_matches_a_loop(backend, rng, dtype):
    src = sample(rng, dtype, 300)
    src_offsets, dst_offsets, lengths, dst_size = uneven_segments(rng, 40, src.size)
    expected = np.zeros(dst_size, dtype)
    for s, d, n in zip(src_offsets, dst_offsets, lengths, strict=True):
        expected[d : d + n] = src[s : s + n]
    dst = nbcoll.zeros(dst_size, dtype)
    assert cp.batched_copy(dst, nbcoll.to_device(src), src_offsets, dst_offsets, list(lengths)) is dst
    np.testing.assert_array_equal(nbcoll.to_host(dst), expected)


def test_batched_copy_with_no_segments_or_only_empty_ones_changes_nothing(backend):
    dst = nbcoll.to_device(np.arange(5, dtype=np.float32))
    cp.batched_copy(dst, nbcoll.zeros(5, np.float32), [], [], [])
    cp.batched_copy(dst, nbcoll.zeros(5, np.float32), [1, 2], [0, 0], [0, 0])
    np.testing.assert_array_equal(nbcoll.to_host(dst), np.arange(5))


def test_copy_descriptors_drop_empty_segments_and_prefix_sum_the_rest():
    table = cp.CopyDescriptors.build([0, 9, 10], [5, 0, 0], [3, 0, 4])
    np.testing.assert_array_equal(table.starts, [0, 3])
    np.testing.assert_array_equal(table.src_offsets, [0, 10])
    assert table.total == 7 and table.starts.dtype == np.int64
    starts = np.array([0, 3, 4, 9])
    assert [batched._segment_of(starts, i) for i in range(12)] == [0, 0, 0, 1, 2, 2, 2, 2, 2, 3, 3, 3]


def test_flatten_and_unflatten_round_trip(backend, rng):
    shapes = [(3, 4), (5,), (0,), (2, 2, 2), (1,)]
    hosts = [sample(rng, "float32", s) for s in shapes]
    arrays = [nbcoll.to_device(h) for h in hosts]
    flat = cp.flatten(arrays)
    np.testing.assert_array_equal(nbcoll.to_host(flat), np.concatenate([h.ravel() for h in hosts]))

    targets = [nbcoll.zeros(s, np.float32) for s in shapes]
    assert cp.unflatten(flat, targets) == targets
    for target, host in zip(targets, hosts, strict=True):
        np.testing.assert_array_equal(nbcoll.to_host(target), host)

    out = nbcoll.zeros(flat.size, np.float32)
    assert cp.flatten(arrays, out=out) is out
    np.testing.assert_array_equal(nbcoll.to_host(out), nbcoll.to_host(flat))
    assert cp.flatten([], out=nbcoll.zeros(0, np.int8)).size == 0


def test_copy_and_cast_errors_name_the_argument(backend):
    f32 = nbcoll.zeros(4, np.float32)
    with pytest.raises(TypeError, match=r"dst: dtype must match src.*use cast_into"):
        cp.copy(f32, nbcoll.zeros(4, np.int32))
    with pytest.raises(ValueError, match=r"dst: shape must match src.*src.shape=\(5,\)"):
        cp.copy(f32, nbcoll.zeros(5, np.float32))
    with pytest.raises(ValueError, match="src: must be C-contiguous"):
        cp.copy(f32, nbcoll.zeros(8, np.float32)[::2])
    with pytest.raises(ValueError, match="dst: must be C-contiguous"):
        cp.strided_copy_into(nbcoll.zeros(8, np.float32)[::2], f32)
    with pytest.raises(ValueError, match="dst: shape must match src"):
        cp.strided_copy_into(nbcoll.zeros((2, 2), np.float32), f32)
    with pytest.raises(TypeError, match="dst: dtype must match src"):
        cp.strided_copy_into(nbcoll.zeros(4, np.float64), f32)
    with pytest.raises(TypeError, match="dtype: dtype complex128 is not supported"):
        cp.cast(f32, np.complex128)
    with pytest.raises(ValueError, match="dst: shape must match src"):
        cp.cast_into(nbcoll.zeros(3, np.int8), f32)
    if backend != "numpy":
        with pytest.raises(TypeError, match="src: expected a device array"):
            cp.copy(f32, np.zeros(4, np.float32))


def test_batched_copy_errors_name_the_argument(backend):
    src, dst = nbcoll.zeros(10, np.float32), nbcoll.zeros(10, np.float32)
    with pytest.raises(TypeError, match="dst: dtype must match src"):
        cp.batched_copy(nbcoll.zeros(10, np.int8), src, [0], [0], [1])
    with pytest.raises(ValueError, match="src: expected a 1-D array"):
        cp.batched_copy(dst, nbcoll.zeros((2, 5), np.float32), [0], [0], [1])
    with pytest.raises(ValueError, match="dst: must be C-contiguous"):
        cp.batched_copy(nbcoll.zeros(20, np.float32)[::2], src, [0], [0], [1])
    with pytest.raises(ValueError, match="one entry per segment, got 2, 1 and 1"):
        cp.batched_copy(dst, src, [0, 1], [0], [1])
    with pytest.raises(ValueError, match="lengths: entries must be >= 0, got -1 at index 1"):
        cp.batched_copy(dst, src, [0, 1], [0, 5], [1, -1])
    with pytest.raises(TypeError, match="src_offsets: expected a 1-D sequence of integers"):
        cp.batched_copy(dst, src, [0.5], [0], [1])
    with pytest.raises(ValueError, match=r"src_offsets: a segment covers src\[8:11\], beyond src.size=10"):
        cp.batched_copy(dst, src, [0, 8], [0, 5], [2, 3])
    with pytest.raises(ValueError, match=r"dst_offsets: a segment covers dst\[9:11\], beyond dst.size=10"):
        cp.batched_copy(dst, src, [0], [9], [2])
    with pytest.raises(ValueError, match=r"dst_offsets: segments overlap in dst: dst\[2:5\] and dst\[4:6\]"):
        cp.batched_copy(dst, src, [0, 0, 0], [4, 2, 8], [2, 3, 1])


def test_flatten_errors_name_the_argument(backend):
    a, b = nbcoll.zeros(3, np.float32), nbcoll.zeros(2, np.int32)
    with pytest.raises(TypeError, match="arrays\\[1\\]: dtype must be float32 like the others, got int32"):
        cp.flatten([a, b])
    with pytest.raises(ValueError, match="arrays: need at least one array"):
        cp.flatten([])
    with pytest.raises(ValueError, match=r"out: expected a 1-D array of 5 elements"):
        cp.flatten([a, a[:2]], out=nbcoll.zeros(4, np.float32))
    with pytest.raises(ValueError, match="arrays\\[0\\]: must be C-contiguous"):
        cp.flatten([nbcoll.zeros(6, np.float32)[::2]])
    with pytest.raises(ValueError, match=r"flat: expected a 1-D array of 3 elements"):
        cp.unflatten(nbcoll.zeros(4, np.float32), [a])
    with pytest.raises(TypeError, match="flat: dtype must match the arrays'"):
        cp.unflatten(nbcoll.zeros(3, np.float64), [a])


@pytest.mark.gpu
def test_negative_strides_are_refused_on_cuda():
    x = nbcoll.to_device(np.arange(6, dtype=np.float32))
    with pytest.raises(ValueError, match="src: negative strides .* are not supported on the cuda backend"):
        cp.strided_copy(x[::-1])
