"""Runtime state of the engine: resident CTAs and SMs, and the GPU units an SM is built from.

Used by torchsim.sim.engine; CTA state exists only while the CTA is resident (freed when it retires).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from torchsim.graph import Unit
from torchsim.hwmodels.gpu import GpuProfile
from torchsim.sim.prepare import Prepared
from torchsim.sim.resources import Pipeline

W_DATA, W_ORDER, W_BARRIER, W_LAUNCH = 0, 1, 2, 3
WAIT_NAMES = ("data", "order", "barrier", "launch")
# what the engine's calendar holds at a cycle: (EV_DONE, cta, node) a node completes, (EV_WAKE, sm, sm index)
# an SM is looked at again (stale when its `wake` moved since), (EV_LAUNCH, sm index, CTA index) a CTA launches,
# (EV_READY, cta, node) a node whose edges were all released becomes ready as its last data arrives; and, never in
# the calendar, (EV_SYNC, cta, node) a synchronisation node retires in the issue rounds of the cycle it is ready
EV_DONE, EV_WAKE, EV_LAUNCH, EV_READY, EV_SYNC = 0, 1, 2, 3, 4
NEVER = 1 << 62  # an SM's `wake` when none is pending (a cycle no simulation reaches: one comparison tests both)
UNITS = max(Unit) + 1  # an SM's unit list is indexed by Unit (iterating the enum for it: 2 us an SM)


class CtaState:
    """A resident CTA: per-node counters for its template (freed when it retires)."""

    __slots__ = ("seq", "base", "prep", "info", "cls", "params", "pred", "remaining", "bar", "bar_wait", "keys",
                 "ready_t", "why", "grp_last", "sm", "smo", "data_at", "qinfo", "group", "rkind", "data_succ", "need",
                 "barrier", "code")

    def __init__(self, seq: int, prep: Prepared, cls: int, params: np.ndarray, sm: SmState, t: int,
                 info: list[Any]) -> None:
        self.seq = seq
        self.base = seq * 4096  # age of group g = base + g
        self.info = info  # the engine's per-node issue table of the class
        self.prep = prep
        # the class's per-node tables the event loop reads for every node, held here (C fields when compiled:
        # torchsim.sim.native; the Prepared dataclass's are dict lookups)
        self.qinfo, self.group, self.rkind, self.data_succ = prep.qinfo, prep.group, prep.rkind, prep.data_succ
        self.need, self.barrier, self.code = prep.need, prep.barrier, prep.code
        self.cls = cls
        self.params = params
        self.pred = list(prep.indeg)  # edges not yet released, per node
        # per node: the cycle its last data arrives from predecessors whose data edges were released at their
        # issue (the event loop does so when every data successor of a node joins a queue; 0: none)
        self.data_at = [0] * prep.n
        self.remaining = prep.n  # nodes not yet completed (the event loop counts such a node at its issue)
        self.bar = [0] * len(prep.barrier_names)
        self.bar_wait: list[list[int]] = [[] for _ in prep.barrier_names]
        self.ready_t = [t] * prep.n
        self.why = [W_LAUNCH] * prep.n
        self.grp_last = [t] * prep.ngroups
        self.sm = sm.index
        self.smo = sm
        self.keys: dict[int, tuple[Any, ...]] = {}
        if prep.mem_nodes.size:  # node -> (tensor, coordinate per dim), the tuples built by zip (once per CTA)
            dims = (prep.mem_const + prep.mem_coef @ params).T.tolist()  # [D, m]
            self.keys = dict(zip(prep.mem_node_list, zip(prep.mem_tensor, *dims)))


class SmState:
    __slots__ = ("index", "units", "ulist", "sp_free", "spmax", "queues", "wake", "threads", "regs", "smem", "ctas")

    def __init__(self, index: int, units: dict[int, Pipeline], nsp: int) -> None:
        self.index = index
        self.units = units
        self.ulist: list[Pipeline | None] = [units.get(u) for u in range(UNITS)]  # indexed by Unit
        self.sp_free = [0] * nsp  # cycle each subpartition can issue again
        self.spmax = 0  # max(sp_free), kept by the event loop (torchsim.sim.loop): last issue cycle + 1
        # ready entries per subpartition: (age, node, cta, multi, unit: this SM's Pipeline the node runs on)
        self.queues: list[list[tuple[int, int, CtaState, Any, Pipeline]]] = [[] for _ in range(nsp)]
        self.wake = NEVER  # cycle of its pending wake-up
        self.threads = self.regs = self.smem = self.ctas = 0


def gpu_units(hw: GpuProfile, dtype_flop_per_clk: float, register_mma: bool = True) -> dict[int, Pipeline]:
    """The SM's pipes; `register_mma`: the kernel's MMAs accumulate in the issuing warps' registers (mma.sync,
    wgmma), so a profile whose `sfu_overlaps_tensor` is 0 pairs the SFU with the tensor pipe. MMAs that
    accumulate in TMEM (tcgen05) never exclude MUFU work."""
    q = hw
    u: dict[int, Pipeline] = {
        Unit.TENSOR: Pipeline("tensor", dtype_flop_per_clk, int(q.tensor_latency_cycles.value),
                              float(q.tensor_inflight_subops.value), float(q.tensor_subop_flop.value)),
        Unit.FMA: Pipeline("fma", float(q.fma_flop_per_clk_per_sm.value), int(q.fma_latency_cycles.value)),
        Unit.SFU: Pipeline("sfu", float(q.sfu_ops_per_clk_per_sm.value), int(q.sfu_latency_cycles.value)),
        Unit.LDST: Pipeline("ldst", float(q.ldst_bytes_per_clk_per_sm.value), int(q.smem_latency_cycles.value)),
    }
    if q.tma_bytes_per_clk_per_sm.value > 0:
        u[Unit.TMA] = Pipeline("tma", float(q.tma_bytes_per_clk_per_sm.value), 0, queued=True)
    if q.tmem_bytes_per_clk_per_sm.value > 0:
        u[Unit.TMEM] = Pipeline("tmem", float(q.tmem_bytes_per_clk_per_sm.value), 2)
    overlap = getattr(q, "sfu_overlaps_tensor", None)
    if register_mma and overlap is not None and overlap.value == 0:  # the SFU and the tensor pipe exclude each other
        u[Unit.TENSOR].partner, u[Unit.SFU].partner = u[Unit.SFU], u[Unit.TENSOR]
    return u
