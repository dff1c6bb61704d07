"""GEMM predictions beside the published GPU GEMM rows of ../shared/validation/published_dev.csv, MAPE per group.

    python benchmarks/validate_gemm.py [--quick] [--csv PATH]

Each row is simulated with the default tile heuristic of its architecture (what a tuned library would pick);
its metric (TFLOPS or time) is compared with ours. Rows whose dtype torchsim does not model (nvfp4) are listed
as skipped. Not a pass/fail test: a report.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from torchsim.hwmodels import get_profile
from torchsim.lowering.templates import gemm
from torchsim.sim.sustained import simulate_sustained as simulate  # sustained clock under the power limit
from torchsim.validation.published import dtype_of, grouped_mape, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--csv", type=Path, default=None)
    ap.add_argument("--quick", action="store_true", help="skip rows above 2e12 FLOPs")
    args = ap.parse_args()
    results = []
    print(f"{'id':<9} {'profile':<9} {'dtype':<9} {'shape':<26} {'metric':<7} {'measured':>10} {'predicted':>10} "
          f"{'err%':>7}  bound")
    t0 = time.time()
    for r in rows("gemm", args.csv):
        prof = r.profile
        if prof is None:
            continue
        dtype = dtype_of(r.dtype)
        p = r.params
        m, n, k, batch = p.get("M"), p.get("N"), p.get("K"), p.get("batch", 1)
        if dtype is None or not (m and n and k):
            print(f"{r.id:<9} skipped: {r.dtype} not modelled")
            continue
        flops = 2.0 * batch * m * n * k
        if args.quick and flops > 2e12:
            continue
        hw = get_profile(prof[0])
        res = simulate(gemm(m, n, k, dtype, hw, batch=batch, shared_b=False), hw)
        if r.metric == "tflops":
            pred, meas = res.tflops, r.value
        elif r.metric in ("time_us", "time_ms"):
            scale = 1e3 if r.metric == "time_ms" else 1.0
            pred, meas = res.time_us / scale, r.value
        else:
            continue
        group = f"{prof[0]} {dtype.name.lower()}"
        results.append((group, pred, meas))
        shape = f"{batch}x{m}x{n}x{k}"
        print(f"{r.id:<9} {prof[0]:<9} {dtype.name.lower():<9} {shape:<26} {r.metric:<7} {meas:>10.3f} {pred:>10.3f} "
              f"{100 * (pred - meas) / meas:>+7.1f}  {res.bound}")
    print(f"\nMAPE per group ({time.time() - t0:.0f} s of simulation):")
    for g, (count, err) in sorted(grouped_mape(results).items()):
        print(f"  {g:<22} n={count:<3} MAPE {err:6.1f}%")


if __name__ == "__main__":
    main()
