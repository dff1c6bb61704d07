"""Cluster fusion over the SM-cluster network (GPU-Tile-Sim §7, in the manner of ClusterFusion): a fused decode
attention block — RMSNorm, QKV projection, RoPE, attention, rescale, output projection — one head per cluster,
its C CTAs splitting the hidden dimension and the KV length; intermediates exchanged by four cluster reduces
and one gather, either over DSMEM (torchsim.sim.noc) or through global memory.

Runs on one Hopper GPC (16 SMs, `max_sms=16`) with that GPC's share of the chip's L2 and DRAM bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from torchsim.graph import CtaClass, DType, GraphBuilder, KernelGraph, Op, Space, TileDesc, Unit, aff
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.whatif import derive_profile
from torchsim.sim import simulate
from torchsim.sim.noc import NocConfig, Placement, Topology

HIDDEN, HEAD_DIM, QKV = 4096, 128, 384  # Llama-3-8B: q + k + v rows of one head (GQA folded in)
GPC_SMS = 16
# (stage name, bytes each CTA contributes): reduce after RMSNorm, gather after QKV, two reduces inside the
# attention (running max, running sum), reduce after the rescale
EXCHANGES = (("rmsnorm", 4), ("qkv", QKV * 4), ("attn_max", 4), ("attn_sum", 4), ("rescale", HEAD_DIM * 4))
PAPER = {"noc_vs_dram_mean": 1.65, "noc_vs_dram_max": 1.94, "placement_mean": 1.47, "placement_max": 1.91}


def gpc_profile(name: str = "h100-sxm") -> Any:
    base = get_profile(name)
    share = GPC_SMS / base.sms
    return derive_profile(base, {"dram_bytes_per_s": base.dram_bytes_per_s.value * share,
                                 "l2_bytes_per_s": base.l2_bytes_per_s.value * share},
                          where="torchsim.studies.cluster: one GPC's share of L2 and DRAM bandwidth",
                          name=f"{name}-one-gpc")


def fused_block(cluster: int, heads: int = 8, kv: int = 4096, dsmem: bool = True) -> KernelGraph:
    """One cluster of `cluster` CTAs per head; `dsmem=False` exchanges through global memory instead."""
    c = cluster
    if c < 2 or HIDDEN % c or kv % c:
        raise ValueError(f"cluster size {c} must be >= 2 and divide hidden {HIDDEN} and kv {kv}")
    s, rows = HIDDEN // c, kv // c
    b = GraphBuilder(f"cluster_attn_c{c}_{'dsmem' if dsmem else 'dram'}", DType.BF16)
    g = b.group("cta", 0, 4)
    bar = b.barrier("cluster:xchg", expected=c)
    me = aff(rank=1)

    def glob(tensor: str, shape: tuple[int, ...], coord: tuple[Any, ...], dt: DType = DType.BF16) -> TileDesc:
        return TileDesc(Space.GLOBAL, dt, shape, tensor, coord)

    def ldg(t: TileDesc, after: int) -> int:
        n = b.node(g, Op.LDG, Unit.LDST, work=t.nbytes, tile=t, name=f"ldg_{t.tensor}")
        if after >= 0:
            b.data(after, n)
        return n

    def fma(work: float, name: str, *after: int, unit: Unit = Unit.FMA) -> int:
        n = b.node(g, Op.EXP if unit is Unit.SFU else Op.ELEMENTWISE, unit, work=work, name=name)
        for a in after:
            b.data(a, n)
        return n

    def exchange(phase: int, stage: str, nbytes: int, after: int) -> int:
        words = max(1, nbytes // 4)
        sent = []
        if dsmem:
            for d in range(1, c):
                t = TileDesc(Space.DSMEM, DType.FP32, (1, words), f"x_{stage}", (aff(**{f"peer{d}": 1}), aff()))
                sent.append(b.node(g, Op.STS, Unit.LDST, work=words * 4.0, tile=t, name=f"dsmem_{stage}>{d}"))
        else:
            t = glob(f"x_{stage}", (1, words), (aff(head=c, rank=1), aff()), DType.FP32)
            sent.append(b.node(g, Op.STG, Unit.LDST, work=t.nbytes, tile=t, name=f"stg_{stage}"))
        arrive = b.node(g, Op.BARRIER_ARRIVE, Unit.NONE, barrier=bar, name=f"arrive_{stage}")
        for n in sent:
            b.data(after, n)
            b.data(n, arrive)
        wait = b.node(g, Op.BARRIER_WAIT, Unit.NONE, barrier=bar, phase=phase, name=f"wait_{stage}")
        last = wait
        if not dsmem:  # read every CTA's partial back from global memory
            last = ldg(glob(f"x_{stage}", (c, words), (aff(head=1), aff()), DType.FP32), wait)
        return fma(float(c * words), f"combine_{stage}", last)

    x = ldg(glob("x", (1, s), (aff(), me)), -1)
    ss = fma(2.0 * s, "sum_squares", x)
    norm = exchange(0, *EXCHANGES[0], after=ss)
    w = ldg(glob("Wqkv", (s, QKV), (me, aff(head=1))), -1)
    qkv = fma(2.0 * s * QKV, "qkv_gemv", norm, w)
    qkv_all = exchange(1, *EXCHANGES[1], after=qkv)
    rope = fma(float(QKV), "rope", qkv_all)
    k = ldg(glob("K", (rows, HEAD_DIM), (aff(head=c, rank=1), aff())), -1)
    v = ldg(glob("V", (rows, HEAD_DIM), (aff(head=c, rank=1), aff())), -1)
    qk = fma(2.0 * rows * HEAD_DIM, "qk", rope, k)
    mx = exchange(2, *EXCHANGES[2], after=qk)
    p = fma(float(rows), "exp", mx, unit=Unit.SFU)
    sm = exchange(3, *EXCHANGES[3], after=p)
    pv = fma(2.0 * rows * HEAD_DIM, "pv", sm, v)
    o = exchange(4, *EXCHANGES[4], after=fma(float(HEAD_DIM), "rescale", pv))
    wo = ldg(glob("Wo", (HEAD_DIM, s), (aff(head=1), me)), -1)
    out = fma(2.0 * HEAD_DIM * s, "o_proj", o, wo)
    st = glob("out", (1, s), (aff(head=1), me), DType.FP32)
    stg = b.node(g, Op.STG, Unit.LDST, work=st.nbytes, tile=st, name="stg_out")
    b.data(out, stg)
    done = b.node(g, Op.BARRIER_ARRIVE, Unit.NONE, barrier=bar, name="arrive_exit")
    b.data(stg, done)
    b.node(g, Op.BARRIER_WAIT, Unit.NONE, barrier=bar, phase=len(EXCHANGES), name="wait_exit")  # peers done
    graph = b.build()
    names = ("head", "rank", *(f"peer{d}" for d in range(1, c)))
    params = np.array([[h, r, *((r + d) % c for d in range(1, c))] for h in range(heads) for r in range(c)],
                      dtype=np.int64).reshape(heads * c, len(names))
    cls = CtaClass(graph, params, names, threads=128, regs_per_thread=128, smem_bytes=32 * 1024)
    return KernelGraph(graph.name, (cls,), flops=0.0, attrs={"template": "study/cluster_attention",
                                                           "cluster_size": c, "exchange": "dsmem" if dsmem else
                                                           "dram"})


@dataclass(frozen=True)
class ClusterRow:
    cluster: int
    topology: str
    placement: str
    exchange: str
    cycles: int
    noc_residence_cycles: float


def run_one(cluster: int, dsmem: bool, topology: Topology = Topology.CROSSBAR,
            placement: Placement = Placement.DEFAULT, heads: int = 8, kv: int = 4096) -> ClusterRow:
    r = simulate(fused_block(cluster, heads, kv, dsmem), gpc_profile(), max_sms=GPC_SMS,
                 noc=NocConfig(topology, placement))
    return ClusterRow(cluster, topology.value, placement.value, "dsmem" if dsmem else "dram", r.cycles,
                      float(r.attrs.get("noc_mean_residence_cycles", 0.0)))
