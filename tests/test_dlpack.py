"""DLPack: nbcoll tensors and PyTorch tensors share memory both ways, on the sim and numpy backends.

Every sharing test writes on one side and reads on the other. The hand-written capsules of
``nbcoll.dlpack_capsule`` (what the cuda backend exports and reads) are checked on the CPU against PyTorch, which
writes and reads DLPack itself; the cuda backend's own test runs only where a GPU and a CUDA PyTorch are.
"""

import numpy as np
import pytest

import nbcoll
from nbcoll import dlpack_capsule, memory
from nbcoll.backend import get_backend

torch = pytest.importorskip("torch", reason="the DLPack tests exchange tensors with PyTorch, which is not installed")

DTYPES = ["int8", "uint8", "int32", "int64", "float16", "float32", "float64", "bool"]


def _address(tensor) -> int:
    return memory.address_range(tensor.data)[0]


def test_torch_and_nbcoll_see_each_others_writes(backend):
    x = nbcoll.tensor(np.arange(5, dtype=np.float32))
    t = torch.from_dlpack(x)
    assert t.data_ptr() == _address(x) and t.device.type == "cpu"
    t[1] = 10.0
    assert x.numpy()[1] == 10.0
    x.data[2] = -1.0
    assert t[2].item() == -1.0

    y = nbcoll.from_dlpack(t)
    assert _address(y) == t.data_ptr() and y.shape == (5,) and y.dtype == np.float32
    t.add_(1.0)
    np.testing.assert_array_equal(y.numpy(), [1.0, 11.0, 0.0, 4.0, 5.0])
    y.data[0] = 7.0
    assert t[0].item() == 7.0 and x.numpy()[0] == 7.0  # all three are one buffer
    np.testing.assert_array_equal((y * 2).numpy(), t.numpy() * 2)  # a kernel reads the shared memory
    assert _address(nbcoll.from_dlpack(x)) == _address(x)  # nbcoll to nbcoll, and to NumPy: no copy either
    assert np.from_dlpack(x).__array_interface__["data"][0] == _address(x)


def test_the_device_of_an_nbcoll_tensor_is_the_cpu_off_a_gpu(backend):
    assert nbcoll.tensor([1.0]).__dlpack_device__() == (dlpack_capsule.CPU, 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_travels_both_ways_with_its_values(backend, dtype):
    host = (np.arange(7) % 3).astype(dtype)
    x = nbcoll.tensor(host)
    t = torch.from_dlpack(x)
    assert str(t.dtype) == f"torch.{dtype}"
    np.testing.assert_array_equal(t.numpy(), host)
    y = nbcoll.from_dlpack(torch.from_numpy(host.copy()))
    assert y.dtype == host.dtype
    np.testing.assert_array_equal(y.numpy(), host)


@pytest.mark.parametrize("shape", [(), (0,), (0, 3), (2, 3, 4), (1, 1)])
def test_shapes_travel_both_ways_including_0d_and_empty(backend, shape):
    values = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    t = torch.from_dlpack(nbcoll.tensor(values))
    assert tuple(t.shape) == shape
    np.testing.assert_array_equal(t.numpy(), values)
    y = nbcoll.from_dlpack(torch.from_numpy(values.copy()))
    assert y.shape == shape and y.ndim == len(shape)
    np.testing.assert_array_equal(y.numpy(), values)


def test_a_strided_view_is_copied_by_default_and_refused_with_copy_false(backend):
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    view = t.T[:, ::2]
    y = nbcoll.from_dlpack(view)
    np.testing.assert_array_equal(y.numpy(), view.numpy())
    t.zero_()
    assert y.numpy().sum() > 0, "a copy: the write to the torch tensor is not seen"
    with pytest.raises(BufferError, match=r"obj: has strides .* pass copy=None"):
        nbcoll.from_dlpack(view, copy=False)


def test_copy_true_always_copies_and_copy_false_shares_contiguous_memory(backend):
    t = torch.ones(4)
    copied, shared = nbcoll.from_dlpack(t, copy=True), nbcoll.from_dlpack(t, copy=False)
    t.fill_(3.0)
    np.testing.assert_array_equal(copied.numpy(), np.ones(4, np.float32))
    np.testing.assert_array_equal(shared.numpy(), np.full(4, 3.0, np.float32))
    with pytest.raises(ValueError, match="copy: expected None, True or False"):
        nbcoll.from_dlpack(t, copy="yes")


def test_gradients_are_not_carried_and_a_tensor_that_requires_grad_is_refused(backend):
    w = nbcoll.tensor([1.0, 2.0], requires_grad=True)
    (w * w).sum().backward()
    with pytest.raises(BufferError, match=r"__dlpack__: this tensor requires grad.*detach\(\)"):
        torch.from_dlpack(w)
    t = torch.from_dlpack(w.detach())
    assert not t.requires_grad and t.grad is None and t.grad_fn is None
    np.testing.assert_array_equal(t.numpy(), [1.0, 2.0])

    p = torch.tensor([3.0, 4.0], requires_grad=True)
    (p * p).sum().backward()
    with pytest.raises(BufferError, match="detach"):  # PyTorch's own refusal
        nbcoll.from_dlpack(p)
    y = nbcoll.from_dlpack(p.detach())
    assert not y.requires_grad and y.grad is None and y.grad_fn is None
    np.testing.assert_array_equal(y.numpy(), [3.0, 4.0])


def test_bad_input_is_refused_by_name(backend):
    with pytest.raises(TypeError, match="obj: expected an object with __dlpack__"):
        nbcoll.from_dlpack([1.0, 2.0])
    with pytest.raises(TypeError, match="obj.dtype: NumPy cannot hold it"):
        nbcoll.from_dlpack(torch.zeros(2, dtype=torch.float8_e5m2))
    for dtype in (torch.int16, torch.complex64):
        with pytest.raises(TypeError, match=r"obj.dtype: dtype (int16|complex64) is not supported"):
            nbcoll.from_dlpack(torch.zeros(2, dtype=dtype))


def test_bfloat16_travels_both_ways_through_nbcolls_own_capsule(backend):
    if dlpack_capsule.BFLOAT16 is None:
        pytest.skip("bfloat16 needs ml_dtypes")
    try:
        memory.check_dtype(dlpack_capsule.BFLOAT16)
    except TypeError:
        pytest.skip("this nbcoll holds no bfloat16 tensors")
    t = torch.tensor([1.5, -2.0, 3.0], dtype=torch.bfloat16)
    y = nbcoll.from_dlpack(t)  # NumPy cannot read it: nbcoll reads the capsule itself
    assert y.dtype == dlpack_capsule.BFLOAT16 and _address(y) == t.data_ptr()
    t[0] = 7.0
    back = torch.from_dlpack(y)  # nor write it: nbcoll's own capsule
    assert back.dtype == torch.bfloat16 and back.data_ptr() == t.data_ptr()
    np.testing.assert_array_equal(back.float().numpy(), [7.0, -2.0, 3.0])
    assert y.numpy().astype(np.float32).tolist() == [7.0, -2.0, 3.0]


class _OnAGpu:
    """What a CUDA tensor says of itself, on a machine without one."""

    def __dlpack_device__(self):
        return (dlpack_capsule.CUDA, 0)

    def __dlpack__(self, **kwargs):
        raise AssertionError("a GPU tensor must be refused before its memory is asked for")


def test_gpu_memory_is_refused_on_the_host_backends(backend):
    with pytest.raises(BufferError, match=rf"obj: lives on CUDA .* the '{get_backend()}' backend shares host memory"):
        nbcoll.from_dlpack(_OnAGpu())


# -- the hand-written capsules that the cuda backend uses, checked against PyTorch on the CPU --------------------


class _Exporter:
    """A host array exported through nbcoll's own capsule, as a Numba device array is on cuda."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __dlpack_device__(self):
        return (dlpack_capsule.CPU, 0)

    def __dlpack__(self, **kwargs):
        a = self.array
        return dlpack_capsule.export(a.ctypes.data, a.shape, a.strides, a.dtype, (dlpack_capsule.CPU, 0), a)


def test_a_hand_written_capsule_shares_strided_memory_with_torch_and_is_released():
    before = len(dlpack_capsule._EXPORTED)
    host = np.arange(12, dtype=np.int32).reshape(3, 4)
    t = torch.from_dlpack(_Exporter(host[:, 1::2]))
    assert tuple(t.shape) == (3, 2) and t.stride() == (4, 2) and t.dtype == torch.int32
    t[2, 1] = -5
    assert host[2, 3] == -5
    assert len(dlpack_capsule._EXPORTED) == before + 1  # the capsule holds the array while torch reads it
    del t  # reference counting frees at once: no garbage collection needed
    assert len(dlpack_capsule._EXPORTED) == before
    unused = _Exporter(host).__dlpack__()
    del unused
    assert len(dlpack_capsule._EXPORTED) == before, "a capsule nobody consumed still released its array"
    for value in (np.array(2.5), np.zeros((0, 3), np.float16), np.array([True, False])):
        back = torch.from_dlpack(_Exporter(value))
        assert tuple(back.shape) == value.shape
        np.testing.assert_array_equal(back.numpy(), value)


@pytest.mark.parametrize("make", [lambda: torch.arange(6.0).reshape(2, 3).T, lambda: torch.tensor(7, dtype=torch.int8)])
def test_reading_a_torch_capsule_by_hand_gives_its_memory(make):
    t = make()
    capsule = t.__dlpack__()
    interface, dtype, device, release = dlpack_capsule.describe(capsule)
    assert device == (dlpack_capsule.CPU, 0) and interface["data"][0] == t.data_ptr()
    assert dtype == np.dtype(str(t.dtype).removeprefix("torch."))

    class Holder:
        __array_interface__ = interface

    view = np.asarray(Holder())
    np.testing.assert_array_equal(view, t.numpy())
    assert view.strides == tuple(s * t.element_size() for s in t.stride())
    with pytest.raises(TypeError, match="obj: __dlpack__\\(\\) should return an unused 'dltensor' capsule"):
        dlpack_capsule.describe(capsule)
    release()


def test_dlpack_types_map_to_numpy_dtypes_and_unknown_ones_are_named():
    for dtype in DTYPES:
        assert dlpack_capsule.numpy_dtype(dlpack_capsule.dl_dtype(dtype)) == np.dtype(dtype)
    with pytest.raises(TypeError, match=r"obj.dtype: DLPack type \(code 5, 64 bits, 1 lanes\)"):
        dlpack_capsule.numpy_dtype(dlpack_capsule.DLDataType(5, 64, 1))  # complex64
    with pytest.raises(TypeError, match="dtype: complex64 has no DLPack type"):
        dlpack_capsule.dl_dtype(np.complex64)


def test_on_cuda_torch_and_nbcoll_share_device_memory():
    if get_backend() != "cuda" or not torch.cuda.is_available():
        pytest.skip("needs the cuda backend and a CUDA build of PyTorch")
    x = nbcoll.tensor(np.arange(5, dtype=np.float32))
    t = torch.from_dlpack(x)
    assert t.device.type == "cuda" and t.data_ptr() == _address(x)
    t[1] = 10.0
    torch.cuda.synchronize()
    assert x.numpy()[1] == 10.0
    y = nbcoll.from_dlpack(t)  # through __cuda_array_interface__
    z = nbcoll.from_dlpack(_CapsuleOnly(t))  # through the capsule
    t.add_(1.0)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(y.numpy(), t.cpu().numpy())
    np.testing.assert_array_equal(z.numpy(), t.cpu().numpy())


class _CapsuleOnly:
    """A CUDA tensor seen through DLPack alone, as a JAX array is."""

    def __init__(self, t) -> None:
        self.t = t

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        return self.t.__dlpack__(**kwargs)
