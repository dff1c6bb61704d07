"""Perfetto export: the end-to-end view of predictions and, through `perfetto_detail`, kernel detail views.

End-to-end: a process per device (one per hardware profile when comparing, each aligned at zero; one per rank
of a tensor-parallel run, each collective's slices linked by flows from rank to rank), a
thread track per stream, one slice per kernel with its shapes, cycles and bound as arguments, a `launch gap`
slice for the launch model's idle time before a kernel, enclosed in phase slices (prefill, decode) and
decode-step slices. Timestamps are ns; cycles travel as arguments.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby

from torchsim.exports.atomic import atomic_output
from torchsim.exports.perfetto_detail import emit_detail
from torchsim.exports.records import KernelDetail, KernelRecord, PredictionRecords
from torchsim.exports.trace_builder import ArgValue, TraceStats, TraceWriter


@dataclass(frozen=True, slots=True)
class TraceReport:
    """What `write_trace` wrote: its counts, size and how long writing took."""

    path: str
    stats: TraceStats
    size_bytes: int
    write_s: float


def kernel_args(k: KernelRecord) -> dict[str, ArgValue]:
    """The arguments shown for a kernel slice that repeat across layers and steps (see `kernel_counts` for the
    per-launch ones); quantities that were not modelled are left out."""
    args: dict[str, ArgValue] = {"kind": k.kernel_kind, "shapes": k.shapes_text()}
    optional: dict[str, ArgValue | None] = {
        "dtype": k.dtype or None, "bound": k.bound, "layer": k.layer, "template": k.template,
        "flops": k.flops, "dram_bytes": k.dram_bytes, "l2_hit_rate": k.l2_hit_rate,
        "module_path": k.module_path or None, "source": k.source_line or None,
        "method": k.method if k.method not in (None, "simulated", "exact") else None,
    }
    for unit, frac in sorted((k.unit_busy or {}).items()):
        optional[f"busy.{unit}"] = round(frac, 4)
    for reason, cycles in sorted((k.stalls_cycles or {}).items()):
        optional[f"stall_cycles.{reason}"] = cycles
    if k.roofline_fallback:
        optional["roofline_fallback"] = True
    args.update({key: v for key, v in optional.items() if v is not None})
    return args


def kernel_counts(k: KernelRecord) -> dict[str, int]:
    """Per-launch integer arguments: duration and start in cycles, KV length."""
    out = {"cycles": k.duration_cycles, "start_cycles": k.start_cycles}
    if k.kv_len is not None:
        out["kv_len"] = k.kv_len
    return out


def _ns(us: float) -> int:
    return round(us * 1000.0)


def _enclosing(k: KernelRecord) -> list[str]:
    """Names of the slices that enclose a kernel on its stream track: the phase, then the decode step."""
    if not k.phase:
        return []
    if k.decode_step is None:
        return [k.phase]
    return [k.phase, f"decode step {k.decode_step}"]


def emit_prediction(w: TraceWriter, pred: PredictionRecords, label: str | None = None) -> None:
    """One device process for `pred` (one per rank of a tensor-parallel run: the symmetric ranks run the same
    kernels, each collective's slices joined by a flow from rank to rank), its kernels on stream tracks,
    aligned so the run starts at 0 ns."""
    run = pred.run
    name = label or run.device_label or f"{run.hardware}: {run.model}" + (f" ({run.preset})" if run.preset else "")
    t0_us = min((k.start_us for k in pred.kernels), default=0.0)
    streams = sorted({k.stream for k in pred.kernels})
    ranks = max(1, run.ranks)
    colls = [k.kernel_index for k in pred.kernels if k.kernel_kind == "collective"]
    hops = {i: [w.new_flow() for _ in range(ranks - 1)] for i in colls}  # rank r -> r + 1, per collective
    for rank in range(ranks):
        proc = w.process(f"{name} rank {rank}" if ranks > 1 else name)
        flows = {i: (f[rank:rank + 1], f[rank - 1:rank] if rank else []) for i, f in hops.items()}
        for stream in streams:
            track = w.thread(proc, f"stream {stream}")
            kernels = sorted((k for k in pred.kernels if k.stream == stream),
                             key=lambda k: (k.start_us, k.kernel_index))
            _emit_stream(w, track, kernels, t0_us, name, flows)


GAP_SLICE = "launch gap"


def _emit_stream(w: TraceWriter, track: int, kernels: list[KernelRecord], t0_us: float, device: str,
                 flows: dict[int, tuple[list[int], list[int]]] | None = None) -> None:
    prev_end = -1
    prev_name = ""
    for phase, in_phase in groupby(kernels, key=lambda k: k.phase):
        in_phase_list = list(in_phase)
        opened = -1  # start of the innermost enclosing slice (a gap slice stays inside it)
        if phase:
            opened = max(prev_end, _ns(in_phase_list[0].start_us - t0_us))
            w.begin(opened, track, phase)
        for step, in_step in groupby(in_phase_list, key=lambda k: k.decode_step):
            step_list = list(in_step)
            if phase and step is not None:
                opened = max(prev_end, _ns(step_list[0].start_us - t0_us))
                w.begin(opened, track, f"decode step {step}")
            for k in step_list:
                start = _ns(k.start_us - t0_us)
                end = _ns(k.start_us + k.duration_us - t0_us)
                gap_from = max(prev_end, opened, start - _ns(k.gap_us or 0.0), 0)
                if start - gap_from > 1:  # the launch model's idle time before this kernel
                    w.slice(gap_from, start - gap_from, track, GAP_SLICE, {"launch": "device gap / host issue"},
                            unique_args={"gap_ns": start - gap_from})
                if start < prev_end:
                    if prev_end - start > 1:  # more than ns rounding: the stream is not serial
                        raise ValueError(f"{device}: kernel {k.kernel_index} {k.kernel_name!r} starts at "
                                         f"{k.start_us} us, before kernel {prev_name!r} on stream {k.stream} ends")
                    start = prev_end
                out, into = (flows or {}).get(k.kernel_index, ((), ()))
                w.slice(start, max(end, start) - start, track, k.kernel_name, kernel_args(k), flows_out=out,
                        flows_in=into, unique_args=kernel_counts(k))
                prev_end, prev_name = max(end, start), k.kernel_name
            if phase and step is not None:
                w.end(prev_end, track)
        if phase:
            w.end(prev_end, track)


def write_trace(path: str | os.PathLike[str], predictions: Sequence[PredictionRecords] = (),
                details: Sequence[KernelDetail] = (), detail_slice_budget: int = 250_000) -> TraceReport:
    """Write one trace atomically: a process per prediction (aligned at 0), then each kernel detail view.

    A detail view of a kernel that is part of a prediction starts at that kernel's start time. The detail
    views share `detail_slice_budget` node slices; a view over its share shows an evenly spaced SM sample.
    """
    if not predictions and not details:
        raise ValueError(f"nothing to write to {path}: give at least one prediction or kernel detail")
    t_start = time.perf_counter()
    with atomic_output(path) as f:
        w = TraceWriter(f)
        for pred in predictions:
            emit_prediction(w, pred)
        for detail in details:
            emit_detail(w, detail, _ns(detail.kernel.start_us), max_slices=max(1, detail_slice_budget // len(details)))
        stats = w.close()
    return TraceReport(str(path), stats, w.bytes_written, time.perf_counter() - t_start)
