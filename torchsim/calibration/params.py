"""The physical parameters `torchsim calibrate` may fit, by profile field name (data), with their search bounds.

A parameter is one number of a profile that a published kernel measurement can see: a memory efficiency, a
fixed latency, a launch gap, later the power-limit and energy-per-operation numbers of a sustained clock. Never
a per-shape or per-kernel factor. Bounds are physical: a sustained bandwidth is searched between a low
efficiency and the profile's peak, a gap between 0 and a generous ceiling.

`sim` says whether the kernel simulation reads the field (then each trial value costs simulations) or only the
timing method does (then a trial is free: the device time is re-used).

A field another change adds to the profiles joins by adding a line here; fields a profile lacks are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Param:
    field: str
    scale: str  # "log": bounds are factors of the profile's value; "linear": bounds are absolute, in `unit`
    lo: float
    hi: float
    sim: bool  # the engine reads it (trial values cost simulations)
    what: str

    def bounds(self, hw: Any) -> tuple[float, float]:
        """(lo, hi) in the field's unit on `hw`."""
        v = float(getattr(hw, self.field).value)
        if self.scale == "log":
            lo, hi = v * self.lo, v * self.hi
            if self.field == "dram_bytes_per_s" and hasattr(hw, "dram_peak_bytes_per_s"):
                hi = min(hi, float(hw.dram_peak_bytes_per_s.value))  # sustained never beats the peak
            return lo, max(hi, lo)
        return self.lo, self.hi


PARAMS: dict[str, Param] = {p.field: p for p in (
    Param("dram_bytes_per_s", "log", 0.6, 1.2, True, "sustained DRAM bandwidth (DRAM efficiency)"),
    Param("l2_bytes_per_s", "log", 0.5, 1.3, True, "L2 bandwidth"),
    # the eager back-to-back gap is measured per GPU (gpu-benches' small-kernel periods, the profile's source): a
    # different host or driver moves it by a factor, not by 5x; searched over [0, 10 us] it took up kernel errors
    # of other rows (TileLang's short-K intercept: 3.5 us on H100, 10 us at that bound for attention rows, 8.8 us
    # on A100 PCIe) and carried them to other sources' rows (docs/validation.md 'Leave-one-source-out')
    Param("launch_overhead_s", "log", 0.25, 2.0, False, "back-to-back eager launch gap (s)"),
    Param("graph_launch_overhead_s", "linear", 0.0, 5e-6, False, "kernel-to-kernel gap in a CUDA graph (s)"),
    Param("host_sync_overhead_s", "linear", 0.0, 20e-6, False, "host launch + synchronisation of one timed op (s)"),
    Param("kernel_trace_overhead_s", "linear", 0.0, 10e-6, False,
          "per-kernel floor of a kernel-serialising CUPTI tracer (s)"),
    Param("cta_launch_cycles", "linear", 0.0, 2000.0, True, "CTA dispatch and prologue (cycles)"),
    Param("tma_latency_cycles", "linear", 0.0, 1000.0, True, "fixed TMA cost beyond the memory path (cycles)"),
    # power-limited sustained clock (joins when the profiles carry these fields)
    Param("power_limit_w", "log", 0.7, 1.2, True, "board power limit (W)"),
    Param("static_power_w", "log", 0.5, 1.5, True, "static power (W)"),
    Param("tensor_pj_per_flop_bf16", "log", 0.6, 1.5, True, "tensor-core energy per BF16 FLOP (pJ)"),
)}

QUICK_PARAMS = ("dram_bytes_per_s", "launch_overhead_s", "graph_launch_overhead_s")
FULL_PARAMS = ("dram_bytes_per_s", "l2_bytes_per_s", "launch_overhead_s", "graph_launch_overhead_s",
               "cta_launch_cycles", "tma_latency_cycles", "power_limit_w", "tensor_pj_per_flop_bf16")


class CalibrationError(ValueError):
    """Bad calibration input; the message names the file, row, parameter or profile."""


def resolve(names: list[str] | tuple[str, ...], hw: Any, explicit: bool) -> tuple[list[Param], list[str]]:
    """The parameters of `names` that `hw` has, and a note for each skipped one. An explicitly requested name
    that is unknown or that the profile lacks is an error."""
    out, notes = [], []
    for n in names:
        p = PARAMS.get(n)
        if p is None:
            raise CalibrationError(f"unknown calibration parameter {n!r}; valid: {', '.join(PARAMS)} (a profile "
                                   f"field joins by adding it to torchsim/calibration/params.py)")
        if getattr(hw, p.field, None) is None or not hasattr(getattr(hw, p.field), "value"):
            if explicit:
                raise CalibrationError(f"profile {hw.name!r} has no field {p.field!r} to calibrate")
            notes.append(f"{p.field}: not a field of {hw.name}; skipped")
            continue
        out.append(p)
    return out, notes
