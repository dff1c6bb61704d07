"""Fit the H200 power model to first-hand sustained measurements (torchsim/validation/measured/h200-2026-12-04).

The same steps are the library's `torchsim calibrate --power` (torchsim/calibration/power_fit.py) for any
microbench file; this script keeps the h200 profile's fit reproducible from that run's files, whose power probes
came from benchmarks/power_window.py, and adds the fast power limit and the clock-window check.

    python scripts/calibrate_power_h200.py

The rows (microbench.csv) give, for kernels run back to back for 3 s: the time per call and NVML's board power;
power_window.json adds three power probes run the same way (benchmarks/power_window.py). The fit, in order, each
step closed-form on torchsim's own simulation of the kernel, every reading the second-half median of a 3 s run:

1. static_power_w: the idle board power nvidia-smi read before the run (smi_before.txt, Average Power Draw).
2. sm_active_pj_per_cycle: an elementwise add over an L2-resident 8 MiB buffer (200 per CUDA-graph replay) at the
   1980 MHz boost clock draws 387 W with no DRAM traffic: idle + the L2 energy of its bytes + C per busy SM-cycle.
3. dram_pj_per_byte: the same add over 1 GiB (DRAM-bound) draws 643 W; what idle, the SMs and L2 do not explain,
   per DRAM byte. The 1 GiB copy_ and the bf16 GEMV (MB-087/089) are printed as checks.
4. tensor_pj_per_flop_bf16: the 8192^3 bf16 GEMM on random data (MB-072, 700 W limit): the clock f* at which the
   simulated kernel takes the measured time, then the tensor energy that makes it draw the limit at f*.
5. tensor_pj_per_flop_fp8: the same on the FP8 8192^3 GEMM (MB-081).
6. power_limit_fast_w: the three GEMM loops of power_window.json run their first 5-20 ms after idle faster than
   sustained; the model's power at the clock each needs then, averaged. The GEMM alternating with a copy is
   printed against torchsim.prediction.clock_window's shared clock as a check.

Held out (not fitted, printed against the fit): the 4096^3 bf16 GEMM (MB-078), the GEMV's power. Prints the
constants to paste into torchsim/hwmodels/gpu.py (h200).
"""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

from torchsim.calibration.power_fit import clock_for_time, simulate_at
from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.power import graph_idle_s, power_w, tensor_energy_for_clock
from torchsim.hwmodels.quantity import Quantity
from torchsim.lowering.templates import gemm
from torchsim.lowering.templates.elementwise import elementwise
from torchsim.prediction.repeats import simulate_kernel
from torchsim.sim.sustained import result_work

DATA = Path(__file__).resolve().parents[1] / "torchsim/validation/measured/h200-2026-12-04"
IDLE_W = 79.19  # smi_before.txt: Average Power Draw 79.19 W, idle at 345 MHz


def rows() -> dict[str, dict[str, str]]:
    with open(DATA / "microbench.csv", newline="") as f:
        return {r["id"]: r for r in csv.DictReader(f)}


def q(v: float, unit: str) -> Quantity:
    return Quantity(v, unit, "calibrated", "scripts/calibrate_power_h200.py")


def window_probes() -> dict[str, dict[str, float]]:
    """The three power probes of power_window.json: second-half median NVML power and per-call time."""
    doc = json.loads((DATA / "power_window.json").read_text())
    out = {}
    for key, prefix in (("dram", "probe: add on 1 GiB"), ("l2", "probe: add on 8 MiB"), ("copy", "probe: copy_")):
        case = next(c for c in doc["cases"] if c["case"].startswith(prefix))
        half = case["seconds"] / 2
        watts = sorted(p for t, _, p, _ in case["nvml"] if t > half and p is not None)
        times = sorted(dt for _, at, dt in case["calls"] if at > 1000 * half)
        out[key] = {"w": watts[len(watts) // 2], "ms": times[len(times) // 2]}
    return out


def main() -> None:
    mb = rows()
    hw = replace(get_profile("h200"), static_power_w=q(IDLE_W, "W"))
    f_max = float(hw.clock_max_hz.value)
    # 2. the probes at boost: an L2-resident add (SMs + L2, no DRAM) gives C, a DRAM-bound add the DRAM energy
    probes = window_probes()
    l2p, dramp, copyp = probes["l2"], probes["dram"], probes["copy"]
    interval = l2p["ms"] * 1e-3 / 200  # one 8 MiB add per 1/200 of a replay
    l2_rate = 2 * (8 << 20) / interval  # bytes read and written through L2 per second
    busy = 1.0 - graph_idle_s(hw) / interval  # the graph's kernel-to-kernel gap and each add's tail: SMs idle
    e_l2 = float(hw.l2_pj_per_byte.value)
    c_sm = (l2p["w"] - IDLE_W - e_l2 * 1e-12 * l2_rate) / (hw.sms * busy * f_max) * 1e12
    print(f"L2-resident add   {interval * 1e6:.2f} us per 8 MiB add, {l2_rate / 1e12:.2f} TB/s through L2, SMs busy "
          f"{busy:.0%}, {l2p['w']:.0f} W -> sm_active_pj_per_cycle {c_sm:.0f} pJ/cycle "
          f"({c_sm * 1e-12 * hw.sms * f_max:.0f} W for all SMs at boost)")
    hw = replace(hw, sm_active_pj_per_cycle=q(c_sm, "pJ/cycle"))
    add = elementwise(512 << 20, 1, 1, "add", DType.BF16, hw)  # the fp32 add's bytes as bf16 elements
    r = simulate_at(add, hw, f_max)
    w = result_work(DType.BF16, hw, r)
    t = dramp["ms"] * 1e-3
    rest = IDLE_W + 1e-12 * (e_l2 * w.l2_bytes + float(hw.simt_pj_per_op.value) * w.simt_ops) / t \
        + c_sm * 1e-12 * w.active_sms * f_max
    e_dram = (dramp["w"] - rest) / (r.dram_bytes / t) * 1e12
    print(f"DRAM-bound add    {t * 1e6:.1f} us per 1 GiB add ({r.dram_bytes / t / 1e12:.2f} TB/s), {dramp['w']:.0f} W; "
          f"{rest:.0f} W is idle + SMs + L2 -> dram_pj_per_byte {e_dram:.1f} pJ/B")
    hw = replace(hw, dram_pj_per_byte=q(e_dram, "pJ/B"))
    for label, kernel, t_s, watts in (
            ("copy_ 1 GiB", elementwise(512 << 20, 1, 1, "copy", DType.BF16, hw), copyp["ms"] * 1e-3, copyp["w"]),
            ("GEMV 1x8192x8192", gemm(1, 8192, 8192, DType.BF16, hw),
             2.0 * 8192 * 8192 / (float(mb["MB-087"]["value"]) * 1e12), float(mb["MB-089"]["value"]))):
        r = simulate_at(kernel, hw, f_max)
        model = power_w(hw, result_work(DType.BF16, hw, r), f_max, seconds=t_s)
        print(f"check: {label:<17} {t_s * 1e6:.1f} us per call: {model:.0f} W modelled vs {watts:.0f} W measured "
              f"({100 * (model / watts - 1):+.1f}%)")
    # 3./4. tensor energies from the power-capped GEMMs
    fitted = {}
    for label, dtype, t_id, field in (("bf16 8192^3", DType.BF16, "MB-072", "tensor_pj_per_flop_bf16"),
                                      ("fp8 8192^3", DType.FP8_E4M3, "MB-081", "tensor_pj_per_flop_fp8")):
        kernel = gemm(8192, 8192, 8192, dtype, hw)
        t = 2.0 * 8192 ** 3 / (float(mb[t_id]["value"]) * 1e12)
        f, r = clock_for_time(kernel, hw, t, 1.4e9)
        e = tensor_energy_for_clock(hw, result_work(dtype, hw, r), f)
        fitted[field] = e
        hw = replace(hw, **{field: q(e, "pJ/FLOP")})
        print(f"{label:<18} measured {t * 1e6:8.2f} us/call -> the simulated kernel takes it at {f / 1e9:.3f} GHz "
              f"(NVML median {mb[t_id]['notes'].split('SM clock ')[1].split(' MHz')[0]} MHz); {field} {e:.4f} pJ/FLOP")
    # held out
    kernel = gemm(4096, 4096, 4096, DType.BF16, hw)
    res = simulate_kernel(kernel, hw)
    meas = float(mb["MB-078"]["value"])
    print(f"held out: bf16 4096^3 predicted {res.tflops:.1f} TFLOPS at {res.clock_hz / 1e9:.3f} GHz ({res.power_w:.0f} "
          f"W) vs measured {meas:.1f} ({100 * (res.tflops / meas - 1):+.1f}%)")
    for label, dtype, t_id in (("bf16 8192^3", DType.BF16, "MB-072"), ("fp8 8192^3", DType.FP8_E4M3, "MB-081")):
        res = simulate_kernel(gemm(8192, 8192, 8192, dtype, hw), hw)
        meas = float(mb[t_id]["value"])
        print(f"fitted:   {label} predicted {res.tflops:.1f} TFLOPS at {res.clock_hz / 1e9:.3f} GHz vs measured "
              f"{meas:.1f} ({100 * (res.tflops / meas - 1):+.1f}%)")
    # 6. the fast limit: the first 5-20 ms of each GEMM loop from idle (power_window.json)
    doc = json.loads((DATA / "power_window.json").read_text())
    fast = []
    for case, dtype, size in (("bf16 8192^3", DType.BF16, 8192), ("fp8 8192^3", DType.FP8_E4M3, 8192),
                              ("bf16 4096^3", DType.BF16, 4096)):
        calls = next(c for c in doc["cases"] if c["case"] == case)["calls"]
        burst = sorted(dt for _, at, dt in calls if 5.0 <= at < 20.0)
        t = burst[len(burst) // 2] * 1e-3
        kernel = gemm(size, size, size, dtype, hw)
        f, r = clock_for_time(kernel, hw, t, 1.6e9)
        watts = power_w(hw, result_work(dtype, hw, r), f)
        fast.append(watts)
        print(f"burst {case:<12} {t * 1e6:8.1f} us/call 5-20 ms after idle -> {f / 1e9:.3f} GHz, {watts:.0f} W "
              "modelled")
    p_fast = sum(fast) / len(fast)
    print(f"-> power_limit_fast_w {p_fast:.0f} W (mean; spread {min(fast):.0f}-{max(fast):.0f} W)")
    hw = replace(hw, power_limit_fast_w=q(p_fast, "W"))
    # check: the GEMM alternating with a copy, one shared clock (torchsim.prediction.clock_window)
    from torchsim.lowering.kernel_call import KernelCall, KernelKind
    from torchsim.prediction.clock_window import share_clock
    from torchsim.prediction.kernel_sim import simulate_call
    g = KernelCall.make(KernelKind.GEMM, DType.BF16, name="gemm", m=8192, n=8192, k=8192)
    cp = KernelCall.make(KernelKind.ELEMENTWISE, DType.BF16, name="copy", numel=512 << 20, inputs=1, outputs=1,
                         op="copy")
    shared = share_clock([(g, simulate_call(g, hw)), (cp, simulate_call(cp, hw))], hw)
    alt = next(c for c in doc["cases"] if c["case"].startswith("bf16 8192^3 alternating"))["calls"]
    for which, label in ((0, "GEMM"), (1, "copy")):
        late = sorted(dt for w, at, dt in alt if w == which and at > 1500.0)
        meas = late[len(late) // 2]
        pred = shared[which].time_s * 1e3
        print(f"check: alternating, {label}: {pred:.3f} ms predicted at {shared[which].clock_hz / 1e9:.3f} GHz vs "
              f"{meas:.3f} ms measured ({100 * (pred / meas - 1):+.1f}%)")
    print(f"\nH200: power_limit_fast_w {p_fast:.0f}, static_power_w {IDLE_W}, dram_pj_per_byte {e_dram:.1f}, "
          f"sm_active_pj_per_cycle {c_sm:.0f}, "
          + ", ".join(f"{k} {v:.4f}" for k, v in fitted.items()))


if __name__ == "__main__":
    main()
