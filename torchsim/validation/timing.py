"""How a published measurement was timed, and what a predicted kernel device time looks like under that timer.

The timer is part of the comparison, not of the model: the engine predicts a kernel's device time (first CTA
start to last CTA end); a benchmark that times CUDA events around each call of an eager loop also sees the
back-to-back launch gap, one that replays a CUDA graph sees the graph's kernel-to-kernel gap, and a host timer
around one op sees the host launch path and the synchronisation. Each method names the profile fields it adds,
by name (data): a profile that lacks a field (a field another change adds later) contributes nothing and the
breakdown says so.

The mapping from published rows to methods is data too: timing_methods.csv beside this module, one rule a line
(`match`: a substring of the row's source, or an exact row id; first match wins), each with a one-line reason.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from torchsim.validation.published import Row


@dataclass(frozen=True)
class TimingMethod:
    name: str
    description: str
    gap_fields: tuple[str, ...]  # profile fields (seconds) the timer sees on top of the kernel's device time
    # the timed kernel starts with L2 full of dirty lines (a flush that zeroes a buffer larger than L2 just before
    # it): simulated with `l2_dirty_bytes` = the L2's size, their write-back competing with the kernel's traffic
    l2_dirty: bool = False


METHODS: dict[str, TimingMethod] = {m.name: m for m in (
    TimingMethod("device-profiler", "kernel device time only (nsys/ncu/kineto/CUPTI, in-kernel clocks)", ()),
    TimingMethod("cuda-events-loop", "CUDA events around each of N back-to-back eager launches: kernel time + the "
                 "eager back-to-back launch gap", ("launch_overhead_s",)),
    TimingMethod("cuda-events-l2-zeroed", "triton.testing.do_bench: before each eager call a 256 MB buffer is "
                 "zeroed (flushing L2 and leaving it full of dirty lines, whose write-back the kernel then pays), "
                 "CUDA events around the call: kernel time with a dirty L2 + the eager back-to-back launch gap",
                 ("launch_overhead_s",), l2_dirty=True),
    TimingMethod("cuda-graph", "CUDA-graph replay of N launches: kernel time + the graph's kernel-to-kernel gap",
                 ("graph_launch_overhead_s",)),
    TimingMethod("host-timer", "a host timer around one op: kernel time + host launch latency + synchronisation",
                 ("launch_overhead_s", "host_sync_overhead_s")),
    TimingMethod("cupti-serialised", "each kernel's duration from a CUPTI tracer that serialises kernels "
                 "(CUPTI_ACTIVITY_KIND_KERNEL): kernel time + the tracer's per-kernel floor",
                 ("kernel_trace_overhead_s",)),
    TimingMethod("e2e-serving", "end-to-end serving run: the serving model carries its own launch model", ()),
)}

RULES_CSV = Path(__file__).with_name("timing_methods.csv")


@dataclass(frozen=True)
class Rule:
    match: str
    method: str
    reason: str


@lru_cache(maxsize=4)
def rules(path: Path = RULES_CSV) -> tuple[Rule, ...]:
    out = []
    with path.open() as f:
        for i, r in enumerate(csv.DictReader(f), start=2):
            if set(r) != {"match", "method", "reason"} or not r["match"]:
                raise ValueError(f"{path}:{i}: a rule needs match, method and reason, got {r}")
            if r["method"] not in METHODS:
                raise ValueError(f"{path}:{i}: unknown timing method {r['method']!r}; valid: {', '.join(METHODS)}")
            out.append(Rule(r["match"], r["method"], r["reason"]))
    return tuple(out)


def method_for(row: Row) -> tuple[TimingMethod, str]:
    """The timing method of `row` and the reason, from the first matching rule (row id first, then source)."""
    rs = rules()
    for rule in rs:
        if rule.match == row.id:
            return METHODS[rule.method], rule.reason
    for rule in rs:
        if rule.match in row.source:
            return METHODS[rule.method], rule.reason
    raise ValueError(f"row {row.id}: no timing-method rule matches its source {row.source[:80]!r}; add one to "
                     f"{RULES_CSV.name}")


def gap_s(method: TimingMethod, hw: Any) -> tuple[float, dict[str, float | None]]:
    """Seconds the timer adds per call on `hw`, and each field's part (None: the profile has no such field)."""
    parts: dict[str, float | None] = {}
    for name in method.gap_fields:
        q = getattr(hw, name, None)
        parts[name] = None if q is None else float(q.value if hasattr(q, "value") else q)
    return sum(v for v in parts.values() if v is not None), parts


def l2_dirty_bytes(method: TimingMethod, hw: Any) -> float:
    """Dirty L2 bytes the timed kernel starts with under `method` (0 unless its flush writes)."""
    return float(hw.l2_bytes.value) if method.l2_dirty and hasattr(hw, "l2_bytes") else 0.0


def observed_time_s(device_time_s: float, method: TimingMethod, hw: Any) -> float:
    """What `method` would measure for a kernel whose device time is `device_time_s` on `hw`."""
    if device_time_s < 0:
        raise ValueError(f"device time {device_time_s} s is negative")
    return device_time_s + gap_s(method, hw)[0]
