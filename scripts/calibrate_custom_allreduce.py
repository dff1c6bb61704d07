"""Calibrate the custom all-reduce model (torchsim.sim.custom_allreduce) on published vLLM measurements.

    python scripts/calibrate_custom_allreduce.py

The rows (torchsim/validation/custom_allreduce_published.csv) are vLLM's device-communicator benchmark on H100:
the one-stage and two-stage custom all-reduce (ca_1stage, ca_2stage) and NCCL (pynccl) on 4 and 6 GPUs, 0.5 to
4 MiB. For each stage the model is t = latency + traffic / (efficiency x the GPU's NVLink bandwidth), traffic the
bytes each GPU pulls from its peers (one stage: (n - 1) x S; two stages: 2 (n - 1) / n x S). A least-squares line
through PR #24111's rows gives the latency and the efficiency; PR #24532's rows (another run of the same
benchmark) are held out and predicted. Prints the constants the module holds and the MAPE of both sets.
"""

from __future__ import annotations

import numpy as np

from torchsim.hwmodels.systems import get_system
from torchsim.sim.custom_allreduce import STAGES, custom_allreduce_time, published_rows, traffic_bytes

FIT_SOURCE = "PR #24111"


def main() -> None:
    rows = published_rows()
    for stage, impl in STAGES.items():
        fit = [r for r in rows if r["implementation"] == impl and FIT_SOURCE in r["source"]]
        held = [r for r in rows if r["implementation"] == impl and FIT_SOURCE not in r["source"]]
        bw = get_system(fit[0]["system"]).device_bytes_per_s()
        x = np.array([traffic_bytes(stage, int(r["ranks"]), int(r["bytes"])) / bw for r in fit])
        y = np.array([float(r["time_us"]) * 1e-6 for r in fit])
        slope, latency = np.polyfit(x, y, 1)
        print(f"{stage}: latency {latency * 1e6:.2f} us, efficiency {1 / slope:.3f} of the NVLink bandwidth "
              f"({len(fit)} rows of {FIT_SOURCE})")
        for label, subset in (("fit", fit), ("held out", held)):
            errs = [abs(custom_allreduce_time(stage, get_system(r["system"]), int(r["ranks"]), int(r["bytes"]))
                        / (float(r["time_us"]) * 1e-6) - 1) for r in subset]
            if errs:
                print(f"  with the module's constants: {label} MAPE {100 * np.mean(errs):.1f}% over {len(errs)} rows")


if __name__ == "__main__":
    main()
