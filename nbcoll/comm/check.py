"""``NBCOLL_CHECK=1``: before each collective, every rank compares what it is about to call with every other rank.

The most confusing failure of a collective library is a mismatch: one rank calls all-reduce with 1000
elements and another with 1001, or one calls broadcast while the others call all-reduce. Without a check the
ranks exchange chunks that do not line up, and the job hangs or, worse, computes garbage. With the check each
collective first gathers a small signature (collective, count, dtype, op, root) from every rank, and on any
difference every rank raises :class:`~nbcoll.comm.errors.CollectiveMismatchError` naming both sides.

A rank whose arguments fail the checks still takes part in the exchange, with a signature marked *refused*: the
others then raise too, before anything moves, and the exchanges of later calls stay in step
(see :mod:`nbcoll.comm.refusal`).

The exchange is one non-blocking ``MPI_Iallgather`` of a few integers, polled under the communicator's
timeout and abort checks like every other wait, so even the check cannot hang.

Example::

    NBCOLL_CHECK=1 mpiexec -n 4 python train.py
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

try:
    from mpi4py import MPI
except ImportError:  # the comm package imports without MPI; only communicators over MPI need it
    MPI = None

from nbcoll.comm.errors import CollectiveMismatchError, CommTimeoutError
from nbcoll.memory import DTYPES, LOW_PRECISION_DTYPES

SIGNATURE_DTYPES = DTYPES + LOW_PRECISION_DTYPES
"""The dtypes a signature can name, by position: what is exchanged is the index."""

COLLECTIVES = (
    "all_reduce",
    "broadcast",
    "reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "gather",
    "scatter",
    "barrier",
)
OPS = ("-", "sum", "prod", "max", "min", "avg", "premul_sum")


@dataclass(frozen=True)
class Signature:
    """What one rank is about to call."""

    collective: str
    count: int
    dtype: str
    op: str
    root: int
    refused: bool = False

    @staticmethod
    def refusal(collective: str) -> Signature:
        """What a rank whose arguments failed the checks sends in the exchange."""
        return Signature(collective, 0, "-", "-", -1, refused=True)

    def encode(self) -> np.ndarray:
        return np.array(
            [
                COLLECTIVES.index(self.collective),
                self.count,
                [str(d) for d in SIGNATURE_DTYPES].index(self.dtype) if self.dtype != "-" else -1,
                OPS.index(self.op.split("(")[0]),
                self.root,
                int(self.refused),
            ],
            dtype=np.int64,
        )

    @staticmethod
    def decode(row: np.ndarray) -> Signature:
        dtype = "-" if row[2] < 0 else str(SIGNATURE_DTYPES[row[2]])
        return Signature(COLLECTIVES[row[0]], int(row[1]), dtype, OPS[row[3]], int(row[4]), bool(row[5]))

    def __str__(self) -> str:
        root = f", root={self.root}" if self.root >= 0 else ""
        op = f", op={self.op}" if self.op != "-" else ""
        return f"{self.collective}(count={self.count}, dtype={self.dtype}{op}{root})"


def compare_across_ranks(
    mpi_comm: MPI.Comm, signature: Signature, timeout: float, check_aborted: Callable[[], None]
) -> None:
    """Raise :class:`CollectiveMismatchError` on every rank if any rank's signature differs from rank 0's.

    A rank that sends a refusal returns (it raises its own error); the others raise, naming it.
    """
    rank, size = mpi_comm.Get_rank(), mpi_comm.Get_size()
    mine = signature.encode()
    everyone = np.empty((size, mine.size), np.int64)
    request = mpi_comm.Iallgather(mine, everyone)
    deadline = time.monotonic() + timeout
    while not request.Test():
        check_aborted()
        if time.monotonic() > deadline:
            raise CommTimeoutError(
                f"rank {rank}: NBCOLL_CHECK of {signature} waited {timeout:g} s for the other ranks' signatures; "
                "some rank has not called a collective on this communicator"
            )
        time.sleep(1e-4)
    refused = [r for r in range(size) if everyone[r][5]]
    if refused and not signature.refused:
        raise CollectiveMismatchError(
            f"rank {rank}: {signature} not run: rank(s) {', '.join(map(str, refused))} refused this call (its "
            "arguments failed the checks there; see its error); nothing was sent, and the communicator stays usable"
        )
    if refused:
        return
    reference = Signature.decode(everyone[0])
    for other in range(size):
        theirs = Signature.decode(everyone[other])
        if theirs != reference:
            raise CollectiveMismatchError(
                f"rank {rank}: collective mismatch (NBCOLL_CHECK): rank 0 called {reference} but rank {other} "
                f"called {theirs}; every rank must make the same collective calls in the same order"
            )
