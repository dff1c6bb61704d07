"""Weight and activation formats (torchsim.lowering.quant, issue 15 deliver 3): the figures the issue asks for.

1. Llama-2-7B batch-1 decode on A100 SXM in bf16, W8A16 and W4A16 (Marlin-style weight-only GEMMs): TPOT, weight
   bytes, and where the step's time goes, so the time ratio can be set against the weight-byte ratio.
2. An NVFP4 GEMM on B200 against FP8 (and bf16) from decode to compute-bound shapes.
3. The published rows these formats make expressible: GEMM-132 / GEMM-142 (torchao's nvfp4 GEMM on B200, pytorch/ao
   PR #2427) and UBENCH-020 (A100 int8 tensor-core peak, GPUInspector.jl) against the profile's int8 rate.

    PYTHONPATH=. python benchmarks/quant_formats.py [--decode 32] [--prompt 512]
"""

from __future__ import annotations

import argparse
import time

from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.lowering.templates.gemm import gemm
from torchsim.prediction.pipeline import predict
from torchsim.validation.predict_row import predict as predict_row
from torchsim.validation.predict_row import simulate_kernel
from torchsim.validation.published import read_rows


def _decode_parts(p: object) -> dict[str, float]:
    """Time of decode step 0 by part: the decoder-layer GEMMs, attention, LM head, the rest (us)."""
    parts = {"layer GEMMs": 0.0, "attention": 0.0, "LM head": 0.0, "other": 0.0, "gaps": 0.0}
    gemm_bytes = 0.0
    for k in p.kernels:  # type: ignore[attr-defined]
        if k.phase != "decode" or k.decode_step != 0:
            continue
        parts["gaps"] += k.gap_us
        if k.kind == "gemm" and k.layer is not None:
            parts["layer GEMMs"] += k.duration_us
            gemm_bytes += k.dram_bytes
        elif k.kind.startswith("attention"):
            parts["attention"] += k.duration_us
        elif k.kind == "gemm":
            parts["LM head"] += k.duration_us
        else:
            parts["other"] += k.duration_us
    parts["gemm_bytes"] = gemm_bytes
    return parts


def llama2_decode(prompt: int, decode: int) -> None:
    hw = get_profile("a100-sxm")
    print(f"1. Llama-2-7B, batch 1, prompt {prompt}, {decode} decode steps on {hw.name} (serving preset, CUDA graphs)")
    print(f"  {'format':<7} {'weights GB':>10} {'TPOT ms':>8} {'tok/s':>7} {'x floor':>7}   decode step 0 (us): "
          f"{'GEMMs':>7} {'attn':>6} {'LM head':>7} {'other':>6} {'gaps':>6}  GEMM GB/s")
    rows = {}
    for fmt in ("none", "w8a16", "w4a16"):
        t = time.time()
        p = predict("llama2-7b", hw, prompt_len=prompt, decode_steps=decode, quant=fmt, workers=1)
        parts = _decode_parts(p)
        rows[fmt] = (p, parts)
        bw = parts["gemm_bytes"] / (parts["layer GEMMs"] * 1e-6) / 1e9
        print(f"  {'bf16' if fmt == 'none' else fmt:<7} {p.stats['weight_bytes'] / 1e9:>10.2f} "
              f"{p.tpot_s * 1e3:>8.3f} {1 / p.tpot_s:>7.1f} {p.floor_ratio():>7.2f}   {'':>19} "
              f"{parts['layer GEMMs']:>7.0f} {parts['attention']:>6.0f} {parts['LM head']:>7.0f} "
              f"{parts['other']:>6.0f} {parts['gaps']:>6.0f}  {bw:>8.0f}   ({time.time() - t:.0f} s)")
    base, bparts = rows["none"]
    for fmt in ("w8a16", "w4a16"):
        p, parts = rows[fmt]
        speed = bparts["layer GEMMs"] / parts["layer GEMMs"]
        print(f"  {fmt}: weight bytes {base.stats['weight_bytes'] / p.stats['weight_bytes']:.2f}x fewer, TPOT "
              f"{base.tpot_s / p.tpot_s:.2f}x shorter, the decoder-layer GEMMs {speed:.2f}x faster on "
              f"{bparts['gemm_bytes'] / parts['gemm_bytes']:.2f}x fewer bytes")
    print(f"  (sustained HBM {hw.dram_bytes_per_s_value / 1e9:.0f} GB/s; the LM head, embedding, norms and the KV "
          "cache stay bf16, attention and the launch gaps do not shrink)\n")


def nvfp4_vs_fp8() -> None:
    hw = get_profile("b200")
    print("2. NVFP4 against FP8 and bf16 GEMMs on B200 (power-limited sustained clock)")
    print(f"  {'M x N x K':<18} {'bf16 us':>9} {'fp8 us':>9} {'nvfp4 us':>9} {'fp8/nvfp4':>9} {'nvfp4 TFLOPS':>12} "
          f"{'bound (nvfp4)':<26} config")
    for m, n, k in ((1, 8192, 8192), (16, 8192, 8192), (128, 8192, 8192), (1024, 1024, 1024), (4096, 4096, 4096)):
        t = {}
        for name, dt, q in (("bf16", DType.BF16, ""), ("fp8", DType.FP8_E4M3, ""), ("nvfp4", DType.FP4_E2M1, "nvfp4")):
            kg = gemm(m, n, k, dt, hw, shared_b=True, quant=q)
            t[name] = (simulate_kernel(kg, hw), kg)
        r, kg = t["nvfp4"]
        a = kg.attrs
        print(f"  {f'{m}x{n}x{k}':<18} {t['bf16'][0].time_us:>9.2f} {t['fp8'][0].time_us:>9.2f} {r.time_us:>9.2f} "
              f"{t['fp8'][0].time_s / r.time_s:>9.2f} {r.tflops:>12.0f} {r.bound:<26} "
              f"{a['bm']}x{a['bn']}x{a['bk']} s{a['stages']} sk{a['split_k']} at {r.clock_hz / 1e9:.2f} GHz")
    print(f"  peak: fp8 {hw.peak_tensor_flops_per_s(DType.FP8_E4M3) / 1e15:.2f}, fp4 "
          f"{hw.peak_tensor_flops_per_s(DType.FP4_E2M1) / 1e15:.2f} PFLOPS at the profile clock\n")


def published() -> None:
    print("3. Published rows the formats make expressible")
    rows = {r.id: r for r in read_rows()}
    for rid in ("GEMM-132", "GEMM-142"):
        r = rows[rid]
        p = predict_row(r)
        print(f"  {rid} {r.hardware} {r.workload[:44]} {r.params}: measured {r.value} {r.unit}, predicted "
              f"{p.predicted:.2f} ({100 * p.err:+.1f}%), {p.device.bound}, timer {p.method.name}")  # type: ignore
    r = rows["UBENCH-020"]
    hw = get_profile("a100-sxm")
    peak = hw.peak_tensor_flops_per_s(DType.INT8) / 1e12
    print(f"  UBENCH-020 {r.hardware} int8 tensor-core microkernel: measured {r.value} TOPS; a100-sxm's int8 rate "
          f"{peak:.1f} TOPS at {hw.clock_hz_value / 1e9:.2f} GHz ({100 * (peak - r.value) / r.value:+.1f}%; a "
          "peak, not a GEMM: no kernel is compared)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--decode", type=int, default=32)
    args = ap.parse_args()
    llama2_decode(args.prompt, args.decode)
    nvfp4_vs_fp8()
    published()


if __name__ == "__main__":
    main()
