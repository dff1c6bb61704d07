"""Turn a `torchsim.prediction.Prediction` into export records: one KernelRecord per kernel launch.

The prediction simulates a few sampled decode steps and interpolates the others (`decode_step_s` has one
time per step). For the timeline and the kernels table every step gets its launches: a step that was not
simulated takes its kernels from the bracketing sampled steps, each duration interpolated linearly by step,
then scaled so the step lasts exactly the prediction's `decode_step_s[t]`; such rows say so in `method`.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import replace
from typing import Any

from torchsim.exports.records import KernelRecord, PredictionRecords, RunInfo


def _record(k: Any, index: int, clock_hz: float) -> KernelRecord:
    return KernelRecord(
        kernel_index=index, kernel_name=k.name, kernel_kind=k.kind, phase=k.phase,
        start_cycles=int(k.start_cycles), duration_cycles=int(k.duration_cycles), clock_hz=clock_hz,
        start_us=float(k.start_us), duration_us=float(k.duration_us), dtype=k.dtype, params=tuple(k.params),
        decode_step=k.decode_step, layer=k.layer, stream=k.stream,
        template=None if k.fallback else (k.template or None),
        template_config=None if k.fallback else (dict(k.config) or None),
        flops=float(k.flops), dram_bytes=float(k.dram_bytes),  # a roofline row models work too
        l2_hit_rate=None if k.fallback else float(k.l2_hit_rate),
        unit_busy=None if k.fallback else dict(k.unit_util),
        stalls_cycles=None if k.fallback else dict(k.stalls),
        bound=k.bound or None, module_path=k.module_path, source_line=k.source, roofline_fallback=bool(k.fallback),
        kv_len=getattr(k, "kv_len", None), gap_us=getattr(k, "gap_us", None), method=getattr(k, "method", None),
        simulated_step=k.decode_step,
    )


def _clock_hz(pred: Any) -> float:
    for k in pred.kernels:
        if k.duration_us > 0 and k.duration_cycles > 0:
            return float(k.duration_cycles) / (float(k.duration_us) * 1e-6)
    return 1e9


def run_info(pred: Any, run_id: str | None = None) -> RunInfo:
    tp = int(getattr(pred, "tp", 1))
    scenario = {"prompt": pred.prompt_len, "decode": pred.decode_steps, "batch": pred.batch, "kv_len": pred.kv_len,
                "launch": getattr(pred, "launch", ""), "tp": tp, "ep": int(getattr(pred, "ep", 1)),
                "pp": int(getattr(pred, "pp", 1))}
    rid = run_id or (f"{pred.model}-{pred.hw}-{pred.preset}-b{pred.batch}-p{pred.prompt_len}-d{pred.decode_steps}"
                     + (f"-tp{tp}" if tp > 1 else ""))
    return RunInfo(rid, pred.model, pred.hw, pred.preset, scenario=scenario, ranks=tp)


def prediction_records(pred: Any, run_id: str | None = None, all_steps: bool = True) -> PredictionRecords:
    """Records of every launch: prefill, then each decode step (sampled ones as simulated, others interpolated)."""
    clock = _clock_hz(pred)
    prefill = [k for k in pred.kernels if k.phase == "prefill"]
    by_step: dict[int, list[Any]] = defaultdict(list)
    for k in pred.kernels:
        if k.phase == "decode" and k.decode_step is not None:
            by_step[int(k.decode_step)].append(k)
    out = [_record(k, 0, clock) for k in sorted(prefill, key=lambda k: (k.start_us, k.order))]
    sampled = sorted(by_step)
    base = {s: [_record(k, 0, clock) for k in sorted(by_step[s], key=lambda k: (k.start_us, k.order))]
            for s in sampled}
    step_start = [float(pred.ttft_s) * 1e6]
    for dt in pred.decode_step_s:
        step_start.append(step_start[-1] + float(dt) * 1e6)
    # time from a step's start to its first kernel's gap (the per-step launch cost of the launch model)
    lead = {s: max(0.0, rows[0].start_us - (rows[0].gap_us or 0.0) - step_start[s]) for s, rows in base.items()
            if rows and s < len(step_start)}
    steps = range(len(pred.decode_step_s)) if all_steps and sampled else sampled
    t_us = float(pred.ttft_s) * 1e6
    for t in steps:
        step_us = float(pred.decode_step_s[t]) * 1e6 if t < len(pred.decode_step_s) else None
        rows = base[t] if t in base else _interpolated(t, sampled, base, clock, t_us, step_us, lead)
        out.extend(rows)
        t_us += step_us if step_us is not None else sum((r.gap_us or 0.0) + r.duration_us for r in rows)
    return PredictionRecords(run_info(pred, run_id), [replace(r, kernel_index=i) for i, r in enumerate(out)])


def _interpolated(t: int, sampled: list[int], base: dict[int, list[KernelRecord]], clock: float, start_us: float,
                  step_us: float | None, lead: dict[int, float]) -> list[KernelRecord]:
    """Step t's launches from the sampled steps around it (linear in t), scaled to last `step_us`.

    The per-step launch cost before the first kernel (`lead`) is kept; kernels and gaps are scaled."""
    i = bisect.bisect_left(sampled, t)
    lo = sampled[max(0, i - 1)]
    hi = sampled[min(i, len(sampled) - 1)]
    rows_lo, rows_hi = base[lo], base[hi]
    if len(rows_hi) != len(rows_lo) or any(a.kernel_name != b.kernel_name for a, b in zip(rows_lo, rows_hi)):
        rows_hi, hi = rows_lo, lo  # different launch lists: hold the nearer step's kernels
    w = 0.0 if hi == lo else (t - lo) / (hi - lo)
    durs = [(1 - w) * a.duration_us + w * b.duration_us for a, b in zip(rows_lo, rows_hi)]
    gaps = [(1 - w) * (a.gap_us or 0.0) + w * (b.gap_us or 0.0) for a, b in zip(rows_lo, rows_hi)]
    total = sum(durs) + sum(gaps)
    head = (1 - w) * lead.get(lo, 0.0) + w * lead.get(hi, 0.0)
    scale = (step_us - head) / total if step_us and total > 0 and step_us > head else 1.0
    method = f"interpolated from decode steps {lo} and {hi}" if hi != lo else f"copied from decode step {lo}"
    out: list[KernelRecord] = []
    t_us = start_us + head
    for rec, dur, gap in zip(rows_lo, durs, gaps):
        t_us += gap * scale
        d_us = dur * scale
        out.append(replace(rec, decode_step=t, start_us=t_us, duration_us=d_us, gap_us=gap * scale,
                           start_cycles=round(t_us * 1e-6 * clock), duration_cycles=round(d_us * 1e-6 * clock),
                           kv_len=None if rec.kv_len is None else rec.kv_len + (t - lo),
                           method=method if rec.method in (None, "simulated", "exact") else f"{method} ({rec.method})",
                           simulated_step=lo))
        t_us += d_us
    return out
