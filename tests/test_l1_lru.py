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


def _expanded(l1: L1Cache, tile_lines: dict[Hashable, tuple[Hashable, ...]]) -> list[Hashable]:
    """The L1's content in LRU order, each whole-tile entry written out as its present (youngest) lines."""
    out: list[Hashable] = []
    for key, v in l1.lines.items():
        out.extend(tile_lines[key][len(tile_lines[key]) - v[0]:] if isinstance(v, list) else [key])
    return out


@pytest.mark.parametrize("seed", range(4))
def test_whole_tile_entries_behave_as_their_lines(seed: int) -> None:
    """`access_tile` on tiles of a tensor read only in whole tiles, mixed with other tensors' lines, gives the
    misses and the LRU content (order included) of the same lines one at a time."""
    rng = random.Random(seed)
    for _ in range(40):
        cap = rng.choice([1, 4, 16, 64, 200])
        size = rng.choice([1, 3, 8, 16, 70])  # lines of one tile, up to past the capacity
        tiles = {("T", i): tuple(("T-line", i, x) for x in range(size)) for i in range(rng.randint(1, 12))}
        l1, ref = L1Cache(cap * 128), Reference(cap)
        for t in range(200):
            if rng.random() < 0.6:
                key = rng.choice(list(tiles))
                got, want = l1.access_tile(key, size), ref.access(tiles[key], 0, t)
            else:  # another tensor's lines: fresh runs, hits and mixes
                lo = rng.randint(0, 2 * cap)
                lines = tuple(range(lo, lo + rng.randint(1, 2 * cap)))
                got, want = l1.access(lines, 0, t), ref.access(lines, 0, t)
            assert got == want, (cap, size, t)
            assert _expanded(l1, tiles) == list(ref.lines), (cap, size, t)
            assert l1.count == len(ref.lines) <= cap
        assert l1.misses == sum(1 for e in ref.events if e[0] == "miss")


def test_tile_granular_tensors() -> None:
    import numpy as np

    from torchsim.sim.l1 import tile_granular

    def at(*rows: tuple[int, ...]) -> object:
        return lambda: np.array(rows)

    reads = [("X", (8, 4096), 2.0, 2, None), ("E", (8192,), 2.0, 1, None),
             ("H", (4, 96), 1.0, 2, None),  # a row of 96 B shares lines with the next tile
             ("Q", (4, 128), 0.5, 2, None),  # 64 B rows (FP4)
             ("K", (64, 128), 2.0, 3, None),  # a third coordinate the lines ignore
             ("R", (6, 4096), 2.0, 2, at((0, 0), (1, 0))), ("R", (4, 4096), 2.0, 2, at((3, 0))),  # tail rows 12..15
             ("S", (6, 4096), 2.0, 2, at((0, 0), (1, 0))), ("S", (4, 4096), 2.0, 2, at((2, 0)))]  # rows 8..11 overlap
    assert tile_granular(reads) == {("X", (8, 4096)): 8 * 64, ("E", (8192,)): 128, ("R", (6, 4096)): 6 * 64,
                                    ("R", (4, 4096)): 4 * 64}
