"""Fit the H200's kernel_tail_cycles: the device time a one-CTA kernel spends beyond its simulated work.

    python scripts/calibrate_fixed_h200.py

torch.profiler's CUDA kernel records (CUPTI activity: start to end on the GPU) of the HF Llama-3-8B eager decode
step (torchsim/validation/measured/h200-2026-12-04/llama_gpu.json) hold hundreds of one-CTA elementwise kernels at
batch 1: 4096-element residual adds and multiplies, fp32 pow and casts of one token's hidden state, one-element
rsqrt and adds. The decode step is host-bound (64 ms of Python for 6.5 ms of kernels), so they run at the 1980
MHz boost. Each is simulated with torchsim's elementwise template at that clock without a tail; the tail is the
median of (measured - simulated) in cycles, weighted by the kernel's calls. Prints the value for
torchsim/hwmodels/gpu.py (h200) and the fit's spread.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.quantity import assumed
from torchsim.lowering.templates.elementwise import elementwise
from torchsim.sim.sustained import simulate_sustained

DATA = Path(__file__).resolve().parents[1] / "torchsim/validation/measured/h200-2026-12-04/llama_gpu.json"
# kernel name fragment -> (numel, inputs, outputs, op, dtype) of the torchsim call it is
KERNELS = {
    "CUDAFunctor_add<c10::BFloat16>": (4096, 2, 1, "add", DType.BF16),
    "BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor":
        (4096, 2, 1, "mul", DType.BF16),
    "rsqrt_kernel_cuda": (1, 1, 1, "rsqrt", DType.FP32),
    "CUDAFunctorOnSelf_add<float>": (1, 1, 1, "add", DType.FP32),
    "bfloat16_copy_kernel_cuda": (4096, 1, 1, "copy", DType.FP32),
    "pow_tensor_scalar_kernel_impl<float, float>": (4096, 1, 1, "pow", DType.FP32),
}


def main() -> None:
    doc = json.loads(DATA.read_text())
    top = doc["decode"][0]["profile"]["top"]
    hw = replace(get_profile("h200"), kernel_tail_cycles=assumed(0.0, "cycles", "calibration: no tail"))
    f = float(hw.clock_max_hz.value)
    tails: list[float] = []
    for frag, (numel, ins, outs, op, dtype) in KERNELS.items():
        rows = [r for r in top if frag in r["kernel"] and "vectorized_elementwise_kernel" in r["kernel"]]
        if not rows:
            print(f"{frag[:40]:<42} not in the profile")
            continue
        r = max(rows, key=lambda x: x["calls"])
        meas = r["device_us"] / r["calls"] * 1e-6
        sim = simulate_sustained(elementwise(numel, ins, outs, op, dtype, hw), hw, lock_clock_hz=f)
        tail = (meas - sim.time_s) * f
        tails += [tail] * int(r["calls"])
        print(f"{op:<5} {dtype.name.lower():<4} {numel:>5} el: measured {meas * 1e6:.3f} us x{r['calls']:<4} "
              f"simulated {sim.time_s * 1e6:.3f} us -> tail {tail:.0f} cycles")
    med = statistics.median(tails)
    print(f"\nkernel_tail_cycles {med:.0f} (median over {len(tails)} calls; range {min(tails):.0f}-{max(tails):.0f})")


if __name__ == "__main__":
    main()
