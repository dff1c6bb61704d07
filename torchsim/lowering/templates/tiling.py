"""Tile schedules: which output tiles (and K slices) each CTA computes, grouped into CTA classes.

A work unit is one output tile (or one K slice of it under split-K). Non-persistent kernels launch one CTA
per unit; persistent kernels launch one CTA per SM that walks units with a grid stride. CTAs that walk the
same number of units with the same K lengths share one template (a CTA class).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np


class WorkUnit(NamedTuple):  # a tuple: a batch of 10^6 tiles lists 10^6 of them
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
    slices = [(s * per, min(per, kt_total - s * per)) for s in range(split_k) if kt_total - s * per > 0]
    groups = [range(g0, min(mt, g0 + raster_group)) for g0 in range(0, mt, raster_group)]
    units: list[WorkUnit] = []
    add = units.append
    for b in range(batch):
        mo, no = b * mt, b * nt
        for rows in groups:
            for j in range(nt):
                nb = j if shared_b else no + j
                for i in rows:
                    for k0, kt in slices:
                        add(WorkUnit(mo + i, no + j, nb, k0, kt, i % b_split))
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
