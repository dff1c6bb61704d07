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

from torchsim.graph import KernelGraph, Op, Space, Unit
from torchsim.hwmodels.gpu import GpuProfile
from torchsim.sim.l1 import L1Cache, l1_capacity, tile_lines
from torchsim.sim.noc import ClusterNoc, NocConfig
from torchsim.sim.policy import IssuePolicy, current_default, get_policy
from torchsim.sim.prepare import COMPUTE, GLOBAL_READ, GLOBAL_WRITE, ISSUE_ONLY, Prepared, prepare
from torchsim.sim.resources import BandwidthServer, LruCache, Pipeline
from torchsim.sim.result import DeadlockError, KernelResult, NodeRecord

EV_DONE, EV_WAKE, EV_LAUNCH = 0, 1, 2
W_DATA, W_ORDER, W_BARRIER, W_LAUNCH = 0, 1, 2, 3
WAIT_NAMES = ("data", "order", "barrier", "launch")
STALLS = ("data", "order", "barrier", "unit_busy", "issue", "memory_queue")
INF = math.inf


class _Cta:
    """A resident CTA: per-node counters for its template (freed when it retires)."""

    __slots__ = ("seq", "prep", "cls", "params", "pred", "remaining", "bar", "bar_wait", "keys", "ready_t",
                 "why", "grp_last", "sm", "index")

    def __init__(self, seq: int, prep: Prepared, cls: int, params: np.ndarray, sm: int, t: int) -> None:
        self.seq = seq
        self.prep = prep
        self.cls = cls
        self.params = params
        self.pred = list(prep.indeg)
        self.remaining = prep.n
        self.bar = [0] * len(prep.barrier_names)
        self.bar_wait: list[list[int]] = [[] for _ in prep.barrier_names]
        self.ready_t = [t] * prep.n
        self.why = [W_LAUNCH] * prep.n
        self.grp_last = [t] * prep.ngroups
        self.sm = sm
        self.keys: dict[int, tuple[Any, ...]] = {}
        if prep.mem_nodes.size:
            coords = prep.mem_const + prep.mem_coef @ params  # [m, D]
            for idx, node, row in zip(range(len(prep.mem_tensor)), prep.mem_nodes.tolist(), coords.tolist()):
                self.keys[node] = (prep.mem_tensor[idx], *row)


class _Sm:
    __slots__ = ("index", "units", "sp_free", "queues", "wake", "threads", "regs", "smem", "ctas")

    def __init__(self, index: int, units: dict[int, Pipeline], nsp: int) -> None:
        self.index = index
        self.units = units
        self.sp_free = [0] * nsp
        self.queues: list[list[tuple[int, int, _Cta]]] = [[] for _ in range(nsp)]
        self.wake: int | None = None
        self.threads = self.regs = self.smem = self.ctas = 0


def _units(hw: GpuProfile, dtype_flop_per_clk: float) -> dict[int, Pipeline]:
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
    if overlap is not None and overlap.value == 0:  # the SFU and the tensor pipe exclude each other
        u[Unit.TENSOR].partner, u[Unit.SFU].partner = u[Unit.SFU], u[Unit.TENSOR]
    return u


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


class _Engine:
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
            self.sms = [_Sm(i, {u: Pipeline(name, thr, lat, queued=q) for u, (name, thr, lat, q) in table.items()},
                            self.nsp) for i in range(self.nsm)]
        else:
            self.sms = [_Sm(i, _units(hw, max(tensor_rate, 1e-9)), self.nsp) for i in range(self.nsm)]
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
        self.cbar_wait: dict[tuple[int, int], list[tuple[_Cta, int]]] = {}
        self.dsmem = [_dsmem_nodes(c) for c in kernel.classes]
        self.group_nodes = [tuple(int(x) for x in np.bincount([g for g, c in zip(p.group, p.code) if c != ISSUE_ONLY],
                                                              minlength=p.ngroups)) for p in self.preps]
        self.occ = [self._occupancy(c, p) for c, p in zip(kernel.classes, self.preps)]
        self.heap: list[tuple[int, int, int, Any, Any]] = []
        self.seq = 0
        self.dirty: list[int] = []
        self.instant: deque[tuple[_Cta, int]] = deque()
        self.is_dirty = [False] * self.nsm
        self.pending = [(ci, r) for ci, c in enumerate(kernel.classes) for r in range(c.count)]
        self.next_cta = 0
        self.done_ctas = 0
        self.events = 0
        self.stalls = [0.0] * len(STALLS)
        self.records: list[NodeRecord] = []
        self.cta_sm: list[int] = [-1] * len(self.pending)
        self.sm_end = [0] * self.nsm  # cycle at which each SM's last CTA retired
        self.resident: dict[int, _Cta] = {}
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

    def _fits(self, sm: _Sm, ci: int) -> bool:
        p = self.preps[ci]
        hw = self.hw
        return (sm.ctas < self.occ[ci] and sm.threads + p.threads <= hw.max_threads_per_sm.value
                and sm.regs + p.regs <= hw.registers_per_sm.value and sm.smem + p.smem <= hw.smem_per_sm_bytes.value)

    def _dispatch(self, sm: _Sm, t: int) -> bool:
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

    def _dispatch_clusters(self, t: int) -> None:
        """Launch whole clusters on idle SMs of one GPC (NoC domain), placed by the NoC's placement policy."""
        assert self.noc is not None
        size, per = self.cluster, self.noc.cfg.nodes
        while self.next_cta < len(self.pending):
            nodes = None
            for g0 in range(0, self.nsm - size + 1, per):
                free = [sm.index - g0 for sm in self.sms[g0:g0 + per] if sm.ctas == 0]
                pick = self.noc.place(free, size)
                if pick is not None and len(pick) == size:
                    nodes = [g0 + x for x in pick]
                    break
            if nodes is None:
                return
            for sm_idx in nodes:
                ci, _ = self.pending[self.next_cta]
                p = self.preps[ci]
                sm = self.sms[sm_idx]
                sm.ctas += 1
                sm.threads += p.threads
                sm.regs += p.regs
                sm.smem += p.smem
                self.cta_sm[self.next_cta] = sm_idx
                self._push(t + self.launch_cycles, EV_LAUNCH, sm_idx, self.next_cta)
                self.next_cta += 1

    def _cluster_arrive(self, cta: _Cta, b: int, t: int) -> None:
        key = (cta.seq // self.cluster, b)
        count = self.cbar[key] = self.cbar.get(key, 0) + 1
        waiters = self.cbar_wait.get(key)
        if not waiters:
            return
        still = []
        for c2, k in waiters:
            if count >= c2.prep.need[k]:
                c2.why[k] = W_BARRIER
                c2.ready_t[k] = t
                if c2.prep.code[k] == ISSUE_ONLY:
                    self.instant.append((c2, k))
                else:
                    self.sms[c2.sm].queues[c2.prep.sp0[k]].append((c2.seq * 4096 + c2.prep.group[k], k, c2))
                    self._mark(c2.sm)
            else:
                still.append((c2, k))
        self.cbar_wait[key] = still

    def _remote(self, cta: _Cta, j: int, unit: Pipeline | None, t: int) -> int:
        """A DSMEM node: issue through the local LD/ST port, then cross the SM-cluster network to the peer."""
        assert self.noc is not None
        const, coef = self.dsmem[cta.cls][j]
        rank = int(const + int(coef @ cta.params))
        peer = (cta.seq // self.cluster) * self.cluster + rank
        if not 0 <= rank < self.cluster or peer >= len(self.cta_sm):
            raise ValueError(f"DSMEM node {cta.prep.names[j]!r} of CTA {cta.seq} targets rank {rank}, outside its "
                             f"cluster of {self.cluster}")
        nbytes = cta.prep.work[j]
        start = unit.accept(t, nbytes)[0] if unit is not None else t
        return self.noc.transfer(start, cta.sm, self.cta_sm[peer], nbytes)

    def _launch(self, sm_idx: int, cta_index: int, t: int) -> None:
        ci, row = self.pending[cta_index]
        p = self.preps[ci]
        cta = _Cta(cta_index, p, ci, self.kernel.classes[ci].params[row], sm_idx, t)
        self.resident[cta_index] = cta
        self.cta_sm[cta_index] = sm_idx
        self.policies[sm_idx].launched(cta_index, self.group_nodes[ci], t)
        for j in range(p.n):
            if cta.pred[j] == 0:
                self._ready(cta, j, t)

    def _retire(self, cta: _Cta, t: int) -> None:
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

    def _ready(self, cta: _Cta, j: int, t: int) -> None:
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

    def _issue(self, sm: _Sm, cta: _Cta, j: int, t: int) -> None:
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

    def _memory(self, fe: Pipeline, cta: _Cta, j: int, t: int, read: bool) -> tuple[int, int]:
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

    def _lines(self, cta: _Cta, j: int) -> tuple[Any, ...]:
        """The L1 lines node `j` of `cta` reads (memoised by class, node and tile coordinates)."""
        key = cta.keys[j]
        memo = (cta.cls, j, key)
        lines = self.l1_lines.get(memo)
        if lines is None:
            g = self.kernel.classes[cta.cls].graph
            tile = g.tiles[int(g.tile[j])]
            lines = self.l1_lines[memo] = tile_lines(key, tile.shape, tile.dtype.nbytes)
        return lines

    def _complete(self, cta: _Cta, j: int, t: int) -> None:
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
    def _try_issue(self, sm: _Sm, t: int) -> None:
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
            raise DeadlockError(self._diagnose(t))
        if self.memsys is None:  # write-back still queued at DRAM belongs to this kernel
            t = max(t, math.ceil(self.dram.free_at))
        return self._result(t, time.perf_counter() - wall)

    def _diagnose(self, t: int) -> str:
        lines = [f"kernel {self.kernel.name!r} on {self.hw.name} stopped making progress at cycle {t}: "
                 f"{self.done_ctas}/{len(self.pending)} CTAs finished. Waiting nodes:"]
        shown = 0
        for cta in list(self.resident.values()):
            p = cta.prep
            g = self.kernel.classes[cta.cls].graph
            for j in range(p.n):
                if shown >= 12:
                    break
                waits: list[str] = []
                b = p.barrier[j]
                if p.need[j] and j in cta.bar_wait[b]:
                    waits.append(f"barrier {p.barrier_names[b]!r} has {cta.bar[b]} of {p.need[j]} arrivals")
                elif cta.pred[j] > 0:
                    for s, k in p.predecessors(j, g.edge_src, g.edge_dst, g.edge_kind):
                        waits.append(f"{'data' if k == 0 else 'order'} edge from node {s} {p.names[s]!r}")
                    waits = waits[:3]
                else:
                    continue
                lines.append(f"  CTA {cta.seq} (SM {cta.sm}) node {j} {p.names[j]!r} "
                             f"[{p.group_names[p.group[j]]}] waits on: " + "; ".join(waits))
                shown += 1
        return "\n".join(lines)

    def _result(self, t: int, wall_s: float) -> KernelResult:
        hw = self.hw
        cycles = max(1, t)
        busy: dict[str, float] = {}
        sm_busy: dict[str, tuple[float, ...]] = {}  # unit -> busy cycles of each SM (load balance across SMs)
        for unit_id in sorted(self.sms[0].units):
            pipes = [sm.units[unit_id] for sm in self.sms if unit_id in sm.units]
            if pipes:
                work = sum(pp.busy_work for pp in pipes)
                busy[pipes[0].name] = work / (pipes[0].throughput * cycles * self.nsm)
                sm_busy[pipes[0].name] = tuple(pp.busy_work / pp.throughput for pp in pipes)
        if self.memsys is not None:
            busy.update(self.memsys.busy(cycles))
        else:
            busy["l2"] = self.l2srv.busy_cycles / cycles
            busy["dram"] = self.dram.busy_cycles / cycles
        bound = _bound(busy)
        per_sm = min(self.occ)
        waves = len(self.pending) / (per_sm * self.nsm)
        return KernelResult(
            name=self.kernel.name, hw=hw.name, cycles=cycles, clock_hz=hw.clock_hz_value,
            flops=self.kernel.flops, dram_bytes=self.dram.bytes if self.memsys is None else self.memsys.dram_bytes,
            l2_hit_rate=self.l2.hit_rate,
            unit_busy=busy, stalls=dict(zip(STALLS, self.stalls)), bound=bound, waves=waves,
            ctas=len(self.pending), ctas_per_sm=per_sm, node_events=self.events,
            attrs={**self.kernel.attrs, "wall_s": wall_s, "sms": self.nsm, "sm_end_cycles": tuple(self.sm_end),
                   "sm_busy_cycles": sm_busy, **self._l1_stats()},
            records=tuple(self.records) if self.record else None,
            cta_sm=tuple(self.cta_sm) if self.record else None,
        )


    def _l1_stats(self) -> dict[str, Any]:
        pol = self.policies[0]
        out: dict[str, Any] = {"policy": pol.name}
        if self.l1 is not None:
            hits, misses = sum(c.hits for c in self.l1), sum(c.misses for c in self.l1)
            out.update(l1_line_hits=hits, l1_line_misses=misses,
                       l1_hit_rate=hits / (hits + misses) if hits + misses else 0.0)
        if self.noc is not None:
            out.update(noc_requests=self.noc.requests, noc_bytes=self.noc.bytes,
                       noc_mean_residence_cycles=self.noc.mean_residence_cycles,
                       noc=f"{self.noc.cfg.topology.value}/{self.noc.cfg.placement.value}")
        if hasattr(pol, "vta_hits"):
            out["vta_hits"] = sum(getattr(p, "vta_hits", 0) for p in self.policies)
        return out


def _dsmem_nodes(cls: Any) -> dict[int, tuple[int, np.ndarray]]:
    """Nodes of a CTA class whose tile lives in DSMEM: node -> (const, coefficients) of the destination rank."""
    g = cls.graph
    out: dict[int, tuple[int, np.ndarray]] = {}
    for j in range(g.num_nodes):
        t = int(g.tile[j])
        if t >= 0 and g.tiles[t].space is Space.DSMEM:
            a = g.tiles[t].coord[0] if g.tiles[t].coord else None
            coef = np.zeros(len(cls.param_names), dtype=np.int64)
            if a is not None:
                for name, c in a.terms:
                    coef[cls.param_names.index(name)] = c
            out[j] = (a.const if a is not None else 0, coef)
    return out


BOUND_NAMES = {"tensor": "tensor pipe", "dram": "DRAM bandwidth", "l2": "L2 bandwidth", "fma": "CUDA cores",
               "sfu": "SFU", "ldst": "shared-memory/LD-ST port", "tma": "TMA", "tmem": "TMEM", "fpu": "matrix FPU",
               "sfpu": "SFPU", "unpacker": "unpacker", "packer": "packer", "noc": "NoC links"}


def _bound(busy: dict[str, float]) -> str:
    name, util = max(busy.items(), key=lambda kv: kv[1])
    if util >= 0.6:
        return BOUND_NAMES.get(name, name)
    return "latency/synchronisation"
