"""torchsim.calibration.gpu_state (NVML readings beside microbenchmarks) against a fake pynvml, and the sustained
runs of torchsim microbench on the CPU device: what the rows say about the clock and power they ran at."""

from __future__ import annotations

import sys
import time
import types

import pytest

from torchsim.calibration import gpu_state
from torchsim.calibration.gpu_state import Sampler, limits, reason_names


def fake_nvml(clocks: list[float], power_mw: float = 650_000, mask: int = 0x4, fail_power: bool = False
              ) -> types.ModuleType:
    """A pynvml stand-in whose SM clock walks through `clocks` (then stays at the last)."""
    m = types.ModuleType("pynvml")
    state = {"i": 0}
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM = 1, 2  # type: ignore[attr-defined]
    m.nvmlInit = lambda: None  # type: ignore[attr-defined]
    m.nvmlDeviceGetHandleByIndex = lambda i: ("gpu", i)  # type: ignore[attr-defined]

    def clock(h: object, which: int) -> float:
        c = clocks[min(state["i"], len(clocks) - 1)]
        state["i"] += 1
        return c

    def power(h: object) -> float:
        if fail_power:
            raise RuntimeError("not supported")
        return power_mw
    m.nvmlDeviceGetClockInfo = clock  # type: ignore[attr-defined]
    m.nvmlDeviceGetPowerUsage = power  # type: ignore[attr-defined]
    m.nvmlDeviceGetCurrentClocksEventReasons = lambda h: mask  # type: ignore[attr-defined]
    m.nvmlDeviceGetMaxClockInfo = lambda h, which: 1980 if which == 1 else 3201  # type: ignore[attr-defined]
    m.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700_000  # type: ignore[attr-defined]
    return m


def test_sampler_reads_the_median_clock_power_and_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([1980, 1500, 1470, 1470, 1470]))
    s = Sampler(0, period_s=0.001)
    assert s.available
    with s:
        time.sleep(0.05)
    r = s.reading()
    assert r is not None and r.samples >= 5
    assert r.sm_clock_mhz == 1470 and r.power_w == 650.0 and r.reasons == ("sw_power_cap",)
    assert "SM clock 1470 MHz, board power 650 W" in r.note() and "sw_power_cap" in r.note()
    assert s.reading(after_s=10.0) is None  # no sample that late


def test_a_board_without_power_reports_the_clock_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([1755], mask=0, fail_power=True))
    with Sampler(0, period_s=0.001) as s:
        time.sleep(0.02)
    r = s.reading()
    assert r is not None and r.power_w is None and r.reasons == ()
    assert "power" not in r.note()


def test_without_nvml_nothing_is_read_and_nothing_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    s = Sampler(0)
    assert not s.available
    with s:
        pass
    assert s.reading() is None and limits(0) == {}
    with pytest.raises(ValueError, match="period"):
        Sampler(0, period_s=0)


def test_limits_and_reason_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([1980]))
    assert limits(0) == {"max_sm_clock_mhz": 1980.0, "max_mem_clock_mhz": 3201.0, "power_limit_w": 700.0}
    assert reason_names(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert [bit for bit, _ in gpu_state.REASONS] == sorted(bit for bit, _ in gpu_state.REASONS)


def test_sustained_rows_on_the_cpu_device() -> None:
    pytest.importorskip("torch")
    from torchsim.calibration import microbench as mb
    cases = (mb.SustainedCase("gemm", "bf16", (16, 16, 16)), mb.SustainedCase("copy", "fp32", (4096,), "zeros"))
    ms = mb.sustained("cpu", cases, 0.05)
    assert [(m.category, m.metric) for m in ms] == [("gemm", "tflops"), ("microbenchmark", "bandwidth_gbps")]
    assert all(m.value > 0 and m.calls >= 1 and "second half" in m.how for m in ms)  # no NVML on the CPU: no clock rows
    with pytest.raises(ValueError, match="seconds"):
        mb.sustained("cpu", cases, 0.0)
    with pytest.raises(ValueError, match="sustained case"):
        mb.SustainedCase("gemm", "fp16", (16, 16, 16))


def test_sustained_rows_carry_the_clock_where_nvml_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from torchsim.calibration import microbench as mb
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([1470]))
    monkeypatch.setattr(mb, "_sampler", lambda device: Sampler(0, period_s=0.001))
    ms = mb.sustained("cpu", (mb.SustainedCase("gemm", "bf16", (16, 16, 16)),), 0.05)
    by = {m.metric: m for m in ms}
    assert set(by) == {"tflops", "sm_clock_mhz", "board_power_w"}
    assert by["sm_clock_mhz"].value == 1470 and by["board_power_w"].value == 650.0
    assert by["sm_clock_mhz"].params["data"] == "random" and "SM clock 1470 MHz" in by["tflops"].detail
