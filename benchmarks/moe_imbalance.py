"""Mixtral 8x7B expert FFN as grouped GEMMs: balanced vs skewed routing, and why skew costs time.

    python benchmarks/moe_imbalance.py [--hw h100-sxm] [--tokens 128,256,512,1024,2048,4096] [--dtype bf16]
                                       [--workers 2] [--quick]

Shapes as in the GPU-Tile-Sim MoE case study: hidden 4096, FFN 14336, 8 experts, top-2; the up projection is the
fused gate/up grouped GEMM (N = 2 x 14336, K = 4096), the down projection N = 4096, K = 14336. Balanced routing
gives every expert 2T/8 rows; skewed routing gives 50% of the 2T assignments to one expert (capped at T, a token
picks an expert once) and spreads the rest evenly. Prints each GEMM's simulated time, its tile schedule and the
load across SMs, then the FFN margin per token count with its explanation. A report, not a test.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from typing import Any

from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.lowering.templates.grouped_gemm import grouped_gemm, load_balance
from torchsim.models.routing_synthetic import synthetic_routing
from torchsim.sim import simulate

HIDDEN, FFN, EXPERTS, TOP_K = 4096, 14336, 8, 2
PROJECTIONS = {"up": (2 * FFN, HIDDEN), "down": (HIDDEN, FFN)}


def run_one(job: tuple[str, str, int, str, str]) -> dict[str, Any]:
    hw_name, dtype_name, tokens, pattern, proj = job
    hw, dtype = get_profile(hw_name), DType.parse(dtype_name)
    counts = synthetic_routing(pattern, num_layers=1, num_experts=EXPERTS, top_k=TOP_K, tokens=tokens).layer(0)
    n, k = PROJECTIONS[proj]
    kg = grouped_gemm(counts, n, k, dtype, hw, tokens=tokens, top_k=TOP_K)
    t0 = time.perf_counter()
    res = simulate(kg, hw)
    a = kg.attrs
    return {"tokens": tokens, "pattern": pattern, "proj": proj, "counts": counts, "time_us": res.time_us,
            "tflops": res.tflops, "bound": res.bound, "dram_gb_s": res.dram_bytes_per_s / 1e9,
            "l2_hit": res.l2_hit_rate, "tiles": a["tiles"], "grid": a["grid"], "bm": a["bm"],
            "tile_eff": a["tile_efficiency"], "rounds": a["tiles_per_cta"][1], "template": a["template"],
            "tensor_busy": res.unit_busy.get("tensor", 0.0), "balance": load_balance(res),
            "wall_s": time.perf_counter() - t0}


def explain(b: dict[str, dict[str, Any]], s: dict[str, dict[str, Any]]) -> str:
    """Why skewed differs from balanced at one token count, from the two runs' schedules and results."""
    parts = []
    for proj in PROJECTIONS:
        rb, rs = b[proj], s[proj]
        why = [f"tiles {rb['tiles']} -> {rs['tiles']}"]
        if rs["tiles"] > rb["tiles"]:
            why.append(f"rows/computed rows {100 * rb['tile_eff']:.0f}% -> {100 * rs['tile_eff']:.0f}% (the cold "
                       f"experts' {rs['counts'][1]} rows pad their last {rs['bm']}-row tile)")
        why.append(f"rounds per CTA {rb['rounds']} -> {rs['rounds']} on {rs['grid']} CTAs")
        why.append(f"tensor pipe busy {100 * rb['tensor_busy']:.0f}% -> {100 * rs['tensor_busy']:.0f}%")
        why.append(f"tail idle {100 * rb['balance']['tail_idle_share']:.0f}% -> "
                   f"{100 * rs['balance']['tail_idle_share']:.0f}%")
        if "DRAM" in rb["bound"] and abs(rs["time_us"] / rb["time_us"] - 1) < 0.03:
            why.append("both stream all 8 experts' weights from DRAM once; the hot expert's extra M tiles re-read "
                       "them from L2")
        parts.append(f"{proj}: {'; '.join(why)}")
    return "\n      ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hw", default="h100-sxm")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--tokens", default="128,256,512,1024,2048,4096")
    ap.add_argument("--workers", type=int, default=2, help="simulations run in parallel (forked processes)")
    ap.add_argument("--quick", action="store_true", help="tokens 128,512,1024 only")
    args = ap.parse_args()
    tokens = [128, 512, 1024] if args.quick else [int(t) for t in args.tokens.split(",")]
    jobs = [(args.hw, args.dtype, t, p, proj) for t in tokens for p in ("balanced", "skewed") for proj in PROJECTIONS]
    jobs.sort(key=lambda j: -j[2])  # largest first so the workers finish together
    t0 = time.time()
    if args.workers > 1:
        with multiprocessing.get_context("fork").Pool(args.workers) as pool:
            results = pool.map(run_one, jobs, chunksize=1)
    else:
        results = [run_one(j) for j in jobs]
    by = {(r["tokens"], r["pattern"], r["proj"]): r for r in results}
    print(f"Mixtral 8x7B expert FFN grouped GEMMs on {args.hw} ({args.dtype}); template {results[0]['template']}")
    print(f"{'tokens':>6} {'routing':<9} {'proj':<5} {'max rows':>8} {'tiles':>6} {'rows/comp':>9} {'rounds':>6} "
          f"{'time us':>9} {'TFLOPS':>7} {'DRAM GB/s':>9} {'tail idle':>9} {'busy max/mean':>13}  bound")
    for t in tokens:
        for p in ("balanced", "skewed"):
            for proj in PROJECTIONS:
                r = by[(t, p, proj)]
                lb = r["balance"]
                print(f"{t:>6} {p:<9} {proj:<5} {max(r['counts']):>8} {r['tiles']:>6} {100 * r['tile_eff']:>8.0f}% "
                      f"{r['rounds']:>6} {r['time_us']:>9.1f} {r['tflops']:>7.0f} {r['dram_gb_s']:>9.0f} "
                      f"{100 * lb['tail_idle_share']:>8.1f}% {lb.get('tensor_busy_max_over_mean', 0):>13.2f}  "
                      f"{r['bound']}")
    print("\nFFN (up + down) per token count, skewed vs balanced:")
    for t in tokens:
        b = {proj: by[(t, "balanced", proj)] for proj in PROJECTIONS}
        s = {proj: by[(t, "skewed", proj)] for proj in PROJECTIONS}
        tb, ts = (sum(x["time_us"] for x in d.values()) for d in (b, s))
        print(f"  T={t:<5} balanced {tb:9.1f} us  skewed {ts:9.1f} us  margin {100 * (ts / tb - 1):+6.1f}%  "
              f"(routing {list(s['up']['counts'])})\n      {explain(b, s)}")
    print(f"\n{len(jobs)} simulations, {time.time() - t0:.0f} s wall ({sum(r['wall_s'] for r in results):.0f} s of "
          f"simulation on {args.workers} worker(s))")


if __name__ == "__main__":
    main()
