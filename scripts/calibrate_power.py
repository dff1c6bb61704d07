"""Calibrate each GPU profile's bf16 tensor energy per FLOP from a published sustained dense-GEMM point.

    python scripts/calibrate_power.py

For each profile: simulate the anchor's square bf16 GEMM (8192^3, or the size the anchor was measured at) at
clock_max_hz, then solve (torchsim.hwmodels.power.tensor_energy_for_clock) for the tensor pJ/FLOP that makes it
draw exactly power_limit_w at the anchor clock, keeping every other energy of the profile. The anchors (sources
at the profile fields, /work notes power.md §1): A100 257 TFLOPS (randn, 400 W), H100 794.5 TFLOPS (MAMF,
700 W), B200 4096^3 at 1586 MHz (clock and power measured during the GEMM: 984 W, at the 1000 W limit).
A TFLOPS anchor becomes a clock by the GEMM's compute-bound scaling: f = clock_max * anchor / simulated TFLOPS.
Prints the constants to paste into torchsim/hwmodels/gpu.py.
"""

from __future__ import annotations

from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.power import tensor_energy_for_clock, work_of
from torchsim.lowering.templates import gemm
from torchsim.sim import simulate
from torchsim.sim.sustained import at_clock

# profile: (anchor kind, value, the square GEMM's size)
ANCHORS = {"a100-sxm": ("tflops", 257.0, 8192), "h100-sxm": ("tflops", 794.5, 8192),
           "b200": ("clock_hz", 1.586e9, 4096)}


def main() -> None:
    for name, (kind, value, size) in ANCHORS.items():
        hw = get_profile(name)
        f_max = float(hw.clock_max_hz.value)
        kg = gemm(size, size, size, DType.BF16, hw)
        r = simulate(kg, at_clock(hw, f_max, "calibration"))
        w = work_of(hw, DType.BF16, r.cycles, r.clock_hz, r.unit_busy, r.dram_bytes, hw.sms)
        f = value if kind == "clock_hz" else f_max * value / r.tflops
        e = tensor_energy_for_clock(hw, w, f)
        print(f"{name:<9} {size}^3 {r.tflops:7.1f} TFLOPS at {f_max / 1e9:.3f} GHz -> anchor clock {f / 1e9:.3f} GHz; "
              f"tensor bf16 {e:.4f} pJ/FLOP")


if __name__ == "__main__":
    main()
