"""Collective bus bandwidth against message size: torchsim's NCCL model beside published nccl-tests figures.

    PYTHONPATH=. python benchmarks/collectives.py [--quick]

Prints (1) all-reduce and all-to-all busbw from 8 B to 8 GiB on DGX H100 and DGX B200 (time, algbw, busbw,
algorithm, protocol, SMs), and (2) every row of torchsim/validation/collectives_published.csv beside the model,
with the MAPE of busbw per group (system x collective) and per regime (latency-bound < 1 MiB, bandwidth >= 1 MiB).
Rows measured without CUDA graphs (graph = 0, nccl-tests' default) are compared with the eager time. One number
is calibrated, host_enqueue_s, on the rows COLL-H100x4-AR-01..09 (the eager floor of the 4 x H100 sweep): the
MAPE is printed for all rows, for those rows (in-sample) and for every other row (held out). Every other constant
comes from the system profiles (torchsim hw show dgx-h100). (3) The serving engines' custom all-reduce
(torchsim.sim.custom_allreduce) and the NCCL model beside vLLM's device-communicator benchmark on H100
(torchsim/validation/custom_allreduce_published.csv): MAPE of the time per implementation, and which of them the
serving preset would run.
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path

from torchsim.hwmodels.systems import get_system
from torchsim.sim.collectives import bus_factor, collective_cost, message_sizes

CALIBRATION_ROWS = {f"COLL-H100x4-AR-{i:02d}" for i in range(1, 10)}  # host_enqueue_s of the systems
PUBLISHED = Path(__file__).resolve().parents[1] / "torchsim" / "validation" / "collectives_published.csv"


def sweep(system: str, collective: str, factor: int, eager: bool) -> None:
    hw = get_system(system)
    print(f"\n{collective} on {system} ({hw.devices} ranks, {'eager launches' if eager else 'device time'})")
    print(f"{'size (B)':>12} {'time (us)':>11} {'algbw GB/s':>11} {'busbw GB/s':>11}  algorithm protocol  SMs")
    for s in message_sizes(8, 8 * 2**30, factor):
        c = collective_cost(collective, hw, hw.devices, s, eager=eager)
        print(f"{s:>12} {c.time_s * 1e6:>11.2f} {c.algbw_bytes_per_s / 1e9:>11.2f} {c.busbw_bytes_per_s / 1e9:>11.2f}"
              f"  {c.algorithm:<9} {c.protocol:<8} {c.channels:>4}")


def compare() -> dict[str, float]:
    rows = list(csv.DictReader(PUBLISHED.open()))
    errs: dict[str, list[float]] = defaultdict(list)
    print(f"\npublished nccl-tests busbw beside torchsim ({PUBLISHED.name}, {len(rows)} rows)")
    print(f"{'id':<14} {'system':<9} {'collective':<11} {'n':>2} {'size (B)':>11} {'pub GB/s':>9} {'model':>8} "
          f"{'err %':>7}  pick")
    for r in rows:
        hw = get_system(r["system"])
        c = collective_cost(r["collective"], hw, int(r["ranks"]), int(r["bytes"]), algorithm=r["algorithm"] or None,
                            eager=r["graph"] == "0")
        # busbw from the printed time where there is one (2-decimal busbw rounds small sizes to 0.00)
        pub = (int(r["bytes"]) / (float(r["time_us"]) * 1e-6) * bus_factor(c.collective, int(r["ranks"])) / 1e9
               if r["time_us"] else float(r["busbw_gbps"]))
        model = c.busbw_bytes_per_s / 1e9
        err = abs(model - pub) / pub * 100
        regime = "latency<1MiB" if int(r["bytes"]) < 2**20 else "bandwidth>=1MiB"
        group = f"{r['system']} {r['collective']}"
        split = "in-sample" if r["id"] in CALIBRATION_ROWS else "held-out"
        for key in (group, f"{group} {regime}", regime, "all", split, f"{split} {regime}"):
            errs[key].append(err)
        print(f"{r['id']:<14} {r['system']:<9} {r['collective']:<11} {r['ranks']:>2} {r['bytes']:>11} {pub:>9.2f} "
              f"{model:>8.2f} {err:>7.1f}  {c.algorithm}/{c.protocol}")
    print("\nMAPE of busbw")
    out = {}
    for key in sorted(errs):
        out[key] = sum(errs[key]) / len(errs[key])
        print(f"  {key:<45} {out[key]:7.1f} %  ({len(errs[key])} rows)")
    return out


def compare_custom() -> dict[str, float]:
    """vLLM's one-/two-stage custom all-reduce and pynccl rows beside torchsim's custom all-reduce and NCCL models
    (device time); the rows' timing mode (CUDA graph or not) was not read, so NCCL is shown both ways."""
    from torchsim.sim.custom_allreduce import STAGES, custom_allreduce_time, published_rows

    stage_of = {v: k for k, v in STAGES.items()}
    errs: dict[str, list[float]] = defaultdict(list)
    print("\nall-reduce on H100 (vLLM benchmark_device_communicators.py rows) beside the models")
    print(f"{'row':<8} {'ranks':>5} {'size':>9} {'impl':<10} {'measured us':>12} {'model us':>9} {'err':>7}  "
          f"serving preset runs")
    for r in published_rows():
        hw, n, b, impl = get_system(r["system"]), int(r["ranks"]), int(r["bytes"]), r["implementation"]
        meas = float(r["time_us"])
        if impl in stage_of:
            model = custom_allreduce_time(stage_of[impl], hw, n, b) * 1e6
        else:  # pynccl: NCCL under CUDA-graph replay (device time)
            model = collective_cost("all-reduce", hw, n, b).time_s * 1e6
        err = 100 * (model - meas) / meas
        errs[impl].append(abs(err))
        pick = collective_cost("all-reduce", hw, n, b, custom_ar=True)
        print(f"{r['id']:<8} {n:>5} {b / 2**20:>7.2f}Mi {impl:<10} {meas:>12.1f} {model:>9.1f} {err:>+6.1f}%  "
              f"{pick.algorithm} ({pick.time_s * 1e6:.1f} us)")
    out = {k: sum(v) / len(v) for k, v in errs.items()}
    for k, v in out.items():
        print(f"  MAPE {k:<10} {v:5.1f} %  ({len(errs[k])} rows)")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="sweep by x8 instead of x2")
    args = ap.parse_args()
    factor = 8 if args.quick else 2
    for system in ("dgx-h100", "dgx-b200"):
        for coll in ("all-reduce", "all-to-all"):
            sweep(system, coll, factor, eager=True)
    compare()
    compare_custom()


if __name__ == "__main__":
    main()
