"""Tensor-pipe sensitivity study (warp-scheduling notes, papers/004, 'Sensitivity Analysis'): total and stall
cycles of an sm80-style load/compute GEMM as the tensor pipe's latency (32-128 cycles) and in-flight capacity
(issue width, 2-16 sub-operations) vary, on an A100 profile derived through torchsim.hwmodels.whatif.

The kernel is written at mma.sync granularity: W warps each own I accumulator fragments (m16n8k16 MMAs of one
tensor sub-operation each); each k-step a warp cp.asyncs its operands (`stages` deep), reads them with
ldmatrix (LDS) and issues I independent MMAs, each chained on the same accumulator's MMA of the step before.
So at most W x I MMAs are ever in flight: width beyond that finds nothing more to issue (the knee).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from torchsim.graph import CtaClass, DType, GraphBuilder, KernelGraph, Op, Space, TileDesc, Unit, aff
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.whatif import derive_profile
from torchsim.sim import simulate

LATENCIES = (32, 64, 96, 128)
WIDTHS = (2, 4, 6, 8, 10, 12, 16)


def mma_gemm(warps: int = 4, chains: int = 2, k_steps: int = 32, stages: int = 6, bk: int = 64) -> KernelGraph:
    """One CTA of an sm80 multistage GEMM at instruction granularity: warps x chains m16n8k16 accumulators,
    K = k_steps x bk (each k-step: bk / 16 MMAs per accumulator, chained)."""
    b = GraphBuilder(f"mma_gemm_w{warps}_i{chains}", DType.BF16)
    frag_a = TileDesc(Space.SHARED, DType.BF16, (16, 16), "A_smem")
    mma_flop = 2.0 * 16 * 8 * 16
    for w in range(warps):
        g = b.group(f"warp{w}", w, 1)
        loads: dict[int, int] = {}
        last_mma: list[int] = [-1] * chains
        lds_of: dict[int, int] = {}

        def load(i: int, w: int = w, g: int = g, loads: dict[int, int] = loads,
                 lds_of: dict[int, int] = lds_of) -> None:
            tile = TileDesc(Space.GLOBAL, DType.BF16, (16 + 8 * chains, bk), "AB", (aff(w), aff(i)))
            loads[i] = b.node(g, Op.CP_ASYNC, Unit.LDST, work=tile.nbytes, tile=tile, name=f"cp_async[w{w},k{i}]")
            if i >= stages and i - stages in lds_of:
                b.data(lds_of[i - stages], loads[i])  # the slot is refilled once its ldmatrix read it

        for i in range(min(stages - 1, k_steps)):
            load(i)
        for i in range(k_steps):
            if i + stages - 1 < k_steps:
                load(i + stages - 1)
            lds = b.node(g, Op.LDS, Unit.LDST, work=(16 + 8 * chains) * bk * 2.0, tile=frag_a,
                         name=f"ldmatrix[w{w},k{i}]")
            b.data(loads.pop(i), lds)
            lds_of[i] = lds
            for kk in range(bk // 16):
                for c in range(chains):
                    mma = b.node(g, Op.MMA, Unit.TENSOR, work=mma_flop, name=f"mma[w{w},k{i}.{kk},c{c}]")
                    b.data(lds, mma)
                    if last_mma[c] >= 0:
                        b.data(last_mma[c], mma)  # accumulate into the same fragment
                    last_mma[c] = mma
    graph = b.build()
    cls = CtaClass(graph, np.zeros((1, 1), dtype=np.int64), ("cta",), threads=32 * warps, regs_per_thread=64,
                   smem_bytes=int(stages * warps * bk * (16 + 8 * chains) * 2))
    return KernelGraph(graph.name, (cls,), flops=mma_flop * warps * chains * k_steps * (bk // 16),
                       attrs={"template": "study/mma_gemm", "warps": warps, "chains": chains})


@dataclass(frozen=True)
class PipePoint:
    latency: int
    width: int
    cycles: int
    stall_cycles: float  # warp cycles waiting on data (MMA results, loads) plus the busy pipe
    tensor_util: float


def profile(latency: int, width: int, base: str = "a100-sxm") -> Any:
    return derive_profile(get_profile(base), {"tensor_latency_cycles": latency, "tensor_inflight_subops": width},
                          where=f"torchsim.studies.tensor_pipe (latency {latency}, width {width})",
                          name=f"{base}-tc-l{latency}-w{width}")


def run(latencies: tuple[int, ...] = LATENCIES, widths: tuple[int, ...] = WIDTHS, warps: int = 4,
        chains: int = 2) -> list[PipePoint]:
    kg = mma_gemm(warps, chains)
    out = []
    for lat in latencies:
        for w in widths:
            r = simulate(kg, profile(lat, w), max_sms=1)
            stall = r.stalls.get("data", 0.0) + r.stalls.get("unit_busy", 0.0)
            out.append(PipePoint(lat, w, r.cycles, stall, r.unit_busy.get("tensor", 0.0)))
    return out


def knee(points: list[PipePoint], latency: int, gain: float = 0.1) -> int:
    """The smallest width after which one more step of width saves less than `gain` of the cycles."""
    row = sorted((p for p in points if p.latency == latency), key=lambda p: p.width)
    for a, b in zip(row, row[1:]):
        if (a.cycles - b.cycles) / a.cycles < gain:
            return a.width
    return row[-1].width
