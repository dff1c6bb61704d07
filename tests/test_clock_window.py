"""torchsim.prediction.clock_window: a step's kernels share one clock under the board's averaged power limit."""

from __future__ import annotations

import dataclasses

import pytest

from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.quantity import assumed
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.prediction.clock_window import applies, fast_limit_w, share_clock
from torchsim.prediction.kernel_sim import simulate_call

GEMM = KernelCall.make(KernelKind.GEMM, DType.BF16, name="gemm", m=4096, n=4096, k=4096)
COPY = KernelCall.make(KernelKind.ELEMENTWISE, DType.BF16, name="copy", numel=128 << 20, inputs=1, outputs=1,
                       op="copy")


@pytest.fixture(scope="module")
def h200() -> object:
    return get_profile("h200")


@pytest.fixture(scope="module")
def step(h200: object) -> list[tuple[KernelCall, object]]:
    return [(GEMM, simulate_call(GEMM, h200)), (COPY, simulate_call(COPY, h200))]


def avg_power(sims: list[object]) -> float:
    return sum(s.power_w * s.time_s for s in sims) / sum(s.time_s for s in sims)  # type: ignore[attr-defined]


def test_only_profiles_with_a_fast_limit_share_a_clock(step: list[tuple[KernelCall, object]]) -> None:
    h100 = get_profile("h100-sxm")
    assert not applies(h100) and fast_limit_w(h100) == float(h100.power_limit_w.value)
    assert applies(get_profile("h200"))
    gemm_h100 = simulate_call(GEMM, h100)
    out = share_clock([(GEMM, gemm_h100)], h100)
    assert out[0] is gemm_h100  # unchanged, not a copy


def test_a_mixed_step_runs_its_gemm_faster_than_alone(h200: object, step: list[tuple[KernelCall, object]]) -> None:
    (_g, gemm), (_c, copy) = step
    assert gemm.clock_reason.startswith("power-limited")  # type: ignore[attr-defined]
    out = share_clock(step, h200)
    assert out[0].time_s < gemm.time_s and out[0].clock_hz > gemm.clock_hz  # type: ignore[attr-defined]
    assert out[0].clock_hz <= float(h200.clock_max_hz.value)  # type: ignore[attr-defined]
    assert out[1].time_s == pytest.approx(copy.time_s)  # memory-bound: its time does not follow the clock
    assert avg_power(out) <= float(h200.power_limit_w.value) * (1 + 1e-6)  # type: ignore[attr-defined]
    assert out[0].clock_reason.startswith("power window")
    assert share_clock(step, h200) == out  # deterministic


def test_a_gemm_alone_keeps_its_sustained_clock(h200: object, step: list[tuple[KernelCall, object]]) -> None:
    gemm = step[0][1]
    out = share_clock([step[0]], h200)
    assert out[0].clock_hz == pytest.approx(gemm.clock_hz, rel=0.01)  # type: ignore[attr-defined]


def test_the_fast_limit_bounds_every_kernel(h200: object, step: list[tuple[KernelCall, object]]) -> None:
    """However much idle time a step has around its GEMM, the GEMM never runs past its fast-limit clock."""
    light = [step[0]] + [step[1]] * 40
    out = share_clock(light, h200)
    assert out[0].power_w <= fast_limit_w(h200) * (1 + 1e-6)  # type: ignore[attr-defined]
    lower = dataclasses.replace(h200, power_limit_fast_w=assumed(750.0, "W", "test"))
    assert share_clock(light, lower)[0].clock_hz < out[0].clock_hz  # type: ignore[attr-defined]


def test_idle_gaps_lower_the_steps_average_power(h200: object, step: list[tuple[KernelCall, object]]) -> None:
    busy = share_clock([step[0]], h200)
    gappy = share_clock([step[0]], h200, idle_s=step[0][1].time_s)  # type: ignore[attr-defined]
    assert gappy[0].clock_hz > busy[0].clock_hz  # type: ignore[attr-defined]
