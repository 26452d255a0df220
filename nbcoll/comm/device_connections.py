"""One communicator's device all-reduce: the connections each rank's kernel spins on, and its launches.

What each rank holds (:mod:`nbcoll.comm.algorithms.ring_device_rank` says how the kernel uses it)::

    fifos[dtype]  (this rank's FIFO, the next rank's FIFO)       [channel, slot, i], made at the dtype's first call
    counters      (this rank's [TAIL|HEAD, ...], the next one's)  int64, zeroed before a peer sees them, never reset
    abort         this rank's abort word, written by its host     mapped host memory on a GPU

On ``sim`` and ``numpy`` the FIFOs and counters are POSIX shared memory, which a simulated kernel reads live (it is
wrapped without a copy); on ``cuda`` they are CUDA IPC device memory, and the kernel fences at system scope. The
set-up is the direct windows' (``DirectWindows._map_everywhere``): created once every rank has arrived, mapped by
every peer, unlinked as soon as all have; each rank then keeps only its own buffers and its next rank's.

Example (every rank of a communicator on one machine)::

    device = DeviceAllReduce(comm)
    device.all_reduce(x, None, "sum")          # one kernel launch; the host watches and never steers a chunk
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np

from nbcoll import backend, memory
from nbcoll.comm.algorithms import ring_device_rank as rdr
from nbcoll.comm.device import prims as dp
from nbcoll.comm.device_collective import KernelWatch, failure, mps_visible, shared_gpu_problem, world_problem
from nbcoll.comm.errors import CommError
from nbcoll.comm.window import _exchange
from nbcoll.kernels import combine as combine_kernels

SIMULATED_SPINS_BEFORE_CHECK = 200
"""The simulator's spins between two reads of the abort word: each of its spins yields the interpreter."""


def _zero(array: Any) -> None:
    if isinstance(array, np.ndarray):
        array[:] = 0
    else:
        array.copy_to_device(np.zeros(array.shape, array.dtype))


class DeviceAllReduce:
    """The device path of one communicator's all-reduce (``comm.engine.device``, made at its first use).

    ``fallback`` is why the host-driven ring serves device requests instead (``""``: it does not), decided alike
    on every rank; ``broken`` why a failed launch left the connections unusable.

    >>> import numpy as np, nbcoll
    >>> comm = nbcoll.init()
    >>> device = DeviceAllReduce(comm)
    >>> device.all_reduce(np.arange(4, dtype=np.int32), None, "max")      # one rank: the kernel copies
    array([0, 1, 2, 3], dtype=int32)
    >>> device.close(); comm.destroy()
    """

    def __init__(self, comm: Any) -> None:
        self.comm = comm
        self.rank, self.nranks = comm.rank, comm.size
        self.next = (self.rank + 1) % self.nranks
        self.broken: str | None = None
        self.fallback = world_problem(comm)
        on_gpu = not backend.is_simulator()
        if not self.fallback and on_gpu and self.nranks > 1:
            self.fallback = self._shared_gpu()
        if self.fallback:
            line = f"nbcoll: proto='device' collectives run on the host-driven ring here: {self.fallback}"
            comm.log.warn("COLL", line)
            warnings.warn(line, RuntimeWarning, stacklevel=4)
            return
        self.cuda = backend.cuda()
        config = comm.config
        self.nchannels, self.steps, self.chunk_bytes = config.nchannels, config.steps, config.chunk_bytes
        self.threads = 256 if on_gpu else 4  # a multiple of 32 on a GPU; simulated threads are costly
        self.spins = dp.SPINS_BEFORE_CHECK_ABORT if on_gpu else SIMULATED_SPINS_BEFORE_CHECK
        # The host writes the abort word while the kernel runs: mapped memory on a GPU, read with volatile loads.
        self.abort = self.cuda.mapped_array(1, np.int32) if on_gpu else self.cuda.to_device(np.zeros(1, np.int32))
        self.abort[0] = 0
        self.on_gpu = on_gpu
        self.counters: tuple[Any, Any] | None = None
        self.fifos: dict[np.dtype, tuple[Any, Any]] = {}
        self.buffers: list[Any] = []  # every mapping this rank keeps, closed by close()
        self.watch: KernelWatch | None = None  # one for every launch, made at the first (close() stops it)

    def _shared_gpu(self) -> str:
        """Collective: why the machine's ranks cannot spin on each other's GPUs (two on one without MPS)."""
        device = self.cuda_device()
        gpu = str(getattr(device, "uuid", None) or device.id)
        comm, wiring = self.comm, self.comm._wiring
        gpus = _exchange(wiring.ctrl, wiring.uid, gpu, "device-gpus", comm.watchdog.drive, comm.recorder, "all_reduce")
        return shared_gpu_problem(gpus, mps_visible())

    @staticmethod
    def cuda_device() -> Any:
        """This process's GPU (on ``cuda``).

        >>> callable(DeviceAllReduce.cuda_device)
        True
        """
        return backend.cuda().get_current_device()

    # -- the connections ----------------------------------------------------------------------------------------

    def _live(self, array: Any) -> Any:
        """``array`` as the kernel must see it: a NumPy view of shared memory is wrapped, not copied, so that the
        simulated kernel reads the peers' writes as they happen."""
        if isinstance(array, np.ndarray):
            return self.cuda.device_array(array.shape, array.dtype, buffer=array)
        return array

    def _connect(self, dtype: np.dtype, call: str) -> None:
        """Collective at the first call of ``dtype``: every rank's FIFOs (and, the first time, counters), mapped."""
        if dtype in self.fifos:
            return
        shape = (self.nchannels, self.steps, max(1, self.chunk_bytes // dtype.itemsize))
        words = (2, rdr.counter_words(self.nchannels))
        first = self.counters is None
        if self.nranks == 1:  # nobody to map: the kernel only copies
            fifo = self.cuda.device_array(shape, dtype)
            self.fifos[dtype] = (fifo, fifo)
            if first:
                ctr = self.cuda.to_device(np.zeros(words, np.int64))
                self.counters = (ctr, ctr)
            return
        windows = self.comm.engine.direct_windows(call)  # the machinery that maps every peer's buffers

        def make() -> list[Any]:
            made = [windows.memory.create(shape, dtype, tag=f"dev{self.rank}{dtype.char}")]
            if first:
                made.append(windows.memory.create(words, np.int64, tag=f"devctr{self.rank}"))
                _zero(made[1].array)  # before its handle leaves this rank
            return made

        mapped = windows._map_everywhere(make, f"device-{dtype.name}", call)
        for peer, buffers in enumerate(mapped):
            if peer not in (self.rank, self.next):
                for buffer in buffers:
                    buffer.close()  # a ring rank reads and writes only its own memory and its next rank's
        mine, theirs = mapped[self.rank], mapped[self.next]
        self.buffers += mine + theirs
        self.fifos[dtype] = (self._live(mine[0].array), self._live(theirs[0].array))
        if first:
            self.counters = (self._live(mine[1].array), self._live(theirs[1].array))

    def close(self) -> None:
        """Unmap every buffer this rank keeps (local; the memory goes with the last process that maps it).

        >>> import nbcoll
        >>> comm = nbcoll.init()
        >>> DeviceAllReduce(comm).close(); comm.destroy()
        """
        self.fifos, self.counters = {}, None
        if getattr(self, "watch", None) is not None:
            self.watch.stop()
        for buffer in getattr(self, "buffers", []):
            buffer.close()
        self.buffers = []

    # -- one call -----------------------------------------------------------------------------------------------

    def all_reduce(self, sendbuf: Any, recvbuf: Any, op: Any) -> Any:
        """``recvbuf = op over ranks of sendbuf`` (in place without ``recvbuf``) by one kernel launch per rank.

        >>> import numpy as np, nbcoll
        >>> comm = nbcoll.init()
        >>> DeviceAllReduce(comm).all_reduce(np.ones(2), np.zeros(2), "sum")
        array([1., 1.])
        >>> comm.destroy()
        """
        comm, engine = self.comm, self.comm.engine
        with engine.call("all_reduce") as seq:
            self._check_usable()
            op = combine_kernels.parse_op(op)
            send = comm._buffer(sendbuf, "sendbuf")
            recv = send if recvbuf is None else comm._buffer(recvbuf, "recvbuf")
            comm._same_size(recv, "recvbuf", send, "sendbuf", send.size)
            comm._same_or_apart(send, recv)
            memory.require_writable(recv, "sendbuf" if recvbuf is None else "recvbuf")
            engine.mark_run(seq)
        self._run("all_reduce", seq, send, recv, op, rdr.ring_rank_all_reduce_kernel, send.size)
        return recvbuf if recvbuf is not None else sendbuf

    def _check_usable(self) -> None:
        if self.broken is not None:
            raise CommError(f"rank {self.rank}: the device connections failed earlier ({self.broken}); "
                            "abort or shrink the communicator")  # fmt: skip

    def _run(self, collective: str, seq: int, send: Any, recv: Any, op: str | None, kernel: Any, count: int,
             extra: tuple[int, ...] = (), root: int = -1, written: bool = True) -> None:  # fmt: skip
        """Call ``seq`` of ``collective``, checked and marked run: connect, launch ``kernel`` (with ``extra`` after
        its common arguments), record it, and raise the error of a failed launch. ``count`` elements of ``send``
        are this rank's message; ``written``: whether the kernel writes ``recv`` on this rank."""
        comm, engine = self.comm, self.comm.engine
        call = f"{collective} #{seq} (ring, device)"
        dtype = np.dtype(send.dtype)
        what = f"{count} x {dtype}" + (f" {op}" if op is not None else "")
        record = comm.recorder.record(collective, root, count * dtype.itemsize, what)
        comm.log.info("COLL", f"{call}: {what}, one kernel launch")
        engine._after_queued_plans()
        engine.progress.quiesce()  # calls issued before this one run first, on every rank
        try:
            self._connect(dtype, call)
            t0 = time.time()
            status, reason = self._launch(send, recv, op, kernel, extra, written)
            t1 = time.time()
        except BaseException:
            record.finish("failed")
            raise
        error = failure(status, reason, rank=self.rank, nranks=self.nranks, call=call, timeout=comm.config.timeout,
                        pids=comm.watchdog.peer_pids)  # fmt: skip
        if engine.tracer.enabled:  # one span per rank: the kernel's launch, its return, each channel's steps
            name, outcome = getattr(kernel, "py_func", kernel).__name__, type(error).__name__ if error else "ok"
            engine.tracer.kernel(seq=seq, collective=collective, algo="ring", kernel=name, t0=t0, t1=t1,
                                 status=status.tolist(), nbytes=count * dtype.itemsize, span=(0, count),
                                 outcome=outcome)  # fmt: skip
        if error is not None:
            record.finish("failed")
            self.broken = str(error)
            comm.watchdog.failed = True  # chunks may still be on their way: keep the MPI communicators
            comm.log.warn("COLL", f"{type(error).__name__}: {error}")
            raise error
        record.finish()

    def _launch(self, send: Any, recv: Any, op: str | None, kernel: Any, extra: tuple[int, ...],
                written: bool) -> tuple[np.ndarray, Any]:  # fmt: skip
        """Run ``kernel`` on this rank under a :class:`KernelWatch`; the status and the watch's reason."""
        comm, cuda = self.comm, self.cuda
        fifo_in, fifo_out = self.fifos[np.dtype(send.dtype)]
        ctr_in, ctr_out = self.counters
        copy_back = isinstance(recv, np.ndarray)  # the numpy backend: the simulated kernel takes device arrays
        d_send = cuda.to_device(send) if copy_back else send
        d_recv = d_send if recv is send else (cuda.to_device(recv) if copy_back else recv)
        status = cuda.to_device(np.full((self.nchannels, 2), dp.RUNNING, np.int64))
        self.abort[0] = 0

        def progress() -> int | None:  # a GPU's counters cannot be read while its kernel runs: count from launch
            if self.on_gpu:
                return None
            return int(sum(int(np.asarray(_host(c)).sum()) for c in (ctr_in, ctr_out)))

        if self.watch is None:  # it stays for every later launch: a launch pays no thread start

            def ended() -> bool:  # plain flags, no MPI: the watch reads them between launches
                return comm.closed or comm._aborted_by is not None

            self.watch = KernelWatch(self.abort, comm.config.timeout, progress, lambda: comm._poll_aborted(True),
                                     comm.watchdog.peer_pids, ended)  # fmt: skip
        watch = self.watch.launch(progress)
        with watch:
            kernel[self.nchannels, self.threads](
                d_send, d_recv, fifo_in, fifo_out, ctr_in, ctr_out, self.abort, status,
                self.rank, self.nranks, dp.OPS[op or "sum"], dp.SCOPE_SYSTEM, self.spins, *extra,
            )  # fmt: skip
            result = status.copy_to_host()  # on a GPU: returns once the kernel has
        if copy_back and written:
            d_recv.copy_to_host(recv)
        return result, watch.reason


def _host(array: Any) -> Any:
    return array if isinstance(array, np.ndarray) else array.copy_to_host()
