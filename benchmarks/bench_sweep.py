"""Sweep throughput: a 64-point, two-knob sweep of one Llama-3-8B decode step, and the 1.5x-HBM what-if.

    python benchmarks/bench_sweep.py [--out-dir /tmp] [--jobs N] [--executor local|ray] [--skip-hbm]

Part 1 sweeps dram_bytes_per_s (8 values) x sm_count (8 values) on H100 SXM, writes sweep.parquet and
sweep.png, and prints points per minute (planning and capture included). Part 2 compares the built-in H100 with
examples/h100_fast_hbm.toml (1.5x sustained HBM bandwidth) at batch 1 and batch 64 and prints the speed-up per
kernel kind with its bound, which explains why the gain shrinks at large batch.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from torchsim.hwmodels import get_profile
from torchsim.sweeps.outputs import plot, write_parquet
from torchsim.sweeps.space import metadata, model_workload, parse_vary, run_sweep

ROOT = Path(__file__).resolve().parents[1]


def sweep_64(out_dir: Path, jobs: int, executor: str) -> None:
    hw = get_profile("h100-sxm")
    knobs = [parse_vary("dram_bytes_per_s=2e12:6e12:8", hw), parse_vary("sm_count=64,74,84,94,104,114,124,132", hw)]
    t0 = time.perf_counter()
    work = model_workload("llama3-8b", phase="decode", kv=4096)
    t1 = time.perf_counter()
    rows = run_sweep(hw, knobs, work, executor=executor, jobs=jobs, progress=True, log=print)
    t2 = time.perf_counter()
    n = write_parquet(rows, str(out_dir / "sweep.parquet"), metadata(hw, knobs, work))
    plot(rows, knobs, str(out_dir / "sweep.png"), "Llama-3-8B decode (KV 4096) on h100-sxm")
    total = t2 - t0
    print(f"capture+plan {t1 - t0:.1f} s, simulate+assemble {t2 - t1:.1f} s, {len(rows)} points in {total:.1f} s "
          f"= {60 * len(rows) / total:.1f} points/min ({executor}, {jobs or 'all'} workers); "
          f"wrote {out_dir / 'sweep.parquet'} ({n} B) and {out_dir / 'sweep.png'}")
    lo = min(rows, key=lambda r: r["total_us"])
    hi = max(rows, key=lambda r: r["total_us"])
    print(f"step time {lo['total_us']:.0f} us (dram {lo['dram_bytes_per_s'] / 1e12:.2f} TB/s, {lo['sm_count']:.0f} SMs)"
          f" .. {hi['total_us']:.0f} us (dram {hi['dram_bytes_per_s'] / 1e12:.2f} TB/s, {hi['sm_count']:.0f} SMs)")
    print(f"{'TB/s':>6} " + " ".join(f"{int(v):>7}" for v in knobs[1].values) + "   (step us by SMs)")
    for d in knobs[0].values:
        print(f"{d / 1e12:>6.2f} " + " ".join(f"{r['total_us']:>7.0f}" for r in rows if r["dram_bytes_per_s"] == d))


def hbm_whatif(jobs: int) -> None:
    base = get_profile("h100-sxm")
    fast = get_profile(str(ROOT / "examples" / "h100_fast_hbm.toml"))
    knob = parse_vary(f"dram_bytes_per_s={base.dram_bytes_per_s.value:g},{fast.dram_bytes_per_s.value:g}", base)
    print("\n1.5x HBM what-if (examples/h100_fast_hbm.toml) on Llama-3-8B decode:")
    for batch, kv in ((1, 4096), (64, 4096), (256, 512)):
        work = model_workload("llama3-8b", phase="decode", kv=kv, batch=batch)
        slow_row, fast_row = run_sweep(base, [knob], work, jobs=jobs)
        print(f"  batch {batch:>3}, KV {kv:>4}: step {slow_row['total_us']:8.0f} -> {fast_row['total_us']:8.0f} us = "
              f"{slow_row['total_us'] / fast_row['total_us']:.2f}x")
        kinds = sorted({k[:-3] for k in slow_row if k.endswith("_us") and k not in ("total_us", "kernels_us")},
                       key=lambda k: -slow_row[f"{k}_us"])
        for k in kinds[:5]:
            a, b = slow_row[f"{k}_us"], fast_row[f"{k}_us"]
            print(f"      {k:<18} {a:8.0f} -> {b:8.0f} us  {a / b:4.2f}x  bound {slow_row[f'{k}_bound']} -> "
                  f"{fast_row[f'{k}_bound']}")
        gaps = slow_row["total_us"] - slow_row["kernels_us"]
        print(f"      launch gaps {gaps:.0f} us (unchanged by HBM)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", default="/tmp")
    ap.add_argument("--jobs", type=int, default=0)
    ap.add_argument("--executor", default="local", choices=("local", "ray"))
    ap.add_argument("--skip-hbm", action="store_true")
    args = ap.parse_args()
    sweep_64(Path(args.out_dir), args.jobs, args.executor)
    if not args.skip_hbm:
        hbm_whatif(args.jobs)


if __name__ == "__main__":
    main()
