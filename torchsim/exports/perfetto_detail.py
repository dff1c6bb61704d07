"""Kernel detail view of a Perfetto trace: what every SM's execution groups did, node by node.

Reads a `KernelDetail` (node events recorded by the engine): a process per SM (all, or an evenly spaced
sample that the process names state), a thread per execution group with extra lanes when its operations
overlap (asynchronous copies, several resident CTAs), a slice per tile operation, flow arrows for
cross-group dependencies, and kernel-wide counter tracks (DRAM bandwidth, L2 hit rate, tensor-pipe use).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from torchsim.exports.counters import kernel_counters
from torchsim.exports.records import KernelDetail, NodeEvent
from torchsim.exports.trace_builder import ArgValue, TraceWriter


def sample_sms(sms_with_events: list[int], events_per_sm: dict[int, int], max_slices: int) -> list[int]:
    """All SMs when their events fit `max_slices`, else an evenly spaced sample that does."""
    total = sum(events_per_sm.values())
    if total <= max_slices or len(sms_with_events) <= 1:
        return sms_with_events
    per_sm = max(1, total // len(sms_with_events))
    keep = max(1, min(len(sms_with_events), max_slices // per_sm))
    idx = np.linspace(0, len(sms_with_events) - 1, keep).round().astype(int)
    return [sms_with_events[i] for i in sorted(set(idx.tolist()))]


def assign_lanes(events: list[tuple[int, int, int]]) -> list[int]:
    """Greedy interval partitioning of (start, end, index) sorted by start: lane per event, no overlap in a lane."""
    lane_end: list[int] = []
    lanes: list[int] = []
    for start, end, _ in events:
        for lane, last in enumerate(lane_end):
            if last <= start:
                lane_end[lane] = end
                lanes.append(lane)
                break
        else:
            lane_end.append(end)
            lanes.append(len(lane_end) - 1)
    return lanes


def _node_args(e: NodeEvent) -> dict[str, ArgValue]:
    args: dict[str, ArgValue] = {"op": e.op, "unit": e.unit, "cycles": e.end_cycle - e.start_cycle}
    if e.wait_reason is not None:
        args["wait_reason"] = e.wait_reason
        args["wait_cycles"] = e.wait_cycles
    if e.global_bytes is not None:
        args["global_bytes"] = e.global_bytes
    if e.dram_bytes is not None:
        args["dram_bytes"] = e.dram_bytes
    return args


def emit_detail(w: TraceWriter, detail: KernelDetail, offset_ns: int = 0, max_slices: int = 250_000) -> None:
    """Emit one kernel's detail view; cycles become ns through the kernel record's clock."""
    k = detail.kernel
    ns_per_cycle = 1e9 / k.clock_hz

    def ns(cycle: int) -> int:
        return offset_ns + round(cycle * ns_per_cycle)

    events = detail.events
    per_sm: dict[int, list[int]] = defaultdict(list)
    for i, e in enumerate(events):
        per_sm[e.sm].append(i)
    sms = sorted(per_sm)
    shown = sample_sms(sms, {s: len(v) for s, v in per_sm.items()}, max_slices)
    sampled = len(shown) < len(sms)
    note = f", sampled {len(shown)} of {len(sms)} SMs" if sampled else ""

    # the kernel process: one slice for the whole kernel and the counter tracks
    kproc = w.process(f"Kernel {k.kernel_name} on {detail.run.hardware}{note}")  # sorts before the SMs
    ktrack = w.thread(kproc, "kernel")
    end_cycle = max([k.duration_cycles] + [e.end_cycle for e in events])
    kargs: dict[str, ArgValue] = {"kind": k.kernel_kind, "shapes": k.shapes_text(), "cycles": k.duration_cycles,
                                  "sms_total": detail.num_sms, "sms_with_work": len(sms), "sms_shown": len(shown)}
    if k.bound is not None:
        kargs["bound"] = k.bound
    w.slice(ns(0), ns(end_cycle) - ns(0), ktrack, k.kernel_name, kargs)
    for series in kernel_counters(detail, end_cycle):
        ctrack = w.counter_track(kproc, series.name, series.unit)
        for cycle, value in zip(series.cycles, series.values):
            w.counter(ns(cycle), ctrack, value)

    # flows: cross-group dependencies between shown events; the source must come first in time order
    # (events are recorded in issue order, so at equal start times the lower index issued first)
    shown_set = set(shown)
    flows_out: dict[int, list[int]] = defaultdict(list)
    flows_in: dict[int, list[int]] = defaultdict(list)
    for dep in detail.dependencies:
        src, dst = events[dep.src], events[dep.dst]
        if src.sm not in shown_set or dst.sm not in shown_set or (src.sm, src.group) == (dst.sm, dst.group):
            continue  # not shown, or the same group (program order needs no arrow)
        if (ns(src.start_cycle), dep.src) >= (ns(dst.start_cycle), dep.dst):
            continue  # an order edge released at issue whose source started later: the arrow would point back
        fid = w.new_flow()
        flows_out[dep.src].append(fid)
        flows_in[dep.dst].append(fid)

    # tracks first: a process per SM, a thread per group, a child track per extra lane
    track_of: dict[int, int] = {}
    for sm in shown:
        label = f"SM {sm:0{len(str(max(detail.num_sms - 1, sm)))}d}"  # zero-padded: the UI sorts by name
        proc = w.process(label + (f" (sample of {len(shown)}/{len(sms)})" if sampled else ""))
        by_group: dict[str, list[int]] = defaultdict(list)
        for i in per_sm[sm]:
            by_group[events[i].group].append(i)
        for group, idxs in by_group.items():
            lane_tracks = [w.thread(proc, group)]
            spans = sorted((events[i].start_cycle, events[i].end_cycle, i) for i in idxs)
            for (_, _, i), lane in zip(spans, assign_lanes(spans)):
                while lane >= len(lane_tracks):
                    lane_tracks.append(w.track(lane_tracks[0], f"{group} (overlap {len(lane_tracks)})"))
                track_of[i] = lane_tracks[lane]

    # then every slice in global time order: ends before begins at the same instant, ties in issue order
    order: list[tuple[int, int, int]] = []
    for i in track_of:
        e = events[i]
        b, t = ns(e.start_cycle), ns(e.end_cycle)
        order.append((b, 1, i))
        if t > b:
            order.append((t, 0, i))
    order.sort()
    for ts, is_begin, i in order:
        e = events[i]
        if not is_begin:
            w.end(ts, track_of[i])
            continue
        w.begin(ts, track_of[i], e.node, _node_args(e), flows_out.get(i, ()), flows_in.get(i, ()),
                {"cta": e.cta, "issue_cycle": e.issue_cycle, "start_cycle": e.start_cycle, "end_cycle": e.end_cycle})
        if ns(e.end_cycle) == ts:
            w.end(ts, track_of[i])
