"""Simulate a kernel at the clock it sustains under its profile's power limit (torchsim.hwmodels.power).

Wraps `torchsim.sim.simulate` without changing it: simulate at clock_max_hz; if the kernel's average power there
exceeds power_limit_w, solve for the clock that meets the limit (its time taken as 1/f) and simulate once more
at that clock. Only when that run still overshoots the limit by more than `TOLERANCE` (a kernel partly bound by
DRAM or by latencies slows less than 1/f) is the time refitted as a + b/f through the two runs and the kernel
simulated a third time; when the last run lands more than `TOLERANCE` under the limit, once more at the clock
where power, linear between it and the lowest run over the limit, meets it. The result carries the clock it ran
at, its power and why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from torchsim.hwmodels.power import (
    active_sms_of,
    has_power_model,
    power_w,
    sustained_clock,
    time_model,
    useful_flop_of,
    work_of,
)
from torchsim.hwmodels.quantity import Quantity
from torchsim.sim.engine import simulate
from torchsim.sim.result import KernelResult

TOLERANCE = 0.01  # a power-limited run may overshoot the limit by this fraction before it is refined


def at_clock(hw: Any, clock_hz: float, why: str) -> Any:
    """`hw` with the engine clock set to `clock_hz` (provenance: derived, `why`)."""
    return replace(hw, clock_hz=Quantity(float(clock_hz), "Hz", "derived", why))


def kernel_power_w(kernel: Any, hw: Any, res: KernelResult, activity: float = 1.0) -> float:
    """Average board power of a simulated kernel at the clock it was simulated at."""
    return power_w(hw, result_work(kernel.classes[0].graph.dtype, hw, res), activity=activity)


def simulate_sustained(kernel: Any, hw: Any, *, activity: float = 1.0, lock_clock_hz: float | None = None,
                       **simulate_kwargs: Any) -> KernelResult:
    """`simulate(kernel, hw, **simulate_kwargs)` at the sustained clock; `result.clock_hz` is that clock and
    `result.clock_reason` says why. `activity` scales tensor switching energy (1 = random operands);
    `lock_clock_hz` runs at that clock (as `nvidia-smi -lgc`), its power still reported.

    >>> from torchsim.hwmodels import get_profile
    >>> from torchsim.lowering.templates import gemm
    >>> from torchsim.graph import DType
    >>> hw = get_profile("h100-sxm")
    >>> r = simulate_sustained(gemm(4096, 4096, 4096, DType.BF16, hw), hw)
    >>> r.clock_reason.startswith("power-limited"), float(hw.clock_min_hz.value) <= r.clock_hz <= 1.98e9
    (True, True)
    """
    return sustain(lambda h: simulate(kernel, h, **simulate_kwargs), hw, kernel.classes[0].graph.dtype,
                   activity=activity, lock_clock_hz=lock_clock_hz)


def sustain(run: Callable[[Any], KernelResult], hw: Any, dtype: Any, *, activity: float = 1.0,
            lock_clock_hz: float | None = None) -> KernelResult:
    """The power/clock solution of `simulate_sustained` over any `run(profile at a clock) -> KernelResult`: a full
    simulation, or an extrapolation from truncated instances of the kernel (torchsim.prediction.repeats), whose
    power then comes from its extrapolated work counts and whose sustained-clock run is of the truncated
    instances only. `dtype` is the kernel's MMA dtype (its tensor energy)."""
    if not has_power_model(hw):
        res = run(hw)
        return replace(res, clock_reason=f"no power model for {hw.name}: the profile clock "
                                         f"{hw.clock_hz_value / 1e9:.3f} GHz")
    limit = float(hw.power_limit_w.value)
    if lock_clock_hz is not None:
        lo, hi = float(hw.clock_min_hz.value), float(hw.clock_max_hz.value)
        if not lo <= lock_clock_hz <= hi:
            raise ValueError(f"lock_clock_hz {lock_clock_hz / 1e9:.3f} GHz is outside {hw.name}'s clock range "
                             f"[{lo / 1e9:.3f}, {hi / 1e9:.3f}] GHz (clock_min_hz, clock_max_hz)")
        res = run(at_clock(hw, lock_clock_hz, "locked clock"))
        p = power_w(hw, result_work(dtype, hw, res), activity=activity)
        return replace(res, power_w=p, clock_reason=f"locked: {p:.0f} W at {lock_clock_hz / 1e9:.3f} GHz "
                                                    f"(limit {limit:.0f} W)")
    f_max = float(hw.clock_max_hz.value)
    res = run(at_clock(hw, f_max, "clock_max_hz (boost)"))
    w = result_work(dtype, hw, res)
    p = power_w(hw, w, activity=activity)
    if p <= limit:
        return replace(res, power_w=p, clock_reason=f"boost: {p:.0f} W < {limit:.0f} W at "
                                                    f"{f_max / 1e9:.3f} GHz")
    f = sustained_clock(hw, w, activity)
    why = f"power-limited: {p:.0f} W at {f_max / 1e9:.3f} GHz over the {limit:.0f} W limit"

    def at(clock: float) -> tuple[KernelResult, float]:
        r = run(at_clock(hw, clock, why))
        return r, power_w(hw, result_work(dtype, hw, r), activity=activity)

    res1, p1 = at(f)
    f_over, p_over = f_max, p  # the lowest clock run so far that is over the limit
    fit = time_model(f_max, w.seconds, f, res1.time_s) if p1 > limit * (1 + TOLERANCE) else None
    if fit is not None:
        f2 = sustained_clock(hw, w, activity, fit)
        if f2 < f:
            f_over, p_over = f, p1
            f = f2
            res1, p1 = at(f)
    if p1 < limit * (1 - TOLERANCE) and f < f_over:  # under the limit by more than the tolerance: one more run at
        # the clock where power, linear in the clock between this run and the lowest one over the limit, meets it
        # (a kernel whose time is flat above a knee clock and 1/f below it fits a + b/f badly); kept when within it
        f3 = f + (limit - p1) * (f_over - f) / (p_over - p1)
        res3, p3 = at(f3)
        if p3 <= limit * (1 + TOLERANCE):
            f, res1, p1 = f3, res3, p3
    res = res1
    floor = " (the clock floor)" if f <= float(hw.clock_min_hz.value) else ""
    return replace(res, power_w=p1, clock_reason=f"power-limited: {p1:.0f} W at {f / 1e9:.3f} GHz{floor} "
                                                 f"(limit {limit:.0f} W; {p:.0f} W at boost "
                                                 f"{f_max / 1e9:.3f} GHz)")


def result_work(dtype: Any, hw: Any, res: KernelResult) -> Any:
    """The power model's work counts of an engine result (`dtype`: the kernel's MMA dtype): its SMs, the SMs its
    waves keep busy, and, for GEMM templates, its own FLOPs as the switching work."""
    sms = int(res.attrs.get("sms", hw.sms))
    return work_of(hw, dtype, res.cycles, res.clock_hz, res.unit_busy, res.dram_bytes, sms,
                   active_sms_of(res.waves, sms), useful_flop_of(str(res.attrs.get("template", "")), res.flops))
