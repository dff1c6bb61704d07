"""torchsim calibrate --power: the power fit recovers a profile's energies from rows that profile would have
produced (sustained runs simulated on a 'true' profile), names what it cannot fit, and writes a what-if."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from torchsim.calibration.power_fit import fit_power, report, whatif
from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.power import power_w
from torchsim.hwmodels.quantity import assumed
from torchsim.lowering.templates import gemm
from torchsim.lowering.templates.elementwise import elementwise
from torchsim.sim.sustained import result_work
from torchsim.validation.published import Row

MIB = 1 << 20


def _row(i: int, cat: str, workload: str, dtype: str, params: dict[str, object], metric: str, value: float) -> Row:
    return Row(f"T-{i:03d}", cat, "h200", workload, dtype, params, metric, value, "", "", "torchsim microbench")


def rows_from(true: object) -> list[Row]:
    """What a sustained microbench run on `true` would have written (its own simulation is the measurement)."""
    from torchsim.calibration import power_fit as pf
    hw: object = true
    f = float(hw.clock_max_hz.value)  # type: ignore[attr-defined]
    out = [_row(1, "microbenchmark", "board power at idle", "n/a", {"kernel": "idle", "seconds": 2.0},
                "board_power_w", float(hw.static_power_w.value))]  # type: ignore[attr-defined]
    # L2-resident add: its power by the fit's own account of it (idle + L2 bytes + C per busy SM-cycle)
    l2 = {"op": "add", "bytes": 8 * MIB, "bytes_moved": 16 * MIB, "adds_per_call": 200}
    gbps = 5450.0
    per_add = 16 * MIB / (gbps * 1e9)
    busy = 1.0 - pf.graph_idle_s(hw) / per_add
    p_l2 = (float(hw.static_power_w.value) + float(hw.l2_pj_per_byte.value) * 1e-12 * 16 * MIB / per_add  # type: ignore[attr-defined]
            + float(hw.sm_active_pj_per_cycle.value) * 1e-12 * hw.sms * busy * f)  # type: ignore[attr-defined]
    out += [_row(2, "microbenchmark", "add, sustained, L2-resident", "fp32", l2, "bandwidth_gbps", gbps),
            _row(3, "microbenchmark", "board power during add, sustained", "fp32", {"kernel": "add", **l2},
                 "board_power_w", p_l2)]
    dram = {"op": "add", "bytes": 64 * MIB, "bytes_moved": 128 * MIB}
    res = pf.simulate_at(elementwise(32 * MIB, 1, 1, "add", DType.BF16, hw), hw, f)
    p_dram = power_w(hw, result_work(DType.BF16, hw, res), f, seconds=res.time_s)
    out += [_row(4, "microbenchmark", "add, sustained", "fp32", dram, "bandwidth_gbps", 128 * MIB / res.time_s / 1e9),
            _row(5, "microbenchmark", "board power during add, sustained", "fp32", {"kernel": "add", **dram},
                 "board_power_w", p_dram)]
    from torchsim.prediction.repeats import simulate_kernel
    for i, (m, n, k) in enumerate(((4096, 4096, 4096), (2048, 4096, 4096))):
        g = simulate_kernel(gemm(m, n, k, DType.BF16, hw), hw)
        out.append(_row(6 + i, "gemm", "torch.matmul, sustained 3 s back to back, random data", "bf16",
                        {"M": m, "N": n, "K": k, "layout": "NN"}, "tflops", g.tflops))
    return out


def test_the_fit_recovers_the_energies_that_made_the_rows() -> None:
    base = get_profile("h200")
    true = dataclasses.replace(
        base, static_power_w=assumed(90.0, "W", "test"),
        sm_active_pj_per_cycle=assumed(1200.0, "pJ/cycle", "test"),
        dram_pj_per_byte=assumed(40.0, "pJ/B", "test"),
        tensor_pj_per_flop_bf16=assumed(0.75, "pJ/FLOP", "test"))
    fit = fit_power(base, rows_from(true))
    got = {k: v for k, (v, _u, _r) in fit.values.items()}
    assert got["static_power_w"] == pytest.approx(90.0)
    assert got["sm_active_pj_per_cycle"] == pytest.approx(1200.0, rel=1e-6)
    assert got["dram_pj_per_byte"] == pytest.approx(40.0, rel=0.02)
    assert got["tensor_pj_per_flop_bf16"] == pytest.approx(0.75, rel=0.03)
    assert [rid for rid, _m, _p in fit.held_out] == ["T-007"]  # the smaller GEMM, predicted with the fit
    (_rid, measured, predicted), = fit.held_out
    assert predicted == pytest.approx(measured, rel=0.03)
    assert any("fp8" in s for s in fit.skipped) and "held out" in report(fit)


def test_missing_rows_are_named_and_the_whatif_loads(tmp_path: Path) -> None:
    base = get_profile("h200")
    only_idle = [r for r in rows_from(base) if r.params.get("kernel") == "idle"]
    fit = fit_power(base, only_idle)
    assert set(fit.values) == {"static_power_w"} and len(fit.skipped) == 4
    path = tmp_path / "p.toml"
    path.write_text(whatif(fit, "m.csv"))
    hw = get_profile(str(path))  # a what-if path is a profile name
    assert hw.static_power_w.kind == "calibrated" and "m.csv rows T-001" in hw.static_power_w.source
