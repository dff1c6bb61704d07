"""Thread-block clusters for the engine: co-scheduled launch on one GPC, cluster barriers, DSMEM transfers.

A mixin of torchsim.sim.engine._Engine; active only for kernels whose attrs set `cluster_size` > 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from torchsim.graph import Space
from torchsim.sim.prepare import ISSUE_ONLY
from torchsim.sim.resources import Pipeline
from torchsim.sim.state import EV_LAUNCH, EV_SYNC, W_BARRIER, CtaState


class ClusterMixin:
    """Cluster launch and synchronisation; the engine provides the attributes used here."""

    cluster: int
    noc: Any
    nsm: int
    sms: list[Any]
    pending: list[tuple[int, int]]
    preps: list[Any]
    next_cta: int
    cta_sm: list[int]
    launch_cycles: int
    cbar: dict[tuple[int, int], int]
    cbar_wait: dict[tuple[int, int], list[tuple[CtaState, int]]]
    instant: Any
    dsmem: list[dict[int, tuple[int, np.ndarray]]]

    def _push(self, t: int, kind: int, a: Any, b: Any) -> None:
        raise NotImplementedError

    def _mark(self, sm: int) -> None:
        raise NotImplementedError

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

    def _cluster_arrive(self, cta: CtaState, b: int, t: int) -> None:
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
                    self.instant.append((EV_SYNC, c2, k))
                else:
                    p = c2.prep
                    sm = c2.smo
                    u = sm.ulist[p.unit[k]]
                    assert u is not None
                    sm.queues[p.sp0[k]].append((c2.base + p.group[k], k, c2, p.multi[k], u))
                    self._mark(c2.sm)
            else:
                still.append((c2, k))
        self.cbar_wait[key] = still

    def _remote(self, cta: CtaState, j: int, unit: Pipeline | None, t: int) -> int:
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


def dsmem_nodes(cls: Any) -> dict[int, tuple[int, np.ndarray]]:
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
