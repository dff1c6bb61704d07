"""Grouped-GEMM predictions beside the published moe_grouped_gemm rows of ../shared/validation/published_dev.csv.

    python benchmarks/validate_moe.py [--quick] [--csv PATH]

Each row (DeepGEMM FP8 grouped GEMMs on H800, run on the h100-sxm profile) becomes `groups` experts of
`M_per_group` rows each: the contiguous layout is exactly that; the masked (decode) layout computes each group's
valid rows only, which the published shapes fill. DeepGEMM's per-128-channel FP8 scale promotion on the CUDA cores
is not modelled. MAPE is printed per group (hardware, dtype, layout). Not a pass/fail test: a report.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from torchsim.hwmodels import get_profile
from torchsim.lowering.templates.grouped_gemm import grouped_gemm, load_balance
from torchsim.sim.sustained import simulate_sustained as simulate  # sustained clock under the power limit
from torchsim.validation.published import dtype_of, grouped_mape, rows


def layout_of(workload: str) -> str:
    w = workload.lower()
    return "masked" if "masked" in w else "contiguous" if "contiguous" in w else "grouped"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", type=Path, default=None)
    ap.add_argument("--quick", action="store_true", help="skip rows above 2e12 FLOPs")
    args = ap.parse_args()
    results = []
    print(f"{'id':<9} {'profile':<9} {'dtype':<9} {'layout':<10} {'groups x M x N x K':<24} {'metric':<7} "
          f"{'measured':>9} {'predicted':>9} {'err%':>7}  {'bound':<16} tail idle")
    t0 = time.time()
    for r in rows("moe_grouped_gemm", args.csv):
        prof = r.profile
        p = r.params
        groups, m, n, k = p.get("groups"), p.get("M_per_group"), p.get("N"), p.get("K")
        if prof is None or not (groups and m and n and k):
            print(f"{r.id:<9} skipped: hardware {r.hardware!r} or shape {p} not modelled")
            continue
        dtype = dtype_of(r.dtype)
        flops = 2.0 * groups * m * n * k
        if args.quick and flops > 2e12:
            continue
        hw = get_profile(prof[0])
        res = simulate(grouped_gemm((m,) * groups, n, k, dtype, hw), hw)
        if r.metric == "tflops":
            pred, meas = res.tflops, r.value
        elif r.metric in ("time_us", "time_ms"):
            scale = 1e3 if r.metric == "time_ms" else 1.0
            pred, meas = res.time_us / scale, r.value
        else:
            continue
        layout = layout_of(r.workload)
        results.append((f"{prof[0]} {dtype.name.lower()} {layout}", pred, meas))
        shape = f"{groups}x{m}x{n}x{k}"
        tail = load_balance(res).get("tail_idle_share", 0.0)
        print(f"{r.id:<9} {prof[0]:<9} {dtype.name.lower():<9} {layout:<10} {shape:<24} {r.metric:<7} {meas:>9.1f} "
              f"{pred:>9.1f} {100 * (pred - meas) / meas:>+7.1f}  {res.bound:<16} {100 * tail:.0f}%")
    print(f"\nMAPE per group ({time.time() - t0:.0f} s of simulation):")
    for g, (count, err) in sorted(grouped_mape(results).items()):
        print(f"  {g:<34} n={count:<3} MAPE {err:6.1f}%")


if __name__ == "__main__":
    main()
