"""The Tensix memory path the engine calls for NOC_READ / NOC_WRITE nodes: DRAM pages spread over banks,
multicast of shared blocks along rows or columns of the core grid, all on one NocModel.

Sits between torchsim.sim (which calls `access` per memory node) and noc.py. A template describes each memory
node in its graph's `attrs["noc"]` (see `NodeRoute`); the CTA parameters `cx`, `cy` place the CTA on a core.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from torchsim.hwmodels.tensix.noc import NocId, NocModel, Rect
from torchsim.hwmodels.tensix.spec import XY, TensixSpec

MCAST_AXES = ("none", "row", "col", "all")
SOURCES = ("dram", "l1")  # where a node's bytes live: interleaved/sharded DRAM, or another core's L1


@dataclass(frozen=True, slots=True)
class NodeRoute:
    """How one memory node moves its bytes. Stored by templates as a dict in `TileGraph.attrs["noc"]`.

    `pages_w`: width of the DRAM tensor in pages (tiles); `block`: the node's tile block (rows, cols) in pages,
    placed by the node's tile coordinates. `mcast`: the node's data is read from DRAM by the first core of its
    row/column/grid and multicast to the others (tt-metal's in0/in1 senders); "none": each core reads its own.
    `src` "l1": the bytes live in the L1 of core `peer` (logical x, y; a sharded activation): a read fetches
    (or, with `mcast`, receives the multicast of) them from there, a write sends them there, no DRAM is touched.
    `bank_of_cta`: the DRAM tensor is sharded by bank and the CTA reads its own bank (CTA parameter `bank`).
    """

    node: int
    noc: int
    mcast: str
    page_bytes: float
    pages_w: int
    block: tuple[int, int]
    src: str = "dram"
    peer: tuple[int, int] = (0, 0)
    bank_of_cta: bool = False

    @staticmethod
    def parse(d: dict[str, Any]) -> NodeRoute:
        peer = d.get("peer", (0, 0))
        r = NodeRoute(int(d["node"]), int(d.get("noc", 0)), str(d.get("mcast", "none")), float(d["page_bytes"]),
                      int(d["pages_w"]), (int(d["block"][0]), int(d["block"][1])), str(d.get("src", "dram")),
                      (int(peer[0]), int(peer[1])), bool(d.get("bank_of_cta", False)))
        if r.mcast not in MCAST_AXES:
            raise ValueError(f"memory node {r.node}: mcast {r.mcast!r} is not one of {MCAST_AXES}")
        if r.src not in SOURCES:
            raise ValueError(f"memory node {r.node}: src {r.src!r} is not one of {SOURCES}")
        return r


class TensixMemory:
    """Serves a kernel's memory nodes on a fresh NocModel; keeps DRAM bytes and busy statistics."""

    def __init__(self, hw: TensixSpec, kernel: Any) -> None:
        self.hw = hw
        self.noc = NocModel(hw)
        self.banks = int(hw.dram_banks)
        self.grid = tuple(kernel.attrs.get("grid", hw.grid))
        cols = sorted({x for x, _ in hw.worker_xy})
        rows = sorted({y for _, y in hw.worker_xy})
        gx, gy = self.grid
        if gx > len(cols) or gy > len(rows):
            raise ValueError(f"kernel {kernel.name!r}: grid {gx}x{gy} is larger than {hw.name}'s compute grid "
                             f"{len(cols)}x{len(rows)}")
        self.cols, self.rows = cols[:gx], rows[:gy]
        self.routes: list[dict[int, NodeRoute]] = []
        self.pidx: list[tuple[int, int]] = []
        self.bank_idx: list[int] = []
        for c in kernel.classes:
            self.routes.append({r.node: r for r in map(NodeRoute.parse, c.graph.attrs.get("noc", []))})
            names = list(c.param_names)
            self.pidx.append((names.index("cx") if "cx" in names else -1, names.index("cy") if "cy" in names else -1))
            self.bank_idx.append(names.index("bank") if "bank" in names else -1)
        self.shared: dict[tuple[Any, ...], float] = {}
        self.dram_bytes = 0.0
        self.bank_rate = float(hw.dram_bank_bytes_per_s) / hw.clock_hz_value

    def core(self, cls: int, params: np.ndarray, sm: int) -> tuple[int, int]:
        ix, iy = self.pidx[cls]
        gx = self.grid[0]
        cx = int(params[ix]) if ix >= 0 else sm % gx
        cy = int(params[iy]) if iy >= 0 else sm // gx
        return cx, cy

    def xy(self, cx: int, cy: int) -> XY:
        return self.cols[cx], self.rows[cy]

    def _bank_bytes(self, route: NodeRoute, key: tuple[Any, ...] | None, nbytes: float) -> dict[int, float]:
        """Bytes per DRAM bank of the node's block (pages interleaved round-robin over the banks)."""
        bh, bw = route.block
        c0, c1 = (int(key[1]), int(key[2])) if key is not None and len(key) >= 3 else (0, 0)
        r = np.arange(c0 * bh, c0 * bh + bh)[:, None]
        c = np.arange(c1 * bw, c1 * bw + bw)[None, :]
        counts = np.bincount(((r * route.pages_w + c) % self.banks).ravel(), minlength=self.banks)
        scale = nbytes / max(1.0, float(counts.sum()))
        return {int(b): float(n) * scale for b, n in enumerate(counts) if n}

    def access(self, t: int, sm: int, cls: int, j: int, params: np.ndarray, key: tuple[Any, ...] | None,
               nbytes: float, read: bool) -> tuple[float, float]:
        """Serve node `j` of the CTA on `sm` at cycle `t`; returns (completion cycle, zero-load cycles)."""
        route = self.routes[cls].get(j)
        if route is None:
            raise ValueError(f"memory node {j} of CTA class {cls} has no NoC route in its graph's attrs['noc']")
        noc = NocId(route.noc)
        cx, cy = self.core(cls, params, sm)
        me = self.xy(cx, cy)
        if route.src == "l1":
            return self._l1(t, cls, j, key, route, me, nbytes, read, noc)
        if route.bank_of_cta:
            ib = self.bank_idx[cls]
            if ib < 0:
                raise ValueError(f"memory node {j} of CTA class {cls} reads its CTA's DRAM bank, but the class has "
                                 "no 'bank' parameter")
            per_bank = {int(params[ib]) % self.banks: nbytes}
        else:
            per_bank = self._bank_bytes(route, key, nbytes)
        ideal = 2 * self.noc.latency(me, self.hw.dram_bank_xy[0], noc) + nbytes / (self.bank_rate * len(per_bank))
        if not read:
            self.dram_bytes += nbytes
            done = max(self.noc.write(t, me, self.hw.dram_bank_xy[b], n, noc, bank=b) for b, n in per_bank.items())
            return done, ideal
        if route.mcast == "none":
            self.dram_bytes += nbytes
            done = max(self.noc.read(t, me, self.hw.dram_bank_xy[b], n, noc, bank=b) for b, n in per_bank.items())
            return done, ideal
        gx, gy = self.grid
        sx, sy, dests = {
            "row": (0, cy, [(x, cy) for x in range(1, gx)]),
            "col": (cx, 0, [(cx, y) for y in range(1, gy)]),
            "all": (0, 0, [(x, y) for y in range(gy) for x in range(gx) if (x, y) != (0, 0)]),
        }[route.mcast]
        memo = (cls, j, key, sx, sy)
        if memo not in self.shared:  # the sender reads once and multicasts; the other cores receive
            sender = self.xy(sx, sy)
            self.dram_bytes += nbytes
            got = max(self.noc.read(t, sender, self.hw.dram_bank_xy[b], n, noc, bank=b) for b, n in per_bank.items())
            if dests:
                xys = [self.xy(x, y) for x, y in dests]
                rect = Rect(min(x for x, _ in xys), min(y for _, y in xys), max(x for x, _ in xys),
                            max(y for _, y in xys))
                got = max(got, self.noc.multicast(got, sender, xys, rect, nbytes, noc))
            self.shared[memo] = got
        return max(self.shared[memo], t + 2 * self.noc.niu), ideal

    def _l1(self, t: int, cls: int, j: int, key: tuple[Any, ...] | None, route: NodeRoute, me: XY, nbytes: float,
            read: bool, noc: NocId) -> tuple[float, float]:
        """A transfer to or from core `route.peer`'s L1; a multicast read is sent once by the peer to the grid."""
        peer = self.xy(*route.peer)
        ideal = 2 * self.noc.latency(me, peer, noc) + nbytes / self.noc.niu_rate
        if not read:
            return self.noc.write(t, me, peer, nbytes, noc), ideal
        if route.mcast == "none":
            return self.noc.read(t, me, peer, nbytes, noc), ideal
        memo = (cls, j, key, route.peer)
        if memo not in self.shared:  # the first core ready for the block triggers the sender's multicast
            dests = [self.xy(x, y) for y in range(self.grid[1]) for x in range(self.grid[0])
                     if self.xy(x, y) != peer]
            rect = Rect(min(x for x, _ in dests), min(y for _, y in dests), max(x for x, _ in dests),
                        max(y for _, y in dests))
            self.shared[memo] = self.noc.multicast(t, peer, dests, rect, nbytes, noc)
        return max(self.shared[memo], t + 2 * self.noc.niu), ideal

    def busy(self, cycles: int) -> dict[str, float]:
        links = self.noc.link_busy()
        return {"noc": float(links.max()) / cycles if links.size else 0.0,
                "dram": float(self.noc.bank_busy().sum()) / (self.banks * cycles)}
