"""Step traces: with ``NBCOLL_TRACE=DIR`` every rank writes one line per primitive it runs to ``DIR/rank<r>.jsonl``.

Each line is a JSON object::

    {"rank": 0, "seq": 3, "collective": "all_reduce", "algo": "ring", "step": 5, "channel": 1,
     "primitive": "recv_reduce_send", "recv": [3], "send": [1], "span": [8, 12], "bytes": 16,
     "t0": 1764403200.0012, "t1": 1764403200.0013}

``seq`` numbers the collectives this rank has run; ``channel`` is the connection set the step used (see
:mod:`nbcoll.comm.algorithms`); ``span`` is the element range of the collective's buffer that the chunk holds;
``t0``/``t1`` are wall-clock seconds, comparable across ranks of one machine.

A collective run as one kernel per rank (``proto="device"``, :mod:`nbcoll.comm.device_collective`) has no steps
the host sees: each rank writes one line for its launch, from launch to return, with ``"primitive":
"device_kernel"``, the kernel's name, and ``status``, each channel's ``[code, steps started]`` as the kernel left
it (code 0: it completed; see :mod:`nbcoll.comm.device.prims`)::

    {"rank": 1, "seq": 4, "collective": "all_reduce", "algo": "ring", "proto": "device", "step": 0, "channel": 0,
     "primitive": "device_kernel", "kernel": "ring_rank_all_reduce_kernel", "recv": [], "send": [],
     "span": [0, 4096], "bytes": 16384, "status": [[0, 12], [0, 12]], "outcome": "ok", "t0": ..., "t1": ...}

``python -m nbcoll trace view DIR`` draws them (:mod:`nbcoll.comm.trace_view`).

Example::

    NBCOLL_TRACE=traces/ring mpiexec -n 4 python tutorials/08_ring_all_reduce.py
    python -m nbcoll trace view traces/ring -o ring.png
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEVICE_KERNEL = "device_kernel"
"""The ``primitive`` of a trace line that stands for a whole kernel launch (see :meth:`Tracer.kernel`)."""


class Tracer:
    """Appends step records of one rank to its trace file; does nothing when tracing is off.

    Example::

        tracer = Tracer(Path("traces/rank0.jsonl"), rank=0)     # the communicator's engine makes one
        tracer.step(seq=1, collective="all_reduce", algo="ring", step=0, primitive=prim, t0=0.0, t1=0.1, channel=0)
    """

    def __init__(self, path: Path | None, rank: int) -> None:
        self.path = path
        self.rank = rank
        self._file = None

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def _write(self, record: dict) -> None:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a")  # noqa: SIM115 - kept open for the life of the communicator
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def step(
        self,
        *,
        seq: int,
        collective: str,
        algo: str,
        step: int,
        primitive: Any,
        t0: float,
        t1: float,
        channel: int = 0,
    ) -> None:
        if self.path is None:
            return
        record = {
            "rank": self.rank,
            "seq": seq,
            "collective": collective,
            "algo": algo,
            "step": step,
            "channel": channel,
            "primitive": primitive.name,
            "recv": [c.peer for c in primitive.recv],
            "send": [c.peer for c in primitive.send],
            "span": list(primitive.span) if primitive.span else None,
            "bytes": primitive.nbytes,
            "t0": t0,
            "t1": t1,
        }
        self._write(record)

    def kernel(self, *, seq: int, collective: str, algo: str, kernel: str, t0: float, t1: float,
               status: Sequence[Sequence[int]], nbytes: int, span: tuple[int, int],
               outcome: str = "ok") -> None:  # fmt: skip
        """One line for a whole kernel launch of collective ``seq``: launched at ``t0``, returned at ``t1``, each
        channel's ``status`` row ``[code, steps started]``; ``outcome`` is ``"ok"`` or the error's class name.

        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "rank0.jsonl"
        >>> tracer = Tracer(path, rank=0)
        >>> tracer.kernel(seq=1, collective="all_reduce", algo="ring", kernel="ring_rank_all_reduce_kernel",
        ...               t0=1.0, t1=1.5, status=[[0, 6]], nbytes=64, span=(0, 16))
        >>> tracer.close()
        >>> record = load(path.parent)[0]
        >>> record["primitive"], record["status"], record["t1"] - record["t0"]
        ('device_kernel', [[0, 6]], 0.5)
        """
        if self.path is None:
            return
        self._write({"rank": self.rank, "seq": seq, "collective": collective, "algo": algo, "proto": "device",
                     "step": 0, "channel": 0, "primitive": DEVICE_KERNEL, "kernel": kernel, "recv": [], "send": [],
                     "span": list(span), "bytes": nbytes, "status": [list(map(int, row)) for row in status],
                     "outcome": outcome, "t0": t0, "t1": t1})  # fmt: skip

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def load(directory: str | Path) -> list[dict]:
    """Every record of every rank's trace file in ``directory``, sorted by start time."""
    records = []
    for path in sorted(Path(directory).glob("rank*.jsonl")):
        with open(path) as f:
            records += [json.loads(line) for line in f if line.strip()]
    if not records:
        raise FileNotFoundError(f"directory: no rank*.jsonl trace files in {directory}")
    return sorted(records, key=lambda rec: (rec["t0"], rec["rank"]))
