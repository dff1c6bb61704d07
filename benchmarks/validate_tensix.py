"""Validate the Tensix model against tt-metal's published Wormhole n150 / Blackhole p150 numbers.

Reads ../shared/validation/published_dev.csv: the GEMM rows (tt-metal GEMM_FLOPS report) and the DRAM
read-bandwidth microbenchmark rows, plus held-out rows of the same report that are not in that file (HELD_OUT),
predicts each with torchsim and prints a table and MAPE per group and per timing method: device time against the
report's device-profiler utilisation, host-visible time (launch.py `host_visible_s`) against its host timing.
Out-of-box rows run on ttnn's own program-config selection (the template's default), manually tuned rows on the
config tt-metal's benchmark sets for their shape (MANUAL_8x8). One Tensix number is fitted to these rows:
Blackhole's unpack_l1_bytes_per_clk, to the published p150 rows' device times (scripts/calibrate_unpack_blackhole.py);
the held-out p150 rows are its test fold. Every Wormhole figure and the held-out ones are out-of-sample.
Usage: python benchmarks/validate_tensix.py [--quick] [--no-held-out] [--csv PATH]
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path

from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.quantity import derived
from torchsim.hwmodels.tensix.dram import ReadStream, adjacent_readers, run_read_streams
from torchsim.hwmodels.tensix.formats import MathFidelity
from torchsim.hwmodels.tensix.launch import TimingMethod, host_visible_s
from torchsim.hwmodels.tensix.noc import NocId
from torchsim.hwmodels.tensix.profiles import TensixProfile
from torchsim.lowering.templates.tensix.matmul import SUBBLOCK_HW_CHOICES, MatmulConfig, matmul
from torchsim.sim import simulate

CSV = Path(__file__).resolve().parents[1].parent / "shared" / "validation" / "published_dev.csv"
DTYPES = {"BFLOAT16": DType.BF16, "BFLOAT8_B": DType.BFP8_B, "BFLOAT4_B": DType.BFP4_B}
GEMM_FLOPS = ("tenstorrent/tt-metal tech_reports/GEMM_FLOPS/GEMM_FLOPS.md @ 06bd3735f7df2921d8195d732c14eba433e4a32d")

# How each kind of row was timed (TimingMethod, torchsim.hwmodels.tensix.launch). GEMM_FLOPS.md gives two
# numbers per row: 'Inference Time Avg' from the host (a loop of metal-trace replays when 'Use Trace', else eager
# ttnn calls) and the 'Device Based Utilization' of tt-metal's device profiler (kernel time alone).
HOST_METHOD = {True: TimingMethod.TRACE, False: TimingMethod.HOST_TIMER}
DEVICE_METHOD = TimingMethod.DEVICE_PROFILER

# Measurements of the same report outside published_dev.csv (held out: no torchsim number was set from them):
# traced rows, all tensors in DRAM. (M, K, N, dtype, fidelity, host ns, device-based util %, table).
HELD_OUT = [
    (4096, 4096, 4096, "BFLOAT16", "HiFi2", 2007951.74, 59.45, "N150 Manually Tuned Configurations"),
    (8192, 8192, 8192, "BFLOAT16", "HiFi2", 13551716.80, 66.47, "N150 Manually Tuned Configurations"),
    (3328, 2560, 2560, "BFLOAT16", "HiFi2", 727927.68, 63.13, "N150 Manually Tuned Configurations"),
    (3072, 3072, 4096, "BFLOAT16", "HiFi2", 1149344.44, 74.19, "N150 Manually Tuned Configurations"),
    (4096, 4096, 4096, "BFLOAT16", "HiFi4", 2711439.13, 83.19, "N150 Manually Tuned Configurations"),
    (8192, 8192, 8192, "BFLOAT16", "HiFi4", 20846247.67, 88.70, "N150 Manually Tuned Configurations"),
    (3072, 4096, 4096, "BFLOAT16", "HiFi4", 2020318.51, 92.18, "N150 Manually Tuned Configurations"),
    (3328, 2560, 2560, "BFLOAT16", "HiFi4", 1009585.86, 89.40, "N150 Manually Tuned Configurations"),
    (4096, 4096, 4096, "BFLOAT8_B", "HiFi2", 1451368.33, 79.43, "N150 Manually Tuned Configurations"),
    (8192, 8192, 8192, "BFLOAT8_B", "HiFi2", 10994498.73, 83.95, "N150 Manually Tuned Configurations"),
    (4096, 4096, 4096, "BFLOAT8_B", "LoFi", 977981.09, 58.85, "N150 Manually Tuned Configurations"),
    (8192, 8192, 8192, "BFLOAT8_B", "LoFi", 7068297.86, 64.77, "N150 Manually Tuned Configurations"),
    (3328, 2560, 2560, "BFLOAT4_B", "LoFi", 266108.51, 81.62, "N150 Manually Tuned Configurations"),
    (8192, 8192, 8192, "BFLOAT4_B", "LoFi", 5612254.14, 82.59, "N150 Manually Tuned Configurations"),
    (5120, 5632, 5632, "BFLOAT16", "HiFi2", 1356294.16, 80.52, "P150 Manually Tuned Configurations (11x10 grid)"),
    (5120, 5632, 5632, "BFLOAT16", "HiFi4", 2381470.20, 90.38, "P150 Manually Tuned Configurations (11x10 grid)"),
    (4160, 3520, 3520, "BFLOAT8_B", "HiFi2", 401184.56, 89.07, "P150 Manually Tuned Configurations (11x10 grid)"),
    (4160, 3520, 3520, "BFLOAT8_B", "LoFi", 238494.87, 84.25, "P150 Manually Tuned Configurations (11x10 grid)"),
    (5120, 5632, 5632, "BFLOAT8_B", "LoFi", 708231.93, 77.40, "P150 Manually Tuned Configurations (11x10 grid)"),
    (4160, 3520, 3520, "BFLOAT4_B", "LoFi", 208148.96, 85.51, "P150 Manually Tuned Configurations (11x10 grid)"),
    (2560, 4224, 4224, "BFLOAT16", "HiFi2", 392005.44, 87.03, "P150 Out of Box Results (11x10 grid)"),
    (3840, 4224, 4224, "BFLOAT8_B", "LoFi", 301239.49, 85.82, "P150 Out of Box Results (11x10 grid)"),
    (1280, 2816, 2816, "BFLOAT4_B", "LoFi", 51698.68, 75.13, "P150 Out of Box Results (11x10 grid)"),
]


# The manually tuned program configs of GEMM_FLOPS.md's N150 tables: tt-metal tests/ttnn/unit_tests/benchmarks/
# test_benchmark.py (test_matmul_2d_host_perf, the version whose matmul_shapes carry (m, k, n, in0_sharded,
# out_sharded, in0_block_w_div, num_out_blocks_h, num_out_blocks_w); its 16384^3 bf16 entry is (4, 8, 8)).
# (m, k, n, dtype) -> (in0_sharded, in0_block_w_div, num_out_blocks_h, num_out_blocks_w). Shapes the file does
# not list (3328x2560x2560, the P150 tables) run on ttnn's own selection.
MANUAL_8x8 = {
    **{(m, k, n, "BFLOAT16"): (True, d, 1, 1) for m, k, n, d in (
        (512, 512, 512, 1), (512, 1024, 1024, 1), (512, 1024, 2048, 1), (1024, 1024, 1024, 1),
        (1024, 1024, 2048, 1), (1024, 2048, 2048, 1), (2048, 2048, 2048, 1), (2048, 2048, 3072, 1),
        (2048, 3072, 3072, 2), (3072, 3072, 3072, 4))},
    (3072, 3072, 4096, "BFLOAT16"): (False, 2, 1, 1), (3072, 4096, 4096, "BFLOAT16"): (False, 2, 1, 1),
    (4096, 4096, 4096, "BFLOAT16"): (False, 1, 2, 2), (8192, 8192, 8192, "BFLOAT16"): (False, 2, 4, 4),
    (16384, 16384, 16384, "BFLOAT16"): (False, 4, 8, 8),
    (4096, 4096, 4096, "BFLOAT8_B"): (False, 1, 2, 2), (8192, 8192, 8192, "BFLOAT8_B"): (False, 2, 4, 4),
    (16384, 16384, 16384, "BFLOAT8_B"): (False, 4, 8, 8),
    (8192, 8192, 8192, "BFLOAT4_B"): (False, 2, 2, 2), (16384, 16384, 16384, "BFLOAT4_B"): (False, 4, 4, 4),
}


def manual_config(c: GemmCase) -> MatmulConfig | None:
    """The benchmark's program config for a manually tuned row (test_benchmark.py's arithmetic: in0_block_w =
    K / 32 / grid_x / in0_block_w_div, per_core = M / 32 / grid_y x N / 32 / grid_x, out blocks = per_core /
    num_out_blocks, subblock = its get_subblock_sizes: the first SUBBLOCK_HW_CHOICES entry dividing the out
    block, h = 1 when the output is sharded). In0 sharded in L1 is not modelled: such rows read it from DRAM."""
    if not c.manual:
        return None
    entry = MANUAL_8x8.get((c.m, c.k, c.n, c.dtype)) if c.grid == (8, 8) else None
    if entry is None:
        return None
    sharded, div, nbh, nbw = entry
    gx, gy = c.grid
    pm, pn, bw = c.m // gy // 32, c.n // gx // 32, c.k // gx // 32 // div
    obh, obw = pm // nbh, pn // nbw
    sh, sw = next(((h, w) for h, w in SUBBLOCK_HW_CHOICES if obh % h == 0 and obw % w == 0
                   and not (sharded and h != 1)), (1, 1))
    return MatmulConfig((gx, gy), pm, pn, bw, sh, sw, "row", "col", obh, obw,
                        "GEMM_FLOPS manual (test_benchmark.py)")


def _profile(hardware: str, grid: tuple[int, int]) -> TensixProfile:
    """The profile of the grid the row's source used: GEMM_FLOPS.md's P150 tables say '13x10 grid' (firmware
    before v19.5.0, 140 Tensix) or '11x10 grid' (v19.5.0, 120 Tensix); the N150 tables ran on the 8x8 grid."""
    if "Wormhole" in hardware:
        return get_profile("wormhole-n150").with_grid(*grid)  # type: ignore[no-any-return]
    name = {(13, 10): "blackhole-p150-13x10", (11, 10): "blackhole-p150-11x10"}.get(grid)
    if name is None:
        raise ValueError(f"{hardware}: no Blackhole profile for the grid {grid} (13x10 or 11x10)")
    return get_profile(name)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class GemmCase:
    rid: str
    hardware: str
    m: int
    k: int
    n: int
    dtype: str
    fidelity: str
    grid: tuple[int, int]
    trace: bool
    host_s: float  # measured host-visible time per op
    device_util: float  # measured device-based utilisation (0..1)
    held_out: bool
    manual: bool = False  # a 'Manually Tuned' table row: the benchmark set the program config


def _csv_cases(rows: list[dict[str, str]]) -> list[GemmCase]:
    out = []
    for r in rows:
        if r["category"] != "gemm" or not any(h in r["hardware"] for h in ("Wormhole n150", "Blackhole p150")):
            continue
        p = json.loads(r["params_json"])
        grid = tuple(int(v) for v in p["grid"].strip("()").split(","))
        host_ns = float(re.search(r"inference_time_avg=([\d.]+) ns", r["notes"]).group(1))  # type: ignore[union-attr]
        util = float(re.search(r"device-based util ([\d.]+)%", r["notes"]).group(1)) / 100  # type: ignore[union-attr]
        out.append(GemmCase(r["id"], r["hardware"], p["M"], p["K"], p["N"], r["dtype"].split()[0],
                            p["math_fidelity"], grid, bool(p["use_trace"]), host_ns * 1e-9, util, False,  # type: ignore[arg-type]
                            "manually tuned" in r["workload"]))
    return out


def _held_out_cases() -> list[GemmCase]:
    out = []
    for i, (m, k, n, dt, fid, host_ns, util, table) in enumerate(HELD_OUT):
        hw = "Wormhole n150" if table.startswith("N150") else "Blackhole p150"
        grid = (8, 8) if hw.startswith("Wormhole") else (11, 10)
        out.append(GemmCase(f"HOLD-{i + 1:02d}", hw, m, k, n, dt, fid, grid, True, host_ns * 1e-9, util / 100, True,
                            "Manually" in table))
    return out


@dataclass(frozen=True)
class GemmResult:
    case: GemmCase
    group: str
    dev_meas_s: float
    dev_pred_s: float
    host_pred_s: float


def gemm_rows(rows: list[dict[str, str]], quick: bool, held_out: bool = True) -> list[GemmResult]:
    cases = _csv_cases(rows) + (_held_out_cases() if held_out else [])
    out = []
    for c in cases:
        if quick and c.m * c.n * c.k > 8192 ** 3 // 2:
            continue
        dt = DTYPES[c.dtype]
        fid = MathFidelity.parse(c.fidelity)
        hw = _profile(c.hardware, c.grid)
        kg = matmul(c.m, c.n, c.k, dt, hw, fidelity=fid, grid=c.grid, config=manual_config(c))
        res = simulate(kg, hw)
        ideal_s = c.m * c.k * c.n / 32 ** 3 * 16 * fid.phases / hw.sms / hw.clock_hz_value
        host_pred = host_visible_s(hw, res.time_s, HOST_METHOD[c.trace])
        group = f"{c.hardware} {dt.name.lower()} {fid.label}"
        out.append(GemmResult(c, group, ideal_s / c.device_util, res.time_s, host_pred))
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
    bh = get_profile("blackhole-p150-13x10")  # the DRAM report's p150 ran the earlier firmware (140 Tensix)
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


def _err(pred: float, meas: float) -> float:
    return 100.0 * (pred - meas) / meas


def _mape(pairs: list[tuple[float, float]]) -> float:
    return 100.0 * sum(abs(p - m) / m for m, p in pairs) / len(pairs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="skip GEMMs above 4096x8192x8192 (the 16384^3 row takes "
                    "~30 s)")
    ap.add_argument("--csv", type=Path, default=CSV)
    ap.add_argument("--no-held-out", action="store_true", help="only the published_dev.csv rows")
    args = ap.parse_args()
    with args.csv.open() as f:
        rows = list(csv.DictReader(f))
    t0 = time.perf_counter()
    g = gemm_rows(rows, args.quick, not args.no_held_out)
    print(f"{'id':9} {'group':36} {'method':10} {'host us meas':>12} {'pred':>9} {'err%':>6}  "
          f"{'device us meas':>14} {'pred':>9} {'err%':>6}")
    for r in g:
        c = r.case
        print(f"{c.rid:9} {r.group:36} {HOST_METHOD[c.trace].value:10} {c.host_s * 1e6:12.1f} "
              f"{r.host_pred_s * 1e6:9.1f} {_err(r.host_pred_s, c.host_s):6.1f}  {r.dev_meas_s * 1e6:14.1f} "
              f"{r.dev_pred_s * 1e6:9.1f} {_err(r.dev_pred_s, r.dev_meas_s):6.1f}")
    print("\nMAPE of the time per op, by how it was timed (host: trace / host-timer rows against 'Inference Time "
          "Avg'; device-profiler: every row against its device-based utilisation):")
    for label, sel in (("published_dev.csv rows", lambda r: not r.case.held_out),
                       ("held-out GEMM_FLOPS.md rows", lambda r: r.case.held_out), ("all rows", lambda r: True)):
        rs = [r for r in g if sel(r)]
        if not rs:
            continue
        print(f"  {label}:")
        groups: dict[str, list[GemmResult]] = {}
        for r in rs:
            groups.setdefault(r.group, []).append(r)
        for group, vals in list(groups.items()) + [("all groups", rs)]:
            parts = []
            for m in (TimingMethod.TRACE, TimingMethod.HOST_TIMER):
                pairs = [(v.case.host_s, v.host_pred_s) for v in vals if HOST_METHOD[v.case.trace] is m]
                if pairs:
                    parts.append(f"{m.value} n={len(pairs):2} {_mape(pairs):5.1f}%")
            dev = [(v.dev_meas_s, v.dev_pred_s) for v in vals]
            parts.append(f"{DEVICE_METHOD.value} n={len(dev):2} {_mape(dev):5.1f}%")
            print(f"    {group:36} " + "   ".join(parts))
    d = dram_rows(rows)
    print(f"\n{'id':11} {'case':66} {'meas GB/s':>9} {'pred GB/s':>9} {'err%':>6}")
    for rid, label, meas, pred in d:
        print(f"{rid:11} {label:66} {meas:9.1f} {pred:9.1f} {100 * (pred - meas) / meas:6.1f}")
    print(f"DRAM MAPE: {_mape([(m, p) for _, _, m, p in d]):.1f}%   (wall {time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
