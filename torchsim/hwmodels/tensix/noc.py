"""The Tensix NoC: two unidirectional wrapping 2D tori routed in opposite directions, with DRAM banks behind them.

Resource model of torchsim.hwmodels.tensix used by the engine for NOC_READ/NOC_WRITE nodes (and by the DRAM
and NoC benchmarks). Latency = NIU cost + per-hop cost x hops along the NoC's own direction; bandwidth = flits
occupying every link (and NIU, DRAM bank) they cross, so transfers sharing a link slow each other.
Routes follow tt-isa-documentation BlackholeA0/NoC/RoutingPaths.md ('Unicast routes', 'Broadcast routes, X as
major axis'): NoC0 goes right (+x) then down (+y); NoC1 goes up (-y) then left (-x).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache

import numpy as np

from torchsim.hwmodels.tensix.spec import XY, TensixSpec


class NocId(IntEnum):
    NOC0 = 0  # +x then +y
    NOC1 = 1  # -y then -x


@dataclass(frozen=True, slots=True)
class Rect:
    """A multicast destination: NoC coordinates x_lo..x_hi, y_lo..y_hi inclusive (non-Tensix nodes opt out)."""

    x_lo: int
    y_lo: int
    x_hi: int
    y_hi: int

    def __post_init__(self) -> None:
        if self.x_lo > self.x_hi or self.y_lo > self.y_hi:
            raise ValueError(f"multicast rectangle {self} is empty: need x_lo <= x_hi and y_lo <= y_hi")


class NocTopology:
    """Routing on an nx x ny torus. Link id = ((noc * ny + y) * nx + x) * 2 + axis (0: x-link, 1: y-link)."""

    def __init__(self, nx: int, ny: int) -> None:
        self.nx, self.ny = nx, ny
        self.num_links = 2 * 2 * nx * ny

    def _link(self, noc: int, x: int, y: int, axis: int) -> int:
        return ((noc * self.ny + y) * self.nx + x) * 2 + axis

    def _steps(self, noc: NocId) -> tuple[int, int]:
        return (1, 1) if noc is NocId.NOC0 else (-1, -1)

    def hops(self, src: XY, dst: XY, noc: NocId) -> int:
        """Router-to-router hops along `noc`'s direction (the wrong NoC goes the long way round)."""
        d = 1 if noc is NocId.NOC0 else -1
        return (d * (dst[0] - src[0])) % self.nx + (d * (dst[1] - src[1])) % self.ny

    def route(self, src: XY, dst: XY, noc: NocId) -> tuple[int, ...]:
        """Links a unicast crosses, in order."""
        return _route(self.nx, self.ny, src, dst, int(noc))

    def multicast_tree(self, src: XY, rect: Rect, noc: NocId) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(links, depth of each link in hops from the source) of an X-major broadcast to `rect`."""
        return _tree(self.nx, self.ny, src, rect, int(noc))


@lru_cache(maxsize=65536)
def _route(nx: int, ny: int, src: XY, dst: XY, noc: int) -> tuple[int, ...]:
    topo = NocTopology(nx, ny)
    d = 1 if noc == 0 else -1
    x, y = src
    links: list[int] = []
    order = ((0, dst[0]), (1, dst[1])) if noc == 0 else ((1, dst[1]), (0, dst[0]))
    for axis, target in order:
        size = nx if axis == 0 else ny
        while (x if axis == 0 else y) != target:
            links.append(topo._link(noc, x, y, axis))
            if axis == 0:
                x = (x + d) % size
            else:
                y = (y + d) % size
    return tuple(links)


@lru_cache(maxsize=4096)
def _tree(nx: int, ny: int, src: XY, rect: Rect, noc: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    topo = NocTopology(nx, ny)
    d = 1 if noc == 0 else -1
    cols = range(rect.x_lo, rect.x_hi + 1)
    rows = range(rect.y_lo, rect.y_hi + 1)
    cdist = {c: (d * (c - src[0])) % nx for c in cols}
    rdist = {r: (d * (r - src[1])) % ny for r in rows}
    first_c = min(cols, key=lambda c: cdist[c])
    width = max(cdist.values()) - cdist[first_c]
    links: list[int] = []
    depth: list[int] = []
    x = src[0]
    for k in range(cdist[first_c]):  # major axis to the rectangle's first column
        links.append(topo._link(noc, x, src[1], 0))
        depth.append(k)
        x = (x + d) % nx
    base = cdist[first_c]
    y = src[1]
    for k in range(max(rdist.values())):  # minor axis down the first column
        links.append(topo._link(noc, first_c, y, 1))
        depth.append(base + k)
        y = (y + d) % ny
    for r in rows:  # major axis again along each row of the rectangle
        x = first_c
        for k in range(width):
            links.append(topo._link(noc, x, r, 0))
            depth.append(base + rdist[r] + k)
            x = (x + d) % nx
    return tuple(links), tuple(depth)


class NocModel:
    """Links, NIUs and DRAM banks as bandwidth servers with `free_at` times; transfers reserve their whole path.

    A transfer cuts through its path: server i is entered its wire latency after server i-1 (or later, when
    busy) and is busy for bytes / rate_i (flits, headers included, on links); it ends when its tail leaves
    the last server.
    Example:
        >>> from torchsim.hwmodels.tensix.profiles import wormhole_n150
        >>> noc = NocModel(wormhole_n150())
        >>> noc.latency((1, 1), (3, 1), NocId.NOC0)  # 2 hops: 5 + 2 x 9 + 5 cycles
        28.0
        >>> noc.latency((3, 1), (1, 1), NocId.NOC0)  # the wrong way round the 10-wide ring: 8 hops
        82.0
    """

    def __init__(self, hw: TensixSpec) -> None:
        self.hw = hw
        nx, ny = int(hw.noc_grid_x), int(hw.noc_grid_y)
        self.topo = NocTopology(nx, ny)
        self.flit = float(hw.noc_flit_bytes)
        self.packet = float(hw.noc_max_packet_bytes)
        self.hop = float(hw.noc_hop_cycles)
        self.niu = float(hw.noc_niu_cycles)
        self.niu_rate = float(hw.noc_niu_bytes_per_clk)
        self.min_txn = float(hw.noc_transaction_min_cycles)
        self.endpoint = float(hw.noc_read_endpoint_cycles)
        self.dram_latency = float(hw.dram_latency_cycles)
        self.bank_rate = float(hw.dram_bank_bytes_per_s) / hw.clock_hz_value
        self.nodes = nx * ny
        self._out0 = self.topo.num_links
        self._in0 = self._out0 + 2 * self.nodes
        self._bank0 = self._in0 + 2 * self.nodes
        n = self._bank0 + int(hw.dram_banks)
        self.free = np.zeros(n)
        self.busy = np.zeros(n)
        self.bytes_moved = 0.0

    # -- server ids ------------------------------------------------------------------------------------
    def _niu_out(self, xy: XY, noc: NocId) -> int:
        return self._out0 + int(noc) * self.nodes + xy[1] * self.topo.nx + xy[0]

    def _niu_in(self, xy: XY, noc: NocId) -> int:
        return self._in0 + int(noc) * self.nodes + xy[1] * self.topo.nx + xy[0]

    def _bank(self, bank: int) -> int:
        return self._bank0 + bank

    def link_bytes(self, nbytes: float) -> float:
        """Bytes a transfer occupies on a link: its data flits plus one header flit per packet."""
        packets = max(1.0, np.ceil(nbytes / self.packet))
        return (np.ceil(nbytes / self.flit) + packets) * self.flit

    # -- transfers ---------------------------------------------------------------------------------------
    def _chain(self, t: float, ids: list[int], offsets: list[float], occ: list[float]) -> float:
        """Push one transfer through servers in path order; returns when its tail leaves the last one.

        Server i can start no earlier than the previous one plus the wire latency between them, nor before it
        is free; it is then busy for occ[i]. The tail leaves server i at max(previous tail + step, start + occ).
        """
        free = self.free
        busy = self.busy
        start = tail = float(t)
        prev_off = 0.0
        bank0 = self._bank0
        for sid, off, dur in zip(ids, offsets, occ):
            step = off - prev_off
            prev_off = off
            begin = start + step
            booked = float(free[sid])
            if booked > begin:
                begin = booked
            if sid >= bank0:
                # A DRAM controller serves the requests it holds and never idles for one still on its way: a
                # transfer held up upstream books its bank slot from its zero-load arrival (t + off), so the
                # bank's one free-at time does not leave a hole that a transfer issued later but arriving
                # earlier could not fill. Its own tail follows its real arrival.
                free[sid] = max(booked, t + off) + dur
            else:
                free[sid] = begin + dur
            busy[sid] += dur
            tail = max(tail + step, begin + dur)
            start = begin
        return tail

    def latency(self, src: XY, dst: XY, noc: NocId) -> float:
        """Zero-load head latency of a write: NIU to router + hops x per-hop + router to NIU."""
        return 2 * self.niu + self.hop * self.topo.hops(src, dst, noc)

    def _path(self, src: XY, dst: XY, noc: NocId, wire: float, nbytes: float,
              first_off: float) -> tuple[list[int], list[float], list[float]]:
        links = self.topo.route(src, dst, noc)
        ids = [*links, self._niu_in(dst, noc)]
        offs = [first_off + self.niu + self.hop * k for k in range(len(links))]
        offs.append(first_off + 2 * self.niu + self.hop * len(links))
        occ = [wire / self.flit] * len(links) + [nbytes / self.niu_rate]
        return ids, offs, occ

    def write(self, t: float, src: XY, dst: XY, nbytes: float, noc: NocId, bank: int | None = None) -> float:
        """Unicast write of `nbytes` from `src` to `dst` (DRAM bank `bank` behind endpoint `dst`, if given);
        returns when the last byte has landed."""
        ids, offs, occ = self._path(src, dst, noc, self.link_bytes(nbytes), nbytes, 0.0)
        if bank is not None:
            ids.append(self._bank(bank))
            offs.append(offs[-1])
            occ.append(nbytes / self.bank_rate)
        issue = max(self.min_txn, nbytes / self.niu_rate)
        self.bytes_moved += nbytes
        return self._chain(t, [self._niu_out(src, noc), *ids], [0.0, *offs], [issue, *occ])

    def multicast(self, t: float, src: XY, dests: list[XY], rect: Rect, nbytes: float, noc: NocId) -> float:
        """Write `nbytes` once into every core of `dests` (inside `rect`); returns when the last one has it.

        The tree's links are reserved at their depth; the transfer waits for the busiest of them.
        """
        links, depth = self.topo.multicast_tree(src, rect, noc)
        wire = self.link_bytes(nbytes) / self.flit
        far = max((self.topo.hops(src, xy, noc) for xy in dests), default=0)
        out = self._niu_out(src, noc)
        ids = [out, *links, *(self._niu_in(xy, noc) for xy in dests)]
        offs = [0.0, *(self.niu + self.hop * k for k in depth),
                *(2 * self.niu + self.hop * self.topo.hops(src, xy, noc) for xy in dests)]
        occ = [max(self.min_txn, nbytes / self.niu_rate), *([wire] * len(links)),
               *([nbytes / self.niu_rate] * len(dests))]
        idx = np.asarray(ids, dtype=np.int64)
        off = np.asarray(offs)
        start = max(float(t), float(np.max(self.free[idx] - off)))
        self.free[idx] = start + off + np.asarray(occ)
        self.busy[idx] += np.asarray(occ)
        self.bytes_moved += nbytes * len(dests)
        return start + 2 * self.niu + self.hop * far + max(occ[1:])

    def read(self, t: float, requester: XY, target: XY, nbytes: float, noc: NocId, bank: int | None = None) -> float:
        """Read `nbytes` from `target` (an L1, or DRAM bank `bank` behind endpoint `target`) into `requester`.

        The request (one flit) goes requester -> target on `noc`; the data comes back target -> requester on
        the same NoC, so a round trip always covers the full ring in each dimension it moves along.
        """
        req = self.latency(requester, target, noc) + self.endpoint
        if bank is None:
            src_id, src_occ, data_off = self._niu_out(target, noc), nbytes / self.niu_rate, req
        else:
            src_id, src_occ, data_off = self._bank(bank), nbytes / self.bank_rate, req + self.dram_latency
        ids, offs, occ = self._path(target, requester, noc, self.link_bytes(nbytes), nbytes, data_off)
        self.bytes_moved += nbytes
        return self._chain(t, [self._niu_out(requester, noc), src_id, *ids], [0.0, req, *offs],
                           [self.min_txn, src_occ, *occ])

    # -- statistics ------------------------------------------------------------------------------------
    def link_busy(self) -> np.ndarray:
        return self.busy[: self.topo.num_links]

    def bank_busy(self) -> np.ndarray:
        return self.busy[self._bank0:]
