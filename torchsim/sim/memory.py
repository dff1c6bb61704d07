"""The global-memory path of the engine: a node's front-end pipe, then L1 (LDG), L2 and DRAM, or a profile's own
memory system (Tensix: NoC + DRAM banks).

A mixin of torchsim.sim.engine._Engine, called once per global read/write node; the resource models are in
torchsim.sim.resources, the L1 in torchsim.sim.l1.
"""

from __future__ import annotations

import math
from typing import Any

from torchsim.sim.l1 import L1Cache, tile_lines
from torchsim.sim.resources import BandwidthServer, LruCache, Pipeline
from torchsim.sim.state import CtaState

# how the engine serves a node (precomputed per node of a CTA class)
K_SYNC, K_PIPE, K_READ, K_WRITE, K_LDG, K_REMOTE = 0, 1, 2, 3, 4, 5


class MemoryMixin:
    """Global reads and writes; the engine provides the attributes used here."""

    kernel: Any
    memsys: Any
    stalls: list[float]
    l1: list[L1Cache] | None
    l1_lat: int
    l1_lines: dict[tuple[Any, ...], tuple[Any, ...]]
    l2: LruCache
    l2srv: BandwidthServer
    dram: BandwidthServer
    l2_lat: int
    dram_lat: int

    def _memory(self, fe: Pipeline, cta: CtaState, j: int, t: int, kind: int, occ: int, nbytes: float,
                extra: int) -> tuple[int, int]:
        """Serve global read/write node `j` of `cta` arriving at `t` through front-end `fe` (`occ` cycles for
        `nbytes`; `extra` = TMA latency for TMA nodes); returns (completion, service start)."""
        _, fe_end = fe.occupy(t, occ, nbytes)
        read = kind != K_WRITE
        if self.memsys is not None:
            done_m, ideal_m = self.memsys.access(t, cta.sm, cta.cls, j, cta.params, cta.keys.get(j), nbytes, read)
            done_i = math.ceil(max(fe_end, done_m))
            queue = done_i - t - ideal_m
            if queue > 0:
                self.stalls[5] += queue
            return done_i, t + max(0, int(queue))
        keys = cta.keys
        if kind == K_LDG and j in keys:
            lines = self._lines(cta, j)
            if lines:
                assert self.l1 is not None
                missed = self.l1[cta.sm].access(lines, cta.base + cta.prep.group[j], t)
                if not missed:
                    return fe_end + self.l1_lat, t
                nbytes = nbytes * missed / len(lines)  # only the missing lines go on to L2
                occ = fe.occupancy(nbytes)
        key = keys.get(j)
        if key is None:
            key = (cta.prep.name, j, cta.seq)
        hit = self.l2.access(key, nbytes)
        srv = self.l2srv
        s2 = srv.free_at
        if t > s2:
            s2 = t
        dur = nbytes / srv.bytes_per_cycle
        l2_end = srv.free_at = s2 + dur
        srv.bytes += nbytes
        srv.busy_cycles += dur
        if read:
            if hit:
                done = max(fe_end, l2_end) + self.l2_lat + extra
                ideal = self.l2_lat + extra + occ
            else:
                done = max(fe_end, l2_end, self.dram.serve(t, nbytes)) + self.dram_lat + extra
                ideal = self.dram_lat + extra + occ
        else:
            self.dram.serve(t, nbytes)  # write-back traffic; the store completes at L2
            done = max(fe_end, l2_end) + self.l2_lat + extra
            ideal = self.l2_lat + extra + occ
        done_i = math.ceil(done)
        queue = done_i - t - ideal
        if queue > 0:
            self.stalls[5] += queue
            return done_i, t + queue
        return done_i, t

    def _lines(self, cta: CtaState, j: int) -> tuple[Any, ...]:
        """The L1 lines node `j` of `cta` reads (memoised by class, node and tile coordinates)."""
        key = cta.keys[j]
        memo = (cta.cls, j, key)
        lines = self.l1_lines.get(memo)
        if lines is None:
            g = self.kernel.classes[cta.cls].graph
            tile = g.tiles[int(g.tile[j])]
            lines = self.l1_lines[memo] = tile_lines(key, tile.shape, tile.dtype.nbytes)
        return lines
