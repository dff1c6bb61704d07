"""Tile schedules: which output tiles (and K slices) each CTA computes, grouped into CTA classes.

A work unit is one output tile (or one K slice of it under split-K). Non-persistent kernels launch one CTA
per unit; persistent kernels launch one CTA per SM that walks units with a grid stride. CTAs that walk the
same number of units with the same K lengths share one template (a CTA class).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class WorkUnit:
    m: int  # global M block (batch folded in)
    n: int  # global N block of the output
    nb: int  # block index of B's tensor (batch folded in for batched B)
    k0: int  # first K block
    kt: int  # K blocks
    rank: int  # position in the group of CTAs that share a B tile


def work_units(batch: int, m: int, n: int, k: int, bm: int, bn: int, bk: int, split_k: int, b_split: int,
               raster_group: int, shared_b: bool = False) -> list[WorkUnit]:
    """Output tiles in rasterised order (groups of `raster_group` M tiles walked column by column)."""
    mt, nt, kt_total = math.ceil(m / bm), math.ceil(n / bn), math.ceil(k / bk)
    per = math.ceil(kt_total / split_k)
    units = []
    for b in range(batch):
        for g0 in range(0, mt, raster_group):
            for j in range(nt):
                for i in range(g0, min(mt, g0 + raster_group)):
                    for s in range(split_k):
                        k0 = s * per
                        kt = min(per, kt_total - k0)
                        if kt > 0:
                            units.append(WorkUnit(b * mt + i, b * nt + j, j if shared_b else b * nt + j,
                                                  k0, kt, i % b_split))
    return units


@dataclass(frozen=True)
class ClassPlan:
    kts: tuple[int, ...]  # K blocks of each unit the CTA walks
    params: np.ndarray  # [ctas, 4 * len(kts)]: m, n, nb, k0, rank per unit
    names: tuple[str, ...]


def cta_classes(units: list[WorkUnit], grid: int | None) -> list[ClassPlan]:
    """Assign units to CTAs (grid-stride when `grid` is set) and group CTAs of equal shape into classes."""
    if grid is None or grid >= len(units):
        per_cta = [[u] for u in units]
    else:
        per_cta = [units[c::grid] for c in range(grid)]
    groups: dict[tuple[int, ...], list[list[WorkUnit]]] = {}
    for us in per_cta:
        groups.setdefault(tuple(u.kt for u in us), []).append(us)
    plans = []
    for kts, members in groups.items():
        names = tuple(f"{f}{t}" for t in range(len(kts)) for f in ("m", "n", "nb", "k", "r"))
        rows = np.array([[v for u in us for v in (u.m, u.n, u.nb, u.k0, u.rank)] for us in members],
                        dtype=np.int64).reshape(len(members), len(names))
        plans.append(ClassPlan(kts, rows, names))
    return plans
