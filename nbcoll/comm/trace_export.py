"""A trace as Chrome trace events, for Perfetto (ui.perfetto.dev) and ``chrome://tracing``.

``python -m nbcoll trace export DIR --chrome trace.json`` turns an ``NBCOLL_TRACE`` directory (see
:mod:`nbcoll.comm.trace`) into one JSON file in the Trace Event Format, ``{"traceEvents": [...],
"displayTimeUnit": "ms"}``:

* one process (``pid``) per rank, named ``rank r`` by a ``process_name`` metadata event (``"ph": "M"``);
* in it, one thread (``tid``) per connection end, named ``channel c, peer p``: every step is a complete event
  (``"ph": "X"``, ``ts`` and ``dur`` in microseconds) on the track of each peer it receives from or sends to, as
  NCCL's profiler shows a step per channel and peer. A step without peers (a local copy) sits on ``channel c,
  local``, a collective run as one kernel (``device_kernel``) on ``device kernels``, and track 0, ``collectives``,
  holds one event per collective spanning all its steps on that rank;
* one flow (``"ph": "s"`` then ``"f"``, the same ``id``, ``"bp": "e"``) per chunk, from the step that sent it to
  the step that received it on the peer, paired as :func:`nbcoll.comm.trace_view.arrows` pairs them.

Times are microseconds since the earliest step of the trace (``otherData.t0_unix_s`` says when that was).

Example::

    NBCOLL_TRACE=traces/ring mpiexec -n 4 python tutorials/08_ring_all_reduce.py
    python -m nbcoll trace export traces/ring --chrome ring.json      # then open ring.json in ui.perfetto.dev
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nbcoll.comm.trace import DEVICE_KERNEL, load
from nbcoll.comm.trace_view import arrows, channel_of, select

COLLECTIVES_TID = 0
"""The track of every rank that holds one event per collective."""

_STEP_ARGS = ("seq", "collective", "algo", "step", "channel", "span", "bytes")
"""The fields of a trace record that an event shows in its details."""

_NS = 1e-3  # one nanosecond in microseconds: the finest step Perfetto keeps

Track = tuple[int, int | None, str]
"""``(channel, peer, kind)``: one connection end (``kind`` "peer"), a channel's local steps or the kernels."""


def _micros(seconds: float, start: float) -> float:
    return round((seconds - start) * 1e6, 3)


def tracks_of(rec: dict) -> list[Track]:
    """The tracks a step is drawn on: one per peer it talks to, else its channel's local track or the kernels'.

    >>> tracks_of({"primitive": "recv_reduce_send", "channel": 1, "recv": [3], "send": [1]})
    [(1, 1, 'peer'), (1, 3, 'peer')]
    >>> tracks_of({"primitive": "copy", "channel": 0, "recv": [], "send": []})
    [(0, None, 'local')]
    """
    if rec["primitive"] == DEVICE_KERNEL:
        return [(channel_of(rec), None, "kernel")]
    peers = sorted(set(rec["recv"]) | set(rec["send"]))
    return [(channel_of(rec), peer, "peer") for peer in peers] or [(channel_of(rec), None, "local")]


def track_name(track: Track) -> str:
    """What Perfetto calls a track: ``channel 1, peer 3``, ``channel 0, local`` or ``device kernels``.

    >>> track_name((1, 3, "peer")), track_name((0, None, "local"))
    ('channel 1, peer 3', 'channel 0, local')
    """
    channel, peer, kind = track
    if kind == "kernel":
        return "device kernels"
    return f"channel {channel}, peer {peer}" if kind == "peer" else f"channel {channel}, local"


def _track_order(track: Track) -> tuple:
    channel, peer, kind = track  # by channel, then peer (local steps first); the kernels' track last
    return kind == "kernel", channel, -1 if peer is None else peer


def _inner_end(ts: float, dur: float) -> float:
    """A time just inside the end of ``[ts, ts + dur]``: where a flow leaves or lands on its step."""
    return round(ts + max(dur - _NS, dur / 2), 3)


def chrome_events(records: list[dict]) -> list[dict]:
    """Every record of a trace as Chrome trace events: metadata, steps, collectives and flows (see above).

    >>> steps = [
    ...     {"rank": 0, "seq": 1, "collective": "broadcast", "algo": "ring", "step": 0, "channel": 0,
    ...      "primitive": "send", "recv": [], "send": [1], "span": [0, 4], "bytes": 16, "t0": 10.0, "t1": 10.001},
    ...     {"rank": 1, "seq": 1, "collective": "broadcast", "algo": "ring", "step": 0, "channel": 0,
    ...      "primitive": "recv", "recv": [0], "send": [], "span": [0, 4], "bytes": 16, "t0": 10.0, "t1": 10.002}]
    >>> events = chrome_events(steps)
    >>> [(e["ph"], e["pid"], e["name"]) for e in events if e["ph"] in "sf"]
    [('s', 0, 'chunk'), ('f', 1, 'chunk')]
    >>> [(e["name"], e["ts"], e["dur"]) for e in events if e["ph"] == "X" and e["tid"] != COLLECTIVES_TID]
    [('send', 0.0, 1000.0), ('recv', 0.0, 2000.0)]
    """
    start = min(rec["t0"] for rec in records)
    ranks = sorted({rec["rank"] for rec in records})
    tracks = sorted({t for rec in records for t in tracks_of(rec)}, key=_track_order)
    tid = {track: number for number, track in enumerate(tracks, start=COLLECTIVES_TID + 1)}

    names = {COLLECTIVES_TID: "collectives", **{tid[t]: track_name(t) for t in tracks}}
    events: list[dict] = []
    for rank in ranks:
        events.append(_metadata("process_name", rank, 0, {"name": f"rank {rank}"}))
        events.append(_metadata("process_sort_index", rank, 0, {"sort_index": rank}))
        used = [COLLECTIVES_TID] + sorted({tid[t] for rec in records if rec["rank"] == rank for t in tracks_of(rec)})
        for number in used:
            events.append(_metadata("thread_name", rank, number, {"name": names[number]}))
            events.append(_metadata("thread_sort_index", rank, number, {"sort_index": number}))

    for rec in records:
        ts, end = _micros(rec["t0"], start), _micros(rec["t1"], start)
        args = {key: rec[key] for key in _STEP_ARGS if key in rec}
        args.update({"recv from": rec["recv"], "send to": rec["send"]})
        if rec["primitive"] == DEVICE_KERNEL:
            args.update({"status": rec.get("status"), "outcome": rec.get("outcome", "ok")})
        name = rec.get("kernel", DEVICE_KERNEL) if rec["primitive"] == DEVICE_KERNEL else rec["primitive"]
        for track in tracks_of(rec):
            events.append({"name": name, "cat": "step", "ph": "X", "pid": rec["rank"], "tid": tid[track], "ts": ts,
                           "dur": max(0.0, round(end - ts, 3)), "args": args})  # fmt: skip

    events += _collective_events(records, start)
    events += _flow_events(records, start, tid)
    return events


def _metadata(name: str, pid: int, tid: int, args: dict) -> dict:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "ts": 0, "args": args}


def _collective_events(records: list[dict], start: float) -> list[dict]:
    """One event per collective and rank on the ``collectives`` track, from its first step to its last."""
    spans: dict[tuple[int, int], list[dict]] = {}
    for rec in records:
        spans.setdefault((rec["rank"], rec["seq"]), []).append(rec)
    events = []
    for (rank, seq), steps in sorted(spans.items()):
        ts = _micros(min(r["t0"] for r in steps), start)
        end = _micros(max(r["t1"] for r in steps), start)
        first = steps[0]
        device = ", device" if first.get("proto") == "device" else ""
        events.append({"name": f"#{seq} {first['collective']} ({first['algo']}{device})", "cat": "collective",
                       "ph": "X", "pid": rank, "tid": COLLECTIVES_TID, "ts": ts, "dur": max(0.0, round(end - ts, 3)),
                       "args": {"seq": seq, "steps": len(steps)}})  # fmt: skip
    return events


def _flow_events(records: list[dict], start: float, tid: dict[Track, int]) -> list[dict]:
    """A flow from each sending step to the step that received its chunk, on the two connection ends' tracks.

    The flow leaves just before the sender's step ends (the chunk is published at its end) and lands just before
    the receiver's ends; where clocks put the receiver's end first, it leaves at that time (never later than it
    lands, as the format requires).
    """
    events = []
    for number, (src, dst) in enumerate(arrows(records), start=1):
        s_ts, s_end = _micros(src["t0"], start), _micros(src["t1"], start)
        d_ts, d_end = _micros(dst["t0"], start), _micros(dst["t1"], start)
        land = _inner_end(d_ts, d_end - d_ts)
        leave = min(_inner_end(s_ts, s_end - s_ts), land)
        channel = channel_of(src)
        common = {"name": "chunk", "cat": "chunk", "id": number, "args": {"span": src["span"], "channel": channel}}
        events.append({**common, "ph": "s", "pid": src["rank"], "tid": tid[(channel, dst["rank"], "peer")],
                       "ts": leave})  # fmt: skip
        events.append({**common, "ph": "f", "bp": "e", "pid": dst["rank"],
                       "tid": tid[(channel, src["rank"], "peer")], "ts": land})  # fmt: skip
    return events


def chrome_trace(records: list[dict]) -> dict[str, Any]:
    """The JSON object of a Chrome trace file: the events, milliseconds as the unit shown, and the time origin.

    >>> trace = chrome_trace([{"rank": 0, "seq": 1, "collective": "all_reduce", "algo": "ring", "step": 0,
    ...     "channel": 0, "primitive": "copy", "recv": [], "send": [], "span": None, "bytes": 8, "t0": 5.0,
    ...     "t1": 5.5}])
    >>> trace["displayTimeUnit"], trace["otherData"]["t0_unix_s"], len(trace["traceEvents"])
    ('ms', 5.0, 8)
    """
    return {
        "traceEvents": chrome_events(records),
        "displayTimeUnit": "ms",
        "otherData": {"t0_unix_s": min(rec["t0"] for rec in records), "source": "nbcoll NBCOLL_TRACE"},
    }


def export(directory: str | Path, output: str | Path, seq: int | None = None) -> Path:
    """Write the trace in ``directory`` (collective ``seq`` only, if given) to the Chrome trace file ``output``.

    >>> import tempfile
    >>> from nbcoll.comm.trace import Tracer
    >>> folder = Path(tempfile.mkdtemp())
    >>> tracer = Tracer(folder / "rank0.jsonl", rank=0)
    >>> tracer.kernel(seq=1, collective="all_reduce", algo="ring", kernel="ring_rank_all_reduce_kernel",
    ...               t0=1.0, t1=1.25, status=[[0, 6]], nbytes=64, span=(0, 16))
    >>> tracer.close()
    >>> path = export(folder, folder / "trace.json")
    >>> [e["dur"] for e in json.loads(path.read_text())["traceEvents"] if e["name"].startswith("ring_rank")]
    [250000.0]
    """
    trace = chrome_trace(select(load(directory), seq))
    output = Path(output)
    output.write_text(json.dumps(trace))
    return output
