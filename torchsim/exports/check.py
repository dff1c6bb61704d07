"""Structural check of a written Perfetto trace, by parsing it back with the `perfetto` package's protobufs.

Every trace torchsim writes is checked by the tests with `check_trace`: unique track uuids, parents
declared before children, events only on declared tracks, balanced and properly nested slices per track,
counters only on counter tracks, interned names defined before use, and every flow terminated.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TracePacket, TrackEvent

from torchsim.exports.trace_builder import TraceStats


class TraceCheckError(ValueError):
    """A trace broke a structural rule; `problems` lists each one."""

    def __init__(self, path: str, problems: list[str]) -> None:
        shown = "\n  ".join(problems[:10])
        more = f"\n  ... and {len(problems) - 10} more" if len(problems) > 10 else ""
        super().__init__(f"trace {path} has {len(problems)} structural problems:\n  {shown}{more}")
        self.problems = problems


@dataclass
class _TrackState:
    name: str
    is_counter: bool
    stack: list[int] = field(default_factory=list)  # begin timestamps of open slices
    last_ts: int = -1
    has_slices: bool = False


def check_trace(path: str | os.PathLike[str]) -> TraceStats:
    """Parse `path` and check it; returns the counts found, raises TraceCheckError listing every problem."""
    trace = Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    return check_packets(trace, str(path))


def check_packets(trace: Trace, where: str = "<trace>") -> TraceStats:
    problems: list[str] = []
    tracks: dict[int, _TrackState] = {}
    pids: set[int] = set()
    tids: set[int] = set()
    names: set[int] = set()
    arg_names: set[int] = set()
    strings: set[int] = set()
    opened: dict[int, tuple[int, int]] = {}  # flow id -> (ts, packet index) of the slice that starts it
    terminated: dict[int, tuple[int, int]] = {}
    stats = TraceStats()
    for i, p in enumerate(trace.packet):
        if i == 0 and not p.sequence_flags & TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            problems.append("packet 0 does not clear incremental state (SEQ_INCREMENTAL_STATE_CLEARED)")
        for n in p.interned_data.event_names:
            names.add(n.iid)
        for n in p.interned_data.debug_annotation_names:
            arg_names.add(n.iid)
        for n in p.interned_data.debug_annotation_string_values:
            strings.add(n.iid)
        if p.HasField("track_descriptor"):
            _check_descriptor(p, i, tracks, pids, tids, problems, stats)
        elif p.HasField("track_event"):
            _check_event(p, i, tracks, (names, arg_names, strings), opened, terminated, problems, stats)
    for uuid, t in tracks.items():
        if t.stack:
            problems.append(f"track {uuid} {t.name!r}: {len(t.stack)} slices never ended")
    for fid, start in opened.items():
        if fid not in terminated:
            problems.append(f"flow {fid} started at packet {start[1]} is never terminated")
        elif terminated[fid] < start:
            problems.append(f"flow {fid} ends (packet {terminated[fid][1]}) before it starts (packet {start[1]})")
    for fid, end in terminated.items():
        if fid not in opened:
            problems.append(f"flow {fid} terminated at packet {end[1]} never starts")
    if problems:
        raise TraceCheckError(where, problems)
    return stats


def _check_descriptor(p: TracePacket, i: int, tracks: dict[int, _TrackState], pids: set[int], tids: set[int],
                      problems: list[str], stats: TraceStats) -> None:
    td = p.track_descriptor
    if td.uuid in tracks:
        problems.append(f"packet {i}: track uuid {td.uuid} ({td.name!r}) declared twice")
    if td.HasField("parent_uuid") and td.parent_uuid not in tracks:
        problems.append(f"packet {i}: track {td.uuid} ({td.name!r}) names parent {td.parent_uuid}, "
                        "which is not declared before it")
    if td.HasField("process"):
        if td.process.pid in pids:
            problems.append(f"packet {i}: pid {td.process.pid} used by two process tracks")
        pids.add(td.process.pid)
        stats.processes += 1
    if td.HasField("thread"):
        if td.thread.pid not in pids:
            problems.append(f"packet {i}: thread {td.thread.tid} ({td.name!r}) in undeclared pid {td.thread.pid}")
        if td.thread.tid in tids:
            problems.append(f"packet {i}: tid {td.thread.tid} used by two thread tracks")
        tids.add(td.thread.tid)
        stats.threads += 1
    is_counter = td.HasField("counter")
    stats.counter_tracks += is_counter
    stats.tracks += 1
    tracks[td.uuid] = _TrackState(td.name, is_counter)


def _check_event(p: TracePacket, i: int, tracks: dict[int, _TrackState], interned: tuple[set[int], set[int], set[int]],
                 opened: dict[int, tuple[int, int]], terminated: dict[int, tuple[int, int]], problems: list[str],
                 stats: TraceStats) -> None:
    names, arg_names, strings = interned
    e = p.track_event
    t = tracks.get(e.track_uuid)
    if t is None:
        problems.append(f"packet {i}: event on track {e.track_uuid}, which is not declared before it")
        return
    ts = p.timestamp
    if ts < t.last_ts:
        problems.append(f"packet {i}: track {t.name!r} goes back in time ({ts} ns after {t.last_ts} ns)")
    t.last_ts = max(t.last_ts, ts)
    if e.HasField("name_iid") and e.name_iid not in names:
        problems.append(f"packet {i}: event name iid {e.name_iid} used before it is interned")
    for a in e.debug_annotations:
        if a.HasField("name_iid") and a.name_iid not in arg_names:
            problems.append(f"packet {i}: argument name iid {a.name_iid} used before it is interned")
        if a.HasField("string_value_iid") and a.string_value_iid not in strings:
            problems.append(f"packet {i}: argument string iid {a.string_value_iid} used before it is interned")
    if e.type == TrackEvent.TYPE_COUNTER:
        if not t.is_counter:
            problems.append(f"packet {i}: counter value on {t.name!r}, which is not a counter track")
        stats.counters += 1
        return
    if t.is_counter:
        problems.append(f"packet {i}: slice event on counter track {t.name!r}")
    if e.type == TrackEvent.TYPE_SLICE_BEGIN:
        if t.stack and ts < t.stack[-1]:
            problems.append(f"packet {i}: slice on {t.name!r} begins before its enclosing slice")
        t.stack.append(ts)
        stats.slices += 1
        if not t.has_slices:
            t.has_slices = True
            stats.slice_tracks += 1
        stats.max_depth = max(stats.max_depth, len(t.stack))
    elif e.type == TrackEvent.TYPE_SLICE_END:
        if not t.stack:
            problems.append(f"packet {i}: slice end on {t.name!r} with no open slice")
        else:
            begin = t.stack.pop()
            if ts < begin:
                problems.append(f"packet {i}: slice on {t.name!r} ends ({ts} ns) before it begins ({begin} ns)")
    else:
        problems.append(f"packet {i}: unsupported track event type {e.type}")
    for fid in e.flow_ids:
        if fid in opened:
            problems.append(f"packet {i}: flow id {fid} started twice")
        opened.setdefault(fid, (ts, i))
    for fid in e.terminating_flow_ids:
        if fid in terminated:
            problems.append(f"packet {i}: flow {fid} terminated twice")
        terminated.setdefault(fid, (ts, i))
        stats.flows += 1
