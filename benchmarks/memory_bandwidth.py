"""Achieved HBM bandwidth of the memory-bound templates on every GPU profile, small and large tensors.

    python benchmarks/memory_bandwidth.py [--hw a100-sxm,h100-sxm,h200,b200]

For each kernel: simulated time, effective bandwidth (the kernel's compulsory bytes over its time) as a share of
the profile's HBM peak and of its sustained (measured streaming) bandwidth, what bound it, its launch shape, and
the simulator's wall time. Large RMSNorm and SiLU-and-mul should sit at 70-95% of HBM peak; single rows are
latency-bound. A report, not a test.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from torchsim.graph import DType, KernelGraph
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.gpu import GpuProfile
from torchsim.lowering.templates.elementwise import elementwise, embedding, rope, silu_mul
from torchsim.lowering.templates.norms import rmsnorm, softmax
from torchsim.lowering.templates.reductions import argmax, reduce, router_topk
from torchsim.sim import simulate

BF16, FP32 = DType.BF16, DType.FP32
CASES: list[tuple[str, Callable[[GpuProfile], KernelGraph]]] = [
    ("rmsnorm 16384x4096", lambda hw: rmsnorm(16384, 4096, BF16, hw)),
    ("rmsnorm 8192x8192", lambda hw: rmsnorm(8192, 8192, BF16, hw)),
    ("rmsnorm 1x4096 (decode)", lambda hw: rmsnorm(1, 4096, BF16, hw)),
    ("rmsnorm 64x4096 (decode)", lambda hw: rmsnorm(64, 4096, BF16, hw)),
    ("add_rmsnorm 16384x4096", lambda hw: rmsnorm(16384, 4096, BF16, hw, residual=True)),
    ("silu_mul 8192x14336", lambda hw: silu_mul(8192, 14336, BF16, hw)),
    ("silu_mul 64x14336 (decode)", lambda hw: silu_mul(64, 14336, BF16, hw)),
    ("residual add 64M", lambda hw: elementwise(1 << 26, 2, 1, "add", BF16, hw)),
    ("rope 8192 tok 32+8 heads", lambda hw: rope(8192, 32, 8, 128, BF16, hw)),
    ("softmax 4096x32000 fp32", lambda hw: softmax(4096, 32000, FP32, hw)),
    ("embedding 8192x4096", lambda hw: embedding(8192, 4096, 128256, BF16, hw)),
    ("argmax 1x128256 fp32", lambda hw: argmax(1, 128256, FP32, hw)),
    ("argmax 256x128256 fp32", lambda hw: argmax(256, 128256, FP32, hw)),
    ("router_topk 8192x8 top2", lambda hw: router_topk(8192, 8, 2, BF16, hw)),
    ("moe_sum 8192x2x4096", lambda hw: reduce(8192 * 2 * 4096, 8192 * 4096, BF16, hw)),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hw", default="a100-sxm,h100-sxm,h200,b200")
    args = ap.parse_args()
    for name in args.hw.split(","):
        hw = get_profile(name)
        peak, sustained = float(hw.dram_peak_bytes_per_s.value), hw.dram_bytes_per_s_value
        print(f"\n{hw.name}: HBM peak {peak / 1e9:.0f} GB/s, sustained {sustained / 1e9:.0f} GB/s")
        print(f"  {'kernel':<28} {'time us':>9} {'GB/s':>7} {'% peak':>7} {'% sust':>7}  {'bound':<24} "
              f"{'rows/CTA':>8} {'threads':>7} {'sim s':>6}")
        for label, build in CASES:
            kg = build(hw)
            t0 = time.perf_counter()
            res = simulate(kg, hw)
            wall = time.perf_counter() - t0
            eff = kg.dram_bytes / res.time_s
            per = kg.attrs.get("rows_per_cta", kg.attrs.get("elements_per_cta", ""))
            print(f"  {label:<28} {res.time_us:>9.2f} {eff / 1e9:>7.0f} {100 * eff / peak:>6.1f}% "
                  f"{100 * eff / sustained:>6.1f}%  {res.bound:<24} {per!s:>8} {kg.attrs.get('threads', ''):>7} "
                  f"{wall:>6.2f}")


if __name__ == "__main__":
    main()
