"""The event-driven engine: binds CTAs to SMs, issues ready nodes by policy, serves them on resource models.

Deterministic: integer cycles, events due at one cycle handled in the order they were scheduled, then the SMs
with something to issue in index order.
Node lifecycle: blocked -> ready -> issued -> executing -> completed. ORDER edges release at issue, DATA edges
at completion; barrier waits need their arrivals. Time jumps from event to event; idle cycles are never ticked.
"""

from __future__ import annotations

import gc
import math
import time
import weakref
from collections import deque
from dataclasses import replace
from typing import Any

import numpy as np

from torchsim.graph import KernelGraph, Op, Unit
from torchsim.hwmodels.gpu import GpuProfile
from torchsim.sim.clusters import ClusterMixin, dsmem_nodes
from torchsim.sim.issue import PICK_GTO, PICK_OLDEST, PICK_RR, PICK_SORT, IssueMixin
from torchsim.sim.l1 import L1Cache, l1_capacity, tile_granular
from torchsim.sim.loop import event_loop
from torchsim.sim.memory import K_LDG, K_PIPE, K_READ, K_REMOTE, K_SYNC, K_WRITE, MemoryMixin, dram_server
from torchsim.sim.noc import ClusterNoc, NocConfig
from torchsim.sim.policy import GreedyThenOldest, IssuePolicy, RoundRobin, current_default, get_policy
from torchsim.sim.prepare import GLOBAL_READ, GLOBAL_WRITE, ISSUE_ONLY, R_QUEUE, Prepared, full_sps, prepared
from torchsim.sim.resources import BandwidthServer, CycleHeap, LruCache, Pipeline
from torchsim.sim.result import DeadlockError, KernelResult
from torchsim.sim.state import EV_LAUNCH, EV_WAKE, CtaState, SmState, gpu_units
from torchsim.sim.summary import STALLS, diagnose, summarize


def _cluster_size(kernel: KernelGraph, noc: NocConfig) -> int:
    """The kernel's `cluster_size` attr: a whole number of CTAs that fits one GPC (a cluster never spans GPCs, so
    a larger one could never launch and would only be reported as a deadlock)."""
    raw = kernel.attrs.get("cluster_size")
    raw = 1 if raw is None else raw
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or raw != int(raw) or not 1 <= raw <= noc.nodes:
        raise ValueError(f"kernel {kernel.name!r}: attrs cluster_size {raw!r} is not a thread-block cluster that can "
                         f"launch: a whole number of CTAs from 1 to {noc.nodes} (the SMs of one GPC)")
    return int(raw)


def simulate(kernel: KernelGraph, hw: GpuProfile, *, policy: str | type[IssuePolicy] | None = None,
             record: bool = False, max_sms: int | None = None, l1: bool = True,
             noc: NocConfig | None = None, l2_dirty_bytes: float = 0.0) -> KernelResult:
    """Simulate one kernel launch on `hw`; `record=True` keeps a NodeRecord per executed node.

    `policy` defaults to greedy-then-oldest (or the policy of an enclosing `default_policy(...)` block).
    `max_sms` restricts the launch to the first SMs (single-SM studies). `l1=False` sends LDGs straight to
    L2 (no per-SM L1 data cache; the L1 statistics land in `result.attrs`). A kernel whose attrs set
    `cluster_size` C > 1 launches thread-block clusters: C consecutive CTAs co-scheduled on free SMs of one
    16-SM GPC chosen by `noc`'s placement; barriers named `cluster:...` are shared by the cluster's CTAs, and
    nodes with DSMEM tiles (coordinate 0 = the destination CTA's rank) travel over the SM-cluster network.
    `l2_dirty_bytes`: dirty L2 lines the launch finds (at most the L2's size), written back as the kernel's own
    traffic evicts them (`DramServer.dirty`): what a benchmark that zeroes a buffer to flush L2 measures.
    """
    if l2_dirty_bytes < 0:
        raise ValueError(f"l2_dirty_bytes must be >= 0, got {l2_dirty_bytes}")
    eng = _Engine(kernel, hw, policy, record, max_sms, l1, noc)
    if eng.memsys is None:
        eng.dram.dirty = min(float(l2_dirty_bytes), float(hw.l2_bytes.value))
    return eng.run()


# templates validated by an earlier run in this process (a template is never changed once built: the same truncated
# instance at another clock, a GEMM's CTA template shared by its full graph and its samples) are not checked again
_VALIDATED: weakref.WeakSet[Any] = weakref.WeakSet()


class _Engine(IssueMixin, MemoryMixin, ClusterMixin):
    def __init__(self, kernel: KernelGraph, hw: GpuProfile, policy: str | type[IssuePolicy] | None, record: bool,
                 max_sms: int | None, l1: bool = True, noc: NocConfig | None = None) -> None:
        kernel.validate(_VALIDATED)
        self.kernel = kernel
        self.hw = hw
        self.record = record
        self.nsp = int(hw.subpartitions_per_sm.value)
        self.nsm = min(hw.sms, max_sms) if max_sms else hw.sms
        pol = current_default() if policy is None else get_policy(policy) if isinstance(policy, str) else policy
        self.preps = [prepared(c, hw) for c in kernel.classes]
        dtype = kernel.classes[0].graph.dtype
        tensor_rate = hw.tensor_flop_per_clk_per_sm(dtype)
        if tensor_rate <= 0 and any(Unit.TENSOR in p.unit for p in self.preps):
            raise ValueError(f"kernel {kernel.name!r} runs {dtype.name} MMAs, but {hw.name} has no "
                             f"{dtype.name} tensor cores (tensor_fp8_flop_per_clk_per_sm = 0)")
        specs = getattr(hw, "unit_specs", None)  # hook: a profile may declare its own per-core units
        if specs is not None:
            table = specs(kernel)
            self.sms = [SmState(i, {u: Pipeline(name, thr, lat, queued=q) for u, (name, thr, lat, q) in table.items()},
                            self.nsp) for i in range(self.nsm)]
        else:
            # where MMAs accumulate: the kernel says (attrs "tmem_accumulators"), else the profile's MMA has TMEM
            tmem = bool(kernel.attrs.get("tmem_accumulators", hw.tmem_bytes_per_sm.value > 0))
            self.sms = [SmState(i, gpu_units(hw, max(tensor_rate, 1e-9), register_mma=not tmem), self.nsp)
                        for i in range(self.nsm)]
        self.policies = [pol(self.nsp) for _ in range(self.nsm)]
        clk = hw.clock_hz_value
        # hook: a profile with its own memory path (Tensix: NoC + DRAM banks) serves global reads/writes
        make_mem = getattr(hw, "memory_system", None)
        self.memsys = make_mem(kernel) if make_mem is not None else None
        self.l2 = LruCache(float(hw.l2_bytes.value) if self.memsys is None else 0.0)
        self.l2srv = BandwidthServer("l2", float(hw.l2_bytes_per_s.value) / clk if self.memsys is None else 1.0)
        self.dram = dram_server(hw, clk)
        self.tma_lat = 0
        if self.memsys is None:
            self.l2_lat = int(hw.l2_latency_cycles.value)
            self.dram_lat = int(hw.dram_latency_cycles.value)
            self.tma_lat = int(hw.tma_latency_cycles.value)
        self.launch_cycles = int(hw.cta_launch_cycles.value)
        l1_q = l1_capacity(hw) if l1 and self.memsys is None else None
        self.l1: list[L1Cache] | None = None
        if l1_q is not None:
            self.l1 = [L1Cache(float(l1_q.value), observer=pl.l1_observer) for pl in self.policies]
            self.l1_lat = int(hw.l1_latency_cycles.value)
        self.l1_lines: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self.l1_tensors: dict[Any, int] = {}
        # (class, LDG node) -> lines of its whole tile, for tensors the L1 keeps as whole tiles (L1Cache)
        self.l1_tile_lines = self._tile_granular_reads() if self.l1 and all(
            c.observer is None for c in self.l1) else {}
        self.cluster = _cluster_size(kernel, noc or NocConfig())
        self.noc = ClusterNoc(noc or NocConfig()) if self.cluster > 1 else None
        self.cluster_bars = [frozenset(b for b, nm in enumerate(p.barrier_names) if nm.startswith("cluster:"))
                             for p in self.preps]
        self.cbar: dict[tuple[int, int], int] = {}
        self.cbar_wait: dict[tuple[int, int], list[tuple[CtaState, int]]] = {}
        self.dsmem = [dsmem_nodes(c) for c in kernel.classes]
        self.group_nodes = [tuple(int(x) for x in np.bincount([g for g, c in zip(p.group, p.code) if c != ISSUE_ONLY],
                                                              minlength=p.ngroups)) for p in self.preps]
        self.occ = [self._occupancy(c, p) for c, p in zip(kernel.classes, self.preps)]
        self.info = [self._node_table(ci, p) for ci, p in enumerate(self.preps)]
        # Without throttling or cluster barriers, whether an SM can issue depends only on its own state, so a
        # ready node that cannot issue yet and a subpartition that just issued schedule a wake at the earliest
        # cycle anything could issue instead of re-scanning the SM every cycle (same issue order, fewer events).
        self.lazy = not pol.throttles and self.cluster <= 1
        self.full = full_sps(self.nsp)
        if all(m is self.full for p in self.preps for m in p.multi):
            # Every node needs the whole SM (warp-group kernels): all subpartitions are always free together, so
            # the SM issues like one with a single subpartition, 0, that each node needs alone (one comparison
            # per test instead of a max over subpartitions; the same issue cycles). This run's own copies: the
            # prepared classes are shared with other runs (torchsim.sim.prepare.prepared).
            self.preps = [replace(p, multi=[None] * p.n, qinfo=[(0, None, u) for _, _, u in p.qinfo])
                          for p in self.preps]
        self.throttles = pol.throttles
        self.plain_issued = pol.issued is IssuePolicy.issued  # `issued` only records the last age per subpartition
        # the built-in orders are picked without sorting the queue; other `key`s sort it
        self.pick = {IssuePolicy.key: PICK_OLDEST, GreedyThenOldest.key: PICK_GTO,
                     RoundRobin.key: PICK_RR}.get(pol.key, PICK_SORT)
        # a calendar: the cycles with something due (a heap holding each cycle once), and what is due at each
        # (node completions and readiness, SM wake-ups, CTA launches; torchsim.sim.state EV_*) in the order it
        # was scheduled
        self.times = CycleHeap()
        self.cal: dict[int, list[tuple[int, Any, Any]]] = {}
        self.wake_ev = [(EV_WAKE, sm, sm.index) for sm in self.sms]  # one shared calendar entry per SM
        self.dirty: list[int] = []
        self.instant: deque[tuple[int, CtaState, int]] = deque()
        self.is_dirty = [False] * self.nsm
        self.pending = [(ci, r) for ci, c in enumerate(kernel.classes) for r in range(c.count)]
        self.next_cta = 0
        self.done_ctas = 0
        self.events = 0  # nodes completed: counted per CTA as it retires (see run for the ones left resident)
        self.stalls = [0.0] * len(STALLS)
        self.records: list[Any] = []
        self.cta_sm: list[int] = [-1] * len(self.pending)
        self.sm_end = [0] * self.nsm  # cycle at which each SM's last CTA retired
        self.resident: dict[int, CtaState] = {}
        self.now = 0

    def _node_table(self, ci: int, p: Prepared) -> list[tuple[Any, ...]]:
        """How each node of class `ci` is served: (kind, group, occupancy of its work on its unit, work, bytes
        through the shared-memory port, their port occupancy, order successors, barrier it arrives at, TMA
        latency, data successors when every one of them joins a queue on becoming ready (else None: see
        torchsim.sim.loop on releasing those at issue)). Every SM has the same units, so SM 0's stand for all."""
        units = self.sms[0].units
        port = units.get(Unit.LDST)
        dsmem = self.dsmem[ci] if self.noc is not None else {}
        table = []
        for j in range(p.n):
            code, unit = p.code[j], units.get(p.unit[j])
            if code == ISSUE_ONLY:
                kind = K_SYNC
            elif j in dsmem:
                kind = K_REMOTE
            elif code == GLOBAL_WRITE:
                kind = K_WRITE
            elif code == GLOBAL_READ:
                kind = K_LDG if self.l1 is not None and p.op[j] == Op.LDG else K_READ
            else:
                kind = K_PIPE
            # the event loop applies a partner pipe's exclusion for pipe nodes only
            assert kind == K_PIPE or unit is None or unit.partner is None, (p.name, j, p.unit[j])
            sio = p.smem_io[j]
            dsucc = p.data_succ[j]
            queued = dsucc if dsucc and all(p.rkind[k] == R_QUEUE for k in dsucc) else None
            table.append((kind, p.group[j], unit.occupancy(p.work[j]) if unit is not None else 0, p.work[j], sio,
                          port.occupancy(sio) if sio and port is not None else 0, p.order_succ[j], p.arrive[j],
                          self.tma_lat if p.unit[j] == Unit.TMA else 0, queued))
        return table

    # -- occupancy and CTA dispatch ---------------------------------------------------------------------
    def _tile_granular_reads(self) -> dict[tuple[int, int], tuple[int, tuple[int, ...]]]:
        """(class, LDG node) -> (lines of its tile, tile shape) for the tensors the L1 keeps as whole tiles."""
        reads = []
        for ci, (c, p) in enumerate(zip(self.kernel.classes, self.preps)):
            ncoords = int(p.mem_const.shape[1]) if p.mem_nodes.size else 0
            for m, (j, tensor) in enumerate(zip(p.mem_node_list, p.mem_tensor)):
                if p.op[j] == Op.LDG:
                    tile = c.graph.tiles[int(c.graph.tile[j])]

                    def coords(p: Any = p, m: int = m, c: Any = c) -> np.ndarray:
                        return (p.mem_const[m][:, None] + p.mem_coef[m] @ c.params.T).T
                    reads.append((ci, j, (tensor, tile.shape, tile.dtype.nbytes, ncoords, coords)))
        whole = tile_granular([r[2] for r in reads])
        return {(ci, j): (whole[(r[0], tuple(r[1]))], tuple(r[1])) for ci, j, r in reads
                if (r[0], tuple(r[1])) in whole}

    def _occupancy(self, cls: Any, p: Prepared) -> int:
        hw = self.hw
        limits = {
            "max_ctas_per_sm": int(hw.max_ctas_per_sm.value),
            "max_threads_per_sm": int(hw.max_threads_per_sm.value) // p.threads,
            "registers_per_sm": int(hw.registers_per_sm.value) // max(1, p.regs),
            "smem_per_sm_bytes": int(hw.smem_per_sm_bytes.value) // p.smem if p.smem else 1 << 30,
        }
        field, occ = min(limits.items(), key=lambda kv: kv[1])
        if occ <= 0:
            raise ValueError(f"CTA class {p.name!r} cannot fit on one SM of {hw.name}: limited by {field} "
                             f"(threads {p.threads}, registers {p.regs}, shared memory {p.smem} B)")
        return occ

    def _fits(self, sm: SmState, ci: int) -> bool:
        p = self.preps[ci]
        hw = self.hw
        return (sm.ctas < self.occ[ci] and sm.threads + p.threads <= hw.max_threads_per_sm.value
                and sm.regs + p.regs <= hw.registers_per_sm.value and sm.smem + p.smem <= hw.smem_per_sm_bytes.value)

    def _dispatch(self, sm: SmState, t: int) -> bool:
        if self.next_cta >= len(self.pending):
            return False
        ci, row = self.pending[self.next_cta]
        if not self._fits(sm, ci):
            return False
        p = self.preps[ci]
        sm.ctas += 1
        sm.threads += p.threads
        sm.regs += p.regs
        sm.smem += p.smem
        self._push(t + self.launch_cycles, EV_LAUNCH, sm.index, self.next_cta)
        self.next_cta += 1
        return True

    def _launch(self, sm_idx: int, cta_index: int, t: int) -> CtaState:
        """CTA `cta_index` becomes resident on SM `sm_idx` at `t` (the event loop readies its roots)."""
        ci, row = self.pending[cta_index]
        cta = CtaState(cta_index, self.preps[ci], ci, self.kernel.classes[ci].params[row], self.sms[sm_idx], t,
                       self.info[ci])
        self.resident[cta_index] = cta
        self.cta_sm[cta_index] = sm_idx
        self.policies[sm_idx].launched(cta_index, self.group_nodes[ci], t)
        return cta

    def _retire(self, cta: CtaState, t: int) -> None:
        sm = cta.smo
        p = cta.prep
        sm.ctas -= 1
        sm.threads -= p.threads
        sm.regs -= p.regs
        sm.smem -= p.smem
        self.sm_end[cta.sm] = t
        self.events += p.n
        del self.resident[cta.seq]
        self.policies[cta.sm].retired(cta.seq, t)
        self.done_ctas += 1
        if self.cluster > 1:
            self._dispatch_clusters(t)
            return
        while self._dispatch(sm, t):
            pass

    # -- events -----------------------------------------------------------------------------------------
    def _push(self, t: int, kind: int, a: Any, b: Any) -> None:
        events = self.cal.get(t)
        if events is None:
            self.cal[t] = [(kind, a, b)]
            self.times.push(t)
        else:
            events.append((kind, a, b))

    def _mark(self, sm: int) -> None:
        if not self.is_dirty[sm]:
            self.is_dirty[sm] = True
            self.dirty.append(sm)

    # -- main loop --------------------------------------------------------------------------------------
    def run(self) -> KernelResult:
        wall = time.perf_counter()
        progress = self.cluster <= 1
        if not progress:
            self._dispatch_clusters(0)
        while progress:
            progress = False
            for sm in self.sms:
                if self._dispatch(sm, 0):
                    progress = True
        # the loop allocates millions of short-lived tuples and frees them by reference counting; the cyclic
        # collector's passes over them find nothing to collect (4-5% of a GEMM's simulation time), so it waits
        gc_on = gc.isenabled()
        gc.disable()
        try:
            t = event_loop(self)
        finally:
            if gc_on:
                gc.enable()
        self.events += sum(c.prep.n - c.remaining for c in self.resident.values())
        if self.done_ctas < len(self.pending):
            raise DeadlockError(diagnose(self, t))
        if self.memsys is None:  # write-back still queued at DRAM belongs to this kernel
            t = max(t, math.ceil(self.dram.free_at))
        return summarize(self, t, time.perf_counter() - wall)
