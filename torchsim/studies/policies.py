"""The warp-scheduling policy study: GTO, RR, two-level and cache-conscious (CCWS) issue policies on three kernels.

Kernels (hand-built tile graphs, like the notes' Macsim traces), on one SM with its share of the chip's L2
bandwidth: `reuse` — every warp re-reads its own small working set through LDG (intra-warp temporal locality;
all warps together overflow the 28 KiB L1); `streaming` — the same loop reading fresh tiles (no reuse); and the
TMA-fed sm90 GEMM of the template library on the full chip. Shared by
benchmarks/policy_study.py and tests/test_policies.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from torchsim.graph import CtaClass, DType, GraphBuilder, KernelGraph, Op, Space, TileDesc, Unit, aff
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.whatif import derive_profile
from torchsim.lowering.templates import gemm
from torchsim.sim import IssuePolicy, KernelResult, simulate

POLICY_NAMES = ("gto", "rr", "two-level", "ccws")
TILE_ROWS, TILE_COLS = 8, 64  # one LDG: 8 rows x 128 B = 8 L1 lines (1 KiB)


def loop_kernel(reuse: bool, warps: int = 32, reused: int = 2, iters: int = 24, ctas: int = 1,
                fma_per_tile: float = 4096.0) -> KernelGraph:
    """Each warp loops `iters` times: `reused + 1` LDG tiles (8 rows x 128 B = 1 KiB each), then FMA work.

    `reuse=True`: `reused` tiles are the warp's own and the same every iteration (2 KiB per warp; 32 warps
    together 64 KiB, over the 28 KiB L1); False: those tiles are new every iteration (a stream, no reuse). The
    last tile is a window shared with the neighbouring warp (warp w reads S[w + it]): it stays in L2 and keeps
    every warp waiting on L2 each iteration, so all warps interleave."""
    b = GraphBuilder("reuse_loop" if reuse else "stream_loop", DType.BF16)
    shape = (TILE_ROWS, TILE_COLS)
    for w in range(warps):
        g = b.group(f"warp{w}", w, 1)
        for it in range(iters):
            tiles = [TileDesc(Space.GLOBAL, DType.BF16, shape, "X", (aff(w, cta=warps), aff(s))) if reuse else
                     TileDesc(Space.GLOBAL, DType.BF16, shape, "Y", (aff(w * iters + it, cta=warps * iters), aff(s)))
                     for s in range(reused)]
            tiles.append(TileDesc(Space.GLOBAL, DType.BF16, shape, "S", (aff(w + it, cta=warps), aff())))
            loads = [b.node(g, Op.LDG, Unit.LDST, work=t.nbytes, tile=t, name=f"ldg[w{w},i{it},{t.tensor}{s}]")
                     for s, t in enumerate(tiles)]
            fma = b.node(g, Op.ELEMENTWISE, Unit.FMA, work=fma_per_tile * len(tiles), name=f"fma[w{w},i{it}]")
            for ld in loads:
                b.data(ld, fma)
    graph = b.build()
    params = np.arange(ctas, dtype=np.int64).reshape(ctas, 1)
    cls = CtaClass(graph, params, ("cta",), threads=32 * warps, regs_per_thread=32, smem_bytes=0)
    flops = float(ctas * warps * iters * fma_per_tile * (reused + 1))
    return KernelGraph(graph.name, (cls,), flops=flops, attrs={"template": f"study/{graph.name}", "warps": warps})


def one_sm_profile(name: str = "h100-sxm") -> Any:
    """One SM with its share of the chip's L2 and DRAM bandwidth (what it gets when every SM runs the loop).

    H100's L2 share uses MT4G's measured 4.86 TB/s read bandwidth (facts.csv): 20 B/clk per SM."""
    base = get_profile(name)
    sms = base.sms
    l2 = 4.86e12 if name == "h100-sxm" else float(base.l2_bytes_per_s.value)
    return derive_profile(base, {"l2_bytes_per_s": l2 / sms, "dram_bytes_per_s": base.dram_bytes_per_s.value / sms},
                          where="torchsim.studies.policies: one SM's share of L2 (facts.csv H100-SXM5-80GB "
                          "memory.l2_bandwidth_measured, MT4G 4.86 TB/s read) and DRAM bandwidth",
                          name=f"{name}-one-sm-share")


@dataclass(frozen=True)
class PolicyRow:
    kernel: str
    policy: str
    cycles: int
    l1_misses: int  # line misses
    l1_hit_rate: float
    ops: int  # nodes executed
    vta_hits: int

    @property
    def misses_per_kop(self) -> float:
        return 1000.0 * self.l1_misses / self.ops if self.ops else 0.0


def _row(kernel: str, policy: str, r: KernelResult) -> PolicyRow:
    a = r.attrs
    return PolicyRow(kernel, policy, r.cycles, int(a.get("l1_line_misses", 0)), float(a.get("l1_hit_rate", 0.0)),
                     r.node_events, int(a.get("vta_hits", 0)))


def run_loop(reuse: bool, policy: str | type[IssuePolicy], hw_name: str = "h100-sxm", **kw: int) -> PolicyRow:
    hw = one_sm_profile(hw_name)
    r = simulate(loop_kernel(reuse, **kw), hw, policy=policy, max_sms=1)
    return _row("reuse" if reuse else "streaming", policy if isinstance(policy, str) else policy.name, r)


def run_tma_gemm(policy: str, size: int = 2048, hw_name: str = "h100-sxm") -> PolicyRow:
    hw = get_profile(hw_name)
    r = simulate(gemm(size, size, size, DType.BF16, hw), hw, policy=policy)
    return _row(f"sm90 TMA GEMM {size}^3", policy, r)


def table(policies: tuple[str, ...] = POLICY_NAMES, gemm_size: int = 2048) -> list[PolicyRow]:
    rows = []
    for reuse in (True, False):
        rows += [run_loop(reuse, p) for p in policies]
    rows += [run_tma_gemm(p, gemm_size) for p in policies]
    return rows
