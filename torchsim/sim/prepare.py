"""Prepare a CTA template for the engine: python lists for the hot loop, checks against the profile.

Runs once per CTA class and profile structure (`prepared`; templates are shared by all CTAs of the class).
Checks that every node's unit exists on the target hardware and that shared-memory tiles fit, naming the node
otherwise.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from torchsim.graph import CtaClass, Edge, GraphError, Op, Space, Unit
from torchsim.graph.kinds import GLOBAL_READS, GLOBAL_WRITES
from torchsim.hwmodels.gpu import GpuProfile

# dispatch codes
ISSUE_ONLY, COMPUTE, GLOBAL_READ, GLOBAL_WRITE, LOCAL_MEM = 0, 1, 2, 3, 4
# a node that becomes ready: joins its subpartition queue, retires at once (synchronisation), or waits on a barrier
R_QUEUE, R_INSTANT, R_WAIT = 0, 1, 2
_FULL: dict[int, tuple[int, ...]] = {}


def full_sps(nsp: int) -> tuple[int, ...]:
    """The one tuple object naming every subpartition of an SM: `multi[j] is full_sps(nsp)` tests a node that
    needs the whole SM without comparing tuples."""
    return _FULL.setdefault(nsp, tuple(range(nsp)))


@dataclass(eq=False)
class Prepared:
    name: str
    n: int
    names: tuple[str, ...]
    op: list[int]
    unit: list[int]
    group: list[int]
    group_names: tuple[str, ...]
    work: list[float]
    code: list[int]
    indeg: list[int]
    data_succ: list[tuple[int, ...]]
    order_succ: list[tuple[int, ...]]
    sps: list[tuple[int, ...]]
    sp0: list[int]
    barrier: list[int]
    need: list[int]  # arrivals a barrier wait needs
    barrier_names: tuple[str, ...]
    mem_nodes: np.ndarray  # node indices with a global tile
    mem_node_list: list[int]  # the same as a list
    mem_tensor: list[str]
    mem_const: np.ndarray  # [m, D]
    mem_coef: np.ndarray  # [m, D, P]
    ngroups: int
    threads: int
    regs: int
    smem: int
    smem_io: list[float]  # bytes through the shared-memory port (MMA operands, TMA writes into smem)
    multi: list[tuple[int, ...] | None]  # the subpartitions of a warp-group node (None: its one subpartition sp0;
    # full_sps(nsp) when it needs them all)
    arrive: list[int]  # barrier a BARRIER_ARRIVE node arrives at (-1 for every other node)
    roots: list[int]  # nodes without predecessors (ready at launch)
    qinfo: list[tuple[int, tuple[int, ...] | None, int]]  # (sp0, multi, unit): what a queue entry carries
    rkind: list[int]  # what becoming ready means: R_QUEUE, R_INSTANT, or R_WAIT (a barrier wait: arrivals count)
    pred_edges: list[list[tuple[int, int]]] | None = None  # (src, kind), built for deadlock diagnosis

    def predecessors(self, j: int, src: np.ndarray, dst: np.ndarray, kind: np.ndarray) -> list[tuple[int, int]]:
        if self.pred_edges is None:
            pe: list[list[tuple[int, int]]] = [[] for _ in range(self.n)]
            for s, d, k in zip(src.tolist(), dst.tolist(), kind.tolist()):
                pe[d].append((s, k))
            self.pred_edges = pe
        return self.pred_edges[j]


def _code(op: Op, unit: Unit, tile_space: Space | None) -> int:
    if unit is Unit.NONE:
        return ISSUE_ONLY
    if op in GLOBAL_READS and tile_space in (Space.GLOBAL, None) or op is Op.NOC_READ:
        return GLOBAL_READ
    if op is Op.NOC_WRITE:
        return GLOBAL_WRITE
    if op in GLOBAL_WRITES:
        return GLOBAL_WRITE
    if op in (Op.LDS, Op.STS, Op.TMEM_LOAD, Op.TMEM_STORE):
        return LOCAL_MEM
    return COMPUTE


# prepared classes by template object, then by what `prepare` reads of the class besides its template (parameter
# names, threads, registers, shared memory) and of the profile: a kernel simulated again (at another clock:
# torchsim.sim.sustained; the same truncated instance: torchsim.prediction.repeats) and the classes of a GEMM's full
# graph and its samples, which share templates (torchsim.lowering.templates.gemm), reuse them
_PREPARED: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Prepared]] = weakref.WeakKeyDictionary()


def prepared(cls: CtaClass, hw: GpuProfile) -> Prepared:
    """`prepare(cls, hw)`, computed once per template object, class shape and profile structure (units,
    subpartitions, shared memory per CTA; never the clock). Shared by every run that asks: the engine changes none
    of it (a whole-SM class's conversion is a copy: torchsim.sim.engine), and a graph is not changed once built
    (templates and repeats build new ones; nothing writes into a TileGraph's arrays)."""
    key = (tuple(cls.param_names), cls.threads, cls.regs_per_thread, cls.smem_bytes, hw.name, hw.units,
           int(hw.subpartitions_per_sm.value), float(hw.smem_per_cta_bytes.value))
    per = _PREPARED.get(cls.graph)
    if per is None:
        per = _PREPARED[cls.graph] = {}
    got = per.get(key)
    if got is None:
        got = per[key] = prepare(cls, hw)
    return got


def prepare(cls: CtaClass, hw: GpuProfile) -> Prepared:
    g = cls.graph
    n = g.num_nodes
    have = hw.units
    nsp = int(hw.subpartitions_per_sm.value)
    smem_cta = float(hw.smem_per_cta_bytes.value)
    for i in range(n):
        u = Unit(int(g.unit[i]))
        if u not in have:
            raise GraphError(f"{g.describe_node(i)} needs unit {u.name}, which {hw.name} does not have "
                             f"(it has {', '.join(sorted(x.name for x in have))})")
        t = int(g.tile[i])
        if t >= 0 and g.tiles[t].space is Space.SHARED and g.tiles[t].nbytes > smem_cta:
            raise GraphError(f"{g.describe_node(i)} uses a shared-memory tile of {g.tiles[t].nbytes:.0f} B "
                             f"{g.tiles[t].shape}, larger than {hw.name}'s {smem_cta:.0f} B per CTA")
    if cls.smem > smem_cta:
        raise GraphError(f"CTA class {g.name!r} needs {cls.smem} B of shared memory; {hw.name} allows "
                         f"{smem_cta:.0f} B per CTA (smem_per_cta_bytes)")
    data_succ: list[list[int]] = [[] for _ in range(n)]
    order_succ: list[list[int]] = [[] for _ in range(n)]
    for s, d, k in zip(g.edge_src.tolist(), g.edge_dst.tolist(), g.edge_kind.tolist()):
        (data_succ if k == Edge.DATA else order_succ)[s].append(d)
    indeg = np.bincount(g.edge_dst, minlength=n).astype(int).tolist()
    group_sps = [grp.subpartitions(nsp) for grp in g.groups]
    ops = [Op(int(x)) for x in g.op]
    units = [Unit(int(x)) for x in g.unit]
    codes = []
    mem_nodes, mem_tensor, consts, coefs = [], [], [], []
    pidx = {name: i for i, name in enumerate(cls.param_names)}
    dims = max((len(t.shape) for t in g.tiles), default=1)
    for i in range(n):
        t = int(g.tile[i])
        tile = g.tiles[t] if t >= 0 else None
        code = _code(ops[i], units[i], tile.space if tile else None)
        codes.append(code)
        if code in (GLOBAL_READ, GLOBAL_WRITE) and tile is not None:
            mem_nodes.append(i)
            mem_tensor.append(tile.tensor or f"{g.name}.t{t}")
            c = np.zeros(dims, dtype=np.int64)
            m = np.zeros((dims, max(1, len(pidx))), dtype=np.int64)
            for d, a in enumerate(tile.coord):
                c[d] = a.const
                for pname, coef in a.terms:
                    m[d, pidx[pname]] = coef
            consts.append(c)
            coefs.append(m)
    need = [0] * n
    for i in range(n):
        b = int(g.barrier[i])
        if b >= 0 and ops[i] is Op.BARRIER_WAIT:
            need[i] = g.barriers[b].expected * (int(g.phase[i]) + 1)
    P = max(1, len(pidx))
    multi = [None if len(sps) == 1 else full_sps(nsp) if sps == full_sps(nsp) else sps
             for sps in (group_sps[int(x)] for x in g.group)]
    return Prepared(
        name=g.name, n=n, names=g.node_names, op=[int(o) for o in ops], unit=[int(u) for u in units],
        group=g.group.tolist(), group_names=tuple(gr.name for gr in g.groups), work=g.work.tolist(), code=codes,
        indeg=indeg, data_succ=[tuple(x) for x in data_succ], order_succ=[tuple(x) for x in order_succ],
        sps=[group_sps[int(x)] for x in g.group], sp0=[group_sps[int(x)][0] for x in g.group],
        barrier=g.barrier.tolist(), need=need, barrier_names=tuple(b.name for b in g.barriers),
        mem_nodes=np.array(mem_nodes, dtype=np.int64), mem_node_list=list(mem_nodes), mem_tensor=mem_tensor,
        mem_const=np.array(consts, dtype=np.int64).reshape(len(mem_nodes), dims),
        mem_coef=np.array(coefs, dtype=np.int64).reshape(len(mem_nodes), dims, P),
        ngroups=len(g.groups), threads=cls.threads, regs=cls.regs_per_thread * cls.threads, smem=cls.smem,
        smem_io=[float(g.smem_io[i]) or (float(g.work[i]) if ops[i] is Op.TMA_LOAD else 0.0) for i in range(n)],
        multi=multi,
        arrive=[int(g.barrier[i]) if ops[i] is Op.BARRIER_ARRIVE else -1 for i in range(n)],
        roots=[i for i in range(n) if indeg[i] == 0],
        qinfo=[(group_sps[int(x)][0], mult, int(u)) for x, mult, u in zip(g.group, multi, units)],
        rkind=[R_WAIT if need[i] else R_INSTANT if codes[i] == ISSUE_ONLY else R_QUEUE for i in range(n)],
    )
