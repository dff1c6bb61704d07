"""Fit a GPU profile's power model to a `torchsim microbench` file: `torchsim calibrate --power`.

The file's sustained rows (`--sustained`, 3 s each) carry the time per call and NVML's board power of kernels run
back to back; its idle row the board power before the suite. The fit is closed-form, step by step, each step on
torchsim's own simulation of the measured kernel (the same steps scripts/calibrate_power_h200.py took for the
h200 profile):

1. static_power_w: the idle row.
2. sm_active_pj_per_cycle: the L2-resident fp32 add (graph replays) at boost: what its board power leaves after
   idle and the L2 energy of its bytes, per busy SM-cycle (no DRAM traffic).
3. dram_pj_per_byte: the 1 GiB add (DRAM-bound) at boost: what idle, the SMs and L2 leave, per DRAM byte.
4. tensor_pj_per_flop_bf16 / _fp8: the largest sustained GEMM on random data of each dtype: the clock at which
   the simulated kernel takes the measured time, then the tensor energy that draws power_limit_w there.

The other sustained random-data GEMMs are held out and predicted with the fit. A step whose rows are missing is
skipped and named; nothing is invented. A power-limited GEMM needs the profile's power limit to be the one the
board held (NVML's enforced limit is in every row's notes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from torchsim.calibration.params import CalibrationError
from torchsim.calibration.run import _q as toml_string
from torchsim.graph import DType
from torchsim.hwmodels.power import graph_idle_s, power_w, tensor_energy_for_clock
from torchsim.hwmodels.quantity import Quantity
from torchsim.sim.sustained import result_work
from torchsim.validation.published import Row

POWER_FIELDS = ("static_power_w", "sm_active_pj_per_cycle", "dram_pj_per_byte", "tensor_pj_per_flop_bf16",
                "tensor_pj_per_flop_fp8")


@dataclass
class PowerFit:
    profile: str
    values: dict[str, tuple[float, str, str]] = field(default_factory=dict)  # field -> (value, unit, rows used)
    lines: list[str] = field(default_factory=list)  # the report, step by step
    held_out: list[tuple[str, float, float]] = field(default_factory=list)  # (row id, measured, predicted) TFLOPS
    skipped: list[str] = field(default_factory=list)

    def profile_with(self, hw: Any) -> Any:
        return replace(hw, **{k: Quantity(v, unit, "calibrated", f"torchsim calibrate --power: {rows}")
                              for k, (v, unit, rows) in self.values.items()})


def _sustained(rows: list[Row], category: str, metric: str) -> list[Row]:
    return [r for r in rows if r.category == category and r.metric == metric and "sustained" in r.workload]


def _power_of(rows: list[Row], r: Row) -> Row | None:
    """The board_power_w row measured with the sustained row `r` (same params, kernel and data)."""
    for x in rows:
        if x.metric == "board_power_w" and all(x.params.get(k) == v for k, v in r.params.items()):
            return x
    return None


def simulate_at(kernel: Any, hw: Any, f: float) -> Any:
    """`kernel` on `hw` locked at clock `f` (extrapolated where large, as predictions simulate it)."""
    from torchsim.prediction.repeats import simulate_kernel
    from torchsim.sim.sustained import sustain
    return simulate_kernel(kernel, hw, sustained=lambda run_at, h, dt: sustain(run_at, h, dt, lock_clock_hz=f))


def clock_for_time(kernel: Any, hw: Any, t: float, f0: float = 1.4e9) -> tuple[float, Any]:
    """The clock (at most clock_max_hz) at which the simulated `kernel` takes `t` seconds, by three steps of
    f <- f * t_sim(f) / t from `f0` (exact for a compute-bound kernel), and the kernel simulated there."""
    f_max = float(hw.clock_max_hz.value)
    f = f0
    for _ in range(3):
        f = min(f_max, f * simulate_at(kernel, hw, f).time_s / t)
    return f, simulate_at(kernel, hw, f)


def _gemm_shape(r: Row) -> tuple[int, int, int]:
    return int(r.params["M"]), int(r.params["N"]), int(r.params["K"])


def _dtype(r: Row) -> DType:
    return DType.FP8_E4M3 if "fp8" in r.dtype.lower() or "e4m3" in r.dtype.lower() else DType.BF16


def fit_power(hw: Any, rows: list[Row]) -> PowerFit:
    """The power fit of `hw` (a GPU profile with a power model) to `rows` (one profile's microbench rows)."""
    from torchsim.lowering.templates import gemm
    from torchsim.lowering.templates.elementwise import elementwise

    if getattr(hw, "power_limit_w", None) is None:
        raise CalibrationError(f"profile {hw.name!r} has no power model to calibrate")
    out = PowerFit(hw.name)
    f_max = float(hw.clock_max_hz.value)

    def keep(name: str, value: float, unit: str, used: str, why: str) -> None:
        nonlocal hw
        if not (math.isfinite(value) and value > 0):
            out.skipped.append(f"{name}: the fit gave {value:.4g} {unit} ({why}); kept "
                               f"{float(getattr(hw, name).value):.4g}")
            return
        out.values[name] = (value, unit, used)
        hw = replace(hw, **{name: Quantity(value, unit, "calibrated", used)})
        out.lines.append(f"{name:<26} {value:10.4g} {unit:<9} {why}")

    idle = [r for r in rows if r.metric == "board_power_w" and r.params.get("kernel") == "idle"]
    if idle:
        keep("static_power_w", idle[0].value, "W", idle[0].id, "the board at idle, before the suite")
    else:
        out.skipped.append("static_power_w: no idle row (NVML unavailable when the file was written)")
    adds = [r for r in _sustained(rows, "microbenchmark", "bandwidth_gbps") if r.params.get("op") == "add"]
    l2 = next((r for r in adds if r.params.get("adds_per_call")), None)
    dram = next((r for r in adds if not r.params.get("adds_per_call")), None)
    static = float(hw.static_power_w.value)
    e_l2 = float(hw.l2_pj_per_byte.value)
    if l2 is not None and (pw := _power_of(rows, l2)) is not None:
        per_add = 2.0 * l2.params["bytes"] / (l2.value * 1e9)  # seconds per add (its bytes read + written)
        busy = max(0.0, 1.0 - graph_idle_s(hw) / per_add)  # gap and tail between the adds: SMs idle
        c = (pw.value - static - e_l2 * 1e-12 * 2.0 * l2.params["bytes"] / per_add) / (hw.sms * busy * f_max) * 1e12
        keep("sm_active_pj_per_cycle", c, "pJ/cycle", f"{l2.id}, {pw.id}",
             f"L2-resident add: {pw.value:.0f} W at {l2.value / 1e3:.2f} TB/s through L2, SMs {busy:.0%} busy")
    else:
        out.skipped.append("sm_active_pj_per_cycle: no L2-resident add with its board power")
    if dram is not None and (pw := _power_of(rows, dram)) is not None:
        n = dram.params["bytes"] // 2  # its bytes as bf16 elements: the energy counts bytes, not the dtype
        res = simulate_at(elementwise(int(n), 1, 1, "add", DType.BF16, hw), hw, f_max)
        w = result_work(DType.BF16, hw, res)
        t = 2.0 * dram.params["bytes"] / (dram.value * 1e9)
        rest = power_w(replace(hw, dram_pj_per_byte=Quantity(0.0, "pJ/B", "calibrated", "fit: DRAM left out")), w,
                       f_max, seconds=t)
        keep("dram_pj_per_byte", (pw.value - rest) / (res.dram_bytes / t) * 1e12, "pJ/B", f"{dram.id}, {pw.id}",
             f"DRAM-bound add: {pw.value:.0f} W at {dram.value / 1e3:.2f} TB/s, {rest:.0f} W of it idle + SMs + L2")
    else:
        out.skipped.append("dram_pj_per_byte: no DRAM-bound add with its board power")
    gemms = [r for r in _sustained(rows, "gemm", "tflops") if "random" in r.workload]
    for dtype, name in ((DType.BF16, "tensor_pj_per_flop_bf16"), (DType.FP8_E4M3, "tensor_pj_per_flop_fp8")):
        mine = sorted((r for r in gemms if _dtype(r) is dtype), key=lambda r: -math.prod(_gemm_shape(r)))
        if not mine:
            out.skipped.append(f"{name}: no sustained {dtype.name.lower()} GEMM on random data")
            continue
        anchor = mine[0]
        m, n, k = _gemm_shape(anchor)
        kernel = gemm(m, n, k, dtype, hw)
        f, res = clock_for_time(kernel, hw, 2.0 * m * n * k / (anchor.value * 1e12))
        if f >= f_max * (1 - 1e-6):
            out.skipped.append(f"{name}: {anchor.id} ran at boost (not power-limited): no tensor energy to fit")
            continue
        try:
            e = tensor_energy_for_clock(hw, result_work(dtype, hw, res), f)
        except ValueError as exc:
            out.skipped.append(f"{name}: {exc}")
            continue
        keep(name, e, "pJ/FLOP", anchor.id, f"{anchor.id} {m}x{n}x{k}: {anchor.value:.1f} TFLOPS measured, taken at "
             f"{f / 1e9:.3f} GHz")
        for r in mine[1:]:
            from torchsim.prediction.repeats import simulate_kernel
            mm, nn, kk = _gemm_shape(r)
            pred = simulate_kernel(gemm(mm, nn, kk, dtype, hw), hw)
            out.held_out.append((r.id, r.value, pred.tflops))
    return out


def report(fit: PowerFit) -> str:
    lines = [f"torchsim calibrate --power {fit.profile}:", *("  " + x for x in fit.lines)]
    if fit.held_out:
        lines.append("held out (sustained GEMMs on random data, TFLOPS measured / predicted):")
        lines += [f"  {rid}: {m:.1f} / {p:.1f} ({100 * (p / m - 1):+.1f}%)" for rid, m, p in fit.held_out]
    if fit.skipped:
        lines.append("not fitted:")
        lines += [f"  {x}" for x in fit.skipped]
    return "\n".join(lines)


def whatif(fit: PowerFit, measurements: str) -> str:
    """A what-if TOML: the profile and the fitted power fields, each `calibrated` and citing its rows."""
    q = toml_string
    lines = [f"# torchsim calibrate --power --hw {fit.profile} --measurements {measurements}",
             f"base = {q(fit.profile)}", f"name = {q(fit.profile + '-power')}",
             f"description = {q('power model calibrated against ' + measurements)}"]
    lines += [f"{k} = {q(f'{v:.6g} {unit}')}" for k, (v, unit, _rows) in fit.values.items()]
    for k, (_v, _u, rows) in fit.values.items():
        lines += ["", f"[provenance.{k}]", 'kind = "calibrated"',
                  f"source = {q(f'torchsim calibrate --power: {measurements} rows {rows}')}"]
    return "\n".join(lines) + "\n"
