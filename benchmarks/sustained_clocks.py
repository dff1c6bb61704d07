"""The clock each large published GEMM (and a GEMV) runs at under its profile's power limit, and why.

    python benchmarks/sustained_clocks.py

Each call goes through the prediction path (torchsim.prediction.kernel_sim: the sustained clock of
torchsim.sim.sustained, K-extrapolated or wave-scaled past the event budget). The ids name rows of
../shared/validation/published_dev.csv. A report, not a test.
"""

from __future__ import annotations

from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.prediction.kernel_sim import simulate_call

ROWS = (
    ("GEMM-151", "h100-sxm", DType.BF16, 8192, 8192, 8192),
    ("GEMM-154", "h100-sxm", DType.FP16, 10240, 10240, 10240),
    ("GEMM-150", "h100-sxm", DType.FP16, 4096, 4096, 4096),
    ("GEMM-068", "h100-sxm", DType.FP8_E4M3, 8192, 8192, 16384),
    ("GEMM-016", "h100-sxm", DType.FP8_E4M3, 4096, 7168, 16384),
    ("GEMM-143", "b200", DType.BF16, 8192, 8192, 8192),
    ("GEMM-141", "b200", DType.BF16, 6144, 6144, 6144),
    ("GEMM-139", "b200", DType.BF16, 4096, 4096, 4096),
    ("GEMM-161", "a100-sxm", DType.BF16, 8192, 8192, 8192),
    ("GEMM-164", "a100-sxm", DType.FP16, 10240, 10240, 10240),
    ("gemv", "h100-sxm", DType.BF16, 1, 8192, 8192),
)


def main() -> None:
    print(f"{'row':<9} {'profile':<9} {'dtype':<9} {'MxNxK':<18} {'clock':>9} {'TFLOPS':>8}  reason")
    for rid, prof, dtype, m, n, k in ROWS:
        s = simulate_call(KernelCall.make(KernelKind.GEMM, dtype, name="gemm", m=m, n=n, k=k), get_profile(prof))
        print(f"{rid:<9} {prof:<9} {dtype.name.lower():<9} {f'{m}x{n}x{k}':<18} {s.clock_hz / 1e9:5.3f} GHz "
              f"{2 * m * n * k / s.time_s / 1e12:8.1f}  {s.clock_reason}")


if __name__ == "__main__":
    main()
