"""The engine's event loop: per cycle, the completions, SM wake-ups and launches due (in scheduling order), then
issue rounds (synchronisation nodes, then marked SMs in index order) until quiet.

Called by torchsim.sim.engine._Engine.run: the simulator's hot path. For the common configuration (a built-in
non-throttling order, no clusters: `fast`) the loop inlines what the engine's methods `_ready`, `_try_issue`,
`_issue`, `_issue_sync` and `_memory` do, with every piece of state in a local variable (factoring the copies
back into closures costs 5-8% on GEMM and attention runs); other configurations call those methods. The inlined
form also releases the data edges of a node whose data successors all join queues when it issues, effective at
its completion, instead of scheduling a completion event (most nodes of attention kernels). Both forms give the
same results: tests run every golden case (tests/data/engine_golden.json) through each.
"""

from __future__ import annotations

import heapq
from math import ceil
from typing import Any

from torchsim.sim.issue import LDST, PICK_GTO, PICK_RR, PICK_SORT
from torchsim.sim.memory import K_LDG, K_PIPE, K_WRITE
from torchsim.sim.prepare import R_INSTANT, R_QUEUE, R_WAIT
from torchsim.sim.state import EV_DONE, EV_READY, EV_WAKE, NEVER, W_DATA, W_ORDER, CtaState

FAST = True  # tests set False to run every configuration through the engine's methods


def event_loop(eng: Any) -> int:
    """Process events until none is left; returns the cycle of the last one."""
    times = eng.times
    cal = eng.cal
    wake_ev = eng.wake_ev
    pop = heapq.heappop
    push = heapq.heappush
    sms = eng.sms
    dirty = eng.dirty
    is_dirty = eng.is_dirty
    instant = eng.instant
    stalls = eng.stalls
    record = eng.record
    ready = eng._ready
    retire = eng._retire
    memory = eng._memory
    memsys = eng.memsys
    l2 = eng.l2
    l2lines = l2.lines
    l2_touch = l2lines.move_to_end
    l2_evict = l2lines.popitem
    l2srv = eng.l2srv
    dram_serve = eng.dram.serve
    l2_lat = getattr(eng, "l2_lat", 0)
    dram_lat = getattr(eng, "dram_lat", 0)
    complete = eng._complete
    fast = FAST and eng.lazy and eng.pick != PICK_SORT
    full = eng.full
    gto = eng.pick == PICK_GTO
    rr = eng.pick == PICK_RR
    plain = eng.plain_issued
    policies = eng.policies
    lasts = [pol.last for pol in policies]
    nsp = eng.nsp
    # the subpartitions whose queues can hold entries (every node's first subpartition), in issue order
    active = sorted({sp0 for p in eng.preps for sp0 in p.sp0})

    def enqueue(cta: CtaState, k: int, t: int) -> None:
        """`_ready` for a node without a barrier wait that needs a unit (fast configuration), all of whose edges
        are now released."""
        x = cta.data_at[k]
        if x > t:  # data released at a predecessor's issue arrives later: ready then
            if x in cal:
                cal[x].append((EV_READY, cta, k))
            else:
                cal[x] = [(EV_READY, cta, k)]
                push(times, x)
            return
        cta.ready_t[k] = t
        p = cta.prep
        sm = cta.smo
        sp0, m, uid = p.qinfo[k]
        u = sm.ulist[uid]
        assert u is not None
        sm.queues[sp0].append((cta.base + p.group[k], k, cta, m, u))
        s = sm.index
        if is_dirty[s]:
            return
        spf = sm.sp_free
        lb = spf[sp0] if m is None else sm.spmax if m is full else max(map(spf.__getitem__, m))
        if not u.queued and u.free_at > lb:
            lb = u.free_at
        if lb <= t:
            is_dirty[s] = True
            dirty.append(s)
        elif lb < sm.wake:
            sm.wake = lb
            if lb in cal:
                cal[lb].append(wake_ev[s])
            else:
                cal[lb] = [wake_ev[s]]
                push(times, lb)

    t = 0
    while times:
        t = pop(times)
        # -- completions, readiness, wake-ups and launches at t, in the order they were scheduled (including any
        # scheduled meanwhile). A wake-up only marks its SM, a node joining a queue only marks its SM or moves an
        # unmarked SM's `wake` earlier, and the pick among queued nodes does not depend on their queue order,
        # so the order of these at one cycle does not matter.
        evs = cal[t]
        for kind, a, b in evs:
            if kind == EV_WAKE:  # SM a (index b), unless its wake-up moved since
                if a.wake == t:
                    a.wake = NEVER
                    if not is_dirty[b]:
                        is_dirty[b] = True
                        dirty.append(b)
            elif kind == EV_READY:  # the last data of node b of CTA a arrives: enqueue(a, b, t), inlined
                a.why[b] = W_DATA
                a.ready_t[b] = t
                p = a.prep
                sm = a.smo
                sp0, m, uid = p.qinfo[b]
                u = sm.ulist[uid]
                sm.queues[sp0].append((a.base + p.group[b], b, a, m, u))
                s = sm.index
                if is_dirty[s]:
                    continue
                spf = sm.sp_free
                lb = spf[sp0] if m is None else sm.spmax if m is full else max(map(spf.__getitem__, m))
                if not u.queued and u.free_at > lb:
                    lb = u.free_at
                if lb <= t:
                    is_dirty[s] = True
                    dirty.append(s)
                elif lb < sm.wake:
                    sm.wake = lb
                    if lb in cal:
                        cal[lb].append(wake_ev[s])
                    else:
                        cal[lb] = [wake_ev[s]]
                        push(times, lb)
            elif kind == EV_DONE:  # node b of CTA a completes: release its data edges
                p = a.prep
                pred = a.pred
                for k in p.data_succ[b]:
                    n = pred[k] - 1
                    pred[k] = n
                    if n:
                        continue
                    a.why[k] = W_DATA
                    rk = p.rkind[k] if fast else R_WAIT
                    if rk == R_QUEUE:
                        enqueue(a, k, t)
                    elif rk == R_INSTANT:
                        a.ready_t[k] = t
                        instant.append((a, k))
                    else:
                        ready(a, k, t)
                a.remaining -= 1
                if a.remaining == 0:
                    retire(a, t)
            else:
                eng._launch(a, b, t)
        del cal[t]
        # -- issue rounds: synchronisation nodes first, then the marked SMs in index order, until quiet
        while dirty or instant:
            while instant:
                cta, j = instant.popleft()
                kind, g, occ, work, sio, sio_occ, osucc, arrive, extra, dq = cta.info[j]
                if not fast or sio_occ or record:
                    eng._issue_sync(cta, j, t)
                    continue
                # -- a synchronisation node retires at once (IssueMixin._issue_sync, then _complete)
                rt = cta.ready_t[j]
                gl = cta.grp_last
                dep = rt - gl[g]
                if dep > 0:
                    w = cta.why[j]
                    stalls[w if w < 3 else 0] += dep
                if t > rt:
                    stalls[4] += t - rt
                gl[g] = t
                p = cta.prep
                rkind = p.rkind
                pred = cta.pred
                for k in osucc:
                    n = pred[k] - 1
                    pred[k] = n
                    if n == 0:
                        cta.why[k] = W_ORDER
                        if rkind[k] == R_QUEUE:
                            enqueue(cta, k, t)
                        elif rkind[k] == R_INSTANT:
                            cta.ready_t[k] = t
                            instant.append((cta, k))
                        else:
                            ready(cta, k, t)
                if arrive >= 0:  # IssueMixin._arrive: no cluster barriers when `fast`
                    if cta.bar_wait[arrive]:
                        eng._arrive(cta, arrive, t)
                    else:
                        cta.bar[arrive] += 1
                for k in p.data_succ[j]:
                    n = pred[k] - 1
                    pred[k] = n
                    if n == 0:
                        cta.why[k] = W_DATA
                        if rkind[k] == R_QUEUE:
                            enqueue(cta, k, t)
                        elif rkind[k] == R_INSTANT:
                            cta.ready_t[k] = t
                            instant.append((cta, k))
                        else:
                            ready(cta, k, t)
                cta.remaining -= 1
                if cta.remaining == 0:
                    retire(cta, t)
            if len(dirty) == 1:  # the common case: one SM
                s = dirty.pop()
                is_dirty[s] = False
                batch = (s,)
            else:
                dirty.sort()
                batch = dirty[:]
                dirty.clear()
                for s in batch:
                    is_dirty[s] = False
            if not fast:
                for s in batch:
                    eng._try_issue(sms[s], t)
                continue
            for s in batch:
                sm = sms[s]
                spf = sm.sp_free
                spmax = sm.spmax
                ulist = sm.ulist
                last = lasts[s]
                queues = sm.queues
                for sp in active:
                    q = queues[sp]
                    if not q or spf[sp] > t:
                        continue
                    if len(q) == 1:  # one entry: it issues if its subpartitions and unit are free
                        best = q[0]
                        m = best[3]
                        if m is not None and (spmax if m is full else max(map(spf.__getitem__, m))) > t:
                            continue
                        unit = best[4]
                        if not unit.queued and unit.free_at > t:
                            continue
                        q.clear()
                    else:
                        # the policy's first choice among the entries whose subpartitions and unit are free:
                        # smallest (flag, age, node), flag = not the last-issued group (GTO), at or before it (RR)
                        best = None
                        bk = False
                        lsp = last[sp]
                        for e in q:
                            m = e[3]
                            if m is not None and (spmax if m is full else max(map(spf.__getitem__, m))) > t:
                                continue
                            u = e[4]
                            if not u.queued and u.free_at > t:
                                continue
                            key = e[0] != lsp if gto else e[0] <= lsp if rr else False
                            if best is None or key < bk or key == bk and e < best:
                                best = e
                                bk = key
                                unit = u
                        if best is None:
                            continue
                        q.remove(best)
                    m = best[3]
                    spmax = sm.spmax = t + 1
                    if m is None:
                        spf[sp] = t + 1
                    elif m is full:
                        spf[:] = [t + 1] * nsp
                    else:
                        for x in m:
                            spf[x] = t + 1
                    if plain:
                        last[sp] = best[0]
                    else:
                        policies[s].issued(sp, best)
                    # -- issue node j of cta on unit (IssueMixin._issue)
                    cta = best[2]
                    j = best[1]
                    kind, g, occ, work, sio, sio_occ, osucc, arrive, extra, dq = cta.info[j]
                    rt = cta.ready_t[j]
                    gl = cta.grp_last
                    dep = rt - gl[g]
                    if dep > 0:
                        w = cta.why[j]
                        stalls[w if w < 3 else 0] += dep
                    if t > rt:
                        stalls[3 if unit.free_at > rt else 4] += t - rt
                    gl[g] = t
                    if osucc:  # release order edges at issue
                        pred = cta.pred
                        p = cta.prep
                        rkind = p.rkind
                        for k in osucc:
                            n = pred[k] - 1
                            pred[k] = n
                            if n == 0:
                                cta.why[k] = W_ORDER
                                if rkind[k] == R_QUEUE:
                                    x = cta.data_at[k]
                                    if x > t:  # data released at a predecessor's issue arrives later
                                        if x in cal:
                                            cal[x].append((EV_READY, cta, k))
                                        else:
                                            cal[x] = [(EV_READY, cta, k)]
                                            push(times, x)
                                        continue
                                    # joins a queue of this SM: the wake-up computed after the scan covers it,
                                    # unless it could issue in this cycle (a subpartition still free)
                                    cta.ready_t[k] = t
                                    sp0, m, uid = p.qinfo[k]
                                    u = ulist[uid]
                                    queues[sp0].append((cta.base + p.group[k], k, cta, m, u))
                                    if ((spf[sp0] if m is None else spmax if m is full else
                                         max(map(spf.__getitem__, m))) <= t and (u.queued or u.free_at <= t)
                                            and not is_dirty[s]):
                                        is_dirty[s] = True
                                        dirty.append(s)
                                elif rkind[k] == R_INSTANT:
                                    cta.ready_t[k] = t
                                    instant.append((cta, k))
                                else:
                                    ready(cta, k, t)
                    if arrive >= 0:
                        if cta.bar_wait[arrive]:
                            eng._arrive(cta, arrive, t)
                        else:
                            cta.bar[arrive] += 1
                    if kind == K_PIPE:
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
                    elif kind == K_LDG or memsys is not None:
                        done, start = memory(unit, cta, j, t, kind, occ, work, extra)
                    else:  # a global read/write past L1 (MemoryMixin._memory; DSMEM nodes are never `fast`)
                        x = unit.free_at
                        if t > x:
                            x = t
                        fe_end = x + occ
                        unit.free_at = fe_end
                        unit.busy_work += work
                        pt = unit.partner
                        if pt is not None and pt.free_at < fe_end:
                            pt.free_at = fe_end
                        keys = cta.keys
                        key = keys[j] if j in keys else (cta.prep.name, j, cta.seq)
                        if key in l2lines:  # LruCache.access
                            l2_touch(key)
                            l2.hits += 1
                            l2.hit_bytes += work
                            hit = True
                        else:
                            l2.misses += 1
                            l2.miss_bytes += work
                            l2lines[key] = work
                            l2.used += work
                            while l2.used > l2.capacity and l2lines:
                                l2.used -= l2_evict(False)[1]
                            hit = False
                        x = l2srv.free_at
                        if t > x:
                            x = t
                        dur = work / l2srv.bytes_per_cycle
                        l2_end = l2srv.free_at = x + dur
                        l2srv.bytes += work
                        l2srv.busy_cycles += dur
                        if l2_end > fe_end:  # max(fe_end, l2_end[, dram end]) without the slow builtin
                            fe_end = l2_end
                        if kind == K_WRITE:
                            dram_serve(t, work)  # write-back traffic; the store completes at L2
                            done = fe_end + l2_lat + extra
                            ideal = l2_lat + extra + occ
                        elif hit:
                            done = fe_end + l2_lat + extra
                            ideal = l2_lat + extra + occ
                        else:
                            x = dram_serve(t, work)
                            done = (x if x > fe_end else fe_end) + dram_lat + extra
                            ideal = dram_lat + extra + occ
                        done = ceil(done)
                        start = done - t - ideal
                        if start > 0:
                            stalls[5] += start
                            start += t
                        else:
                            start = t
                    if sio_occ:  # the shared-memory port is shared by LDS/STS, TMA writes, MMA operands
                        port = ulist[LDST]
                        x = port.free_at
                        if t > x:
                            x = t
                        end = x + sio_occ
                        port.free_at = end
                        port.busy_work += sio
                        pt = port.partner
                        if pt is not None and pt.free_at < end:
                            pt.free_at = end
                        if end > done:
                            done = end
                    if record:
                        eng._record(cta, j, rt, t, start, done, dep)
                    if done <= t:
                        complete(cta, j, t)
                    elif dq is None:
                        if done in cal:
                            cal[done].append((EV_DONE, cta, j))
                        else:
                            cal[done] = [(EV_DONE, cta, j)]
                            push(times, done)
                    else:
                        # Every data successor joins a queue when ready, so its data edges are released now,
                        # taking effect at `done`: a successor whose last edge this is becomes ready at the
                        # latest such cycle (EV_READY; the same cycle and wait reason as releasing them at
                        # completion). The node itself needs no completion event: the last node of a CTA to
                        # complete has no data successors, so counting this one now retires the CTA on time.
                        cta.remaining -= 1
                        pred = cta.pred
                        data_at = cta.data_at
                        for k in dq:
                            if done > data_at[k]:
                                data_at[k] = done
                            n = pred[k] - 1
                            pred[k] = n
                            if n == 0:
                                x = data_at[k]
                                if x in cal:
                                    cal[x].append((EV_READY, cta, k))
                                else:
                                    cal[x] = [(EV_READY, cta, k)]
                                    push(times, x)
                if is_dirty[s]:  # looked at again this cycle
                    continue
                # the earliest cycle anything left could issue replaces any pending wake-up (IssueMixin._try_issue)
                nxt = NEVER
                for sp in active:
                    q = queues[sp]
                    if q:
                        f = spf[sp]
                        for e in q:
                            m = e[3]
                            lb = f if m is None else spmax if m is full else max(map(spf.__getitem__, m))
                            u = e[4]
                            if not u.queued and u.free_at > lb:
                                lb = u.free_at
                            if lb < nxt:
                                nxt = lb
                if nxt != sm.wake:
                    sm.wake = nxt
                    if nxt == NEVER:  # nothing queued
                        pass
                    elif nxt in cal:
                        cal[nxt].append(wake_ev[s])
                    else:
                        cal[nxt] = [wake_ev[s]]
                        push(times, nxt)
    return t
