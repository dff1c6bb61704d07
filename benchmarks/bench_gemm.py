"""Simulator speed on full-chip H100 GEMMs: wall time, nodes/s, node events/s, and peak memory.

    python benchmarks/bench_gemm.py [--sizes 1024,4096,8192]

A node event is one lifecycle transition of a node (ready, issued, executing, completed): four per node.
Engine state exists only for resident CTAs (SMs x occupancy), never for the whole grid: the peak traced memory
(a second, slower run under tracemalloc) is printed beside the CTA count and the template size.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.lowering.templates import gemm
from torchsim.sim import simulate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="1024,4096,8192")
    ap.add_argument("--hw", default="h100-sxm")
    ap.add_argument("--mem-max", type=int, default=4096, help="largest size to trace memory for")
    args = ap.parse_args()
    hw = get_profile(args.hw)
    print(f"{'size':>6} {'ctas':>6} {'tmpl nodes':>10} {'nodes run':>10} {'build s':>8} {'sim s':>7} {'nodes/s':>9} "
          f"{'events/s':>9} {'peak MiB':>9} {'TFLOPS':>7}")
    for s in (int(x) for x in args.sizes.split(",")):
        t0 = time.perf_counter()
        kg = gemm(s, s, s, DType.BF16, hw)
        t1 = time.perf_counter()
        res = simulate(kg, hw)
        t2 = time.perf_counter()
        peak = float("nan")
        if s <= args.mem_max:
            tracemalloc.start()
            simulate(gemm(s, s, s, DType.BF16, hw), hw)
            peak = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
        tmpl = sum(c.graph.num_nodes for c in kg.classes)
        sim = t2 - t1
        print(f"{s:>6} {kg.num_ctas:>6} {tmpl:>10} {res.node_events:>10} {t1 - t0:>8.2f} {sim:>7.2f} "
              f"{res.node_events / sim:>9.0f} {4 * res.node_events / sim:>9.0f} {peak:>9.1f} {res.tflops:>7.0f}")
    print("(peak MiB from a separate run under tracemalloc; skipped above --mem-max)")


if __name__ == "__main__":
    main()
