"""Warp-scheduling policy comparison: GTO, RR, two-level, cache-conscious (CCWS) on three kernels.

    python benchmarks/policy_study.py [--gemm 2048,4096]

Prints cycles, L1 line misses per 1000 operations (nodes executed), L1 hit rate and VTA hits for: a loop whose
warps re-read their own 2 KiB working set (32 warps x 2 KiB > the 28 KiB L1), the same loop streaming fresh
tiles, and the TMA-fed sm90 GEMM (full H100). The loops run on one SM with its share of the L2 bandwidth.
"""

from __future__ import annotations

import argparse
import time

from torchsim.studies.policies import POLICY_NAMES, run_loop, run_tma_gemm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gemm", default="2048,4096", help="square TMA GEMM sizes")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = [run_loop(True, p) for p in POLICY_NAMES] + [run_loop(False, p) for p in POLICY_NAMES]
    for size in (int(s) for s in args.gemm.split(",") if s):
        rows += [run_tma_gemm(p, size) for p in POLICY_NAMES]
    print(f"{'kernel':<22} {'policy':<10} {'cycles':>9} {'vs GTO':>7} {'L1 miss/1k ops':>15} {'L1 hit':>7} "
          f"{'VTA hits':>8}")
    gto = {r.kernel: r for r in rows if r.policy == "gto"}
    for r in rows:
        print(f"{r.kernel:<22} {r.policy:<10} {r.cycles:>9} {r.cycles / gto[r.kernel].cycles:>7.3f} "
              f"{r.misses_per_kop:>15.0f} {r.l1_hit_rate:>7.1%} {r.vta_hits:>8}")
    print(f"({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
