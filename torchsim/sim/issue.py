"""Issue helpers of the engine outside its event loop (torchsim.sim.loop): barrier arrivals, node records, and the
queue scan of the configurations the loop does not pick inline (a sorting or throttling policy, clusters).

A mixin of torchsim.sim.engine._Engine.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from torchsim.graph import Op, Unit
from torchsim.sim.policy import IssuePolicy
from torchsim.sim.prepare import ISSUE_ONLY
from torchsim.sim.resources import Pipeline
from torchsim.sim.result import NodeRecord
from torchsim.sim.state import EV_SYNC, NEVER, W_BARRIER, WAIT_NAMES, CtaState, SmState

PICK_SORT, PICK_OLDEST, PICK_GTO, PICK_RR = 0, 1, 2, 3  # how the event loop finds the policy's first choice
LDST = int(Unit.LDST)


class IssueMixin:
    """Barrier arrivals, node records, the general queue scan; the engine provides the attributes used here."""

    policies: list[IssuePolicy]
    dirty: list[int]
    is_dirty: list[bool]
    instant: deque[tuple[int, CtaState, int]]  # (EV_SYNC or EV_DONE, cta, node): handled in the issue rounds
    records: list[NodeRecord]
    full: tuple[int, ...]  # full_sps(nsp)
    pick: int
    cluster: int
    cluster_bars: list[frozenset[int]]

    if TYPE_CHECKING:  # provided by the engine's other mixins
        def _cluster_arrive(self, cta: CtaState, b: int, t: int) -> None:
            ...

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
                    self.instant.append((EV_SYNC, cta, k))
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

    def _choose(self, sm: SmState, sp: int, q: list[Any], t: int,
                allowed: set[int] | None) -> tuple[tuple[int, int, CtaState, Any, Pipeline] | None, int]:
        """The scan of subpartition `sp`'s queue `q` for the configurations the event loop does not pick inline
        (a sorting or throttling policy, clusters): the policy's first choice among the entries whose
        subpartitions and unit are free at `t` and that the policy allows (`allowed`, None: all), and the
        earliest cycle one held back could issue (NEVER: none)."""
        spf = sm.sp_free
        pol = self.policies[sm.index]
        pick = self.pick
        last = pol.last[sp]
        full = self.full
        nxt = NEVER
        if pick == PICK_SORT and len(q) > 1:
            q.sort(key=pol.key(sp))
        best = None
        bk = held = False
        for e in q:
            if allowed is not None and e[0] not in allowed:
                held = True  # throttled by the policy: look again in a while
                continue
            m = e[3]
            if m is not None:
                busy = sm.spmax if m is full else max(map(spf.__getitem__, m))
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
                best = e
                break
            # the built-in orders: (flag, age, node) with flag = not the last-issued group (GTO), or at or
            # before it (RR), or none (oldest); ages and nodes make every key distinct
            k = e[0] != last if pick == PICK_GTO else e[0] <= last if pick == PICK_RR else False
            if best is None or k < bk or k == bk and e < best:
                best, bk = e, k
        if held and t + pol.recheck_cycles < nxt:
            nxt = t + pol.recheck_cycles
        return best, nxt
