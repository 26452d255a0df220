"""The cuda backend's IpcBuffer path, run with the real numba-cuda classes but no GPU: only driver calls are faked.

Run with NBCOLL_BACKEND=cuda. The owner exports a buffer, its handle goes through pickle as it would through MPI,
and a peer opens it through Numba's own ``IpcHandle.open_direct``; the fake context records the handle bytes the
driver would receive. Prints one ``ok <check>`` line per check.
"""

import contextlib
import pickle

import numpy as np
from numba.cuda.cudadrv import devices, driver
from numba.cuda.cudadrv.devicearray import DeviceNDArray

from nbcoll import backend, cuda_ipc, ipc_memory

OWNER_BYTES = bytes(range(7, 71))
SOURCE = {"pci_domain_id": 0, "pci_bus_id": 7, "pci_device_id": 0}
driver_calls = []


class FakeContext:
    """Stands for a CUDA context: hands out the owner's handle and records what a peer asks the driver to open."""

    refuse = False

    def get_ipc_handle(self, memory):
        return driver.IpcHandle(memory, cuda_ipc.handle_from_bytes(OWNER_BYTES), memory.size, SOURCE, offset=0)

    def open_ipc_handle(self, handle, size):
        if FakeContext.refuse:
            raise driver.CudaAPIError(101, "invalid device ordinal")
        driver_calls.append(("open", cuda_ipc.handle_to_bytes(handle), size))
        return driver.MemoryPointer(context=None, pointer=driver.binding.CUdeviceptr(0x20000), size=size)


class FakeDevice:
    id = 0


class FakeCuda:
    """The few ``numba.cuda`` functions the IPC path calls."""

    gpus = [FakeDevice()]

    def current_context(self):
        return FakeContext()

    def get_current_device(self):
        return FakeDevice()

    def device_array(self, count, dtype):
        dtype = np.dtype(dtype)
        memory = driver.MemoryPointer(None, driver.binding.CUdeviceptr(0x10000), count * dtype.itemsize)
        return DeviceNDArray(shape=(count,), strides=(dtype.itemsize,), dtype=dtype, gpu_data=memory)


devices._runtime.ensure_context = contextlib.nullcontext  # slicing a device array asks for a context
driver.driver.cuIpcCloseMemHandle = lambda pointer: driver_calls.append(("close", int(pointer)))
backend.cuda = FakeCuda
assert backend.get_backend() == "cuda", "run with NBCOLL_BACKEND=cuda"

owner = ipc_memory.IpcBuffer.create((3, 5), np.float32, tag="fake")
message = pickle.dumps(owner.handle)
assert b"numba" not in message, "the handle must be plain data, with no Numba object in it"
handle = pickle.loads(message)
assert handle == owner.handle and handle.cuda_handle.raw == OWNER_BYTES and handle.cuda_handle.size == 60
assert dict(handle.cuda_handle.source_info) == SOURCE
print("ok export", flush=True)

peer = ipc_memory.IpcBuffer.open(handle)
assert tuple(peer.array.shape) == (3, 5) and peer.array.dtype == np.float32
assert driver_calls == [("open", OWNER_BYTES, 60)], driver_calls
peer.close()
assert driver_calls[-1] == ("close", 0x20000), driver_calls  # the address the peer mapped
print("ok open and close", flush=True)

FakeContext.refuse = True
try:
    ipc_memory.IpcBuffer.open(handle)
except RuntimeError as exc:
    assert "NBCOLL_TRANSPORT=mpi" in str(exc) and "invalid device ordinal" in str(exc), exc
    print("ok unreachable GPU", flush=True)
else:
    raise AssertionError("opening on an unreachable GPU must raise")

with contextlib.suppress(TypeError):
    ipc_memory.IpcBuffer.open(ipc_memory.IpcHandleInfo("cuda", "x", (2,), "float32", cuda_handle=b"\0" * 64))
    raise AssertionError("a cuda handle that is not a CudaIpcHandle must raise TypeError")
print("ok bad handle", flush=True)
