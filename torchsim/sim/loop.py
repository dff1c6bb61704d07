"""The engine's event loop, the one implementation of the node lifecycle (ready -> issued -> executing ->
completed): per cycle, the completions, readiness, SM wake-ups and launches due (in scheduling order), then
issue rounds (synchronisation nodes, then marked SMs in index order) until quiet.

Called by torchsim.sim.engine._Engine.run: the simulator's hot path. The state touched per node lives in local
variables, and what every node does is written inline (a call per node costs 3-5% on GEMM and attention runs).
The rare configurations are branches on flags fixed for the run: a sorting or throttling issue policy and
thread-block clusters scan an SM through `IssueMixin._choose` and wake it at the cycles that scan names
(`general`); cluster barriers and DSMEM go through torchsim.sim.clusters; LDGs through the L1 and a profile's
own memory system through torchsim.sim.memory. A node whose data successors all join queues releases those
edges when it issues, effective at its completion (EV_READY then), and needs no completion event (most nodes
of attention kernels).
"""

from __future__ import annotations

from typing import Any

import cython

import torchsim.sim.issue as issue
import torchsim.sim.memory as memory
import torchsim.sim.prepare as prepare
import torchsim.sim.state as state
from torchsim.sim.issue import PICK_GTO, PICK_RR, PICK_SORT
from torchsim.sim.resources import BandwidthServer, CycleHeap, DramServer, LruCache, Pipeline
from torchsim.sim.state import CtaState, SmState

# C types for the compiled build (torchsim.sim.native: Cython); plain Python ignores them. A name typed Int
# rejects anything but an int (a float there raises TypeError, never rounds), so only names that hold nothing
# else are; a `bint` converts any value to its truth, so only flags are.
Int = cython.typedef(cython.longlong)

# the event kinds, node codes, memory paths and the shared-memory port's unit as C constants when compiled (a
# module global is a dictionary lookup, and its comparison with a C integer a Python one)
EV_DONE = cython.declare(Int, state.EV_DONE)
EV_LAUNCH = cython.declare(Int, state.EV_LAUNCH)
EV_READY = cython.declare(Int, state.EV_READY)
EV_SYNC = cython.declare(Int, state.EV_SYNC)
EV_WAKE = cython.declare(Int, state.EV_WAKE)
NEVER = cython.declare(Int, state.NEVER)
W_DATA = cython.declare(Int, state.W_DATA)
W_ORDER = cython.declare(Int, state.W_ORDER)
ISSUE_ONLY = cython.declare(Int, prepare.ISSUE_ONLY)
R_INSTANT = cython.declare(Int, prepare.R_INSTANT)
R_QUEUE = cython.declare(Int, prepare.R_QUEUE)
K_LDG = cython.declare(Int, memory.K_LDG)
K_PIPE = cython.declare(Int, memory.K_PIPE)
K_REMOTE = cython.declare(Int, memory.K_REMOTE)
K_WRITE = cython.declare(Int, memory.K_WRITE)
LDST = cython.declare(Int, issue.LDST)


@cython.locals(t=Int, cta=CtaState, c=CtaState, wsm=SmState, sm=SmState, unit=Pipeline, u=Pipeline, pt=Pipeline,
               port=Pipeline, l2=LruCache, l2srv=BandwidthServer, dram=DramServer, keys=dict, j=Int, k=Int, n=Int,
               occ=Int, s=Int, sp=Int, rt=Int, kind=Int, b=Int, why=Int, g=Int, sio_occ=Int, arrive=Int, dep=Int,
               w=Int, rk=Int, spmax=Int, nxt=Int, lb=Int, f=Int, sp0=Int, uid=Int, x=Int, nsp=Int, gl=list,
               pred=list, data_at=list, spf=list, queues=list, q=list, ulist=list, e=tuple, lasts=list,
               policies=list, sms=list, active=list, stalls=list, rkind=list, general=cython.bint, bk=cython.bint,
               flag=cython.bint, gto=cython.bint, rr=cython.bint, plain=cython.bint, throttles=cython.bint,
               clusters=cython.bint, record=cython.bint, first=cython.bint, hit=cython.bint, fd=cython.double,
               pe=Int, i=Int, bi=Int, ba=Int, bn=Int, ea=Int, lsp=Int, tb=object, tb1=object, marked=list,
               calendar=dict, heap=CycleHeap, fe=cython.double, xf=cython.double, dur=cython.double,
               l2_end=cython.double, xe=cython.double, lat=Int, l2_lat=Int, dram_lat=Int, st0=cython.double,
               st1=cython.double, st2=cython.double, st3=cython.double, st4=cython.double, st5=cython.double,
               succ=tuple, osucc=tuple, dq=tuple, batch=list, one_sm=list, one_ev=list, us=Int, ue=Int, dn=Int,
               last=list, work=cython.double, sio=cython.double, gv=Int, age=Int, bo=object, kb=object, jb=object,
               db=object, xb=object, nb=object)
def event_loop(eng: Any) -> int:
    """Process events until none is left; returns the cycle of the last one."""
    times, cal, wake_ev = eng.times, eng.cal, eng.wake_ev  # the calendar: its cycles, their events, SM wake-ups
    sms, dirty, is_dirty = eng.sms, eng.dirty, eng.is_dirty  # the SMs, those to look at this cycle
    instant = eng.instant  # this cycle's synchronisation nodes to retire (EV_SYNC) and their completions (EV_DONE)
    sync_append, sync_first, sync_next = instant.append, instant.appendleft, instant.popleft
    stalls, record, retire = eng.stalls, eng.record, eng._retire
    st0 = st1 = st2 = st3 = st4 = st5 = 0.0  # stall cycles by kind (torchsim.sim.summary STALLS order)
    # the memory hierarchy: a profile's own memory system, or L1 -> L2 (lines, bandwidth) -> DRAM inline
    memsys = eng.memsys
    l2, l2srv = eng.l2, eng.l2srv
    l2lines = l2.lines
    l2_touch, l2_evict = l2lines.move_to_end, l2lines.popitem
    dram = eng.dram  # DramServer: the cost per byte depends on the read/write mix
    l1_lat, l2_lat, dram_lat = (getattr(eng, a, 0) for a in ("l1_lat", "l2_lat", "dram_lat"))
    full = eng.full
    lazy = eng.lazy
    # a sorting or throttling policy, or clusters: the SM scan of IssueMixin._choose, waking at what it names
    general = not lazy or eng.pick == PICK_SORT
    throttles = eng.throttles
    clusters = eng.cluster > 1
    cluster = eng.cluster
    cluster_bars = eng.cluster_bars
    cbar = eng.cbar
    cbar_wait = eng.cbar_wait
    gto = eng.pick == PICK_GTO
    rr = eng.pick == PICK_RR
    plain = eng.plain_issued
    policies = eng.policies
    lasts = [pol.last for pol in policies]
    nsp = eng.nsp
    # the subpartitions whose queues can hold entries (every node's first subpartition), in issue order
    active = sorted({sp0 for p in eng.preps for sp0 in p.sp0})
    # the calendar, the marked SMs and the heap again, C-typed for the loop below (the closures see them untyped)
    calendar, marked, heap = cal, dirty, times

    @cython.locals(cta=CtaState, k=Int, t=Int, x=Int, sm=SmState, u=Pipeline, sp0=Int, uid=Int, s=Int, lb=Int, spf=list,
                   cd=dict, hp=CycleHeap, dl=list, gv=Int, age=Int, xb=object, lbo=object)
    def enqueue(cta: CtaState, kb: int, tb: int) -> None:
        """Node k of cta, which needs a unit and waits on no barrier, has every edge released at cycle tb: it joins
        its subpartition's queue (when data released at a predecessor's issue arrives later: then). An SM whose
        node cannot issue yet is woken at the earliest cycle it could (marked instead when not `lazy`: a
        throttling policy or clusters). (tb: the event loop's Python int of the cycle, stored as it is; cd, hp, dl:
        the calendar, its heap and the marked SMs, C-typed here; kb: the node's Python int, k its C value: an int
        goes into the calendar and the queues as the object it already is, boxed at most once.)"""
        k = kb
        t = tb
        xb = cta.data_at[k]
        x = xb
        if x > t:  # data released at a predecessor's issue arrives later: ready then
            cd = cal
            evl = cd.get(xb)
            if evl is None:
                cd[xb] = [(EV_READY, cta, kb)]
                hp = times
                hp.push(x)
            else:
                evl.append((EV_READY, cta, kb))
            return
        cta.ready_t[k] = tb
        sm = cta.smo
        sp0, m, uid = cta.qinfo[k]
        u = sm.ulist[uid]
        assert u is not None
        gv = cta.group[k]
        age = cta.base + gv
        sm.queues[sp0].append((age, kb, cta, m, u))
        s = sm.index
        if is_dirty[s]:
            return
        spf = sm.sp_free
        lb = spf[sp0] if m is None else sm.spmax if m is full else max(map(spf.__getitem__, m))
        if not u.queued and u.free_at > lb:
            lb = u.free_at
        if lb <= t or not lazy:
            is_dirty[s] = True
            dl = dirty
            dl.append(s)
        elif lb < sm.wake:
            sm.wake = lb
            cd = cal
            lbo = lb
            evl = cd.get(lbo)
            if evl is None:
                cd[lbo] = [wake_ev[s]]
                hp = times
                hp.push(lb)
            else:
                evl.append(wake_ev[s])

    def schedule(x: int, ev: tuple[Any, ...]) -> None:
        """Event ev at cycle x (written inline where every node pays for it)."""
        evl = cal.get(x)
        if evl is None:
            cal[x] = [ev]
            times.push(x)
        else:
            evl.append(ev)

    @cython.locals(cta=CtaState, k=Int, need=Int, b=Int)
    def ready(cta: CtaState, k: int, tb: int) -> None:
        """Node k of cta has every edge released at cycle tb (a Python int, as for enqueue): a barrier wait short of
        its arrivals waits on them, a synchronisation node retires in this cycle's issue rounds, any other node
        joins its queue."""
        need = cta.need[k]
        if need:
            b = cta.barrier[k]
            if b in cluster_bars[cta.cls]:  # counted per cluster (torchsim.sim.clusters)
                key = (cta.seq // cluster, b)
                if cbar.get(key, 0) < need:
                    cbar_wait.setdefault(key, []).append((cta, k))
                    return
            elif cta.bar[b] < need:
                cta.bar_wait[b].append(k)
                return
        if cta.code[k] == ISSUE_ONLY:
            cta.ready_t[k] = tb
            instant.append((EV_SYNC, cta, k))
        else:
            enqueue(cta, k, tb)

    one_sm: list[int] = [0]
    one_ev: list[Any] = [None]
    t = 0
    while heap.n:
        t = heap.pop()
        tb, tb1 = t, t + 1  # t and t + 1 as Python ints, made once a cycle (a store of t, or its comparison with
        # a Python value, would make one each time)
        # -- completions, readiness, wake-ups and launches at t, in the order they were scheduled (including any
        # scheduled meanwhile). A wake-up only marks its SM, a node joining a queue only marks its SM or moves an
        # unmarked SM's `wake` earlier, and the pick among queued nodes does not depend on their queue order,
        # so the order of these at one cycle does not matter. Then the issue rounds, until quiet: each
        # synchronisation node in turn (an EV_SYNC through the same handler, followed at once by its EV_DONE when
        # it completes in the same cycle), then the marked SMs in index order.
        evs = calendar[tb]
        first = True
        while True:
            for kind, a, bo in evs:
                b = bo
                if kind == EV_WAKE:  # SM a (index b), unless its wake-up moved since
                    wsm = a
                    if wsm.wake == t:
                        wsm.wake = NEVER
                        if not is_dirty[b]:
                            is_dirty[b] = True
                            marked.append(b)
                elif kind == EV_READY:  # the last data of node b of CTA a arrives
                    c = a
                    c.why[b] = W_DATA
                    enqueue(c, bo, tb)
                elif kind != EV_LAUNCH:  # node b of CTA a completes (EV_DONE: its data edges) or retires (EV_SYNC:
                    # its order edges first)
                    c = a
                    pred = c.pred
                    if kind == EV_DONE:
                        succ = c.data_succ[b]
                        why = W_DATA
                    else:
                        _, g, occ, work, sio, sio_occ, succ, arrive, extra, dq = c.info[b]
                        gl = c.grp_last
                        gv = gl[g]
                        dep = t - gv  # its wait on its group (it was ready at t: a sync node never waits to issue)
                        if dep > 0:
                            w = c.why[b]
                            if w == 1:
                                st1 += dep
                            elif w == 2:
                                st2 += dep
                            else:
                                st0 += dep
                        gl[g] = tb
                        why = W_ORDER
                    rkind = c.rkind
                    for kb in succ:
                        k = kb
                        n = pred[k]
                        n -= 1
                        pred[k] = n
                        if n:
                            continue
                        c.why[k] = why
                        rk = rkind[k]
                        if rk == R_QUEUE:
                            enqueue(c, kb, tb)
                        elif rk == R_INSTANT:
                            c.ready_t[k] = tb
                            sync_append((EV_SYNC, c, kb))
                        else:
                            ready(c, kb, tb)
                    if kind == EV_DONE:
                        c.remaining -= 1
                        if c.remaining == 0:
                            retire(c, tb)
                        continue
                    # the rest of a synchronisation node: its barrier arrival; it completes now (the EV_DONE appended
                    # here is handled next), unless it moves bytes through the shared-memory port
                    if arrive >= 0:
                        if clusters or c.bar_wait[arrive]:
                            eng._arrive(c, arrive, tb)
                        else:
                            c.bar[arrive] += 1
                    done = tb
                    if sio_occ:
                        port = c.smo.ulist[LDST]
                        assert port is not None
                        done = port.take(t, sio_occ, sio)
                    if record:
                        eng._record(c, b, t, t, t, done, dep)
                    if done == tb:  # handled next, before any other synchronisation node
                        sync_first((EV_DONE, c, bo))
                    else:
                        db = done
                        evl = calendar.get(db)
                        if evl is None:
                            calendar[db] = [(EV_DONE, c, bo)]
                            heap.push(done)
                        else:
                            evl.append((EV_DONE, c, bo))
                else:  # CTA b launches on SM a
                    cta = eng._launch(a, b, tb)
                    for jb in cta.prep.roots:
                        ready(cta, jb, tb)
            if first:
                del calendar[tb]
                first = False
            if instant:
                one_ev[0] = sync_next()  # a list kept for the purpose: no tuple made per synchronisation node
                evs = one_ev
                continue
            if not marked:
                break
            evs = ()
            if len(marked) == 1:  # the common case: one SM (in a list kept for the purpose)
                s = marked.pop()
                is_dirty[s] = False
                one_sm[0] = s
                batch = one_sm
            else:
                marked.sort()
                batch = marked[:]
                marked.clear()
                for s in batch:
                    is_dirty[s] = False
            for s in batch:
                sm = sms[s]
                spf = sm.sp_free
                spmax = sm.spmax
                ulist = sm.ulist
                last = lasts[s]
                queues = sm.queues
                if general:
                    allowed = policies[s].allowed(t) if throttles else None
                    nxt = NEVER
                for sp in active:
                    q = queues[sp]
                    if not q:
                        continue
                    f = spf[sp]
                    if f > t:
                        if general and f < nxt:
                            nxt = f
                        continue
                    if general:
                        best, w = eng._choose(sm, sp, q, t, allowed)
                        if w < nxt:
                            nxt = w
                        if best is None:
                            continue
                        q.remove(best)
                        if q and t + 1 < nxt:  # one issue per subpartition per cycle
                            nxt = t + 1
                        unit = best[4]
                    else:
                        # the policy's first choice among the entries whose subpartitions and unit are free:
                        # smallest (flag, age, node), flag = not the last-issued group (GTO), at or before it (RR)
                        # (ages and nodes compared as integers: no two entries have both equal)
                        best = None
                        bk = False
                        lsp = last[sp]
                        bi = ba = bn = 0
                        for i in range(len(q)):
                            e = q[i]
                            m = e[3]
                            if m is not None and (spmax if m is full else max(map(spf.__getitem__, m))) > t:
                                continue
                            u = e[4]
                            if not u.queued and u.free_at > t:
                                continue
                            ea = e[0]
                            flag = ea != lsp if gto else ea <= lsp if rr else False
                            if best is None or flag < bk or flag == bk and (ea < ba or ea == ba and e[1] < bn):
                                best = e
                                bi, ba, bn = i, ea, e[1]
                                bk = flag
                                unit = u
                        if best is None:
                            continue
                        del q[bi]
                    m = best[3]
                    spmax = sm.spmax = t + 1
                    if m is None:
                        spf[sp] = tb1
                    elif m is full:
                        spf[:] = [tb1] * nsp
                    else:
                        for x in m:
                            spf[x] = tb1
                    if plain:
                        last[sp] = best[0]
                    else:
                        policies[s].issued(sp, best)
                    # -- issue node j of cta on unit (IssueMixin._issue)
                    cta = best[2]
                    jb = best[1]
                    j = jb
                    kind, g, occ, work, sio, sio_occ, osucc, arrive, extra, dq = cta.info[j]
                    rt = cta.ready_t[j]
                    gl = cta.grp_last
                    gv = gl[g]
                    dep = rt - gv
                    if dep > 0:
                        w = cta.why[j]
                        if w == 1:
                            st1 += dep
                        elif w == 2:
                            st2 += dep
                        else:
                            st0 += dep
                    if t > rt:
                        if unit.free_at > rt:
                            st3 += t - rt
                        else:
                            st4 += t - rt
                    gl[g] = tb
                    if osucc:  # release order edges at issue
                        pred = cta.pred
                        rkind = cta.rkind
                        for kb in osucc:
                            k = kb
                            n = pred[k]
                            n -= 1
                            pred[k] = n
                            if n == 0:
                                cta.why[k] = W_ORDER
                                if rkind[k] == R_QUEUE:
                                    x = cta.data_at[k]
                                    if x > t:  # its data arrives later: enqueue makes it ready then
                                        enqueue(cta, kb, tb)
                                        continue
                                    # joins a queue of this SM: the wake-up computed after the scan covers it,
                                    # unless it could issue in this cycle (a subpartition still free)
                                    cta.ready_t[k] = tb
                                    sp0, m, uid = cta.qinfo[k]
                                    u = ulist[uid]
                                    gv = cta.group[k]
                                    age = cta.base + gv
                                    queues[sp0].append((age, kb, cta, m, u))
                                    if (not is_dirty[s] and (not lazy or (u.queued or u.free_at <= t) and (
                                            spf[sp0] if m is None else spmax if m is full else
                                            max(map(spf.__getitem__, m))) <= tb)):
                                        is_dirty[s] = True
                                        marked.append(s)
                                elif rkind[k] == R_INSTANT:
                                    cta.ready_t[k] = tb
                                    sync_append((EV_SYNC, cta, kb))
                                else:
                                    ready(cta, kb, tb)
                    if arrive >= 0:
                        if clusters or cta.bar_wait[arrive]:
                            eng._arrive(cta, arrive, tb)
                        else:
                            cta.bar[arrive] += 1
                    if kind == K_REMOTE:  # DSMEM (torchsim.sim.clusters)
                        start, done = tb, eng._remote(cta, j, unit, tb)
                    else:  # take the unit (a pipe or a memory front end): Pipeline.occupy, inlined
                        us = unit.free_at
                        if t > us:
                            us = t
                        ue = us + occ
                        unit.free_at = ue
                        unit.busy_work += work
                        if kind == K_PIPE:  # only pipes have partners (the tensor pipe and the SFU)
                            pt = unit.partner
                            if pt is not None and pt.free_at < ue:
                                pt.free_at = ue
                            done = ue + unit.latency
                            if record:
                                start = us
                        elif memsys is not None:
                            done, start = eng._memsys(cta, j, tb, ue, work, kind != K_WRITE)
                        elif kind == K_LDG and (miss := eng._l1_miss(unit, cta, jb, tb, work, occ)) is None:
                            start, done = tb, ue + l1_lat  # every line hits the SM's L1
                        else:  # a global read or write past L1: L2, then DRAM on a miss
                            if kind == K_LDG:  # only the missing lines go on to L2
                                work, occ = miss
                            keys = cta.keys
                            key = keys.get(jb)
                            if key is None:
                                key = (cta.prep.name, j, cta.seq)
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
                            # in C doubles from here (each value as Python computes it: every cycle and
                            # byte count below 2^53 converts exactly)
                            fe = ue
                            xf = l2srv.free_at  # BandwidthServer.serve
                            if t > xf:
                                xf = t
                            dur = work / l2srv.bytes_per_cycle
                            l2_end = l2srv.free_at = xf + dur
                            l2srv.bytes += work
                            l2srv.busy_cycles += dur
                            if l2_end > fe:  # max(front end, L2[, DRAM]) without the slow builtin
                                fe = l2_end
                            if kind == K_WRITE:
                                dram.serve_kind(t, work, True)  # write-back traffic; the store completes at L2
                                lat = l2_lat
                            elif hit:
                                lat = l2_lat
                            else:
                                xf = dram.serve_kind(t, work, False)
                                if xf > fe:
                                    fe = xf
                                lat = dram_lat
                            xe = extra
                            fd = fe + lat + xe  # ceil, without the builtin's call (fd >= 0)
                            dn = int(fd)
                            if dn < fd:
                                dn += 1
                            done = dn
                            fd = dn - t - (lat + xe + occ)  # queueing beyond the unloaded latency
                            if fd > 0:
                                st5 += fd
                            if record:  # the record's start as Python computes it (an int unless extra is not)
                                start = done - tb - (lat + extra + occ)
                                start = start + tb if start > 0 else tb
                    if sio_occ:  # the shared-memory port is shared by LDS/STS, TMA writes, MMA operands
                        port = ulist[LDST]
                        assert port is not None
                        pe = port.take(t, sio_occ, sio)
                        if pe > done:
                            done = pe
                    if record:
                        eng._record(cta, j, rt, t, start, done, dep)
                    # done > t: a unit takes at least a cycle (Pipeline.occupancy); boxed once (db)
                    db = done
                    if dq is None:
                        evl = calendar.get(db)
                        if evl is None:
                            calendar[db] = [(EV_DONE, cta, jb)]
                            heap.push(done)
                        else:
                            evl.append((EV_DONE, cta, jb))
                    else:
                        # Every data successor joins a queue when ready, so its data edges are released now,
                        # taking effect at `done`: a successor whose last edge this is becomes ready at the
                        # latest such cycle (EV_READY; the same cycle and wait reason as releasing them at
                        # completion). The node itself needs no completion event: the last node of a CTA to
                        # complete has no data successors, so counting this one now retires the CTA on time.
                        cta.remaining -= 1
                        pred = cta.pred
                        data_at = cta.data_at
                        for kb in dq:
                            k = kb
                            x = data_at[k]
                            if done > x:
                                data_at[k] = db
                            n = pred[k]
                            n -= 1
                            pred[k] = n
                            if n == 0:
                                xb = data_at[k]
                                x = xb
                                evl = calendar.get(xb)
                                if evl is None:
                                    calendar[xb] = [(EV_READY, cta, kb)]
                                    heap.push(x)
                                else:
                                    evl.append((EV_READY, cta, kb))
                if general and not lazy:  # wake at the earliest cycle the scan named, unless one is due before
                    if nxt < sm.wake:
                        sm.wake = nxt
                        schedule(nxt, wake_ev[s])
                    continue
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
                    else:
                        nb = nxt
                        evl = calendar.get(nb)
                        if evl is None:
                            calendar[nb] = [wake_ev[s]]
                            heap.push(nxt)
                        else:
                            evl.append(wake_ev[s])
    # the stall cycles, kept in C doubles during the loop (added in the same order as to the list: the same sums)
    for i, x_st in enumerate((st0, st1, st2, st3, st4, st5)):
        stalls[i] += x_st
    return t
