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
from torchsim.sim.memory import K_PIPE, K_REMOTE
from torchsim.sim.policy import IssuePolicy
from torchsim.sim.prepare import ISSUE_ONLY
from torchsim.sim.resources import Pipeline
from torchsim.sim.result import NodeRecord
from torchsim.sim.state import EV_DONE, EV_READY, NEVER, W_BARRIER, W_ORDER, WAIT_NAMES, CtaState, SmState

PICK_SORT, PICK_OLDEST, PICK_GTO, PICK_RR = 0, 1, 2, 3  # how _try_issue finds the policy's first choice
INF = math.inf
LDST = int(Unit.LDST)


class IssueMixin:
    """Ready -> issued -> executing; the engine provides the attributes used here."""

    sms: list[SmState]
    policies: list[IssuePolicy]
    nsp: int
    times: list[int]
    cal: dict[int, list[tuple[int, Any, Any]]]  # cycle -> completions, readiness, wake-ups, launches due then
    wake_ev: list[tuple[int, SmState, int]]  # per SM: its wake-up entry in `cal`
    dirty: list[int]
    is_dirty: list[bool]
    instant: deque[tuple[CtaState, int]]
    stalls: list[float]
    record: bool
    records: list[NodeRecord]
    lazy: bool
    throttles: bool
    full: tuple[int, ...]  # full_sps(nsp)
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

        def _push(self, t: int, kind: int, a: Any, b: Any) -> None:
            ...

    def _wake(self, sm: SmState, w: int) -> None:
        """Look at `sm` again at cycle `w` (one pending wake per SM: the earliest)."""
        if w < sm.wake:
            sm.wake = w
            b = self.cal.get(w)
            if b is None:
                self.cal[w] = [self.wake_ev[sm.index]]
                heapq.heappush(self.times, w)
            else:
                b.append(self.wake_ev[sm.index])

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
        m = p.multi[j]
        u = sm.ulist[p.unit[j]]
        assert u is not None
        sm.queues[sp0].append((cta.base + p.group[j], j, cta, m, u))
        idx = sm.index
        if self.is_dirty[idx]:
            return
        if self.lazy:  # cannot issue before its subpartitions and its unit are free: wake the SM then
            spf = sm.sp_free
            lb = spf[sp0] if m is None else max(spf) if m is self.full else max(map(spf.__getitem__, m))
            if not u.queued and u.free_at > lb:
                lb = u.free_at
            if lb > t:
                self._wake(sm, lb)
                return
        self.is_dirty[idx] = True
        self.dirty.append(idx)

    def _release(self, cta: CtaState, succ: tuple[int, ...], why: int, t: int) -> None:
        """Release the edges from a node to `succ` (ORDER at issue, DATA at completion); a node whose last
        edge this was becomes ready, remembering which kind of edge it waited on (or, when data released at a
        predecessor's issue arrives later, becomes ready then: torchsim.sim.loop)."""
        pred = cta.pred
        for k in succ:
            n = pred[k] - 1
            pred[k] = n
            if n == 0:
                if cta.data_at[k] > t:
                    self._push(cta.data_at[k], EV_READY, cta, k)
                    continue
                cta.why[k] = why
                self._ready(cta, k, t)

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
                    sm = cta.smo
                    u = sm.ulist[p.unit[k]]
                    assert u is not None
                    sm.queues[p.sp0[k]].append((cta.base + p.group[k], k, cta, p.multi[k], u))
                    if not self.is_dirty[cta.sm]:
                        self.is_dirty[cta.sm] = True
                        self.dirty.append(cta.sm)
            else:
                still.append(k)
        cta.bar_wait[b] = still

    def _record(self, cta: CtaState, j: int, rt: int, t: int, start: int, done: int, dep: int) -> None:
        p = cta.prep
        self.records.append(NodeRecord(
            cta.sm, cta.seq, p.name, p.group_names[p.group[j]], j, p.names[j], Op(p.op[j]).name,
            Unit(p.unit[j]).name, rt, t, start, done,
            WAIT_NAMES[cta.why[j]] if dep > 0 or t > rt else "none", max(0, dep) + (t - rt)))

    def _issue_sync(self, cta: CtaState, j: int, t: int) -> None:
        """Issue synchronisation node `j` of `cta` (no unit: it retires in the cycle it becomes ready)."""
        kind, g, occ, work, sio, sio_occ, osucc, arrive, extra, _ = cta.info[j]
        rt = cta.ready_t[j]
        dep = rt - cta.grp_last[g]
        if dep > 0:
            w = cta.why[j]
            self.stalls[w if w < 3 else 0] += dep
        if t > rt:
            self.stalls[4] += t - rt
        cta.grp_last[g] = t
        if osucc:
            self._release(cta, osucc, W_ORDER, t)
        if arrive >= 0:
            self._arrive(cta, arrive, t)
        done = t
        if sio_occ:
            port = cta.smo.ulist[LDST]
            assert port is not None
            end = port.accept(t, sio)[0]
            if end > done:
                done = end
        if self.record:
            self._record(cta, j, rt, t, t, done, dep)
        if done <= t:
            self._complete(cta, j, t)
        else:
            self._push(done, EV_DONE, cta, j)

    def _issue(self, sm: SmState, unit: Pipeline, cta: CtaState, j: int, t: int) -> None:
        """Issue node `j` of `cta` on `unit` at cycle `t`: stall accounting, ORDER edges, barrier arrivals, service."""
        st = self.stalls
        kind, g, occ, work, sio, sio_occ, osucc, arrive, extra, _ = cta.info[j]
        # waiting before issue: dependency wait since the group's previous issue, then issue wait
        rt = cta.ready_t[j]
        gl = cta.grp_last
        dep = rt - gl[g]
        if dep > 0:
            w = cta.why[j]
            st[w if w < 3 else 0] += dep
        if t > rt:
            st[3 if unit.free_at > rt else 4] += t - rt
        gl[g] = t
        if osucc:  # release order edges at issue
            self._release(cta, osucc, W_ORDER, t)
        if arrive >= 0:
            self._arrive(cta, arrive, t)
        if kind == K_PIPE:
            start, end = unit.occupy(t, occ, work)
            done = end + unit.latency
        elif kind == K_REMOTE:
            start, done = t, self._remote(cta, j, unit, t)
        else:
            done, start = self._memory(unit, cta, j, t, kind, occ, work, extra)
        if sio_occ:  # the shared-memory port is shared by LDS/STS, TMA writes, MMA operands
            port = sm.ulist[LDST]
            assert port is not None
            _, end = port.occupy(t, sio_occ, sio)
            if end > done:
                done = end
        if self.record:
            self._record(cta, j, rt, t, start, done, dep)
        if done <= t:
            self._complete(cta, j, t)
        else:
            self._push(done, EV_DONE, cta, j)

    def _try_issue(self, sm: SmState, t: int) -> None:
        """Issue at most one ready node per free subpartition at cycle `t`: the policy's first choice among the
        nodes whose subpartitions and unit are free (and, for a throttling policy, that it allows)."""
        spf = sm.sp_free
        queues = sm.queues
        pol = self.policies[sm.index]
        pick = self.pick
        last = pol.last
        full = self.full
        allowed = pol.allowed(t) if self.throttles else None
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
            best: tuple[int, int, CtaState, Any, Pipeline] | None = None
            bk = held = False
            bm: tuple[int, ...] | None = None
            unit: Pipeline | None = None
            for e in q:
                if allowed is not None and e[0] not in allowed:
                    held = True  # throttled by the policy: look again in a while
                    continue
                m = e[3]
                if m is not None:
                    busy = max(spf) if m is full else max(map(spf.__getitem__, m))
                    if busy > t:
                        if busy < nxt:
                            nxt = busy
                        continue
                u = e[4]
                if not u.queued and u.free_at > t:
                    if u.free_at < nxt:
                        nxt = u.free_at
                    continue
                if pick == PICK_SORT:  # sorted: the first issuable entry
                    best, bm, unit = e, m, u
                    break
                # the built-in orders: (flag, age, node) with flag = not the last-issued group (GTO), or
                # at or before it (RR), or none (oldest); ages and nodes make every key distinct
                k = e[0] != last[sp] if pick == PICK_GTO else e[0] <= last[sp] if pick == PICK_RR else False
                if best is None or k < bk or k == bk and e < best:
                    best, bk, bm, unit = e, k, m, u
            if held and t + pol.recheck_cycles < nxt:
                nxt = t + pol.recheck_cycles
            if best is None:
                continue
            assert unit is not None
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
            if q and t1 < nxt:  # one issue per subpartition per cycle
                nxt = t1
            self._issue(sm, unit, best[2], best[1], t)
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
                    m = e[3]
                    lb = f if m is None else max(spf) if m is full else max(map(spf.__getitem__, m))
                    u = e[4]
                    if not u.queued and u.free_at > lb:
                        lb = u.free_at
                    if lb < nxt:
                        nxt = lb
        if nxt == INF:
            sm.wake = NEVER
        elif nxt != sm.wake:
            w = sm.wake = int(nxt)
            b = self.cal.get(w)
            if b is None:
                self.cal[w] = [self.wake_ev[sm.index]]
                heapq.heappush(self.times, w)
            else:
                b.append(self.wake_ev[sm.index])
