"""The parts of the engine's global-memory path outside its event loop: an LDG's lookup in the per-SM L1, and a
profile's own memory system (Tensix: NoC + DRAM banks) in place of L2 and DRAM.

A mixin of torchsim.sim.engine._Engine, called by the event loop (torchsim.sim.loop, which serves L2 and DRAM
itself) for a node that reads through the L1 or a profile's own memory system; the resource models are in
torchsim.sim.resources, the L1 in torchsim.sim.l1.
"""

from __future__ import annotations

import math
from typing import Any

from torchsim.sim.l1 import L1Cache, tile_line_ids
from torchsim.sim.resources import DramServer, Pipeline
from torchsim.sim.state import CtaState

# how the engine serves a node (precomputed per node of a CTA class)
K_SYNC, K_PIPE, K_READ, K_WRITE, K_LDG, K_REMOTE = 0, 1, 2, 3, 4, 5


def dram_server(hw: Any, clk: float) -> DramServer:
    """The DRAM server of `hw` at clock `clk`. `dram_bytes_per_s` is the sustained ceiling: the better of the
    profile's read-only and write-only stream figures runs at it, the other kind and the read/write mix (the copy
    figure) at their measured ratios to it, so a what-if or calibration that moves `dram_bytes_per_s` moves every
    kind with it and no traffic mix beats the sustained figure (the roofline). A profile without stream figures
    serves every byte at the sustained figure; the mix window is the profile's DRAM latency (requests that close
    are in the memory system together)."""
    s = float(hw.dram_bytes_per_s_value) / clk
    kinds = [getattr(hw, f, None) for f in ("dram_read_bytes_per_s", "dram_write_bytes_per_s",
                                            "dram_copy_bytes_per_s")]
    if any(q is None for q in kinds):
        return DramServer("dram", s, s, s, 1.0)
    rd, wr, cp = (float(q.value) for q in kinds)  # type: ignore[union-attr]
    ref = max(rd, wr)
    lat = getattr(hw, "dram_latency_cycles", None)
    return DramServer("dram", s * rd / ref, s * wr / ref, s * cp / ref, float(lat.value) if lat is not None else 1.0)


_WHOLE_TILE = object()  # marks the L1 keys of whole tiles: never equal to a line


class MemoryMixin:
    """L1 lookups and a profile's memory system; the engine provides the attributes used here."""

    kernel: Any
    memsys: Any
    stalls: list[float]
    l1: list[L1Cache] | None
    l1_lines: dict[tuple[Any, ...], tuple[Any, ...]]
    l1_tensors: dict[Any, int]  # tensor -> its index in the L1's line ids
    l1_tile_lines: dict[tuple[int, int], tuple[int, tuple[int, ...]]]  # (class, LDG node) -> (lines, tile shape)

    def _memsys(self, cta: CtaState, j: int, t: int, fe_end: int, nbytes: float, read: bool) -> tuple[int, int]:
        """Serve global read/write node `j` of `cta`, arriving at `t` and through its front end at `fe_end`, on
        the profile's own memory system; returns (completion, service start)."""
        done_m, ideal_m = self.memsys.access(t, cta.sm, cta.cls, j, cta.params, cta.keys.get(j), nbytes, read)
        done_i = math.ceil(max(fe_end, done_m))
        queue = done_i - t - ideal_m
        if queue > 0:
            self.stalls[5] += queue
        return done_i, t + max(0, int(queue))

    def _l1_miss(self, fe: Pipeline, cta: CtaState, j: int, t: int, nbytes: float,
                 occ: int) -> tuple[float, int] | None:
        """LDG node `j` of `cta` (`nbytes`, `occ` cycles on front end `fe`) looks up its lines in its SM's L1:
        None when every line hits, else the bytes that go on to L2 (the missing lines' share) and their front-end
        occupancy (the event loop serves them on L2 and DRAM)."""
        if j not in cta.keys:
            return nbytes, occ
        assert self.l1 is not None
        whole = self.l1_tile_lines.get((cta.cls, j))
        if whole is not None:  # a tensor read only in whole tiles: one entry per tile (L1Cache.access_tile)
            n, shape = whole
            key = cta.keys[j]
            missed = self.l1[cta.sm].access_tile((_WHOLE_TILE, key[0], shape, key[1], key[-1]), n)
            if not missed:
                return None
            nbytes = nbytes * missed / n
            return nbytes, fe.occupancy(nbytes)
        lines = self._lines(cta, j)
        if not lines:
            return nbytes, occ
        missed = self.l1[cta.sm].access(lines, cta.base + cta.prep.group[j], t)
        if not missed:
            return None
        nbytes = nbytes * missed / len(lines)
        return nbytes, fe.occupancy(nbytes)

    def _lines(self, cta: CtaState, j: int) -> tuple[Any, ...]:
        """The L1 lines node `j` of `cta` reads (memoised by class, node and tile coordinates)."""
        key = cta.keys[j]
        memo = (cta.cls, j, key)
        lines = self.l1_lines.get(memo)
        if lines is None:
            g = self.kernel.classes[cta.cls].graph
            tile = g.tiles[int(g.tile[j])]
            ids = self.l1_tensors
            tid = ids.setdefault(key[0], len(ids))
            lines = self.l1_lines[memo] = tile_line_ids(key, tile.shape, tile.dtype.nbytes, tid)
        return lines
