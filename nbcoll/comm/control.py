"""The control page of one machine: the abort flag and the step counters of every ipc connection on it.

All ranks of a communicator that share a machine map the same host page (an :class:`~nbcoll.ipc_memory.IpcBuffer`
with ``host=True``), laid out as ``int64`` words::

    [0]  abort flag: 0, or 1 + the rank that called abort()
    then, for each directed pair (sender s, receiver r) of the machine's ranks, in row-major order,
    and for each of the pair's channels (each channel is a connection of its own):
         head             chunks the sender has published        (written by the sender only)
         tail             chunks the receiver has consumed       (written by the receiver only)
         nbytes[steps]    bytes in each slot                     (written by the sender only)
         last[steps]      1 when the slot ends its message       (written by the sender only)

Each word has a single writer, and x86 keeps stores in order, so a reader that sees ``head`` move also sees the
slot contents and sizes written before it.

Example::

    page = ipc_memory.share(machine_comm, ControlPage.words_needed(2, 8, 2), np.int64, tag="ctl", host=True)
    control = ControlPage(page, machine_size=2, steps=8, nchannels=2)
    counters = control.pair(sender=0, receiver=1, channel=1)
    counters.head[0] += 1
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nbcoll.ipc_memory import IpcBuffer

HEADER_WORDS = 1


@dataclass
class PairCounters:
    """Views into the control page for one directed connection (each a NumPy view of shared memory)."""

    head: np.ndarray
    tail: np.ndarray
    nbytes: np.ndarray
    last: np.ndarray


class ControlPage:
    """The words of one machine's control page, by meaning."""

    def __init__(self, page: IpcBuffer, machine_size: int, steps: int, nchannels: int = 1) -> None:
        self.page = page
        self.words = page.array
        self.machine_size = machine_size
        self.steps = steps
        self.nchannels = nchannels

    @staticmethod
    def words_needed(machine_size: int, steps: int, nchannels: int = 1) -> int:
        return HEADER_WORDS + machine_size * machine_size * nchannels * (2 + 2 * steps)

    @property
    def aborted_by(self) -> int | None:
        """The rank that aborted the communicator, or ``None``."""
        flag = int(self.words[0])
        return flag - 1 if flag else None

    def set_aborted(self, rank: int) -> None:
        if not self.words[0]:
            self.words[0] = rank + 1

    def pair(self, sender: int, receiver: int, channel: int = 0) -> PairCounters:
        """Counters of channel ``channel`` of the connection from machine index ``sender`` to ``receiver``."""
        words = 2 + 2 * self.steps
        start = HEADER_WORDS + ((sender * self.machine_size + receiver) * self.nchannels + channel) * words
        block = self.words[start : start + words]
        return PairCounters(block[0:1], block[1:2], block[2 : 2 + self.steps], block[2 + self.steps :])

    def close(self) -> None:
        self.words = None
        self.page.close()
