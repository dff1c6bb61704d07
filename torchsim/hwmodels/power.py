"""Board power of a simulated kernel and the sustained SM clock it runs at under the profile's power limit.

Formulas over a GpuProfile's power fields (the block at the end of `GpuProfile`); `torchsim.sim.sustained`
applies them to an engine result. Model (CMOS dynamic power, alpha*C*V^2*f, per unit of work):

    P(f) = static_power_w + v(f)^2 * (E_tensor + E_simt + E_l2) / t(f) + E_dram / t(f)

E_x = (work the unit did) x (its energy per unit of work at the voltage of clock_max_hz); HBM sits on its own
rail, so DRAM energy does not scale with the core voltage. v(f) = V(f) / V(clock_max_hz) rises linearly from
`dvfs_voltage_floor` at clock_min_hz to 1 at clock_max_hz (a linear V-f curve over the DVFS range: assumed).
A kernel runs at the highest clock in [clock_min_hz, clock_max_hz] whose power stays under power_limit_w.
Solving assumes the kernel's time scales as 1/f (t(f) = t_sim * f_sim / f: exact for a compute-bound kernel,
pessimistic for one partly bound by DRAM); `torchsim.sim.sustained` then re-simulates at the clock found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchsim.graph.kinds import DType

PJ = 1e-12


@dataclass(frozen=True, slots=True)
class Work:
    """What a simulated kernel did, in the units the energies are given in, and how long it took at `clock_hz`."""

    tensor_flop: float  # FLOPs the tensor datapath was busy for (MMA rows padded to the datapath included)
    simt_ops: float  # lane operations of the FMA pipe (one FMA = 2 FLOP = 1 op) and the SFU
    l2_bytes: float
    dram_bytes: float
    seconds: float
    clock_hz: float
    dtype: DType


def has_power_model(hw: Any) -> bool:
    """True when `hw` carries the power fields (the GPU profiles; Tensix profiles do not)."""
    return getattr(hw, "power_limit_w", None) is not None


def work_of(hw: Any, dtype: DType, cycles: float, clock_hz: float, unit_busy: dict[str, float],
            dram_bytes: float, sms: int) -> Work:
    """Work counts from an engine result: each unit's utilisation x its throughput x SMs x cycles. Padded MMA
    rows are charged as full datapath work (conservative: zero rows switch less, but more datapath work then
    never draws less energy, so padding never makes a kernel faster).

    >>> from torchsim.hwmodels import get_profile
    >>> hw = get_profile("h100-sxm")
    >>> w = work_of(hw, DType.BF16, 1000, 1.98e9, {"tensor": 1.0}, 0.0, 132)
    >>> w.tensor_flop == 4096 * 132 * 1000
    True
    """
    if cycles <= 0 or clock_hz <= 0:
        raise ValueError(f"work_of: cycles ({cycles}) and clock_hz ({clock_hz}) must be > 0")
    busy = unit_busy.get
    per_sm_cycles = sms * cycles
    fma_ops = busy("fma", 0.0) * float(hw.fma_flop_per_clk_per_sm.value) / 2.0 * per_sm_cycles
    sfu_ops = busy("sfu", 0.0) * float(hw.sfu_ops_per_clk_per_sm.value) * per_sm_cycles
    return Work(tensor_flop=busy("tensor", 0.0) * hw.tensor_flop_per_clk_per_sm(dtype) * per_sm_cycles,
                simt_ops=fma_ops + sfu_ops,
                l2_bytes=busy("l2", 0.0) * float(hw.l2_bytes_per_s.value) * cycles / clock_hz,
                dram_bytes=float(dram_bytes), seconds=cycles / clock_hz, clock_hz=clock_hz, dtype=dtype)


def tensor_pj_per_flop(hw: Any, dtype: DType) -> float:
    """Tensor-core energy per FLOP for `dtype` at the voltage of clock_max_hz (the same dtype classes as
    GpuProfile.tensor_flop_per_clk_per_sm).

    INT8 and FP4 have no energy of their own (assumed, no per-format power measurement found): the datapath is
    taken to draw the same power at each format's peak rate as at the nearest calibrated format's, so the energy
    per FLOP scales with the rate ratio (int8 from fp8 where both run at one rate, else from bf16; fp4 from fp8)."""
    if dtype in (DType.INT8, DType.FP4_E2M1):
        rate = hw.tensor_flop_per_clk_per_sm(dtype)
        base = DType.FP8_E4M3 if hw.tensor_flop_per_clk_per_sm(DType.FP8_E4M3) > 0 else DType.BF16
        return tensor_pj_per_flop(hw, base) * hw.tensor_flop_per_clk_per_sm(base) / rate if rate > 0 else 0.0
    if dtype.is_fp8:
        return float(hw.tensor_pj_per_flop_fp8.value)
    if dtype in (DType.FP32, DType.TF32):
        return float(hw.tensor_pj_per_flop_tf32.value)
    return float(hw.tensor_pj_per_flop_bf16.value)


def voltage_ratio(hw: Any, clock_hz: float) -> float:
    """V(f) / V(clock_max_hz): linear from dvfs_voltage_floor at clock_min_hz to 1 at clock_max_hz."""
    lo, hi = float(hw.clock_min_hz.value), float(hw.clock_max_hz.value)
    floor = float(hw.dvfs_voltage_floor.value)
    x = 1.0 if hi <= lo else min(1.0, max(0.0, (clock_hz - lo) / (hi - lo)))
    return floor + (1.0 - floor) * x


def core_energy_j(hw: Any, w: Work, activity: float = 1.0) -> float:
    """Energy of the units on the core rail at the voltage of clock_max_hz; `activity` scales the tensor part
    (1 = random operands, as in the calibration sources; constant or zero operands switch less)."""
    return PJ * (activity * tensor_pj_per_flop(hw, w.dtype) * w.tensor_flop
                 + float(hw.simt_pj_per_op.value) * w.simt_ops + float(hw.l2_pj_per_byte.value) * w.l2_bytes)


def power_w(hw: Any, w: Work, clock_hz: float | None = None, activity: float = 1.0,
            seconds: float | None = None) -> float:
    """Average board power running `w` at `clock_hz` (default: the clock it was simulated at) in `seconds`
    (default: the simulated time scaled as 1/f)."""
    f = w.clock_hz if clock_hz is None else clock_hz
    if seconds is None:
        seconds = w.seconds * w.clock_hz / f
    dram_j = PJ * float(hw.dram_pj_per_byte.value) * w.dram_bytes
    return float(hw.static_power_w.value) + (voltage_ratio(hw, f) ** 2 * core_energy_j(hw, w, activity)
                                             + dram_j) / seconds


def sustained_clock(hw: Any, w: Work, activity: float = 1.0, time_model: tuple[float, float] | None = None) -> float:
    """The highest clock in [clock_min_hz, clock_max_hz] at which `w` stays within power_limit_w (P rises
    monotonically with f, so bisection on a fixed number of halvings: deterministic). The kernel's time at f is
    `a + b / f` for `time_model` = (a, b) (fitted to two simulations), else the simulated time scaled as 1/f."""
    lo, hi = float(hw.clock_min_hz.value), float(hw.clock_max_hz.value)
    limit = float(hw.power_limit_w.value)

    def p(f: float) -> float:
        return power_w(hw, w, f, activity, None if time_model is None else time_model[0] + time_model[1] / f)

    if p(hi) <= limit:
        return hi
    if p(lo) >= limit:
        return lo
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if p(mid) <= limit:
            lo = mid
        else:
            hi = mid
    return lo


def time_model(f0: float, t0: float, f1: float, t1: float) -> tuple[float, float] | None:
    """(a, b) with t = a + b / f through two simulated (clock, seconds) points: a clock-independent part (DRAM,
    fixed latencies in seconds) and a part in cycles; None when the points do not give a b > 0 and a >= 0."""
    if f0 == f1:
        return None
    b = (t1 - t0) / (1.0 / f1 - 1.0 / f0)
    a = t0 - b / f0
    return (a, b) if b > 0 and a >= 0 else None


def tensor_energy_for_clock(hw: Any, w: Work, clock_hz: float) -> float:
    """Calibration: the tensor pJ/FLOP (at V(clock_max_hz)) that makes `w` draw exactly power_limit_w at
    `clock_hz`, every other energy of `hw` kept (the inverse of `power_w` in the tensor energy)."""
    if w.tensor_flop <= 0:
        raise ValueError("tensor_energy_for_clock: the reference kernel does no tensor work")
    seconds = w.seconds * w.clock_hz / clock_hz
    budget_j = (float(hw.power_limit_w.value) - float(hw.static_power_w.value)) * seconds
    budget_j -= PJ * float(hw.dram_pj_per_byte.value) * w.dram_bytes
    core_j = budget_j / voltage_ratio(hw, clock_hz) ** 2
    other_j = PJ * (float(hw.simt_pj_per_op.value) * w.simt_ops + float(hw.l2_pj_per_byte.value) * w.l2_bytes)
    e = (core_j - other_j) / (PJ * w.tensor_flop)
    if e <= 0:
        raise ValueError(f"tensor_energy_for_clock: {hw.name}'s other energies already exceed the limit at "
                         f"{clock_hz / 1e9:.3f} GHz")
    return e
