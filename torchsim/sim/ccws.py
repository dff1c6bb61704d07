"""Cache-conscious issue policy in the manner of Cache-Conscious Wavefront Scheduling (Rogers, O'Connor, Aamodt,
MICRO 2012), as the warp-scheduling notes (papers/004) describe it: a plug-in of torchsim.sim.policy.

Each warp (execution group) has a victim tag array (VTA) holding the tags of its lines the per-SM L1
(torchsim.sim.l1) evicted. A miss that hits the warp's own VTA is lost intra-warp locality: the warp's
lost-locality score (LLS) rises by `k_throttle * base_score`, then decays by `decay_per_cycle` back to the
base. Warps sorted by LLS (highest first) are admitted while their cumulative score stays within
`active warps * base_score`; only admitted warps issue, greedy-then-oldest among them. With no lost locality
every warp is admitted and the policy is GTO.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any, ClassVar

from torchsim.sim.policy import GreedyThenOldest, register_policy


@register_policy
class CacheConscious(GreedyThenOldest):
    name = "ccws"
    throttles = True
    base_score: ClassVar[float] = 100.0
    k_throttle: ClassVar[float] = 1.0  # score added per VTA hit, in units of base_score
    vta_entries: ClassVar[int] = 16  # victim tags kept per warp
    decay_per_cycle: ClassVar[float] = 1.0
    recheck_cycles: ClassVar[int] = 32

    def __init__(self, subpartitions: int) -> None:
        super().__init__(subpartitions)
        self.active: dict[int, None] = {}  # resident warps (ages) with nodes left to issue, in launch order
        self.remaining: dict[int, int] = {}
        self.vta: dict[int, OrderedDict[Hashable, None]] = {}
        self.bump: dict[int, float] = {}  # score above base at bump_t
        self.bump_t: dict[int, int] = {}
        self.vta_hits = 0
        self.throttled_checks = 0  # times the admitted set excluded some warp
        self._cached_t = -1
        self._cached: set[int] | None = None

    @classmethod
    def configure(cls, **params: float) -> type[CacheConscious]:
        """A variant with other constants: `CacheConscious.configure(k_throttle=8, vta_entries=32)`."""
        unknown = set(params) - {"base_score", "k_throttle", "vta_entries", "decay_per_cycle", "recheck_cycles"}
        if unknown:
            raise ValueError(f"CacheConscious has no parameter(s) {sorted(unknown)}")
        return type(f"CacheConscious_{'_'.join(f'{k}{v:g}' for k, v in sorted(params.items()))}", (cls,), params)

    # -- L1 observer ------------------------------------------------------------------------------------
    @property
    def l1_observer(self) -> Any:
        return self

    def l1_evict(self, owner: int, line: Hashable) -> None:
        v = self.vta.get(owner)
        if v is None:
            if owner not in self.active:
                return
            v = self.vta[owner] = OrderedDict()
        v[line] = None
        if len(v) > self.vta_entries:
            v.popitem(last=False)

    def l1_miss(self, owner: int, line: Hashable, t: int) -> None:
        v = self.vta.get(owner)
        if v is None or line not in v:
            return
        del v[line]
        self.vta_hits += 1
        self.bump[owner] = self._bump(owner, t) + self.k_throttle * self.base_score
        self.bump_t[owner] = t
        self._cached_t = -1

    def _bump(self, w: int, t: int) -> float:
        b = self.bump.get(w, 0.0)
        if b:
            b = max(0.0, b - (t - self.bump_t[w]) * self.decay_per_cycle)
        return b

    # -- residency --------------------------------------------------------------------------------------
    def launched(self, cta_seq: int, group_nodes: Sequence[int], t: int) -> None:
        for g, n in enumerate(group_nodes):
            if n:
                self.active[cta_seq * 4096 + g] = None
                self.remaining[cta_seq * 4096 + g] = n
        self._cached_t = -1

    def issued(self, sp: int, entry: tuple[Any, ...]) -> None:
        self.last[sp] = w = entry[0]
        left = self.remaining.get(w, 0) - 1
        self.remaining[w] = left
        if left <= 0:  # a warp with nothing left to issue neither competes nor counts toward the cutoff
            self._drop(w)
            self._cached_t = -1

    def retired(self, cta_seq: int, t: int) -> None:
        for age in [a for a in self.remaining if a // 4096 == cta_seq]:
            self._drop(age)
        self._cached_t = -1

    def _drop(self, w: int) -> None:
        self.active.pop(w, None)
        self.remaining.pop(w, None)
        self.vta.pop(w, None)
        self.bump.pop(w, None)
        self.bump_t.pop(w, None)

    # -- throttling -------------------------------------------------------------------------------------
    def allowed(self, t: int) -> set[int] | None:
        if t == self._cached_t:
            return self._cached
        self._cached_t = t
        bumps = {w: b for w in list(self.bump) if (b := self._bump(w, t)) > 0}
        for w in [w for w in self.bump if w not in bumps]:  # decayed back to the base
            del self.bump[w]
            del self.bump_t[w]
        if not bumps:
            self._cached = None
            return None
        base = self.base_score
        cutoff = len(self.active) * base
        order = sorted(self.active, key=lambda w: (-bumps.get(w, 0.0), w))
        admitted: set[int] = set()
        total = 0.0
        for w in order:
            score = base + bumps.get(w, 0.0)
            if admitted and total + score > cutoff:
                break
            admitted.add(w)
            total += score
        if len(admitted) < len(order):
            self.throttled_checks += 1
        self._cached = admitted
        return admitted
