"""The kernels torchsim's H100/H200 templates model, each launched once inside a CUDA profiler range, for Nsight
Compute to count (cycles, pipe utilisation, memory throughput) on a real GPU.

    ncu --clock-control none --profile-from-start off --section SpeedOfLight --section ComputeWorkloadAnalysis \
        --section MemoryWorkloadAnalysis --section LaunchStats --nvtx -o kernels python benchmarks/ncu_kernels.py

Each case is warmed up (cuBLAS heuristics, cuDNN plans) outside the range, then run once inside it, in an NVTX
range named after the case (ncu --nvtx shows it beside each kernel), so the profile holds one launch per case
(some cases launch more than one kernel: a split-K reduction, the two kernels of silu then mul). Needs a
CUDA GPU; a measurement script, not a test.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def cases(torch: Any) -> list[tuple[str, Callable[[], Any]]]:
    f = torch.nn.functional
    dev, bf16 = "cuda", torch.bfloat16
    out: list[tuple[str, Callable[[], Any]]] = []

    def mm(m: int, n: int, k: int) -> None:
        a, b = torch.randn(m, k, device=dev, dtype=bf16), torch.randn(k, n, device=dev, dtype=bf16)
        out.append((f"gemm bf16 {m}x{n}x{k}", lambda: torch.matmul(a, b)))

    for shape in ((8192, 8192, 8192), (4096, 4096, 4096), (2048, 6144, 4096), (2048, 28672, 4096),
                  (2048, 4096, 14336), (1, 28672, 4096)):
        mm(*shape)
    a8 = torch.randn(8192, 8192, device=dev).to(torch.float8_e4m3fn)
    b8 = torch.randn(8192, 8192, device=dev).to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0, device=dev)
    out.append(("gemm fp8 8192x8192x8192",
                lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=bf16)))
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def attn(b: int, h: int, sq: int, skv: int, causal: bool) -> None:
        q = torch.randn(b, h, sq, 128, device=dev, dtype=bf16)
        k, v = (torch.randn(b, h, skv, 128, device=dev, dtype=bf16) for _ in range(2))

        def run() -> Any:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return f.scaled_dot_product_attention(q, k, v, is_causal=causal)
        out.append((f"attention fa2 b{b} h{h} sq{sq} skv{skv}{' causal' if causal else ''}", run))

    attn(4, 16, 4096, 4096, False)
    attn(1, 32, 8192, 8192, True)
    attn(16, 32, 1, 4096, False)
    x = torch.randn(256 << 20, device=dev)
    y = torch.empty_like(x)
    out.append(("copy fp32 1 GiB", lambda: y.copy_(x)))
    h = torch.randn(16384, 4096, device=dev, dtype=bf16)
    w = torch.ones(4096, device=dev, dtype=bf16)
    out.append(("rms_norm bf16 16384x4096", lambda: f.rms_norm(h, (4096,), w, 1e-5)))
    g, u = (torch.randn(16384, 14336, device=dev, dtype=bf16) for _ in range(2))
    out.append(("silu_mul bf16 16384x14336 (silu, then mul)", lambda: f.silu(g) * u))
    return out


def main() -> int:
    import torch
    if not torch.cuda.is_available():
        print("ncu_kernels: needs a CUDA GPU", file=sys.stderr)
        return 2
    todo = cases(torch)
    for _, fn in todo:  # warm-up: library heuristics and plans, outside the profiled range
        fn()
        fn()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for name, fn in todo:
        print(f"case {name}", file=sys.stderr, flush=True)
        torch.cuda.nvtx.range_push(name)
        fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    torch.cuda.cudart().cudaProfilerStop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
