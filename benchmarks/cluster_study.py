"""Cluster fusion over DSMEM vs through global memory, and NoC topology x CTA placement (GPU-Tile-Sim §7).

    python benchmarks/cluster_study.py [--heads 8] [--kv 4096] [--gpc-share]

A fused decode attention block of Llama-3-8B shape (RMSNorm, QKV, RoPE, attention, rescale, O projection), one
head per cluster of C CTAs, on one 16-SM Hopper GPC (torchsim.studies.cluster). Prints, for C = 2..16: cycles
with DRAM exchange vs DSMEM exchange on the crossbar (speed-up), and the mean NoC residence time per request
on the 4x4 mesh under default vs topology-aware placement, beside the paper's figures.
"""

from __future__ import annotations

import argparse
import statistics

from torchsim.hwmodels import get_profile
from torchsim.sim import simulate
from torchsim.sim.noc import NocConfig, Placement, Topology
from torchsim.studies.cluster import GPC_SMS, PAPER, fused_block, gpc_profile


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv", type=int, default=4096)
    ap.add_argument("--gpc-share", action="store_true", help="give the GPC only its 16/132 share of L2/DRAM")
    args = ap.parse_args()
    hw = gpc_profile() if args.gpc_share else get_profile("h100-sxm")
    print(f"{args.heads} heads, KV {args.kv}, {GPC_SMS} SMs of {hw.name}")
    print(f"{'C':>3} {'DRAM xchg':>10} {'DSMEM xbar':>10} {'speed-up':>8} {'xbar res':>8} | {'mesh dflt':>9} "
          f"{'res':>5} {'mesh aware':>10} {'res':>5} {'res ratio':>9}")
    speed, ratio = [], []
    for c in (2, 4, 8, 16):
        def run(dsmem: bool, topo: Topology = Topology.CROSSBAR, place: Placement = Placement.DEFAULT,
                c: int = c) -> tuple[int, float]:
            r = simulate(fused_block(c, args.heads, args.kv, dsmem), hw, max_sms=GPC_SMS, noc=NocConfig(topo, place))
            return r.cycles, float(r.attrs.get("noc_mean_residence_cycles", 0.0))
        dram, (xbar, xres) = run(False)[0], run(True)
        (md, mdres), (ma, mares) = run(True, Topology.MESH), run(True, Topology.MESH, Placement.TOPOLOGY_AWARE)
        speed.append(dram / xbar)
        ratio.append(mdres / mares)
        print(f"{c:>3} {dram:>10} {xbar:>10} {dram / xbar:>7.2f}x {xres:>8.0f} | {md:>9} {mdres:>5.0f} {ma:>10} "
              f"{mares:>5.0f} {mdres / mares:>8.2f}x")
    print(f"DSMEM over DRAM exchange: mean {statistics.mean(speed):.2f}x, max {max(speed):.2f}x "
          f"(paper {PAPER['noc_vs_dram_mean']}x mean, {PAPER['noc_vs_dram_max']}x max)")
    print(f"topology-aware placement, mesh NoC residence: mean {statistics.mean(ratio):.2f}x lower, best "
          f"{max(ratio):.2f}x (paper {PAPER['placement_mean']}x mean, {PAPER['placement_max']}x best; largest at "
          "small clusters)")


if __name__ == "__main__":
    main()
