"""Board power of a simulated kernel and the sustained SM clock it runs at under the profile's power limit.

Formulas over a GpuProfile's power fields (the block at the end of `GpuProfile`); `torchsim.sim.sustained`
applies them to an engine result. Model (CMOS dynamic power, alpha*C*V^2*f, per unit of work):

    P(f) = static_power_w + v(f)^2 * ((E_tensor + E_simt + E_l2) / t(f) + C_sm * active_sms * f) + E_dram / t(f)

E_x = (work the unit did) x (its energy per unit of work at the voltage of clock_max_hz); C_sm
(sm_active_pj_per_cycle) is what an SM holding a CTA draws per cycle whatever it computes (clock tree, issue,
the SM side of the memory path), so a memory-bound kernel at boost draws far more than its DRAM bytes' energy;
HBM sits on its own rail, so DRAM energy does not scale with the core voltage. v(f) = V(f) / V(clock_max_hz)
rises linearly from `dvfs_voltage_floor` at clock_min_hz to 1 at clock_max_hz (a linear V-f curve over the DVFS
range: assumed).
A kernel runs at the highest clock in [clock_min_hz, clock_max_hz] whose power stays under power_limit_w.
Solving assumes the kernel's time scales as 1/f (t(f) = t_sim * f_sim / f: exact for a compute-bound kernel,
pessimistic for one partly bound by DRAM); `torchsim.sim.sustained` then re-simulates at the clock found.
"""

from __future__ import annotations

import math
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
    active_sms: float = 0.0  # SMs holding a CTA, averaged over the kernel (sm_active_pj_per_cycle's count)
    useful_flop: float | None = None  # the kernel's own FLOPs (MMA rows padded to the datapath excluded), if known

    @property
    def switching_flop(self) -> float:
        """The tensor FLOPs that draw switching energy: padded MMA rows (zeros from out-of-bounds TMA/loads) keep
        the datapath busy for their time but toggle no multipliers; their clocked cost is the active-SM term."""
        return self.tensor_flop if self.useful_flop is None else min(self.tensor_flop, self.useful_flop)


def has_power_model(hw: Any) -> bool:
    """True when `hw` carries the power fields (the GPU profiles; Tensix profiles do not)."""
    return getattr(hw, "power_limit_w", None) is not None


def work_of(hw: Any, dtype: DType, cycles: float, clock_hz: float, unit_busy: dict[str, float],
            dram_bytes: float, sms: int, active_sms: float | None = None,
            useful_flop: float | None = None) -> Work:
    """Work counts from an engine result: each unit's utilisation x its throughput x SMs x cycles. `tensor_flop`
    is the datapath's work, padded MMA rows included (what the datapath fill reports); given the kernel's own FLOPs
    (`useful_flop`), only those draw tensor switching energy (Work.switching_flop): a GEMV padded 64x into wgmma
    rows holds the datapath, not 64x its energy (a bf16 GEMV on an H200 runs at the boost clock at 569 W:
    torchsim/validation/measured/h200-2026-12-04 MB-087/089). Padding still never makes a kernel faster: its
    time is the datapath's.

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
                dram_bytes=float(dram_bytes), seconds=cycles / clock_hz, clock_hz=clock_hz, dtype=dtype,
                active_sms=float(sms if active_sms is None else active_sms), useful_flop=useful_flop)


def useful_flop_of(template: str, flops: float) -> float | None:
    """The FLOPs that draw tensor switching energy, where the template's datapath work beyond them is padding
    alone: GEMM templates (M padded to the MMA's rows). None elsewhere: an sm80 mma.sync kernel on a later GPU
    (FlashAttention-2) holds the datapath longer per FLOP through a slower instruction path, register operands
    and all, and is charged for the datapath time as before."""
    return flops if flops > 0 and "gemm" in template else None


def graph_idle_s(hw: Any) -> float:
    """Per kernel replayed from a CUDA graph, the time its SMs hold no CTA: the kernel-to-kernel gap and the
    kernel's own launch-to-completion tail (kernel_tail_cycles at the boost clock)."""
    tail = getattr(hw, "kernel_tail_cycles", None)
    return float(hw.graph_launch_overhead_s.value) + (float(tail.value) / float(hw.clock_max_hz.value)
                                                      if tail is not None else 0.0)


def active_sms_of(waves: float, sms: int) -> float:
    """SMs holding a CTA averaged over a kernel of `waves` waves (CTAs / concurrent CTA slots), taking CTAs of one
    kernel as equally long: a grid smaller than the GPU holds `waves` of the SMs; a grid of w > 1 waves runs
    ceil(w) rounds of which the last is partly empty, w / ceil(w) of the SMs on average."""
    if waves <= 0:
        return 0.0
    if waves <= 1:
        return sms * waves
    return sms * waves / math.ceil(waves - 1e-9)


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
    return PJ * (activity * tensor_pj_per_flop(hw, w.dtype) * w.switching_flop
                 + float(hw.simt_pj_per_op.value) * w.simt_ops + float(hw.l2_pj_per_byte.value) * w.l2_bytes)


def power_w(hw: Any, w: Work, clock_hz: float | None = None, activity: float = 1.0,
            seconds: float | None = None) -> float:
    """Average board power running `w` at `clock_hz` (default: the clock it was simulated at) in `seconds`
    (default: the simulated time scaled as 1/f)."""
    f = w.clock_hz if clock_hz is None else clock_hz
    if seconds is None:
        seconds = w.seconds * w.clock_hz / f
    dram_j = PJ * float(hw.dram_pj_per_byte.value) * w.dram_bytes
    v2 = voltage_ratio(hw, f) ** 2
    return (float(hw.static_power_w.value) + (v2 * core_energy_j(hw, w, activity) + dram_j) / seconds
            + v2 * active_power_w(hw, w, f))


def active_power_w(hw: Any, w: Work, clock_hz: float) -> float:
    """What the SMs holding `w`'s CTAs draw for being clocked, at the voltage of clock_max_hz."""
    return PJ * float(hw.sm_active_pj_per_cycle.value) * w.active_sms * clock_hz


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
    if w.switching_flop <= 0:
        raise ValueError("tensor_energy_for_clock: the reference kernel does no tensor work")
    seconds = w.seconds * w.clock_hz / clock_hz
    budget_j = (float(hw.power_limit_w.value) - float(hw.static_power_w.value)) * seconds
    budget_j -= PJ * float(hw.dram_pj_per_byte.value) * w.dram_bytes
    core_j = budget_j / voltage_ratio(hw, clock_hz) ** 2 - active_power_w(hw, w, clock_hz) * seconds
    other_j = PJ * (float(hw.simt_pj_per_op.value) * w.simt_ops + float(hw.l2_pj_per_byte.value) * w.l2_bytes)
    e = (core_j - other_j) / (PJ * w.switching_flop)
    if e <= 0:
        raise ValueError(f"tensor_energy_for_clock: {hw.name}'s other energies already exceed the limit at "
                         f"{clock_hz / 1e9:.3f} GHz")
    return e
