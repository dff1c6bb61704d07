"""Issue logic of the engine: ready queues per subpartition, the issue scan in policy order, and what an issued node
does (stall accounting, ORDER-edge release, barrier arrivals, service on its unit or the memory path).

A mixin of torchsim.sim.engine._Engine (the hot path of a simulation: once per node and per SM wake-up).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import TYPE_CHECKING, Any

from torchsim.graph import Op, Unit
from torchsim.sim.memory import K_PIPE, K_REMOTE, K_SYNC
from torchsim.sim.policy import IssuePolicy
from torchsim.sim.prepare import ISSUE_ONLY
from torchsim.sim.resources import Pipeline
from torchsim.sim.result import NodeRecord
from torchsim.sim.state import W_BARRIER, W_ORDER, WAIT_NAMES, CtaState, SmState

EV_DONE, EV_WAKE = 0, 1
PICK_SORT, PICK_OLDEST, PICK_GTO, PICK_RR = 0, 1, 2, 3  # how _try_issue finds the policy's first choice
INF = math.inf
LDST = int(Unit.LDST)


class IssueMixin:
    """Ready -> issued -> executing; the engine provides the attributes used here."""

    sms: list[SmState]
    policies: list[IssuePolicy]
    nsp: int
    heap: list[tuple[int, int, int, Any, Any]]
    seq: int
    dirty: list[int]
    is_dirty: list[bool]
    instant: deque[tuple[CtaState, int]]
    stalls: list[float]
    record: bool
    records: list[NodeRecord]
    lazy: bool
    plain_issued: bool
    pick: int
    cluster: int
    cluster_bars: list[frozenset[int]]
    cbar: dict[tuple[int, int], int]
    cbar_wait: dict[tuple[int, int], list[tuple[CtaState, int]]]

    if TYPE_CHECKING:  # provided by the engine's other mixins
        def _cluster_arrive(self, cta: CtaState, b: int, t: int) -> None:
            ...

        def _remote(self, cta: CtaState, j: int, unit: Pipeline | None, t: int) -> int:
            ...

        def _memory(self, fe: Pipeline, cta: CtaState, j: int, t: int, kind: int, occ: int, nbytes: float,
                    extra: int) -> tuple[int, int]:
            ...

        def _complete(self, cta: CtaState, j: int, t: int) -> None:
            ...

    def _wake(self, sm: SmState, w: int) -> None:
        """Look at `sm` again at cycle `w` (one pending wake per SM: the earliest)."""
        if sm.wake is None or w < sm.wake:
            sm.wake = w
            self.seq += 1
            heapq.heappush(self.heap, (w, self.seq, EV_WAKE, sm.index, None))

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
        sm = cta.smo
        sp0 = p.sp0[j]
        sm.queues[sp0].append((cta.base + p.group[j], j, cta))
        idx = sm.index
        if self.is_dirty[idx]:
            return
        if self.lazy:  # cannot issue before its subpartitions and its unit are free: wake the SM then
            spf = sm.sp_free
            m = p.multi[j]
            lb = spf[sp0] if m is None else max(spf) if len(m) == self.nsp else max(map(spf.__getitem__, m))
            u = sm.ulist[p.unit[j]]
            assert u is not None
            if not u.queued and u.free_at > lb:
                lb = u.free_at
            if lb > t:
                self._wake(sm, lb)
                return
        self.is_dirty[idx] = True
        self.dirty.append(idx)

    def _arrive(self, cta: CtaState, b: int, t: int) -> None:
        """A BARRIER_ARRIVE of `cta` on barrier `b`: release the waits whose arrivals are now complete."""
        if self.cluster > 1 and b in self.cluster_bars[cta.cls]:
            self._cluster_arrive(cta, b, t)
            return
        cta.bar[b] += 1
        waiters = cta.bar_wait[b]
        if not waiters:
            return
        p = cta.prep
        still = []
        for k in waiters:
            if cta.bar[b] >= p.need[k]:
                cta.why[k] = W_BARRIER
                cta.ready_t[k] = t
                if p.code[k] == ISSUE_ONLY:
                    self.instant.append((cta, k))
                else:
                    cta.smo.queues[p.sp0[k]].append((cta.base + p.group[k], k, cta))
                    if not self.is_dirty[cta.sm]:
                        self.is_dirty[cta.sm] = True
                        self.dirty.append(cta.sm)
            else:
                still.append(k)
        cta.bar_wait[b] = still

    def _issue(self, sm: SmState, unit: Pipeline | None, cta: CtaState, j: int, t: int) -> None:
        """Issue node `j` of `cta` at cycle `t` on `unit` (None for synchronisation nodes)."""
        kind, g, occ, work, sio, sio_occ, osucc, arrive, extra = cta.info[j]
        st = self.stalls
        # waiting before issue: dependency wait since the group's previous issue, then issue wait
        rt = cta.ready_t[j]
        gl = cta.grp_last
        dep = rt - gl[g]
        if dep > 0:
            w = cta.why[j]
            st[w if w < 3 else 0] += dep
        if t > rt:
            st[3 if unit is not None and unit.free_at > rt else 4] += t - rt
        gl[g] = t
        if osucc:  # release order edges at issue
            pred = cta.pred
            for k in osucc:
                n = pred[k] - 1
                pred[k] = n
                if n == 0:
                    cta.why[k] = W_ORDER
                    self._ready(cta, k, t)
        if arrive >= 0:
            self._arrive(cta, arrive, t)
        # dispatch to the unit
        if kind == K_PIPE:
            assert unit is not None
            start = unit.free_at
            if t > start:
                start = t
            end = start + occ
            unit.free_at = end
            unit.busy_work += work
            pt = unit.partner
            if pt is not None and pt.free_at < end:
                pt.free_at = end
            done = end + unit.latency
        elif kind == K_SYNC:
            start = done = t
        elif kind == K_REMOTE:
            start, done = t, self._remote(cta, j, unit, t)
        else:
            assert unit is not None
            done, start = self._memory(unit, cta, j, t, kind, occ, work, extra)
        if sio_occ:  # the shared-memory port is shared by LDS/STS, TMA writes, MMA operands
            port = sm.ulist[LDST]
            assert port is not None
            s = port.free_at
            if t > s:
                s = t
            port_end = s + sio_occ
            port.free_at = port_end
            port.busy_work += sio
            pt = port.partner
            if pt is not None and pt.free_at < port_end:
                pt.free_at = port_end
            if port_end > done:
                done = port_end
        if self.record:
            p = cta.prep
            self.records.append(NodeRecord(
                cta.sm, cta.seq, p.name, p.group_names[g], j, p.names[j], Op(p.op[j]).name,
                Unit(p.unit[j]).name, rt, t, start, done,
                WAIT_NAMES[cta.why[j]] if dep > 0 or t > rt else "none", max(0, dep) + (t - rt)))
        if done <= t:
            self._complete(cta, j, t)
        else:
            self.seq += 1
            heapq.heappush(self.heap, (done, self.seq, EV_DONE, cta, j))

    def _try_issue(self, sm: SmState, t: int) -> None:
        """Issue at most one ready node per free subpartition at cycle `t`: the policy's first choice among the
        nodes whose subpartitions and unit are free."""
        spf = sm.sp_free
        ulist = sm.ulist
        queues = sm.queues
        pol = self.policies[sm.index]
        pick = self.pick
        last = pol.last
        nsp = self.nsp
        nxt = INF
        t1 = t + 1
        for sp, q in enumerate(queues):
            if not q:
                continue
            f = spf[sp]
            if f > t:
                if f < nxt:
                    nxt = f
                continue
            if pick == PICK_SORT and len(q) > 1:
                q.sort(key=pol.key(sp))
            best: tuple[int, int, CtaState] | None = None
            bk = False
            bm: tuple[int, ...] | None = None
            bunit: Pipeline | None = None
            for e in q:
                j = e[1]
                p = e[2].prep
                m = p.multi[j]
                if m is not None:
                    busy = max(spf) if len(m) == nsp else max(map(spf.__getitem__, m))
                    if busy > t:
                        if busy < nxt:
                            nxt = busy
                        continue
                unit = ulist[p.unit[j]]
                assert unit is not None
                if not unit.queued and unit.free_at > t:
                    if unit.free_at < nxt:
                        nxt = unit.free_at
                    continue
                if pick == PICK_SORT:  # sorted: the first issuable entry
                    best, bm, bunit = e, m, unit
                    break
                # the built-in orders: (flag, age, node) with flag = not the last-issued group (GTO), or
                # at or before it (RR), or none (oldest); ages and nodes make every key distinct
                k = e[0] != last[sp] if pick == PICK_GTO else e[0] <= last[sp] if pick == PICK_RR else False
                if best is None or k < bk or k == bk and e < best:
                    best, bk, bm, bunit = e, k, m, unit
            if best is None:
                continue
            q.remove(best)
            if bm is None:
                spf[sp] = t1
            else:
                for s in bm:
                    spf[s] = t1
            if self.plain_issued:
                last[sp] = best[0]
            else:
                pol.issued(sp, best)
            self._issue(sm, bunit, best[2], best[1], t)
            if q and t1 < nxt:  # one issue per subpartition per cycle
                nxt = t1
        if not self.lazy:
            if nxt < INF:
                self._wake(sm, int(nxt))
            return
        if self.is_dirty[sm.index]:  # looked at again this cycle
            return
        # The earliest cycle anything here could issue (its subpartitions and unit free) replaces any pending
        # wake, which may be stale (a later issue on the same unit pushed its free time back); nodes that
        # become ready later wake the SM themselves.
        nxt = INF
        for sp, q in enumerate(queues):
            if q:
                f = spf[sp]
                for e in q:
                    j = e[1]
                    p = e[2].prep
                    m = p.multi[j]
                    lb = f if m is None else max(spf) if len(m) == nsp else max(map(spf.__getitem__, m))
                    u = ulist[p.unit[j]]
                    assert u is not None
                    if not u.queued and u.free_at > lb:
                        lb = u.free_at
                    if lb < nxt:
                        nxt = lb
        if nxt == INF:
            sm.wake = None
        elif nxt != sm.wake:
            w = sm.wake = int(nxt)
            self.seq += 1
            heapq.heappush(self.heap, (w, self.seq, EV_WAKE, sm.index, None))

    def _try_issue_throttled(self, sm: SmState, t: int) -> None:
        """`_try_issue` for policies that may hold back ready groups (`IssuePolicy.throttles`)."""
        spf = sm.sp_free
        ulist = sm.ulist
        nxt = INF
        pol = self.policies[sm.index]
        allowed = pol.allowed(t)
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
                unit = ulist[p.unit[j]]
                assert unit is not None
                if not unit.queued and unit.free_at > t:
                    if unit.free_at < nxt:
                        nxt = unit.free_at
                    continue
                del q[idx]
                for s in sps:
                    spf[s] = t + 1
                pol.issued(sp, e)
                self._issue(sm, unit, e[2], j, t)
                if q and t + 1 < nxt:  # one issue per subpartition per cycle
                    nxt = t + 1
                break
            if held and t + pol.recheck_cycles < nxt:
                nxt = t + pol.recheck_cycles
        if nxt < INF:
            self._wake(sm, int(nxt))
