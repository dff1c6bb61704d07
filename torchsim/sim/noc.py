"""SM-cluster network (Hopper DSMEM): remote shared-memory traffic between the CTAs of a thread-block cluster.

The engine (torchsim.sim.engine) places each cluster's CTAs on NoC nodes (`ClusterNoc.place`) and sends every
DSMEM node's bytes over `ClusterNoc.transfer`. Topologies (GPU-Tile-Sim §7 'cluster fusion'): a 16-node
crossbar like Hopper's GPC (uniform latency; output and input port per node) and a 4x4 mesh with the same
average latency (per-hop latency = crossbar latency / mean hop count) and the same total bandwidth (16 ports'
worth spread over 48 directed links), routed X then Y. Placement: `default` hands clusters the free nodes in
a topology-oblivious (scattered, fixed) order; `topology-aware` picks the most compact free block and orders
ranks along a snake so neighbouring ranks are neighbouring nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from torchsim.hwmodels.quantity import Quantity, assumed

HOPPER_DSMEM = ("assumed: order of published Hopper SM-to-SM (DSMEM) microbenchmarks (~180-cycle remote "
                "access, a few TB/s aggregate); not in facts.csv")


class Topology(Enum):
    CROSSBAR = "crossbar"
    MESH = "mesh"


class Placement(Enum):
    DEFAULT = "default"
    TOPOLOGY_AWARE = "topology-aware"


@dataclass(frozen=True)
class NocConfig:
    topology: Topology = Topology.CROSSBAR
    placement: Placement = Placement.DEFAULT
    nodes: int = 16  # SMs of one GPC (a cluster never spans GPCs)
    latency_cycles: Quantity = assumed(180, "cycles", HOPPER_DSMEM)
    port_bytes_per_clk: Quantity = assumed(32, "B/clk", HOPPER_DSMEM + "; per SM port")

    @property
    def side(self) -> int:
        s = int(round(self.nodes ** 0.5))
        if s * s != self.nodes:
            raise ValueError(f"a mesh needs a square node count, got {self.nodes}")
        return s


# a fixed topology-oblivious order: consecutive ranks land far apart on the 4x4 grid
_SCATTER16 = (0, 10, 5, 15, 2, 8, 7, 13, 1, 11, 4, 14, 3, 9, 6, 12)


class _Link:
    __slots__ = ("free_at", "bytes_per_clk", "busy")

    def __init__(self, bytes_per_clk: float) -> None:
        self.free_at = 0.0
        self.bytes_per_clk = bytes_per_clk
        self.busy = 0.0


class ClusterNoc:
    """Latency-bandwidth-queue model of the SM-cluster network of one GPC (nodes = SM index % nodes)."""

    def __init__(self, cfg: NocConfig) -> None:
        self.cfg = cfg
        n = cfg.nodes
        lat = float(cfg.latency_cycles.value)
        port = float(cfg.port_bytes_per_clk.value)
        self.links: dict[tuple[int, int], _Link] = {}
        if cfg.topology is Topology.CROSSBAR:
            self.hop_latency = lat / 2  # out port, then in port
            for i in range(n):
                self.links[(i, -1)] = _Link(port)  # output port of node i
                self.links[(-1, i)] = _Link(port)  # input port of node i
        else:
            side = cfg.side
            pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
            mean_hops = sum(self._hops(a, b) for a, b in pairs) / len(pairs)
            self.hop_latency = lat / mean_hops
            directed = [(a, b) for a in range(n) for b in range(n) if self._hops(a, b) == 1]
            per_link = port * n / len(directed)  # same total bandwidth as n ports
            for a, b in directed:
                self.links[(a, b)] = _Link(per_link)
            assert len(directed) == 4 * side * (side - 1)
        self.requests = 0
        self.residence = 0.0
        self.bytes = 0.0

    def _hops(self, a: int, b: int) -> int:
        s = self.cfg.side
        return abs(a // s - b // s) + abs(a % s - b % s)

    def route(self, src: int, dst: int) -> list[tuple[int, int]]:
        if self.cfg.topology is Topology.CROSSBAR:
            return [(src, -1), (-1, dst)]
        s = self.cfg.side
        path, (r, c) = [], divmod(src, s)
        tr, tc = divmod(dst, s)
        while c != tc:  # X first
            nc = c + (1 if tc > c else -1)
            path.append((r * s + c, r * s + nc))
            c = nc
        while r != tr:
            nr = r + (1 if tr > r else -1)
            path.append((r * s + c, nr * s + c))
            r = nr
        return path

    def transfer(self, t: int, src_sm: int, dst_sm: int, nbytes: float) -> int:
        """Send `nbytes` from `src_sm` to `dst_sm` at cycle `t`; returns the cycle the last byte lands."""
        n = self.cfg.nodes
        src, dst = src_sm % n, dst_sm % n
        arrive = float(t)
        if src != dst:
            for key in self.route(src, dst):  # cut-through: the head moves on after a hop, the tail follows
                link = self.links[key]
                start = max(arrive, link.free_at)
                dur = nbytes / link.bytes_per_clk
                link.free_at = start + dur
                link.busy += dur
                arrive = start + self.hop_latency
            arrive += nbytes / min(self.links[k].bytes_per_clk for k in self.route(src, dst))
        done = int(-(-arrive // 1))
        self.requests += 1
        self.residence += done - t
        self.bytes += nbytes
        return done

    @property
    def mean_residence_cycles(self) -> float:
        return self.residence / self.requests if self.requests else 0.0

    # -- placement --------------------------------------------------------------------------------------
    def place(self, free: list[int], size: int) -> list[int] | None:
        """Nodes (in rank order) for a cluster of `size` CTAs among the `free` nodes, or None if it cannot fit."""
        if len(free) < size:
            return None
        if self.cfg.placement is Placement.DEFAULT or self.cfg.topology is Topology.CROSSBAR:
            order = _SCATTER16 if self.cfg.nodes == 16 else tuple(range(self.cfg.nodes))
            pick = [x for x in order if x in set(free)][:size]
            return pick
        best: tuple[float, list[int]] | None = None
        s = self.cfg.side
        for h in range(1, s + 1):
            for w in range(1, s + 1):
                if h * w < size or h * w >= 2 * size and h * w > size + s:
                    continue
                for r0 in range(s - h + 1):
                    for c0 in range(s - w + 1):
                        snake = [(r0 + i) * s + (c0 + (j if i % 2 == 0 else w - 1 - j))
                                 for i in range(h) for j in range(w)]
                        cells = [x for x in snake if x in free][:size]
                        if len(cells) < size:
                            continue
                        cost = sum(self._hops(a, b) for a in cells for b in cells)
                        if best is None or cost < best[0]:
                            best = (cost, cells)
        return best[1] if best else self.place_default(free, size)

    def place_default(self, free: list[int], size: int) -> list[int]:
        order = _SCATTER16 if self.cfg.nodes == 16 else tuple(range(self.cfg.nodes))
        return [x for x in order if x in set(free)][:size]
