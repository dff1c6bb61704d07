"""Validate the Tensix model against tt-metal's published Wormhole n150 / Blackhole p150 numbers.

Reads ../shared/validation/published_dev.csv: the GEMM rows (tt-metal GEMM_FLOPS report) and the DRAM
read-bandwidth microbenchmark rows, predicts each with torchsim, prints a table and MAPE per group.
Usage: python benchmarks/validate_tensix.py [--quick] [--csv PATH]
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import time
from dataclasses import replace
from pathlib import Path

from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.quantity import derived
from torchsim.hwmodels.tensix.dram import ReadStream, adjacent_readers, run_read_streams
from torchsim.hwmodels.tensix.formats import MathFidelity
from torchsim.hwmodels.tensix.noc import NocId
from torchsim.hwmodels.tensix.profiles import TensixProfile
from torchsim.lowering.templates.tensix.matmul import matmul
from torchsim.sim import simulate

CSV = Path(__file__).resolve().parents[1].parent / "shared" / "validation" / "published_dev.csv"
DTYPES = {"BFLOAT16": DType.BF16, "BFLOAT8_B": DType.BFP8_B, "BFLOAT4_B": DType.BFP4_B}


def _profile(hardware: str, grid: tuple[int, int]) -> TensixProfile:
    if "Wormhole" in hardware:
        hw = get_profile("wormhole-n150")
    else:  # the GEMM report's p150 ran the launch firmware (13x10 compute grid)
        hw = get_profile("blackhole-p150-launch")
    return hw.with_grid(*grid)


def gemm_rows(rows: list[dict[str, str]], quick: bool) -> list[tuple[str, str, float, float, float, float]]:
    out = []
    for r in rows:
        if r["category"] != "gemm" or not any(h in r["hardware"] for h in ("Wormhole n150", "Blackhole p150")):
            continue
        p = json.loads(r["params_json"])
        m, k, n = p["M"], p["K"], p["N"]
        if quick and m * n * k > 8192 ** 3:
            continue
        grid = tuple(int(v) for v in p["grid"].strip("()").split(","))
        dt = DTYPES[r["dtype"].split()[0]]
        fid = MathFidelity.parse(p["math_fidelity"])
        hw = _profile(r["hardware"], grid)  # type: ignore[arg-type]
        kg = matmul(m, n, k, dt, hw, fidelity=fid, grid=grid)
        res = simulate(kg, hw)
        host_s = res.time_s + hw.launch_overhead_s_value
        pred = kg.flops / host_s / 1e12
        util = float(re.search(r"device-based util ([\d.]+)%", r["notes"]).group(1)) / 100  # type: ignore[union-attr]
        ideal_s = m * k * n / 32 ** 3 * 16 * fid.phases / hw.sms / hw.clock_hz_value
        meas_dev_s = ideal_s / util
        trace = "trace" if p["use_trace"] else "manual"
        group = f"{r['hardware']} {dt.name.lower()} {fid.label} {trace}"
        out.append((r["id"], group, float(r["value"]), pred, meas_dev_s * 1e6, res.time_s * 1e6))
    return out


def _bw(hw: TensixProfile, readers: tuple[tuple[int, int], ...], nbytes: float, total: float, outstanding: int,
        barrier: int = 0) -> float:
    banks = int(hw.dram_banks)
    count = int(total // (nbytes * banks))
    streams = [ReadStream(readers[b], (b,), nbytes, count, NocId.NOC0, outstanding, barrier) for b in range(banks)]
    end, _ = run_read_streams(hw, streams)
    return nbytes * count * banks / (end / hw.clock_hz_value) / 1e9


def dram_rows(rows: list[dict[str, str]]) -> list[tuple[str, str, float, float]]:
    wh = get_profile("wormhole-n150")
    wh14 = replace(wh, dram_bank_bytes_per_s=derived(28e9, "B/s", "14 GT/s x 16-bit channel (published_dev.csv "
                                                     "UBENCH-002 runs the DRAM at 14 GT/s)"))
    bh = get_profile("blackhole-p150-launch")
    arbitrary = bh.worker_xy[:8]  # "arbitrary cores": the first eight workers of the grid
    cases = {
        "UBENCH-001": ("WH 12 GT/s, bank-adjacent, 8 KB x2",
                       lambda: _bw(wh, adjacent_readers(wh), 8192, 64 * 2**20, 2)),
        "UBENCH-002": ("WH 14 GT/s, bank-adjacent, 8 KB x2",
                       lambda: _bw(wh14, adjacent_readers(wh14), 8192, 64 * 2**20, 2)),
        "UBENCH-003": ("BH per-tile 2 KB reads, barrier per 8 (assumed block), first 8 cores",
                       lambda: _bw(bh, arbitrary, 2048, 128 * 2**20, 8, 8)),
        "UBENCH-004": ("BH 16 KB x2 trids, first 8 cores", lambda: _bw(bh, arbitrary, 16384, 128 * 2**20, 2)),
        "UBENCH-005": ("BH 16 KB x2 trids, bank-adjacent NoC0", lambda: _bw(bh, adjacent_readers(bh), 16384,
                                                                           128 * 2**20, 2)),
    }
    out = []
    for r in rows:
        if r["id"] in cases:
            label, fn = cases[r["id"]]
            out.append((r["id"], label, float(r["value"]), fn()))
    return out


def _mape(pairs: list[tuple[float, float]]) -> float:
    return 100.0 * sum(abs(p - m) / m for m, p in pairs) / len(pairs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="skip GEMMs above 8192^3 (the 16384^3 row takes ~30 s)")
    ap.add_argument("--csv", type=Path, default=CSV)
    args = ap.parse_args()
    with args.csv.open() as f:
        rows = list(csv.DictReader(f))
    t0 = time.perf_counter()
    g = gemm_rows(rows, args.quick)
    print(f"{'id':9} {'group':44} {'meas TF':>8} {'pred TF':>8} {'err%':>6} {'dev us meas':>11} {'dev us pred':>11}")
    groups: dict[str, list[tuple[int, ...]]] = {}
    for rid, group, meas, pred, dev_m, dev_p in g:
        print(f"{rid:9} {group:44} {meas:8.2f} {pred:8.2f} {100 * (pred - meas) / meas:6.1f} {dev_m:11.1f} "
              f"{dev_p:11.1f}")
        groups.setdefault(group, []).append((meas, pred, dev_m, dev_p))  # type: ignore[arg-type]
    print("\nMAPE per group (host TFLOPS incl. the assumed launch gap | device kernel time from the report's "
          "device-based utilisation):")
    for group, vals in groups.items():
        print(f"  {group:44} n={len(vals):2}  host {_mape([(v[0], v[1]) for v in vals]):5.1f}%  "
              f"device {_mape([(v[2], v[3]) for v in vals]):5.1f}%")
    allv = [v for vals in groups.values() for v in vals]
    print(f"  {'all GEMM rows':44} n={len(allv):2}  host {_mape([(v[0], v[1]) for v in allv]):5.1f}%  "
          f"device {_mape([(v[2], v[3]) for v in allv]):5.1f}%")
    d = dram_rows(rows)
    print(f"\n{'id':11} {'case':66} {'meas GB/s':>9} {'pred GB/s':>9} {'err%':>6}")
    for rid, label, meas, pred in d:
        print(f"{rid:11} {label:66} {meas:9.1f} {pred:9.1f} {100 * (pred - meas) / meas:6.1f}")
    print(f"DRAM MAPE: {_mape([(m, p) for _, _, m, p in d]):.1f}%   (wall {time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
