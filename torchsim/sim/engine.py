"""The event-driven engine: binds CTAs to SMs, issues ready nodes by policy, serves them on resource models.

Deterministic: integer cycles, a heap of (cycle, sequence, kind, a, b) events, SMs handled in index order.
Node lifecycle: blocked -> ready -> issued -> executing -> completed. ORDER edges release at issue, DATA edges
at completion; barrier waits need their arrivals. Time jumps from event to event; idle cycles are never ticked.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from typing import Any

import numpy as np

from torchsim.graph import KernelGraph, Op, Unit
from torchsim.hwmodels.gpu import GpuProfile
from torchsim.sim.clusters import ClusterMixin, dsmem_nodes
from torchsim.sim.l1 import L1Cache, l1_capacity, tile_lines
from torchsim.sim.noc import ClusterNoc, NocConfig
from torchsim.sim.policy import IssuePolicy, current_default, get_policy
from torchsim.sim.prepare import COMPUTE, GLOBAL_READ, GLOBAL_WRITE, ISSUE_ONLY, Prepared, prepare
from torchsim.sim.resources import BandwidthServer, LruCache, Pipeline
from torchsim.sim.result import DeadlockError, KernelResult, NodeRecord
from torchsim.sim.state import W_BARRIER, W_DATA, W_ORDER, WAIT_NAMES, CtaState, SmState, gpu_units
from torchsim.sim.summary import STALLS, diagnose, summarize

EV_DONE, EV_WAKE, EV_LAUNCH = 0, 1, 2
INF = math.inf


def simulate(kernel: KernelGraph, hw: GpuProfile, *, policy: str | type[IssuePolicy] | None = None,
             record: bool = False, max_sms: int | None = None, l1: bool = True,
             noc: NocConfig | None = None) -> KernelResult:
    """Simulate one kernel launch on `hw`; `record=True` keeps a NodeRecord per executed node.

    `policy` defaults to greedy-then-oldest (or the policy of an enclosing `default_policy(...)` block).
    `max_sms` restricts the launch to the first SMs (single-SM studies). `l1=False` sends LDGs straight to
    L2 (no per-SM L1 data cache; the L1 statistics land in `result.attrs`). A kernel whose attrs set
    `cluster_size` C > 1 launches thread-block clusters: C consecutive CTAs co-scheduled on free SMs of one
    16-SM GPC chosen by `noc`'s placement; barriers named `cluster:...` are shared by the cluster's CTAs, and
    nodes with DSMEM tiles (coordinate 0 = the destination CTA's rank) travel over the SM-cluster network.
    """
    return _Engine(kernel, hw, policy, record, max_sms, l1, noc).run()


class _Engine(ClusterMixin):
    def __init__(self, kernel: KernelGraph, hw: GpuProfile, policy: str | type[IssuePolicy] | None, record: bool,
                 max_sms: int | None, l1: bool = True, noc: NocConfig | None = None) -> None:
        kernel.validate()
        self.kernel = kernel
        self.hw = hw
        self.record = record
        self.nsp = int(hw.subpartitions_per_sm.value)
        self.nsm = min(hw.sms, max_sms) if max_sms else hw.sms
        pol = current_default() if policy is None else get_policy(policy) if isinstance(policy, str) else policy
        self.preps = [prepare(c, hw) for c in kernel.classes]
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
            self.sms = [SmState(i, gpu_units(hw, max(tensor_rate, 1e-9)), self.nsp) for i in range(self.nsm)]
        self.policies = [pol(self.nsp) for _ in range(self.nsm)]
        clk = hw.clock_hz_value
        # hook: a profile with its own memory path (Tensix: NoC + DRAM banks) serves global reads/writes
        make_mem = getattr(hw, "memory_system", None)
        self.memsys = make_mem(kernel) if make_mem is not None else None
        self.l2 = LruCache(float(hw.l2_bytes.value) if self.memsys is None else 0.0)
        self.l2srv = BandwidthServer("l2", float(hw.l2_bytes_per_s.value) / clk if self.memsys is None else 1.0)
        self.dram = BandwidthServer("dram", hw.dram_bytes_per_s_value / clk)
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
        self.cluster = int(kernel.attrs.get("cluster_size", 1) or 1)
        self.noc = ClusterNoc(noc or NocConfig()) if self.cluster > 1 else None
        self.cluster_bars = [frozenset(b for b, nm in enumerate(p.barrier_names) if nm.startswith("cluster:"))
                             for p in self.preps]
        self.cbar: dict[tuple[int, int], int] = {}
        self.cbar_wait: dict[tuple[int, int], list[tuple[CtaState, int]]] = {}
        self.dsmem = [dsmem_nodes(c) for c in kernel.classes]
        self.group_nodes = [tuple(int(x) for x in np.bincount([g for g, c in zip(p.group, p.code) if c != ISSUE_ONLY],
                                                              minlength=p.ngroups)) for p in self.preps]
        self.occ = [self._occupancy(c, p) for c, p in zip(kernel.classes, self.preps)]
        self.heap: list[tuple[int, int, int, Any, Any]] = []
        self.seq = 0
        self.dirty: list[int] = []
        self.instant: deque[tuple[CtaState, int]] = deque()
        self.is_dirty = [False] * self.nsm
        self.pending = [(ci, r) for ci, c in enumerate(kernel.classes) for r in range(c.count)]
        self.next_cta = 0
        self.done_ctas = 0
        self.events = 0
        self.stalls = [0.0] * len(STALLS)
        self.records: list[NodeRecord] = []
        self.cta_sm: list[int] = [-1] * len(self.pending)
        self.sm_end = [0] * self.nsm  # cycle at which each SM's last CTA retired
        self.resident: dict[int, CtaState] = {}
        self.now = 0

    # -- occupancy and CTA dispatch ---------------------------------------------------------------------
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

    def _launch(self, sm_idx: int, cta_index: int, t: int) -> None:
        ci, row = self.pending[cta_index]
        p = self.preps[ci]
        cta = CtaState(cta_index, p, ci, self.kernel.classes[ci].params[row], sm_idx, t)
        self.resident[cta_index] = cta
        self.cta_sm[cta_index] = sm_idx
        self.policies[sm_idx].launched(cta_index, self.group_nodes[ci], t)
        for j in range(p.n):
            if cta.pred[j] == 0:
                self._ready(cta, j, t)

    def _retire(self, cta: CtaState, t: int) -> None:
        sm = self.sms[cta.sm]
        p = cta.prep
        sm.ctas -= 1
        sm.threads -= p.threads
        sm.regs -= p.regs
        sm.smem -= p.smem
        self.sm_end[cta.sm] = t
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
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, a, b))

    def _mark(self, sm: int) -> None:
        if not self.is_dirty[sm]:
            self.is_dirty[sm] = True
            self.dirty.append(sm)

    def _ready(self, cta: CtaState, j: int, t: int) -> None:
        p = cta.prep
        need = p.need[j]
        if need:
            b = p.barrier[j]
            if b in self.cluster_bars[cta.cls]:
                key = (cta.seq // self.cluster, b)
                if self.cbar.get(key, 0) < need:
                    self.cbar_wait.setdefault(key, []).append((cta, j))
                    return
            elif cta.bar[b] < need:
                cta.bar_wait[b].append(j)
                return
        cta.ready_t[j] = t
        if p.code[j] == ISSUE_ONLY:  # synchronisation retires in the cycle it becomes ready
            self.instant.append((cta, j))
            return
        self.sms[cta.sm].queues[p.sp0[j]].append((cta.seq * 4096 + p.group[j], j, cta))
        self._mark(cta.sm)

    def _issue(self, sm: SmState, cta: CtaState, j: int, t: int) -> None:
        p = cta.prep
        st = self.stalls
        # waiting before issue: dependency wait since the group's previous issue, then issue wait
        g = p.group[j]
        rt = cta.ready_t[j]
        dep = rt - cta.grp_last[g]
        if dep > 0:
            st[cta.why[j] if cta.why[j] < 3 else 0] += dep
        code = p.code[j]
        unit = sm.units.get(p.unit[j]) if code != ISSUE_ONLY else None
        if t > rt:
            st[3 if unit is not None and unit.free_at > rt else 4] += t - rt
        cta.grp_last[g] = t
        # release order edges at issue
        pred = cta.pred
        for k in p.order_succ[j]:
            pred[k] -= 1
            if pred[k] == 0:
                cta.why[k] = W_ORDER
                self._ready(cta, k, t)
        b = p.barrier[j] if p.op[j] == Op.BARRIER_ARRIVE else -1
        if b >= 0 and self.cluster > 1 and b in self.cluster_bars[cta.cls]:
            self._cluster_arrive(cta, b, t)
            b = -1
        if b >= 0:
            cta.bar[b] += 1
            waiters = cta.bar_wait[b]
            if waiters:
                still = []
                for k in waiters:
                    if cta.bar[b] >= p.need[k]:
                        cta.why[k] = W_BARRIER
                        cta.ready_t[k] = t
                        if p.code[k] == ISSUE_ONLY:
                            self.instant.append((cta, k))
                        else:
                            self.sms[cta.sm].queues[p.sp0[k]].append((cta.seq * 4096 + p.group[k], k, cta))
                            self._mark(cta.sm)
                    else:
                        still.append(k)
                cta.bar_wait[b] = still
        # dispatch to the unit
        if code == ISSUE_ONLY:
            start = done = t
        elif self.noc is not None and j in self.dsmem[cta.cls]:
            start, done = t, self._remote(cta, j, unit, t)
        elif code == COMPUTE or unit is not None and code not in (GLOBAL_READ, GLOBAL_WRITE):
            assert unit is not None
            end, done = unit.accept(t, p.work[j])
            start = end - unit.occupancy(p.work[j])
        else:
            assert unit is not None
            done, start = self._memory(unit, cta, j, t, code == GLOBAL_READ)
        sio = p.smem_io[j]
        if sio and Unit.LDST in sm.units:  # the shared-memory port is shared by LDS/STS, TMA writes, MMA operands
            port_end, _ = sm.units[Unit.LDST].accept(t, sio)
            if port_end > done:
                done = port_end
        if self.record:
            self.records.append(NodeRecord(
                cta.sm, cta.seq, p.name, p.group_names[g], j, p.names[j], Op(p.op[j]).name,
                Unit(p.unit[j]).name, rt, t, start, done,
                WAIT_NAMES[cta.why[j]] if dep > 0 or t > rt else "none", max(0, dep) + (t - rt)))
        if done <= t:
            self._complete(cta, j, t)
        else:
            self._push(done, EV_DONE, cta, j)

    def _memory(self, fe: Pipeline, cta: CtaState, j: int, t: int, read: bool) -> tuple[int, int]:
        p = cta.prep
        nbytes = p.work[j]
        fe_end, _ = fe.accept(t, nbytes)
        if self.memsys is not None:
            done_m, ideal_m = self.memsys.access(t, cta.sm, cta.cls, j, cta.params, cta.keys.get(j), nbytes, read)
            done_i = math.ceil(max(fe_end, done_m))
            queue = done_i - t - ideal_m
            if queue > 0:
                self.stalls[5] += queue
            return done_i, t + max(0, int(queue))
        if read and self.l1 is not None and p.op[j] == Op.LDG and j in cta.keys:
            lines = self._lines(cta, j)
            missed = self.l1[cta.sm].access(lines, cta.seq * 4096 + p.group[j], t) if lines else 0
            if lines and not missed:
                return fe_end + self.l1_lat, t
            if lines:
                nbytes = nbytes * missed / len(lines)  # only the missing lines go on to L2
        key = cta.keys.get(j, (p.name, j, cta.seq))
        hit = self.l2.access(key, nbytes)
        l2_end = self.l2srv.serve(t, nbytes)
        extra = self.tma_lat if p.unit[j] == Unit.TMA else 0
        if read:
            if hit:
                done = max(fe_end, l2_end) + self.l2_lat + extra
            else:
                done = max(fe_end, l2_end, self.dram.serve(t, nbytes)) + self.dram_lat + extra
            ideal = (self.l2_lat if hit else self.dram_lat) + extra + fe.occupancy(nbytes)
        else:
            self.dram.serve(t, nbytes)  # write-back traffic; the store completes at L2
            done = max(fe_end, l2_end) + self.l2_lat + extra
            ideal = self.l2_lat + extra + fe.occupancy(nbytes)
        done_i = math.ceil(done)
        queue = done_i - t - ideal
        if queue > 0:
            self.stalls[5] += queue
        return done_i, t + max(0, queue)

    def _lines(self, cta: CtaState, j: int) -> tuple[Any, ...]:
        """The L1 lines node `j` of `cta` reads (memoised by class, node and tile coordinates)."""
        key = cta.keys[j]
        memo = (cta.cls, j, key)
        lines = self.l1_lines.get(memo)
        if lines is None:
            g = self.kernel.classes[cta.cls].graph
            tile = g.tiles[int(g.tile[j])]
            lines = self.l1_lines[memo] = tile_lines(key, tile.shape, tile.dtype.nbytes)
        return lines

    def _complete(self, cta: CtaState, j: int, t: int) -> None:
        self.events += 1
        p = cta.prep
        pred = cta.pred
        for k in p.data_succ[j]:
            pred[k] -= 1
            if pred[k] == 0:
                cta.why[k] = W_DATA
                self._ready(cta, k, t)
        cta.remaining -= 1
        if cta.remaining == 0:
            self._retire(cta, t)

    # -- issue ------------------------------------------------------------------------------------------
    def _try_issue(self, sm: SmState, t: int) -> None:
        """Issue at most one ready node per free subpartition at cycle `t`, in policy order."""
        spf = sm.sp_free
        units = sm.units
        nxt = INF
        pol = self.policies[sm.index]
        allowed = pol.allowed(t) if pol.throttles else None
        for sp in range(self.nsp):
            q = sm.queues[sp]
            if not q:
                continue
            f = spf[sp]
            if f > t:
                if f < nxt:
                    nxt = f
                continue
            if len(q) > 1:
                q.sort(key=pol.key(sp))
            held = False
            for idx in range(len(q)):
                e = q[idx]
                if allowed is not None and e[0] not in allowed:
                    held = True  # throttled by the policy: look again in a while
                    continue
                j = e[1]
                p = e[2].prep
                sps = p.sps[j]
                if len(sps) > 1:
                    busy = max([spf[s] for s in sps])
                    if busy > t:
                        if busy < nxt:
                            nxt = busy
                        continue
                if p.code[j] != ISSUE_ONLY:
                    unit = units[p.unit[j]]
                    if not unit.queued and unit.free_at > t:
                        if unit.free_at < nxt:
                            nxt = unit.free_at
                        continue
                del q[idx]
                for s in sps:
                    spf[s] = t + 1
                pol.issued(sp, e)
                self._issue(sm, e[2], j, t)
                if q and t + 1 < nxt:  # one issue per subpartition per cycle
                    nxt = t + 1
                break
            if held and t + pol.recheck_cycles < nxt:
                nxt = t + pol.recheck_cycles
        if nxt < INF:
            w = int(nxt)
            if sm.wake is None or w < sm.wake:
                sm.wake = w
                self.seq += 1
                heapq.heappush(self.heap, (w, self.seq, EV_WAKE, sm.index, None))

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
        heap = self.heap
        pop = heapq.heappop
        t = 0
        while heap:
            t, _, kind, a, b = pop(heap)
            if kind == EV_DONE:
                self._complete(a, b, t)
            elif kind == EV_LAUNCH:
                self._launch(a, b, t)
            else:
                sm = self.sms[a]
                if sm.wake == t:
                    sm.wake = None
                    self._mark(a)
            if heap and heap[0][0] == t:
                continue
            instant = self.instant
            while self.dirty or instant:
                while instant:
                    cta, j = instant.popleft()
                    self._issue(self.sms[cta.sm], cta, j, t)
                batch = sorted(self.dirty)
                self.dirty.clear()
                for s in batch:
                    self.is_dirty[s] = False
                for s in batch:
                    self._try_issue(self.sms[s], t)
        if self.done_ctas < len(self.pending):
            raise DeadlockError(diagnose(self, t))
        if self.memsys is None:  # write-back still queued at DRAM belongs to this kernel
            t = max(t, math.ceil(self.dram.free_at))
        return summarize(self, t, time.perf_counter() - wall)
