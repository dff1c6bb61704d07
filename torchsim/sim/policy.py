"""Issue policies: which ready node a subpartition's scheduler tries first.

A policy orders the ready entries of one subpartition queue. Entries are `(age, node, cta)` tuples where
`age = cta launch sequence * 4096 + execution group` (smaller is older). Plug-ins subclass `IssuePolicy`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar


def _oldest(e: tuple[int, int, Any]) -> tuple[int, int]:
    return (e[0], e[1])


class IssuePolicy:
    """Base policy: oldest first (by CTA launch order, then group, then program order)."""

    name: ClassVar[str] = "oldest"

    def __init__(self, subpartitions: int) -> None:
        self.last = [-1] * subpartitions

    def key(self, sp: int) -> Callable[[tuple[int, int, Any]], Any]:
        """Sort key of a queue entry at subpartition `sp`: smaller issues first."""
        return _oldest

    def order(self, sp: int, entries: list[tuple[int, int, Any]]) -> list[tuple[int, int, Any]]:
        return sorted(entries, key=self.key(sp))

    def issued(self, sp: int, entry: tuple[int, int, Any]) -> None:
        self.last[sp] = entry[0]


class GreedyThenOldest(IssuePolicy):
    """GTO: keep issuing from the group that issued last; when it stalls, fall back to the oldest."""

    name = "gto"

    def key(self, sp: int) -> Callable[[tuple[int, int, Any]], Any]:
        last = self.last[sp]
        return lambda e: (e[0] != last, e[0], e[1])


class RoundRobin(IssuePolicy):
    """RR: rotate priority among groups, starting after the group that issued last."""

    name = "rr"

    def key(self, sp: int) -> Callable[[tuple[int, int, Any]], Any]:
        last = self.last[sp]
        return lambda e: (e[0] <= last, e[0], e[1])


POLICIES: dict[str, type[IssuePolicy]] = {p.name: p for p in (GreedyThenOldest, RoundRobin, IssuePolicy)}


def get_policy(name: str) -> type[IssuePolicy]:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown issue policy {name!r}; known: {', '.join(POLICIES)}") from None
