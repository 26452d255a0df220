"""Direct windows and registered buffers: every rank of a machine maps its peers' memory, so a one-shot step
reads them in place.

A FIFO moves data by copying it into the receiver's slot, and the receiver copies it out again: two copies per
hop. NCCL's P2P direct mode with user-buffer registration skips the first: a GPU reads its peer's buffer itself
over NVLink. Here every rank of the machine maps two kinds of its peers' memory:

* its *window*, an IPC-exportable buffer of ``NBCOLL_BUFFSIZE`` bytes for every two ranks
  (:func:`~nbcoll.comm.protocol_direct.window_bytes`), where an input that is not registered is
  staged (copied in by its owner, read by the peers: still two copies, but one write serves every reader);
* its *registered buffers*, from :meth:`DirectWindows.alloc` (``comm.alloc``): an input that lies in one is
  *lent*, read by the peers where it is, so each byte is copied once per hop, straight into the reader's output.

What IPC can map decides the shape of the API: on ``numpy`` and ``sim`` only ``/dev/shm`` segments (and on
``cuda`` only whole ``cudaMalloc`` allocations, by their CUDA IPC handle) can be opened by another process, so a
registered buffer is one nbcoll allocates, collectively, rather than any array a user already has.

Four rows of flags in a shared host page, one column per rank, each written by its rank only::

    posted[r]   the last round rank r has posted data for
    done[r]     the last round in which rank r has finished reading its peers
    lent[r]     where rank r's posted data are: registration k, -1 for its window, or -2 for its own memory
    lent_at[r]  the byte offset of rank r's input inside registration k (or, for -2, its address)

One round of a one-shot collective, on every rank ``r`` (:mod:`nbcoll.comm.window_step`)::

    wait until done[p] >= round - after for every peer p  # nobody still reads what we are about to overwrite
    lend our input (lent[r] = k, lent_at[r]), or copy our chunk into window[r][at:];  posted[r] = round
    wait until posted[p] >= round for every source p      # every peer's chunk is posted
    out = fold(source(0), ..., source(n-1))  (or copy each source's chunk into its block of out)
    done[r] = round                                         # every rank, every round, even with no source

The rounds of one collective take the window's two halves in turn (``at``), so a round waits only for the round
before the last one, the last staged in the same half (``after = 2``), and a rank stages a piece while its
peers still read the last; the first round of a collective waits for the round just before it (``after = 1``),
whatever was staged where. A rank that lends posts its later rounds at once (only the first round of a
collective waits for the readers of what came before: lending overwrites nothing), and at the end of a
collective in which it lent its input::

    wait until done[p] >= last lent round for every peer p   # then the user may overwrite the buffer

A broadcast root has nothing to read, so its core would sit idle while every reader copies the whole chunk.
Instead it writes the last ``1/n`` of each chunk straight into every reader's output that is registered too
(NCCL's direct write), and each reader copies the rest::

    reader r:  wait until done[p] >= round - 1 for every peer p
               open out (lent[r] = k, lent_at[r]; or lent[r] = -1: not registered);    posted[r] = round
               copy the root's chunk but the root's share (all of it if not open);      done[r] = round
    root:      post its chunk as above; wait until posted[q] >= round for every reader q
               write its share into every open out;                                    done[root] = round

A reader that opened its output returns, like a lender, only once the root's ``done`` has reached its last
round. On the ``numpy`` and ``sim`` backends a third kind of memory is read: the unregistered input of a copy
collective (all-gather, all-to-all, broadcast) of ``NBCOLL_CMA_BYTES`` or more is *lent by address*
(``lent[r] = -2``, ``lent_at[r]`` its address), and each reader copies its part straight out of the owner's
process into its own output, by the kernel (:mod:`nbcoll.comm.transport.cross_memory`): one copy per hop, as
for a registered buffer, where staging takes two. The windows find out once, when they are set up, whether every
rank may read every peer so (:meth:`DirectWindows._probe_cross_memory`); where any may not, such inputs are
staged. A fold reads its sources in place, so a reduction's inputs are never lent by address (the kernel's copy
would be a copy more). An input the rank folds over in place (an in-place all-reduce) is staged, not lent: the
peers would read the sum instead of the input. All waits are steps, so the communicator's watchdog bounds them
like every other wait. Windows need every rank on one machine with the ipc transport; elsewhere the direct
algorithms use FIFOs.

Setting the windows up, and each ``alloc``, is collective too, and bounded the same way: once every rank has
arrived (so that a rank never holds a name in ``/dev/shm`` while it waits for a peer), each rank creates its
buffer (rank 0 also the flags), the handles go to every peer in non-blocking messages that the watchdog polls
(timeout, abort, dead peer), each rank maps the others' buffers, a second exchange says everyone has, and only
then does each owner remove its names from ``/dev/shm``. A failure anywhere (a rank that never comes, one that
dies, an error while mapping) closes whatever was made, and so unlinks every name at once: nothing waits inside
MPI, where the timeout could not end it.

Example::

    windows = DirectWindows(mpi_comm, nbytes=1 << 20, drive=watchdog.drive, recorder=recorder)
    x = windows.alloc(64, np.float32)                      # registered: peers read it in place
    prims = DirectProtocol(ctx, x, out, 64, op="sum")      # ctx.windows is windows; its round is numbered now
    steps = [*prims.send(0, 64), *prims.recv_reduce_copy(0, 64), *prims.release()]   # nbcoll.comm.protocol_direct
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from nbcoll import backend, memory
from nbcoll.comm.bootstrap import shared_memory_of
from nbcoll.comm.debug import FlightRecorder
from nbcoll.comm.primitives import Flag
from nbcoll.comm.window_setup import TAG_WINDOWS, Exchange  # noqa: F401  (TAG_WINDOWS: as before)
from nbcoll.comm.window_step import BY_ADDRESS, OpenOutput, Release, WindowStep, WriteShares
from nbcoll.ipc_memory import IpcBuffer

POSTED, DONE, LENT, LENT_AT = 0, 1, 2, 3
"""The rows of the flags page, one column per rank, each written by its rank only: the last round it posted, the
last round it finished reading, and where its posted data lie (registration ``k`` at byte ``LENT_AT``, or -1
when they are in its window)."""
FLAG_ROWS = 4


class DirectWindows:
    """The windows of every rank of a communicator that lives on one machine, their flags, and the registered
    buffers (:meth:`alloc`) that the peers read in place."""

    def __init__(
        self, mpi_comm: Any, nbytes: int, drive: Callable[[list[Any]], None], recorder: FlightRecorder, uid: int = 0,
        cma_bytes: int | None = None, call: str = "",
    ) -> None:  # fmt: skip
        """Collective over ``mpi_comm``; ``drive([op])`` runs an operation to its end under the watchdog.

        ``uid`` is the communicator's own number: a message that lacks it was meant for an earlier communicator.
        ``cma_bytes``: lend unregistered inputs of copy collectives of at least so many bytes by address (0: never);
        ``None`` (the LL buffers) does not even ask whether the peers could be read so. ``call``: the collective
        call that sets them up, named by the errors of the set-up.
        """
        self.mpi_comm, self.uid, self.drive, self.recorder = mpi_comm, uid, drive, recorder
        self.rank, self.nranks = mpi_comm.Get_rank(), mpi_comm.Get_size()
        self.nbytes = nbytes
        self.rounds = 0
        self.memory = shared_memory_of(mpi_comm)  # IPC buffers, or plain arrays when the ranks are threads

        def make() -> list[IpcBuffer]:
            made = [self.memory.create(nbytes, np.uint8, tag=f"win{self.rank}")]
            if self.rank == 0:
                made.append(self.memory.create((FLAG_ROWS, self.nranks), np.int64, tag="winflags", host=True))
                made[1].array[:] = 0  # zeroed before its handle leaves this rank
                made[1].array[LENT] = -1  # nothing lent yet
            return made

        mapped = self._map_everywhere(make, "handles", call)
        self.windows = [mapped[p][0] for p in range(self.nranks)]
        self.flags = mapped[0][1]
        self.posted, self.done = self.flags.array[POSTED], self.flags.array[DONE]
        self.lent, self.lent_at = self.flags.array[LENT], self.flags.array[LENT_AT]
        self.registered: list[list[IpcBuffer] | None] = []  # registration k: every rank's buffer, as mapped here
        # An empty device array has no address (numba-cuda gives it a NULL pointer), so an empty registration is
        # known by the very object alloc() returned: registration k -> that array.
        self.empty_views: dict[int, Any] = {}
        self.cma_bytes = cma_bytes or 0
        self.pids: list[int] | None = None  # every rank's process, when each may read the others' memory (CMA)
        if cma_bytes is not None:
            try:
                self.pids = self._probe_cross_memory(call)
            except BaseException:
                self.close()
                raise

    # -- registered buffers: NCCL's user-buffer registration -----------------------------------------------------

    def alloc(self, count: int, dtype: Any) -> Any:
        """Collective: a new buffer of ``count`` x ``dtype`` on every rank, which every peer maps.

        A collective whose input lies in such a buffer lends it: peers read it in place instead of through this
        rank's window, so each byte is copied once per hop. Every rank allocates in the same order, so the
        ``k``-th buffer of each rank is registration ``k`` everywhere.
        """
        dt = np.dtype(dtype)
        nbytes = max(8, count * dt.itemsize)
        k = len(self.registered)

        def make() -> list[IpcBuffer]:
            return [self.memory.create(nbytes, np.uint8, tag=f"reg{k}")]

        mapped = self._map_everywhere(make, f"reg{k}", "comm.alloc")
        self.registered.append([mapped[p][0] for p in range(self.nranks)])
        view = self.registered[k][self.rank].array[: count * dt.itemsize].view(dt)
        if view.size == 0:
            self.empty_views[k] = view
        return view

    def free(self, array: Any) -> None:
        """Unmap the registration that holds ``array``, on this rank; every rank frees its own, in any order.

        Local: a collective returns only when no peer reads this rank's buffer any more (:class:`Release`), and
        the memory itself goes when the last rank that maps it lets it go.
        """
        found = self.find(array)
        if found is None:
            raise ValueError("array: not a buffer from comm.alloc() on this communicator (or freed already)")
        k, _ = found
        with warnings.catch_warnings():  # the caller's own views keep its memory mapped until they go: expected
            warnings.simplefilter("ignore", ResourceWarning)
            for buffer in self.registered[k] or []:
                buffer.close()
        self.registered[k] = None
        self.empty_views.pop(k, None)

    def find(self, array: Any) -> tuple[int, int] | None:
        """``(k, byte offset)`` of ``array`` inside this rank's registration ``k``, or ``None``."""
        if array is None or not self.registered:
            return None
        for k, view in self.empty_views.items():
            if view is array:
                return k, 0
        start, end = memory.address_range(array)
        for k, buffers in enumerate(self.registered):
            if buffers is None:
                continue
            base, top = memory.address_range(buffers[self.rank].array)
            if base <= start and end <= top:
                return k, start - base
        return None

    def lend(self, local: Any, by_address: bool) -> tuple[int, int] | None:
        """Where peers read ``local`` when this rank lends it: ``(k, byte offset)`` in registration ``k``;
        ``(BY_ADDRESS, address)`` for an unregistered input of at least ``cma_bytes`` when ``by_address`` (the
        peers only copy it) and every rank may read its peers' memory; else ``None``: it is staged."""
        found = self.find(local)
        if found is not None or not by_address or self.pids is None or local is None:
            return found
        if self.cma_bytes <= 0 or int(local.size) * local.dtype.itemsize < self.cma_bytes:
            return None
        return BY_ADDRESS, memory.address_range(local)[0]

    def read_lent(self, rank: int, first_byte: int, into: Any) -> None:
        """``into[:] =`` the bytes from ``first_byte`` of what ``rank`` lent by address in its current round: one
        copy, by the kernel, out of ``rank``'s process (:mod:`nbcoll.comm.transport.cross_memory`)."""
        from nbcoll.comm.transport import cross_memory  # a fast path's module: lent by address only when it is on

        cross_memory.read(self.pids[rank], int(self.lent_at[rank]) + first_byte, into)

    def _probe_cross_memory(self, call: str = "") -> list[int] | None:
        """Collective: every rank's pid if every rank can read a probe array out of every peer's process, else
        ``None``. Each rank offers its pid and its probe's address (or nothing: not on the host, or no
        ``process_vm_readv``, or ``cma_bytes`` 0 on that rank), reads every peer's probe, and says whether all
        came back right; the probes stay alive until every rank has said so."""
        probe = np.arange(8, dtype=np.int64) + 1000 * self.rank
        offer = (os.getpid(), memory.address_range(probe)[0]) if self._can_read_peers() else None
        offers = _exchange(self.mpi_comm, self.uid, offer, "cma", self.drive, self.recorder, call)
        readable = all(o is not None for o in offers) and self._read_probes(offers)
        verdicts = _exchange(self.mpi_comm, self.uid, readable, "cma-read", self.drive, self.recorder, call)
        return [o[0] for o in offers] if all(verdicts) else None

    def _read_probes(self, offers: list[Any]) -> bool:
        """Whether every peer's probe reads back right out of its process (every rank offered one)."""
        from nbcoll.comm.transport import cross_memory  # this rank offered too: the fast path is on

        expected = [np.arange(8, dtype=np.int64) + 1000 * p for p in range(self.nranks)]
        return all(cross_memory.probe(*offers[p], expected[p]) for p in range(self.nranks) if p != self.rank)

    def _can_read_peers(self) -> bool:
        """Whether this rank offers cross-memory reads: on the host, ``cma_bytes`` > 0, ``process_vm_readv``."""
        if self.cma_bytes <= 0 or backend.get_backend() == "cuda":
            return False
        from nbcoll.comm.transport import cross_memory  # a fast path's module (NBCOLL_CMA_BYTES): imported if on

        return cross_memory.available()

    def lent_view(self, rank: int, first_byte: int, nbytes: int, dtype: Any) -> Any:
        """``nbytes`` of what ``rank`` lent in its current round, from ``first_byte`` of its registered buffer."""
        k, at = int(self.lent[rank]), int(self.lent_at[rank]) + first_byte
        return self.registered[k][rank].array[at : at + nbytes].view(np.dtype(dtype))

    # -- rounds and windows -------------------------------------------------------------------------------------

    def reserve(self, count: int) -> int:
        """Number the ``count`` rounds of one collective, when it is planned; returns the first.

        Every rank plans its collectives in the same order, so every rank gives the same numbers to the same
        rounds, even when several collectives are in flight at once (async calls, a group), whose steps each
        rank may take in another order.
        """
        first = self.rounds + 1
        self.rounds += count
        return first

    def view(self, rank: int, nbytes: int, dtype: Any, first_byte: int = 0) -> Any:
        return self.windows[rank].array[first_byte : first_byte + nbytes].view(np.dtype(dtype))

    def step(self, prims: Any, flags: Flag, lo: int, hi: int, round_: int, **where: Any) -> WindowStep:
        """A step of ``prims`` (a :class:`~nbcoll.comm.primitives.Prims`) in round ``round_``: a :class:`WindowStep`."""
        return WindowStep(self, prims, flags, lo, hi, round_, **where)

    def open_output(self, prims: Any, lo: int, hi: int, round_: int, root: int, target: Any) -> OpenOutput:
        """A broadcast reader's step: open ``out[lo:hi]`` to the root's write if ``target`` (:meth:`find` of
        ``out``) says where it is registered (:class:`OpenOutput`)."""
        return OpenOutput(self, prims, lo, hi, round_, root, target)

    def write_shares(self, prims: Any, lo: int, hi: int, round_: int) -> WriteShares:
        """A broadcast root's step that writes ``local[lo:hi]`` into every opened output (:class:`WriteShares`)."""
        return WriteShares(self, prims, lo, hi, round_)

    def release(self, prims: Any) -> Release:
        """The step that waits until no peer reads what ``prims`` lent (:class:`Release`)."""
        return Release(self, prims)

    def _map_everywhere(self, make: Callable[[], list[IpcBuffer]], what: str, call: str) -> list[list[IpcBuffer]]:
        """Each rank creates ``make()``; returns every rank's buffers as mapped here, once every rank has them.

        Nothing is created before every rank has arrived, so a rank killed while it waits for a peer that never
        comes has no name in ``/dev/shm``. The handles go to every peer in non-blocking messages the watchdog
        polls, each rank maps the others' buffers, a second exchange says everyone has, and only then does each
        owner remove its names. A failure anywhere closes whatever was made, and so unlinks every name at once.
        """
        own: list[IpcBuffer] = []  # created here: unlinked once every peer has them mapped
        mapped: dict[int, list[IpcBuffer]] = {}
        exchange = (self.mpi_comm, self.uid)
        drive = (self.drive, self.recorder, call)
        _exchange(*exchange, True, f"{what}-arrived", *drive)
        try:
            problem = ""
            try:
                own = make()
            except Exception as exc:
                problem = f"rank {self.rank} could not create its buffer: {exc!r}"
            handles = _exchange(*exchange, problem or [b.handle for b in own], what, *drive)
            problems = [h for h in handles if isinstance(h, str)]
            if not problems:
                try:
                    mapped[self.rank] = own
                    for p in range(self.nranks):
                        if p != self.rank:
                            mapped[p] = [self.memory.open(h) for h in handles[p]]
                except Exception as exc:
                    problem = f"rank {self.rank} could not map a peer's buffer: {exc!r}"
            # Every rank has mapped every buffer: the names can go.
            done = _exchange(*exchange, problem, f"{what}-mapped", *drive)
            problems += [s for s in done if s]
            for buffer in own:
                buffer.unlink()
            if problems:
                raise RuntimeError(f"rank {self.rank}: setting up the direct windows failed: " + "; ".join(problems))
        except BaseException:
            for buffer in [b for buffers in mapped.values() for b in buffers if buffers is not own] + own:
                buffer.close()  # an owner's close also removes a name not yet unlinked
            raise
        return [mapped[p] for p in range(self.nranks)]

    def close(self) -> None:
        self.posted = self.done = self.lent = self.lent_at = None
        for buffers in self.registered:
            for buffer in buffers or []:
                buffer.close()
        for buffer in [*self.windows, self.flags]:
            buffer.close()


def _exchange(
    mpi_comm: Any, uid: int, value: Any, what: str, drive: Callable, recorder: FlightRecorder, call: str = ""
) -> list:
    """Every rank's ``value``, in rank order, exchanged in messages that the watchdog polls (for ``call``)."""
    op = Exchange(mpi_comm, uid, value, what, recorder.record("window_setup", -1, 0, what), call)
    drive([op])
    return [op.values[p] for p in range(op.nranks)]
