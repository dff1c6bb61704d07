"""Attention predictions beside the published GPU attention rows of ../shared/validation/published_dev.csv.

    python benchmarks/validate_attention.py [--quick] [--csv PATH]

Each row runs the template of the kernel it names: FlashAttention-3 rows the fa3 template, FlashAttention-4
rows fa4, FlashAttention-2 rows (also the sm80 code path on Blackwell) fa2; Triton's tutorial kernel (an
FA2-style kernel with no warp specialisation) runs on the fa2 structure as a proxy. FlashMLA rows are peaks
"over a sweep": they are compared with the best of a small sweep of FlashMLA decoding shapes (an envelope,
reported in its own group). Rows we do not model (sparse MLA, Tensix, peaks over unstated sweeps) are listed
as skipped. `--quick` skips rows above 2e12 FLOPs. Not a pass/fail test: a report of MAPE per group.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from torchsim.hwmodels import get_profile
from torchsim.lowering.templates.attention import attention
from torchsim.lowering.templates.attention_config import AttnShape, AttnVariant
from torchsim.lowering.templates.decode import flash_mla
from torchsim.sim.sustained import simulate_sustained as simulate  # sustained clock under the power limit
from torchsim.validation.published import Row, grouped_mape, rows

MLA_SWEEP = [(64, 16, 1), (64, 32, 1), (64, 64, 1), (64, 128, 1), (64, 128, 2)]  # (batch, heads_q, seq_q), kv 4096


def variant_of(r: Row) -> tuple[AttnVariant, str] | None:
    w = r.workload.lower()
    if "flashattention-4" in w:
        return AttnVariant.FA4, "fa4"
    if "flashattention-3" in w:
        return AttnVariant.FA3, "fa3"
    if "triton" in w:
        return AttnVariant.FA2, "triton (fa2 proxy)"
    if "flashattention-2" in w:
        return AttnVariant.FA2, "fa2"
    return None


def shape_of(r: Row) -> AttnShape | None:
    p = r.params
    heads = p.get("heads") or p.get("heads_q")
    d = p.get("head_dim")
    if heads is None and p.get("hidden_dim") and d:
        heads = p["hidden_dim"] // d
    seq = p.get("seqlen")
    if not (p.get("batch") and heads and seq and d):
        return None
    causal = p.get("causal") is True
    return AttnShape(int(p["batch"]), int(heads), int(p.get("heads_kv", heads)), int(seq), int(seq), int(d), causal)


def mla_envelope(hw_name: str) -> tuple[float, float]:
    """Best (GB/s, TFLOPS) over a FlashMLA decoding sweep (kernel bytes and FLOPs over time, as FlashMLA counts)."""
    hw = get_profile(hw_name)
    best_bw = best_tf = 0.0
    for batch, heads, sq in MLA_SWEEP:
        kgs = flash_mla(batch, heads, sq, 4096, hw)
        t = sum(simulate(k, hw).time_s for k in kgs)
        best_bw = max(best_bw, kgs[0].dram_bytes / t / 1e9)
        best_tf = max(best_tf, kgs[0].flops / t / 1e12)
    return best_bw, best_tf


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", type=Path, default=None)
    ap.add_argument("--quick", action="store_true", help="skip rows above 2e12 FLOPs")
    args = ap.parse_args()
    results: list[tuple[str, float, float]] = []
    print(f"{'id':<9} {'profile':<9} {'kernel':<19} {'shape (b,h,s,d)':<20} {'metric':<9} {'measured':>9} "
          f"{'predicted':>9} {'err%':>7}  bound")
    t0 = time.time()
    envelope: dict[str, tuple[float, float]] = {}
    for r in rows("attention", args.csv):
        prof = r.profile
        if prof is None:
            print(f"{r.id:<9} skipped: {r.hardware} is not a GPU profile here")
            continue
        if "flashmla" in r.workload.lower():
            if "sparse" in r.workload.lower() or r.dtype.lower().startswith("fp8"):
                print(f"{r.id:<9} skipped: sparse / FP8-KV FlashMLA is not modelled")
                continue
            if prof[0] not in envelope:
                envelope[prof[0]] = mla_envelope(prof[0])
            bw, tf = envelope[prof[0]]
            pred = bw if r.metric == "bandwidth_gbps" else tf
            results.append((f"{prof[0]} flashmla peak (envelope)", pred, r.value))
            print(f"{r.id:<9} {prof[0]:<9} {'flashmla (peak)':<19} {'sweep kv 4096':<20} {r.metric:<9} "
                  f"{r.value:>9.1f} {pred:>9.1f} {100 * (pred - r.value) / r.value:>+7.1f}  best of sweep")
            continue
        var = variant_of(r)
        shape = shape_of(r)
        if var is None or shape is None:
            print(f"{r.id:<9} skipped: {r.workload[:60]} (shape not stated)")
            continue
        if args.quick and shape.flops() > 2e12:
            continue
        hw = get_profile(prof[0])
        kg = attention(shape, hw, variant=var[0])
        res = simulate(kg, hw)
        if r.metric == "tflops":
            pred, meas = res.tflops, r.value
        elif r.metric in ("time_ms", "time_us"):
            pred, meas = res.time_us / (1e3 if r.metric == "time_ms" else 1.0), r.value
        else:
            continue
        results.append((f"{prof[0]} {var[1]}", pred, meas))
        dims = f"{shape.batch},{shape.heads_q},{shape.seq_q},{shape.head_dim}"
        print(f"{r.id:<9} {prof[0]:<9} {var[1]:<19} {dims:<20} {r.metric:<9} {meas:>9.3f} {pred:>9.3f} "
              f"{100 * (pred - meas) / meas:>+7.1f}  {res.bound}")
    print(f"\nMAPE per group ({time.time() - t0:.0f} s):")
    for g, (count, err) in sorted(grouped_mape(results).items()):
        print(f"  {g:<34} n={count:<3} MAPE {err:6.1f}%")


if __name__ == "__main__":
    main()
