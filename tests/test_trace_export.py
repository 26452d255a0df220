"""Traces as Chrome trace events: real all-reduce traces on loopback worlds, exported and checked against the rules
of the Trace Event Format that Perfetto and chrome://tracing read.

The worlds use FIFOs of 4 slots of 16 bytes (two int64), so that a few dozen elements span several chunks.
"""

import json

import numpy as np
import pytest

import nbcoll
from nbcoll.__main__ import main
from nbcoll.comm import CommConfig, loopback, trace, trace_export, trace_view

TINY = {"buffsize": 64, "steps": 4, "timeout": 60.0}


@pytest.fixture(scope="module", params=[2, 3, 4])  # one rank sends nothing and writes no trace
def traced(request, tmp_path_factory):
    """``(directory, records, sums)``: a ring and a tree all-reduce of 23 int64 (odd: uneven chunks) on n ranks."""
    nranks = request.param
    directory = tmp_path_factory.mktemp(f"trace{nranks}") / "trace"

    def collectives(comm):
        ring = comm.all_reduce(np.arange(23, dtype=np.int64) + comm.rank, algo="ring")
        tree = comm.all_reduce(np.arange(23, dtype=np.int64) * (comm.rank + 1), algo="tree")
        return ring, tree

    with nbcoll.use_backend("numpy"):
        sums = loopback.run(nranks, collectives, config=CommConfig(**TINY, nchannels=2, trace=str(directory)))
    return directory, trace.load(directory), sums, nranks


def check_trace_event_format(document: dict) -> None:
    """Every rule of the format the exporter relies on; fails naming the first event that breaks one."""
    assert document["displayTimeUnit"] == "ms"
    events = document["traceEvents"]
    named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    processes = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    flows: dict[int, list[dict]] = {}
    for event in events:
        for key in ("name", "ph", "pid", "tid", "ts"):
            assert key in event, f"{key} missing from {event}"
        assert isinstance(event["ts"], (int, float)) and event["ts"] >= 0, event
        assert event["pid"] in processes, f"pid {event['pid']} has no process_name: {event}"
        if event["ph"] == "M":
            assert isinstance(event["args"]["name" if event["name"].endswith("_name") else "sort_index"], (str, int))
            continue
        assert (event["pid"], event["tid"]) in named, f"track {event['pid']}/{event['tid']} has no thread_name"
        if event["ph"] == "X":
            assert event["dur"] >= 0, event
        elif event["ph"] in "sf":
            flows.setdefault(event["id"], []).append(event)
        else:
            raise AssertionError(f"unexpected phase {event['ph']!r}: {event}")
    slices = [e for e in events if e["ph"] == "X"]
    for number, pair in flows.items():
        assert sorted(e["ph"] for e in pair) == ["f", "s"], f"flow {number}: {pair}"
        start, finish = sorted(pair, key=lambda e: e["ph"] == "f")
        assert start["cat"] == finish["cat"] and start["name"] == finish["name"], pair
        assert finish.get("bp") == "e" and finish["ts"] >= start["ts"], pair
        for end in pair:  # each end lies inside a step on its own track: that is the step it binds to
            assert any(
                s["pid"] == end["pid"] and s["tid"] == end["tid"] and s["ts"] <= end["ts"] <= s["ts"] + s["dur"]
                for s in slices
            ), f"flow {number}: no step encloses {end}"


def test_an_exported_all_reduce_trace_follows_the_trace_event_format(traced, tmp_path):
    directory, records, sums, nranks = traced
    expected = sum(np.arange(23, dtype=np.int64) + r for r in range(nranks))
    assert all(np.array_equal(ring, expected) for ring, _ in sums)  # the traced collectives computed exactly
    path = trace_export.export(directory, tmp_path / "trace.json")
    document = json.loads(path.read_text())
    check_trace_event_format(document)

    events = document["traceEvents"]
    assert {e["pid"] for e in events} == set(range(nranks))
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {f"rank {r}" for r in range(nranks)}
    steps = [e for e in events if e["ph"] == "X" and e["cat"] == "step"]
    # Every record is an event on each peer's track it used (once when it has no peer), with its own times.
    assert len(steps) == sum(len(trace_export.tracks_of(rec)) for rec in records)
    start = min(rec["t0"] for rec in records)
    for rec in records:
        ts = round((rec["t0"] - start) * 1e6, 3)
        mine = [e for e in steps if e["pid"] == rec["rank"] and e["ts"] == ts and e["args"]["step"] == rec["step"]]
        assert mine and all(e["dur"] == pytest.approx((rec["t1"] - rec["t0"]) * 1e6, abs=2e-3) for e in mine), rec
    flows = [e for e in events if e["ph"] == "s"]
    assert len(flows) == len(trace_view.arrows(records))
    assert flows
    collectives = [e for e in events if e.get("cat") == "collective"]
    assert sorted((e["pid"], e["name"]) for e in collectives) == sorted(
        (r, f"#{seq} all_reduce ({algo})") for r in range(nranks) for seq, algo in ((1, "ring"), (2, "tree"))
    )


def test_a_flow_joins_a_send_to_its_receive_on_the_peers_connection_tracks(traced):
    _, records, _, _ = traced
    events = trace_export.chrome_events(records)
    track = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    for finish in (e for e in events if e["ph"] == "f"):
        start = starts[finish["id"]]
        channel = start["args"]["channel"]
        assert track[(start["pid"], start["tid"])] == f"channel {channel}, peer {finish['pid']}"
        assert track[(finish["pid"], finish["tid"])] == f"channel {channel}, peer {start['pid']}"
    assert {e["args"]["channel"] for e in starts.values()} == {0, 1}  # both channels carried chunks


def test_device_kernel_spans_become_events_on_their_own_track(tmp_path):
    for rank in range(2):
        tracer = trace.Tracer(tmp_path / f"rank{rank}.jsonl", rank)
        tracer.kernel(seq=1, collective="all_reduce", algo="ring", kernel="ring_rank_all_reduce_kernel",
                      t0=100.0 + rank * 1e-4, t1=100.002, status=[[0, 6], [0, 6]], nbytes=64, span=(0, 16),
                      outcome="ok" if rank == 0 else "CommTimeoutError")  # fmt: skip
        tracer.close()
    document = trace_export.chrome_trace(trace.load(tmp_path))
    check_trace_event_format(document)
    kernels = [e for e in document["traceEvents"] if e["ph"] == "X" and e["cat"] == "step"]
    assert [(e["pid"], e["name"], e["args"]["outcome"]) for e in sorted(kernels, key=lambda e: e["pid"])] == [
        (0, "ring_rank_all_reduce_kernel", "ok"),
        (1, "ring_rank_all_reduce_kernel", "CommTimeoutError"),
    ]
    assert kernels[0]["dur"] == pytest.approx(2000.0) and kernels[0]["args"]["status"] == [[0, 6], [0, 6]]
    named = {e["args"]["name"] for e in document["traceEvents"] if e["name"] == "thread_name"}
    assert named == {"collectives", "device kernels"}
    assert "(ring, device)" in next(e["name"] for e in document["traceEvents"] if e.get("cat") == "collective")


@pytest.mark.parametrize("traced", [3], indirect=True)
def test_the_command_writes_the_file_and_refuses_mistakes_in_one_line(traced, tmp_path, capsys):
    directory = traced[0]
    out = tmp_path / "ring.json"
    assert main(["trace", "export", str(directory), "--chrome", str(out), "--seq", "1"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    document = json.loads(out.read_text())
    check_trace_event_format(document)
    assert {e["args"]["seq"] for e in document["traceEvents"] if e["ph"] == "X"} == {1}
    assert main(["trace", "export", str(directory)]) == 2
    assert "nbcoll trace: error: export: name the file to write" in capsys.readouterr().err
    assert main(["trace", "export", str(tmp_path / "nothing"), "--chrome", str(out)]) == 2
    assert "no rank*.jsonl trace files" in capsys.readouterr().err
