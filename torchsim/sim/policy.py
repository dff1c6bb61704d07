"""Issue policies: which ready node a subpartition's scheduler tries first.

A policy orders the ready entries of one subpartition queue. Entries are tuples that start `(age, node, cta)`
(the engine appends what it needs to test them) where `age = cta launch sequence * 4096 + execution group`
(smaller is older; one age is one warp/execution group).
Plug-ins subclass `IssuePolicy`: `key` orders, `issued` learns; a throttling policy (`throttles = True`) also
returns the set of ages allowed to issue from `allowed`, and hears CTA launches/retirements and, through
`l1_observer`, the per-SM L1's misses and evictions (torchsim.sim.ccws). One instance serves one SM.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar


def _oldest(e: tuple[Any, ...]) -> tuple[int, int]:
    return (e[0], e[1])


class IssuePolicy:
    """Base policy: oldest first (by CTA launch order, then group, then program order)."""

    name: ClassVar[str] = "oldest"
    throttles: ClassVar[bool] = False  # True: the engine consults `allowed` before issuing
    recheck_cycles: ClassVar[int] = 32  # how soon a throttled queue is looked at again

    def __init__(self, subpartitions: int) -> None:
        self.last = [-1] * subpartitions

    @property
    def l1_observer(self) -> Any:
        """An object with l1_miss(owner, line, t) / l1_evict(owner, line), or None."""
        return None

    def launched(self, cta_seq: int, group_nodes: Sequence[int], t: int) -> None:
        """A CTA became resident on this SM; group g (age cta_seq * 4096 + g) will issue group_nodes[g] nodes
        through the policy (synchronisation nodes retire without it)."""

    def retired(self, cta_seq: int, t: int) -> None:
        """A CTA left this SM."""

    def allowed(self, t: int) -> set[int] | None:
        """Ages that may issue at cycle `t` (None: all). Only called when `throttles` is set."""
        return None

    def key(self, sp: int) -> Callable[[tuple[Any, ...]], Any]:
        """Sort key of a queue entry at subpartition `sp`: smaller issues first."""
        return _oldest

    def order(self, sp: int, entries: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        return sorted(entries, key=self.key(sp))

    def issued(self, sp: int, entry: tuple[Any, ...]) -> None:
        self.last[sp] = entry[0]


class GreedyThenOldest(IssuePolicy):
    """GTO: keep issuing from the group that issued last; when it stalls, fall back to the oldest."""

    name = "gto"

    def key(self, sp: int) -> Callable[[tuple[Any, ...]], Any]:
        last = self.last[sp]
        return lambda e: (e[0] != last, e[0], e[1])


class RoundRobin(IssuePolicy):
    """RR: rotate priority among groups, starting after the group that issued last."""

    name = "rr"

    def key(self, sp: int) -> Callable[[tuple[Any, ...]], Any]:
        last = self.last[sp]
        return lambda e: (e[0] <= last, e[0], e[1])


class TwoLevel(IssuePolicy):
    """Two-level scheduling (Narasiman et al., MICRO 2011): warps form fetch groups of `group_size` in launch
    order; the active group issues round-robin until none of its warps is ready, then the next group takes over.
    Staggering the groups spreads their long-latency loads instead of having every warp stall at once."""

    name = "two-level"
    group_size: ClassVar[int] = 8

    def __init__(self, subpartitions: int) -> None:
        super().__init__(subpartitions)
        self.ordinal: dict[int, int] = {}
        self.active = [0] * subpartitions

    def launched(self, cta_seq: int, group_nodes: Sequence[int], t: int) -> None:
        for g in range(len(group_nodes)):
            self.ordinal.setdefault(cta_seq * 4096 + g, len(self.ordinal))

    def retired(self, cta_seq: int, t: int) -> None:
        for age in [a for a in self.ordinal if a // 4096 == cta_seq]:
            del self.ordinal[age]

    def key(self, sp: int) -> Callable[[tuple[Any, ...]], Any]:
        last, active, size, ordinal = self.last[sp], self.active[sp], self.group_size, self.ordinal
        nfg = max(1, -(-(max(ordinal.values(), default=0) + 1) // size))

        def k(e: tuple[Any, ...]) -> tuple[int, bool, int, int]:
            fg = ordinal.get(e[0], 0) // size
            return ((fg - active) % nfg, e[0] <= last, e[0], e[1])
        return k

    def issued(self, sp: int, entry: tuple[Any, ...]) -> None:
        self.last[sp] = entry[0]
        self.active[sp] = self.ordinal.get(entry[0], 0) // self.group_size


POLICIES: dict[str, type[IssuePolicy]] = {p.name: p for p in (GreedyThenOldest, RoundRobin, TwoLevel, IssuePolicy)}
POLICIES["lrr"] = RoundRobin  # loose round-robin: RR that skips warps with nothing ready (what RR does here)


def register_policy(cls: type[IssuePolicy]) -> type[IssuePolicy]:
    """Make a policy plug-in known by its `name` (to `simulate(policy=NAME)` and `--policy`)."""
    if cls.name in POLICIES and POLICIES[cls.name] is not cls:
        raise ValueError(f"issue policy name {cls.name!r} is taken by {POLICIES[cls.name].__name__}")
    POLICIES[cls.name] = cls
    return cls


_DEFAULT: list[type[IssuePolicy]] = []


@contextmanager
def default_policy(policy: str | type[IssuePolicy]) -> Iterator[type[IssuePolicy]]:
    """Within the block, `simulate` calls that name no policy use `policy` (and forked workers inherit it): how
    a whole prediction runs under one policy. Memoised results are keyed by profile name, so give the profile a
    name that says the policy (the `predict --policy` command does)."""
    cls = get_policy(policy) if isinstance(policy, str) else policy
    _DEFAULT.append(cls)
    try:
        yield cls
    finally:
        _DEFAULT.pop()


def policy_profile(hw: Any, policy: type[IssuePolicy]) -> Any:
    """`hw` (a profile or its name) renamed `NAME+POLICY` for non-default policies, so memoised kernel results of
    one policy never answer for another."""
    if isinstance(hw, str):
        from torchsim.hwmodels import get_profile

        hw = get_profile(hw)
    if policy is GreedyThenOldest or not hasattr(hw, "__dataclass_fields__"):
        return hw
    import dataclasses

    return dataclasses.replace(hw, name=f"{hw.name}+{policy.name}")


def current_default() -> type[IssuePolicy]:
    return _DEFAULT[-1] if _DEFAULT else GreedyThenOldest


def get_policy(name: str) -> type[IssuePolicy]:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown issue policy {name!r}; known: {', '.join(POLICIES)}") from None
