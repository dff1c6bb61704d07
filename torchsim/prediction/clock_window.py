"""One clock for a sequence of kernels: the board's power limit holds the average over a window, not each kernel.

A GPU's firmware caps board power in two ways (measured on an H200: torchsim/validation/measured/h200-2026-12-04,
power_window.json): a fast cap that no kernel may pass even for a few milliseconds (power_limit_fast_w: dense
GEMMs from idle settle within a millisecond at the clock where they draw ~880 W), and the TDP (power_limit_w) held
as an average over tens of milliseconds, to which the same GEMMs fall after ~20-50 ms. A kernel sequence that
mixes power-hungry GEMMs with memory-bound kernels (a prefill, a decode step) therefore runs its GEMMs faster than
each would sustain alone: an 8192^3 GEMM alternating with a 1 GiB copy ran 1.59 ms per call against 1.66 ms back
to back with itself, at one clock for both.

`share_clock` takes a step's kernels as simulated each at its own sustained clock (torchsim.sim.sustained) and
finds the highest common clock cap under which the step's time-averaged power stays within power_limit_w, every
kernel held at or below the clock power_limit_fast_w allows it; the step's gaps between kernels count at static
power. Power-limited kernels scale their time as 1/f
(they are compute-bound: the per-kernel solution assumed it too); the others keep their time (memory- or
latency-bound) and draw their power at the shared clock. A step is taken as steady state (the burst a GPU allows
from idle is not modelled: the first tens of milliseconds after idle run faster still). Profiles whose fast limit
is not above power_limit_w are returned unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from torchsim.hwmodels.power import has_power_model, power_w, sustained_clock, useful_flop_of, work_of

BISECT = 48  # halvings of the clock interval (deterministic; ~1e-5 Hz resolution)


def fast_limit_w(hw: Any) -> float:
    """The power no kernel may exceed even briefly (the TDP where the profile has no separate fast limit)."""
    q = getattr(hw, "power_limit_fast_w", None)
    limit = float(hw.power_limit_w.value)
    return max(limit, float(q.value)) if q is not None else limit


def applies(hw: Any) -> bool:
    return has_power_model(hw) and fast_limit_w(hw) > float(hw.power_limit_w.value)


class _Kernel:
    """One launch's power model: work at its simulated clock, time as a function of the clock."""

    def __init__(self, call: Any, sim: Any, hw: Any) -> None:
        self.sim = sim
        self.limited = sim.clock_reason.startswith("power-limited") and sim.clock_hz > 0 and sim.time_s > 0
        self.active = sim.clock_hz > 0 and sim.time_s > 0 and sim.cycles > 0 and not sim.fallback
        if self.active:
            self.work = work_of(hw, call.dtype, sim.cycles, sim.clock_hz, sim.unit_util, sim.dram_bytes, hw.sms,
                                useful_flop=useful_flop_of(sim.template, sim.flops))
        self.f_fast = float(hw.clock_max_hz.value)
        if self.limited and self.active:  # the highest clock within the fast limit, its time scaling as 1/f
            fast = replace(hw, power_limit_w=replace(hw.power_limit_w, value=fast_limit_w(hw)))
            self.f_fast = sustained_clock(fast, self.work, time_model=(0.0, sim.time_s * sim.clock_hz))

    def time(self, f: float) -> float:
        return self.sim.time_s * self.sim.clock_hz / f if self.limited else self.sim.time_s

    def power(self, hw: Any, f: float) -> float:
        return power_w(hw, self.work, f, seconds=self.time(f)) if self.active else float(hw.static_power_w.value)


def share_clock(launches: Sequence[tuple[Any, Any]], hw: Any, idle_s: float = 0.0) -> list[Any]:
    """The KernelSims of one step's `launches` ((call, sim) in launch order) re-timed at the step's shared clock
    cap; unchanged where the profile has no fast limit above its TDP or no kernel of the step is power-limited.
    `idle_s`: the step's time between kernels (launch gaps, host stalls), drawn at static power in the average."""
    sims = [s for _c, s in launches]
    if not applies(hw) or not any(s.clock_reason.startswith("power-limited") for s in sims):
        return sims
    # one model per distinct launch (a step repeats its layers' kernels: 3,456 launches, 26 distinct, on an 80-layer
    # model), summed over the launches in order, so the averages are the same floats as launch by launch
    distinct: dict[tuple[int, Any], _Kernel] = {}
    ks = []
    for c, s in launches:
        key = (id(s), c.dtype)
        if key not in distinct:
            distinct[key] = _Kernel(c, s, hw)
        ks.append(distinct[key])
    limit = float(hw.power_limit_w.value)
    idle_w = float(hw.static_power_w.value)
    f_lo, f_hi = float(hw.clock_min_hz.value), float(hw.clock_max_hz.value)

    def clock(k: _Kernel, cap: float) -> float:
        return min(k.f_fast, cap) if k.limited else min(f_hi, cap)

    def average(cap: float) -> float:
        at = {}  # distinct kernel -> (its time, its energy) at this cap
        for k in distinct.values():
            f = clock(k, cap)
            t = k.time(f)
            at[k] = (t, k.power(hw, f) * t)
        energy = sum(at[k][1] for k in ks) + idle_w * idle_s
        total = sum(at[k][0] for k in ks) + idle_s
        return energy / total if total > 0 else 0.0

    if average(f_hi) <= limit:
        cap = f_hi
    else:
        lo, hi = f_lo, f_hi
        for _ in range(BISECT):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if average(mid) <= limit else (lo, mid)
        cap = lo
    avg = average(cap)

    def retimed(k: _Kernel) -> Any:
        """The launch's KernelSim at its clock under the cap (shared by the launches it repeats)."""
        s, f = k.sim, clock(k, cap)
        if not k.active or (f == s.clock_hz and not k.limited):
            return s
        why = (f"power window: {f / 1e9:.3f} GHz, the step's shared clock"
               + (f" (cap {cap / 1e9:.3f} GHz: {avg:.0f} W averaged over the step, limit {limit:.0f} W)"
                  if f == cap else f" (this kernel's fast limit, {fast_limit_w(hw):.0f} W)")
               + f"; alone it sustains {s.clock_hz / 1e9:.3f} GHz")
        cycles = int(round(s.cycles * f / s.clock_hz)) if not k.limited else s.cycles
        return replace(s, time_s=k.time(f), clock_hz=f, cycles=cycles, power_w=k.power(hw, f), clock_reason=why)

    out = {k: retimed(k) for k in distinct.values()}
    return [out[k] for k in ks]
