"""Timing methods: every published row maps to one, and each moves the compared number the way its timer does."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchsim.hwmodels import get_profile
from torchsim.validation import timing
from torchsim.validation.predict_row import Device, compare
from torchsim.validation.published import Row, default_csv, read_rows


def _row(source: str, metric: str = "tflops", rid: str = "T-1") -> Row:
    return Row(rid, "gemm", "h100-sxm", "synthetic", "bf16", {"M": 64, "N": 64, "K": 64}, metric, 1.0, metric, "",
               source)


def test_every_published_row_maps_to_a_method() -> None:
    try:
        path = default_csv()
    except FileNotFoundError:
        pytest.skip("published_dev.csv is not beside this checkout")
    rows = read_rows(path)
    assert rows
    for r in rows:
        method, reason = timing.method_for(r)
        assert method.name in timing.METHODS and reason, r.id
    cats = {r.category: timing.method_for(r)[0].name for r in rows}
    assert cats.get("e2e_inference") == "e2e-serving"


def test_gaps_add_in_the_expected_direction() -> None:
    hw = get_profile("h100-sxm")
    t = 10e-6
    dev = timing.observed_time_s(t, timing.METHODS["device-profiler"], hw)
    ev = timing.observed_time_s(t, timing.METHODS["cuda-events-loop"], hw)
    gr = timing.observed_time_s(t, timing.METHODS["cuda-graph"], hw)
    host = timing.observed_time_s(t, timing.METHODS["host-timer"], hw)
    assert dev == t
    assert ev == pytest.approx(t + float(hw.launch_overhead_s.value))
    assert gr == pytest.approx(t + float(hw.graph_launch_overhead_s.value))
    assert host >= ev > dev
    with pytest.raises(ValueError, match="negative"):
        timing.observed_time_s(-1.0, timing.METHODS["device-profiler"], hw)


def test_missing_profile_field_contributes_nothing_and_is_reported() -> None:
    hw = get_profile("h100-sxm")
    total, parts = timing.gap_s(timing.METHODS["host-timer"], hw)
    assert parts["launch_overhead_s"] == pytest.approx(float(hw.launch_overhead_s.value))
    if getattr(hw, "host_sync_overhead_s", None) is None:
        assert parts["host_sync_overhead_s"] is None
        assert total == pytest.approx(float(hw.launch_overhead_s.value))


def test_method_changes_the_compared_metric() -> None:
    hw = get_profile("h100-sxm")
    d = Device("g", ((5e-6, 1e9, 1e6),), "bound", ("bf16", "1x64x64x64"))
    prof = compare(_row("deepseek-ai/DeepGEMM README.md"), d, hw)
    loop = compare(_row("zzc0721/torch-performance-test-data issue #1"), d, hw)
    assert prof.method.name == "device-profiler" and loop.method.name == "cuda-events-loop"
    assert prof.predicted == pytest.approx(1e9 / 5e-6 / 1e12)
    assert loop.predicted < prof.predicted  # a longer observed time: fewer TFLOPS
    t_prof = compare(_row("deepseek-ai/DeepGEMM README.md", "time_us"), d, hw).predicted
    t_loop = compare(_row("zzc0721/torch-performance-test-data issue #1", "time_us"), d, hw).predicted
    assert t_loop > t_prof == pytest.approx(5.0)


def test_row_id_rule_and_unmatched_row(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="T-9.*no timing-method rule"):
        timing.method_for(_row("some unknown benchmark", rid="T-9"))
    bad = tmp_path / "rules.csv"
    bad.write_text("match,method,reason\nfoo,stopwatch,because\n")
    with pytest.raises(ValueError, match="unknown timing method 'stopwatch'"):
        timing.rules(bad)


def test_zeroing_flush_leaves_the_l2_dirty_for_the_timed_kernel() -> None:
    """triton.testing.do_bench zeroes a 256 MB buffer before each call: tritonbench's rows start with the L2 full
    of dirty lines (its size), other timers with none; the launch gap is the eager loop's."""
    hw = get_profile("h100-sxm")
    m, _ = timing.method_for(_row("pytorch/benchmark commit ff65cb6"))
    assert m.name == "cuda-events-l2-zeroed"
    assert timing.l2_dirty_bytes(m, hw) == float(hw.l2_bytes.value)
    assert timing.observed_time_s(1e-5, m, hw) == timing.observed_time_s(1e-5, timing.METHODS["cuda-events-loop"], hw)
    assert timing.l2_dirty_bytes(timing.METHODS["cuda-events-loop"], hw) == 0.0
