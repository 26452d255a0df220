"""The one switch of the CPU fast paths: which of them a communicator uses, decided here and nowhere else.

The teaching path (an algorithm, its primitives, a transport: ``docs/guide/life_of_an_all_reduce.rst``) is
complete without any of them. Each fast path makes a CPU run faster and lives in a module of its own, imported only
when the path is on:

==================================== =========================================== ==================================
fast path                            module                                      setting (besides NBCOLL_FASTPATH)
==================================== =========================================== ==================================
replay of kept plans                 :mod:`nbcoll.comm.replay`                   off with ``NBCOLL_CHECK=1``
compiled LL loops                    :mod:`nbcoll.comm.ll_compiled`,             ``NBCOLL_LL_COMPILED=1``
                                     :mod:`nbcoll.kernels.ll_host`
streaming stores into outputs        :mod:`nbcoll.comm.copy_policy`,             ``NBCOLL_STREAM_BYTES``
                                     :mod:`nbcoll.kernels.stream_copy`
streaming stores into memory a       (the same)                                  ``NBCOLL_STREAM_SHARED_BYTES``
peer reads next
cross-memory reads of plain inputs   :mod:`nbcoll.comm.transport.cross_memory`   ``NBCOLL_CMA_BYTES``
==================================== =========================================== ==================================

``NBCOLL_FASTPATH=0`` (or :meth:`CommConfig.teaching() <nbcoll.comm.config.CommConfig.teaching>`) turns every one
of them off; each setting alone still turns its own off. Results are the same bits either way: a fast path
changes how bytes are copied or how often a call is planned, never what is computed or in which order.

Example::

    from nbcoll.comm.config import CommConfig
    FastPaths.of(CommConfig.teaching())      # FastPaths(replay=False, ll_compiled=False, stream_bytes=0, ...)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nbcoll import backend

MODULES = (
    "nbcoll.comm.replay",
    "nbcoll.comm.ll_compiled",
    "nbcoll.kernels.ll_host",
    "nbcoll.comm.copy_policy",
    "nbcoll.kernels.stream_copy",
    "nbcoll.comm.transport.cross_memory",
)
"""The fast paths' modules: a process whose communicators all run with ``NBCOLL_FASTPATH=0`` imports none."""


@dataclass(frozen=True)
class FastPaths:
    """The fast paths one communicator uses, each on or off (0 bytes: off), from its config.

    >>> from nbcoll.comm.config import CommConfig
    >>> from nbcoll.comm.fast_paths import FastPaths
    >>> FastPaths.of(CommConfig.teaching()).any
    False
    >>> FastPaths.of(CommConfig(check=True)).replay      # every checked call is compared across ranks: planned
    False
    """

    replay: bool = False
    ll_compiled: bool = False
    stream_bytes: int = 0
    stream_shared_bytes: int = 0
    cma_bytes: int = 0

    @classmethod
    def of(cls, config: Any) -> FastPaths:
        """What ``config`` turns on, on this machine and backend: the one place that decides."""
        if not config.fastpath:
            return cls()
        streams = backend.get_backend() == "numpy" and _cpu_streams()  # host arrays, on an x86-64 CPU
        return cls(
            replay=not config.check,  # with NBCOLL_CHECK every call is compared across ranks, so planned
            ll_compiled=config.ll_compiled and backend.get_backend() == "numpy",
            stream_bytes=config.stream_bytes if streams else 0,
            stream_shared_bytes=config.stream_shared_bytes if streams else 0,
            cma_bytes=config.cma_bytes if backend.get_backend() != "cuda" else 0,
        )

    @property
    def streams(self) -> bool:
        """Whether any copy may use streaming stores (then :mod:`nbcoll.comm.copy_policy` chooses which)."""
        return bool(self.stream_bytes or self.stream_shared_bytes)

    @property
    def any(self) -> bool:
        """Whether any fast path is on."""
        return self.replay or self.ll_compiled or self.streams or bool(self.cma_bytes)


def _cpu_streams() -> bool:
    from nbcoll.kernels import stream_copy  # a fast path's module: imported only when fast paths are on

    return stream_copy.available()
