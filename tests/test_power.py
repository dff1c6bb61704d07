"""The power model and the sustained clock: dense GEMMs throttle under the power limit, memory-bound kernels keep
the boost clock, the clock stays in range, more power is never slower, and no run beats its roofline."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.gpu import GPU_PROFILES
from torchsim.hwmodels.power import power_w, sustained_clock, tensor_energy_for_clock, voltage_ratio, work_of
from torchsim.hwmodels.quantity import assumed
from torchsim.hwmodels.whatif import WhatIfError, derive_profile
from torchsim.lowering.templates import gemm
from torchsim.sim.sustained import kernel_power_w, simulate_sustained

POWER_FIELDS = ("power_limit_w", "static_power_w", "clock_max_hz", "clock_min_hz", "dvfs_voltage_floor",
                "tensor_pj_per_flop_bf16", "tensor_pj_per_flop_fp8", "tensor_pj_per_flop_tf32", "dram_pj_per_byte",
                "l2_pj_per_byte", "simt_pj_per_op")
DENSE = (2048, 2048, 1024)  # tensor-bound on every GPU profile, small enough to simulate quickly
GEMV = (1, 4096, 4096)


def with_limit(hw: object, watts: float) -> object:
    return dataclasses.replace(hw, power_limit_w=assumed(watts, "W", "test"))


def run(hw: object, shape: tuple[int, int, int], dtype: DType = DType.BF16):  # type: ignore[no-untyped-def]
    m, n, k = shape
    return simulate_sustained(gemm(m, n, k, dtype, hw), hw)


@pytest.mark.parametrize("name", sorted(GPU_PROFILES))
def test_power_fields_have_units_and_sources(name: str) -> None:
    hw = get_profile(name)
    for f in POWER_FIELDS:
        q = getattr(hw, f)
        assert q.unit and q.source and q.kind in ("documented", "measured", "derived", "calibrated", "assumed"), f
    assert hw.clock_min_hz.value < hw.clock_max_hz.value
    assert hw.static_power_w.value < hw.power_limit_w.value


def test_voltage_and_power_rise_with_clock() -> None:
    hw = get_profile("h100-sxm")
    lo, hi = float(hw.clock_min_hz.value), float(hw.clock_max_hz.value)
    assert voltage_ratio(hw, lo) == pytest.approx(float(hw.dvfs_voltage_floor.value))
    assert voltage_ratio(hw, hi) == pytest.approx(1.0)
    w = work_of(hw, DType.BF16, 1e6, hi, {"tensor": 0.9, "l2": 0.5, "fma": 0.01}, 1e8, hw.sms)
    clocks = [lo + (hi - lo) * i / 10 for i in range(11)]
    powers = [power_w(hw, w, f) for f in clocks]
    assert all(a < b for a, b in zip(powers, powers[1:], strict=False))
    assert powers[0] > float(hw.static_power_w.value)


def test_sustained_clock_meets_the_limit_and_calibration_inverts() -> None:
    hw = get_profile("b200")
    hi = float(hw.clock_max_hz.value)
    w = work_of(hw, DType.BF16, 1e6, hi, {"tensor": 0.95, "l2": 0.6}, 1e8, hw.sms)
    f = sustained_clock(hw, w)
    assert float(hw.clock_min_hz.value) < f < hi
    assert power_w(hw, w, f) == pytest.approx(float(hw.power_limit_w.value), rel=1e-6)
    e = tensor_energy_for_clock(hw, w, 1.5e9)
    hw2 = dataclasses.replace(hw, tensor_pj_per_flop_bf16=assumed(e, "pJ/FLOP", "test"))
    assert power_w(hw2, w, 1.5e9) == pytest.approx(float(hw.power_limit_w.value), rel=1e-9)
    assert sustained_clock(hw2, w) == pytest.approx(1.5e9, rel=1e-6)


@pytest.mark.parametrize("name", sorted(GPU_PROFILES))
def test_memory_bound_gemv_keeps_boost(name: str) -> None:
    hw = get_profile(name)
    r = run(hw, GEMV)
    assert r.clock_hz == float(hw.clock_max_hz.value)
    assert r.clock_reason.startswith("boost") and 0 < r.power_w < float(hw.power_limit_w.value)


@pytest.mark.parametrize("name", ["a100-sxm", "h100-sxm", "b200"])
def test_lower_power_limit_slows_dense_gemm_not_gemv(name: str) -> None:
    hw = get_profile(name)
    gemv, dense = run(hw, GEMV), run(hw, DENSE)
    low = with_limit(hw, gemv.power_w + 10.0)  # above what the GEMV draws at boost
    dense_low = run(low, DENSE)
    assert dense_low.time_s > dense.time_s * 1.05
    assert dense_low.clock_hz < dense.clock_hz and dense_low.clock_reason.startswith("power-limited")
    assert dense_low.power_w <= 1.03 * float(low.power_limit_w.value)
    gemv_low = run(low, GEMV)
    assert gemv_low.time_s == pytest.approx(gemv.time_s) and gemv_low.clock_hz == gemv.clock_hz


def test_more_power_never_slower_and_clock_in_range() -> None:
    hw = get_profile("h100-sxm")
    lo, hi = float(hw.clock_min_hz.value), float(hw.clock_max_hz.value)
    times = []
    for watts in (80.0, 200.0, 350.0, 500.0, 700.0, 1500.0):
        r = run(with_limit(hw, watts), DENSE)
        assert lo <= r.clock_hz <= hi and r.clock_reason
        times.append(r.time_s)
    assert all(a >= b for a, b in zip(times, times[1:], strict=False))
    assert r.clock_hz == hi  # 1.5 kW: nothing throttles
    floor = run(with_limit(hw, 76.0), DENSE)  # 1 W above static: the clock floor
    assert floor.clock_hz == lo and "clock floor" in floor.clock_reason


@pytest.mark.parametrize("name,dtype", [("h100-sxm", DType.BF16), ("h100-sxm", DType.FP8_E4M3),
                                        ("b200", DType.BF16), ("a100-sxm", DType.FP16)])
def test_roofline_at_the_chosen_clock(name: str, dtype: DType) -> None:
    hw = get_profile(name)
    m, n, k = DENSE
    r = run(hw, DENSE, dtype)
    peak = hw.tensor_flop_per_clk_per_sm(dtype) * hw.sms * r.clock_hz
    assert r.time_s >= 2.0 * m * n * k / peak
    assert r.time_s >= r.dram_bytes / hw.dram_bytes_per_s_value
    assert r.power_w == pytest.approx(kernel_power_w(gemm(m, n, k, dtype, hw), hw, r))


def test_lock_clock_and_its_errors() -> None:
    hw = get_profile("h100-sxm")
    m, n, k = GEMV
    r = simulate_sustained(gemm(m, n, k, DType.BF16, hw), hw, lock_clock_hz=1.2e9)
    assert r.clock_hz == 1.2e9 and r.clock_reason.startswith("locked")
    with pytest.raises(ValueError, match="clock range"):
        simulate_sustained(gemm(m, n, k, DType.BF16, hw), hw, lock_clock_hz=3e9)


def test_whatif_power_fields(tmp_path: Path) -> None:
    base = get_profile("h100-sxm")
    hw = derive_profile(base, {"power_limit_w": "0.5 kW", "tensor_pj_per_flop_bf16": "0.5 pJ/FLOP",
                               "clock_max_hz": "1.7 GHz"}, where="test", bare_numbers=False)
    assert hw.power_limit_w.value == pytest.approx(500) and hw.clock_max_hz.value == pytest.approx(1.7e9)
    assert hw.tensor_pj_per_flop_bf16.value == 0.5 and hw.power_limit_w.kind == "assumed"
    with pytest.raises(WhatIfError, match="clock_min_hz"):
        derive_profile(base, {"clock_max_hz": "100 MHz"}, where="test", bare_numbers=False)
    with pytest.raises(WhatIfError, match="power_limit_w"):
        derive_profile(base, {"power_limit_w": "0 W"}, where="test", bare_numbers=False)


def test_profile_without_power_model_runs_at_its_clock() -> None:
    from torchsim.lowering.kernel_call import KernelCall, KernelKind
    from torchsim.lowering.templates.tensix import build_tensix_kernel

    hw = get_profile("wormhole-n150")
    kg = build_tensix_kernel(KernelCall.make(KernelKind.GEMM, DType.BF16, name="g", m=256, n=256, k=256), hw)
    r = simulate_sustained(kg, hw)
    assert r.clock_hz == hw.clock_hz_value and r.clock_reason.startswith("no power model")


def test_prediction_path_records_the_clock() -> None:
    from torchsim.lowering.kernel_call import KernelCall, KernelKind
    from torchsim.prediction.kernel_sim import simulate_call

    hw = with_limit(get_profile("h100-sxm"), 300.0)
    s = simulate_call(KernelCall.make(KernelKind.GEMM, DType.BF16, name="g", m=2048, n=2048, k=1024), hw)
    assert s.clock_reason.startswith("power-limited") and 0 < s.clock_hz < float(hw.clock_max_hz.value)
    assert s.time_s == pytest.approx(s.cycles / s.clock_hz)


def test_active_sms_follow_the_waves() -> None:
    from torchsim.hwmodels.power import active_sms_of
    assert active_sms_of(1.0, 132) == 132 and active_sms_of(0.5, 132) == 66 and active_sms_of(0, 132) == 0
    assert active_sms_of(1.7, 132) == pytest.approx(132 * 1.7 / 2)  # the second round is 70% full
    assert active_sms_of(3.0, 132) == 132


def test_active_sm_power_is_drawn_whatever_the_sms_compute() -> None:
    """sm_active_pj_per_cycle adds C * V(f)^2 * active SMs * f: the same for any work, linear in the SMs, and it
    lowers the clock a power-limited GEMM sustains; a profile without it (0) is unchanged."""
    from torchsim.hwmodels.power import active_power_w
    hw = get_profile("h200")
    c = float(hw.sm_active_pj_per_cycle.value)
    assert c > 0 and hw.sm_active_pj_per_cycle.kind == "calibrated"
    hi = float(hw.clock_max_hz.value)
    full = work_of(hw, DType.BF16, 1e6, hi, {"l2": 0.5}, 1e8, hw.sms)
    half = dataclasses.replace(full, active_sms=hw.sms / 2)
    assert active_power_w(hw, full, hi) == pytest.approx(c * 1e-12 * hw.sms * hi)
    assert power_w(hw, full) - power_w(hw, half) == pytest.approx(active_power_w(hw, full, hi) / 2)
    dense = work_of(hw, DType.BF16, 1e6, hi, {"tensor": 0.95, "l2": 0.6}, 1e8, hw.sms)
    without = dataclasses.replace(hw, sm_active_pj_per_cycle=assumed(0.0, "pJ/cycle", "test"))
    assert sustained_clock(hw, dense) < sustained_clock(without, dense)
    assert float(get_profile("a100-sxm").sm_active_pj_per_cycle.value) == 0.0  # not separated there


def test_tensor_energy_inverts_power_with_the_active_term() -> None:
    hw = get_profile("h200")
    w = work_of(hw, DType.BF16, 1e6, 1.98e9, {"tensor": 0.94, "l2": 0.55}, 2e9, hw.sms)
    e = tensor_energy_for_clock(hw, w, 1.32e9)
    fitted = dataclasses.replace(hw, tensor_pj_per_flop_bf16=assumed(e, "pJ/FLOP", "test"))
    assert power_w(fitted, w, 1.32e9) == pytest.approx(float(hw.power_limit_w.value))


def _fake_kernel(hw, flops: float, dram: float, compute_cycles: float, floor_s: float):  # type: ignore[no-untyped-def]
    """run(profile) -> KernelResult of a kernel whose time is max(compute_cycles / f, floor_s): bound by another
    unit at boost (its time barely moves as the clock drops) and by the tensor pipe below a knee, the shape whose
    a + b/f refit overshoots downwards."""
    from torchsim.sim.result import KernelResult

    def run(h):  # type: ignore[no-untyped-def]
        f = h.clock_hz_value
        t = max(compute_cycles / f, floor_s)
        busy = compute_cycles / f / t
        return KernelResult("fake", h.name, int(round(t * f)), f, flops, dram, 0.0, {"tensor": busy}, {}, "tensor",
                            1.0, hw.sms, 1, 1, attrs={"sms": hw.sms})
    return run


def test_the_sustained_clock_lands_on_the_limit_when_the_refit_undershoots() -> None:
    """A kernel whose time is flat above a knee clock and 1/f below it: the 1/f guess overshoots the limit, the
    a + b/f refit then undershoots it; the clock between the two runs is tried, so the kernel ends within the
    tolerance of the limit, at the highest clock whose power meets it (what bisection on the same kernel gives)."""
    from torchsim.sim.sustained import TOLERANCE, at_clock, result_work, sustain

    hw = get_profile("h100-sxm")
    limit = float(hw.power_limit_w.value)
    run = _fake_kernel(hw, flops=1.1e15, dram=4e8, compute_cycles=2.6e6, floor_s=1.45e-3)
    res = sustain(run, hw, DType.BF16)
    assert res.clock_reason.startswith("power-limited")
    assert abs(res.power_w - limit) <= TOLERANCE * limit, res.clock_reason

    def p(f: float) -> float:
        return power_w(hw, result_work(DType.BF16, hw, run(at_clock(hw, f, "probe"))))

    lo, hi = float(hw.clock_min_hz.value), float(hw.clock_max_hz.value)
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if p(mid) <= limit else (lo, mid)
    assert res.clock_hz == pytest.approx(lo, rel=0.01)
