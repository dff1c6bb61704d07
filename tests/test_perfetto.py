"""Perfetto traces: every written trace passes the structural check; the layout is as documented; the checker
catches each kind of broken trace; counters and lanes are computed right."""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TracePacket, TrackEvent

from torchsim.exports.adapt import kernel_detail
from torchsim.exports.check import TraceCheckError, check_packets, check_trace
from torchsim.exports.counters import integral, merge_per_sm
from torchsim.exports.perfetto import write_trace
from torchsim.exports.perfetto_detail import assign_lanes
from torchsim.exports.records import RunInfo
from torchsim.exports.synthetic import synthetic_detail, synthetic_prediction, toy_ws_gemm
from torchsim.hwmodels import get_profile
from torchsim.sim import simulate


def parse(path: Path) -> Trace:
    t = Trace()
    t.ParseFromString(path.read_bytes())
    return t


def names(trace: Trace) -> dict[int, str]:
    return {n.iid: n.name for p in trace.packet for n in p.interned_data.event_names}


def slices_by_track(trace: Trace) -> dict[tuple[str, int], list[tuple[str, int, int]]]:
    """(track name, uuid) -> [(slice name, begin ns, end ns)] rebuilt from BEGIN/END pairs."""
    track_names = {p.track_descriptor.uuid: p.track_descriptor.name
                   for p in trace.packet if p.HasField("track_descriptor")}
    iid = names(trace)
    open_: dict[int, list[tuple[str, int]]] = defaultdict(list)
    out: dict[tuple[str, int], list[tuple[str, int, int]]] = defaultdict(list)
    for p in trace.packet:
        if not p.HasField("track_event"):
            continue
        e = p.track_event
        if e.type == TrackEvent.TYPE_SLICE_BEGIN:
            open_[e.track_uuid].append((iid[e.name_iid], p.timestamp))
        elif e.type == TrackEvent.TYPE_SLICE_END:
            name, begin = open_[e.track_uuid].pop()
            out[(track_names[e.track_uuid], e.track_uuid)].append((name, begin, p.timestamp))
    return out


def test_end_to_end_layout(tmp_path: Path) -> None:
    pred = synthetic_prediction("h100-sxm", layers=2, decode_steps=3)
    report = write_trace(tmp_path / "e2e.pftrace", [pred])
    stats = check_trace(report.path)
    assert stats == report.stats
    assert stats.processes == 1 and stats.threads == 1 and stats.max_depth == 3
    assert stats.slices == len(pred.kernels) + 2 + 3  # kernels + two phases + three decode steps
    assert report.size_bytes == Path(report.path).stat().st_size
    (key, got), = slices_by_track(parse(Path(report.path))).items()
    assert key[0] == "stream 0"
    kernels = [s for s in got if s[0] not in ("prefill", "decode") and not s[0].startswith("decode step")]
    assert [(n, b) for n, b, _ in kernels] == [(k.kernel_name, round(k.start_us * 1000)) for k in pred.kernels]
    steps = [s for s in got if s[0].startswith("decode step")]
    for k in pred.kernels:
        if k.decode_step is not None:  # every decode kernel lies inside its step slice
            _, b, e = steps[k.decode_step]
            assert b <= round(k.start_us * 1000) and round((k.start_us + k.duration_us) * 1000) <= e


def test_kernel_args_carry_cycles_and_leave_out_what_was_not_modelled(tmp_path: Path) -> None:
    pred = synthetic_prediction(layers=1, decode_steps=0)
    path = Path(write_trace(tmp_path / "a.pftrace", [pred]).path)
    check_trace(path)
    trace = parse(path)
    arg_names = {n.iid: n.name for p in trace.packet for n in p.interned_data.debug_annotation_names}
    strings = {n.iid: n.str.decode() for p in trace.packet for n in p.interned_data.debug_annotation_string_values}
    iid = names(trace)
    by_kernel: dict[str, dict[str, object]] = {}
    for p in trace.packet:
        e = p.track_event
        if p.HasField("track_event") and e.type == TrackEvent.TYPE_SLICE_BEGIN and e.debug_annotations:
            by_kernel[iid[e.name_iid]] = {arg_names[a.name_iid]: a for a in e.debug_annotations}
    for k in pred.kernels:
        args = by_kernel[k.kernel_name]
        assert args["cycles"].int_value == k.duration_cycles  # type: ignore[attr-defined]
        assert strings[args["shapes"].string_value_iid] == k.shapes_text()  # type: ignore[attr-defined]
        assert args["start_cycles"].int_value == k.start_cycles  # type: ignore[attr-defined]
        assert ("busy.tensor" in args) == (not k.roofline_fallback)
        assert ("flops" in args) == (k.flops is not None)


def test_compare_aligns_each_hardware_at_zero(tmp_path: Path) -> None:
    preds = [synthetic_prediction("a100-sxm", layers=1, decode_steps=1, speed=0.5),
             synthetic_prediction("h100-sxm", layers=1, decode_steps=1)]
    shifted = dataclasses.replace(preds[1], kernels=[dataclasses.replace(k, start_us=k.start_us + 500.0)
                                                      for k in preds[1].kernels])
    report = write_trace(tmp_path / "cmp.pftrace", [preds[0], shifted])
    assert check_trace(report.path).processes == 2
    trace = parse(Path(report.path))
    procs = [p.track_descriptor.process.process_name for p in trace.packet if p.track_descriptor.HasField("process")]
    assert procs == ["a100-sxm: llama3-8b (serving)", "h100-sxm: llama3-8b (serving)"]
    firsts = [min(b for _, b, _ in sl) for sl in slices_by_track(trace).values()]
    assert firsts == [0, 0]


def test_overlapping_kernels_on_a_stream_are_refused(tmp_path: Path) -> None:
    pred = synthetic_prediction(layers=1, decode_steps=0)
    ks = list(pred.kernels)
    ks[3] = dataclasses.replace(ks[3], start_us=ks[2].start_us + 0.1)
    with pytest.raises(ValueError, match=f"kernel 3 '{ks[3].kernel_name}'.*before kernel '{ks[2].kernel_name}'"):
        write_trace(tmp_path / "bad.pftrace", [dataclasses.replace(pred, kernels=ks)])


def test_detail_view_of_a_simulated_kernel(tmp_path: Path) -> None:
    hw = get_profile("h100-sxm")
    kg = toy_ws_gemm(m_tiles=2, n_tiles=3, k_steps=6)
    res = simulate(kg, hw, record=True)
    detail = kernel_detail(res, kg, RunInfo("r", "", hw.name))
    report = write_trace(tmp_path / "detail.pftrace", details=[detail])
    stats = check_trace(report.path)
    assert stats == report.stats
    assert stats.slices == len(res.records) + 1  # one per node + the kernel slice
    assert stats.processes == 1 + len({r.sm for r in res.records})
    assert stats.counter_tracks == 3 and stats.flows > 0
    kinds = Counter(d.kind for d in detail.dependencies)
    assert kinds["data"] > 0 and kinds["barrier"] > 0
    trace = parse(Path(report.path))
    groups = {p.track_descriptor.thread.thread_name for p in trace.packet if p.track_descriptor.HasField("thread")}
    assert {"producer", "consumer0", "consumer1", "kernel"} <= groups
    # ns timestamps from cycles: the kernel slice lasts the kernel's cycles at the profile clock
    kernel_slice = next(sl for (name, _), sl in slices_by_track(trace).items() if name == "kernel")[0]
    assert kernel_slice[2] - kernel_slice[1] == round(res.cycles * 1e9 / hw.clock_hz_value)


def test_detail_sampling_is_stated(tmp_path: Path) -> None:
    detail = synthetic_detail(num_sms=16, ctas=32, k_steps=4)
    report = write_trace(tmp_path / "s.pftrace", details=[detail], detail_slice_budget=200)
    check_trace(report.path)
    procs = [p.track_descriptor.process.process_name for p in parse(Path(report.path)).packet
             if p.track_descriptor.HasField("process")]
    sm_procs = [n for n in procs if n.startswith("SM ")]
    assert 1 <= len(sm_procs) < 16 and all("/16)" in n for n in sm_procs)
    assert f"sampled {len(sm_procs)} of 16 SMs" in procs[0]


def test_same_input_same_bytes(tmp_path: Path) -> None:
    a = write_trace(tmp_path / "a.pftrace", [synthetic_prediction(layers=2)], [synthetic_detail()])
    b = write_trace(tmp_path / "b.pftrace", [synthetic_prediction(layers=2)], [synthetic_detail()])
    assert check_trace(a.path) == a.stats
    assert Path(a.path).read_bytes() == Path(b.path).read_bytes()


# -- the checker catches broken traces ------------------------------------------------------------------
def _trace(*specs: tuple) -> Trace:  # type: ignore[type-arg]
    """Build a raw trace from ('track', uuid, parent, counter) / ('ev', ts, uuid, type, flows, terminating)."""
    t = Trace()
    for i, spec in enumerate(specs):
        p = t.packet.add()
        p.trusted_packet_sequence_id = 1
        if i == 0:
            p.sequence_flags = TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
        if spec[0] == "track":
            _, uuid, parent, counter = spec
            p.track_descriptor.uuid = uuid
            if parent:
                p.track_descriptor.parent_uuid = parent
            if counter:
                p.track_descriptor.counter.unit_name = "%"
        else:
            _, ts, uuid, typ, flows, terminating = spec
            p.timestamp = ts
            p.track_event.type = typ
            p.track_event.track_uuid = uuid
            p.track_event.flow_ids.extend(flows)
            p.track_event.terminating_flow_ids.extend(terminating)
    return t


B, E, C = TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_SLICE_END, TrackEvent.TYPE_COUNTER


@pytest.mark.parametrize("specs, problem", [
    ((("track", 1, 0, False), ("track", 1, 0, False)), "declared twice"),
    ((("track", 2, 1, False), ("track", 1, 0, False)), "not declared before it"),
    ((("track", 1, 0, False), ("ev", 10, 1, B, (), ())), "never ended"),
    ((("track", 1, 0, False), ("ev", 10, 1, E, (), ())), "no open slice"),
    ((("track", 1, 0, False), ("ev", 10, 1, B, (), ()), ("ev", 5, 1, E, (), ())), "goes back in time"),
    ((("track", 1, 0, False), ("ev", 10, 1, C, (), ())), "not a counter track"),
    ((("track", 1, 0, True), ("ev", 10, 1, B, (), ()), ("ev", 11, 1, E, (), ())), "slice event on counter track"),
    ((("track", 1, 0, False), ("ev", 1, 1, B, (7,), ()), ("ev", 2, 1, E, (), ())), "never terminated"),
    ((("track", 1, 0, False), ("track", 2, 0, False), ("ev", 1, 1, B, (), (7,)), ("ev", 2, 1, E, (), ()),
      ("ev", 3, 2, B, (7,), ()), ("ev", 4, 2, E, (), ())), "before it starts"),
    ((("track", 1, 0, False), ("ev", 1, 9, B, (), ())), "not declared before it"),
])
def test_checker_catches(specs: tuple, problem: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(TraceCheckError, match=problem):
        check_packets(_trace(*specs))


def test_checker_accepts_a_minimal_good_trace() -> None:
    stats = check_packets(_trace(("track", 1, 0, False), ("track", 2, 1, True), ("ev", 1, 1, B, (5,), ()),
                                 ("ev", 2, 1, B, (), (5,)), ("ev", 3, 1, E, (), ()), ("ev", 4, 1, E, (), ()),
                                 ("ev", 1, 2, C, (), ())))
    assert (stats.tracks, stats.slices, stats.max_depth, stats.counters, stats.flows) == (2, 2, 2, 1, 1)


# -- counters and lanes ---------------------------------------------------------------------------------
intervals = st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 300), st.floats(0.0, 10.0)), max_size=40)


@settings(max_examples=60, deadline=None)
@given(intervals, st.lists(st.integers(0, 1400), min_size=1, max_size=10))
def test_integral_matches_direct_sum(spans: list[tuple[int, int, float]], points: list[int]) -> None:
    s = np.array([a for a, _, _ in spans], dtype=float)
    e = s + np.array([d for _, d, _ in spans], dtype=float)
    r = np.array([x for _, _, x in spans], dtype=float)
    at = np.array(sorted(points), dtype=float)
    want = [sum(ri * max(0.0, min(ei, x) - si) for si, ei, ri in zip(s, e, r)) for x in at]
    assert np.allclose(integral(s, e, r, at), want)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 500), st.integers(0, 100)), max_size=40))
def test_merged_busy_time_is_union_per_sm(spans: list[tuple[int, int, int]]) -> None:
    sm = np.array([a for a, _, _ in spans], dtype=np.int64)
    s = np.array([b for _, b, _ in spans], dtype=np.int64)
    e = s + np.array([d for _, _, d in spans], dtype=np.int64)
    ms, me = merge_per_sm(sm, s, e)
    union = sum(len({t for (q, a, d) in spans if q == sm_id for t in range(a, a + d)}) for sm_id in range(4))
    assert float((me - ms).sum()) == union


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 50)), max_size=50))
def test_lanes_never_overlap(spans: list[tuple[int, int]]) -> None:
    events = sorted((s, s + d, i) for i, (s, d) in enumerate(spans))
    lanes = assign_lanes(events)
    for lane in set(lanes):
        mine = [(s, e) for (s, e, _), ln in zip(events, lanes) if ln == lane]
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(mine))


def test_tensor_utilisation_counter_is_a_percentage(tmp_path: Path) -> None:
    detail = synthetic_detail(num_sms=4, ctas=8)
    from torchsim.exports.counters import kernel_counters

    series = {s.name: s for s in kernel_counters(detail, detail.kernel.duration_cycles)}
    util = series["tensor pipe utilisation"].values
    assert max(util) > 0 and all(0.0 <= v <= 100.0 for v in util)
    bw = series["DRAM bandwidth"]
    # bytes are conserved: the bandwidth integrates back to the events' DRAM bytes
    edges = bw.cycles
    seconds = np.diff(edges) / detail.kernel.clock_hz
    total = float(np.sum(np.array(bw.values[:-1]) * 1e9 * seconds))
    assert total == pytest.approx(sum(e.dram_bytes or 0 for e in detail.events), rel=1e-6)
