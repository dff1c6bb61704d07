"""The per-SM L1 (torchsim.sim.l1.L1Cache) is an exact LRU over lines, whatever path an access takes (all hits,
a tile of fresh lines, a mix, an observer listening): checked against a one-line-at-a-time reference."""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Hashable

import pytest

from torchsim.sim.l1 import L1Cache


class Reference:
    """Textbook LRU: each line in turn hits (moves to the young end) or is allocated, evicting the oldest."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.lines: OrderedDict[Hashable, int] = OrderedDict()
        self.events: list[tuple[object, ...]] = []

    def access(self, lines: tuple[Hashable, ...], owner: int, t: int) -> int:
        missed = 0
        for ln in lines:
            if ln in self.lines:
                self.lines.move_to_end(ln)
                continue
            missed += 1
            self.events.append(("miss", owner, ln, t))
            self.lines[ln] = owner
            if len(self.lines) > self.capacity:
                old, who = self.lines.popitem(last=False)
                self.events.append(("evict", who, old))
        return missed


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []

    def l1_miss(self, owner: int, line: Hashable, t: int) -> None:
        self.events.append(("miss", owner, line, t))

    def l1_evict(self, owner: int, line: Hashable) -> None:
        self.events.append(("evict", owner, line))


@pytest.mark.parametrize("observed", [False, True], ids=["plain", "observed"])
def test_l1_is_an_exact_lru_on_random_accesses(observed: bool) -> None:
    rng = random.Random(11)
    for _ in range(60):
        cap = rng.choice([1, 3, 16, 64])
        rec = Recorder() if observed else None
        l1, ref = L1Cache(cap * 128, observer=rec), Reference(cap)
        for t in range(150):
            lo, n = rng.randint(0, 4 * cap), rng.randint(1, 3 * cap)
            if rng.random() < 0.5:  # a tile's distinct, consecutive lines
                lines: tuple[Hashable, ...] = tuple(range(lo, lo + n))
            else:  # scattered lines, repeats included
                lines = tuple(rng.randint(lo, lo + 2 * cap) for _ in range(n))
            owner = rng.randint(0, 7)
            assert l1.access(lines, owner, t) == ref.access(lines, owner, t)
            assert list(l1.lines.items()) == list(ref.lines.items())  # the same lines, owners and LRU order
        if rec is not None:
            assert rec.events == ref.events
