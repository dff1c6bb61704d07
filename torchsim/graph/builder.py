"""GraphBuilder: how templates (and users) write a CTA's tile graph.

Example:
    >>> from torchsim.graph import GraphBuilder, Op, Unit, Space, DType, TileDesc, aff
    >>> b = GraphBuilder("copy")
    >>> w = b.group("warp0")
    >>> t = TileDesc(Space.GLOBAL, DType.BF16, (64, 64), tensor="X", coord=(aff(m=1), aff()))
    >>> ld = b.node(w, Op.TMA_LOAD, Unit.TMA, work=t.nbytes, tile=t, name="load")
    >>> mm = b.node(w, Op.MMA, Unit.TENSOR, work=2 * 64 * 64 * 64, name="mma")
    >>> b.data(ld, mm)
    >>> b.build().num_nodes
    2
"""

from __future__ import annotations

from typing import Any

import numpy as np

from torchsim.graph.graph import Barrier, GraphError, TileGraph
from torchsim.graph.kinds import DType, Edge, Op, Unit
from torchsim.graph.tile import ExecGroup, TileDesc


class GraphBuilder:
    """Accumulates groups, nodes, tiles, barriers and edges; `build()` freezes them into arrays."""

    def __init__(self, name: str, dtype: DType = DType.BF16, program_order: bool = True) -> None:
        self.name = name
        self.dtype = dtype
        self.program_order = program_order
        self._groups: list[ExecGroup] = []
        self._names: list[str] = []
        self._op: list[int] = []
        self._unit: list[int] = []
        self._group: list[int] = []
        self._work: list[float] = []
        self._tile: list[int] = []
        self._barrier: list[int] = []
        self._phase: list[int] = []
        self._smem_io: list[float] = []
        self._tiles: list[TileDesc] = []
        self._tile_ids: dict[TileDesc, int] = {}
        self._barriers: list[Barrier] = []
        self._edges: list[tuple[int, int, int]] = []
        self._last_in_group: dict[int, int] = {}
        self.attrs: dict[str, Any] = {}

    # -- declarations ----------------------------------------------------------------------------------
    def group(self, name: str, first_warp: int | None = None, num_warps: int = 1, role: str = "") -> int:
        """Declare an execution group; warps are numbered consecutively unless `first_warp` is given."""
        if first_warp is None:
            first_warp = sum(g.num_warps for g in self._groups)
        self._groups.append(ExecGroup(name, first_warp, num_warps, role))
        return len(self._groups) - 1

    def barrier(self, name: str, expected: int = 1) -> int:
        if expected <= 0:
            raise GraphError(f"template {self.name!r}: barrier {name!r} needs expected arrivals > 0")
        self._barriers.append(Barrier(name, expected))
        return len(self._barriers) - 1

    def node(self, group: int, op: Op, unit: Unit, work: float = 0.0, tile: TileDesc | None = None,
             name: str = "", barrier: int = -1, phase: int = 0, ordered: bool = True,
             smem_bytes: float = 0.0) -> int:
        """Add a node to `group`. With program order on, an ORDER edge joins it to the group's previous node.

        `ordered=False` adds a node outside the group's program order (an asynchronous completion such as
        tcgen05.commit arriving on a barrier when the MMA finishes). `smem_bytes` is traffic the node moves
        through the SM's shared-memory port besides its own unit's work (MMA operands read from shared memory;
        TMA loads count their shared-memory writes automatically).
        """
        if not 0 <= group < len(self._groups):
            raise GraphError(f"template {self.name!r}: node {name!r} names group {group}, "
                             f"but only {len(self._groups)} groups exist")
        if barrier >= len(self._barriers):
            raise GraphError(f"template {self.name!r}: node {name!r} names barrier {barrier}, "
                             f"but only {len(self._barriers)} barriers exist")
        idx = len(self._op)
        self._names.append(name or f"{op.name.lower()}{idx}")
        self._op.append(int(op))
        self._unit.append(int(unit))
        self._group.append(group)
        self._work.append(float(work))
        self._barrier.append(barrier)
        self._phase.append(phase)
        self._smem_io.append(float(smem_bytes))
        if tile is None:
            self._tile.append(-1)
        else:
            tid = self._tile_ids.get(tile)
            if tid is None:
                tid = len(self._tiles)
                self._tiles.append(tile)
                self._tile_ids[tile] = tid
            self._tile.append(tid)
        if ordered:
            prev = self._last_in_group.get(group)
            if self.program_order and prev is not None:
                self._edges.append((prev, idx, int(Edge.ORDER)))
            self._last_in_group[group] = idx
        return idx

    def add_work(self, idx: int, work: float) -> None:
        """Grow node `idx`'s work by `work` (a template folding a little more of the same unit's work into a node
        it wrote earlier)."""
        if not 0 <= idx < len(self._work) or work < 0:
            raise ValueError(f"add_work: node {idx} of {len(self._work)}, work {work} (must be >= 0)")
        self._work[idx] += float(work)

    def data(self, src: int, dst: int) -> None:
        """DATA edge: `dst` reads what `src` produced; released when `src` completes."""
        self._edge(src, dst, Edge.DATA)

    def order(self, src: int, dst: int) -> None:
        """ORDER edge: `dst` may not issue before `src` has issued."""
        self._edge(src, dst, Edge.ORDER)

    def _edge(self, src: int, dst: int, kind: Edge) -> None:
        n = len(self._op)
        for end, what in ((src, "source"), (dst, "destination")):
            if not 0 <= end < n:
                other = dst if end == src else src
                label = self._names[other] if 0 <= other < n else str(other)
                raise GraphError(f"template {self.name!r}: {kind.name} edge to/from node {label!r} names "
                                 f"missing {what} node {end} (graph has nodes 0..{n - 1})")
        if src == dst:
            raise GraphError(f"template {self.name!r}: self edge on node {self._names[src]!r}")
        self._edges.append((src, dst, int(kind)))

    @property
    def num_nodes(self) -> int:
        return len(self._op)

    @property
    def num_barriers(self) -> int:
        return len(self._barriers)

    def roots(self) -> list[int]:
        """Nodes added so far that no edge leads to (ready when the CTA launches)."""
        has_pred = {d for _, d, _ in self._edges}
        return [i for i in range(len(self._op)) if i not in has_pred]

    def build(self, validate: bool = True) -> TileGraph:
        if not self._op:
            raise GraphError(f"template {self.name!r} has no nodes")
        edges = np.array(self._edges, dtype=np.int64).reshape(-1, 3)
        g = TileGraph(
            name=self.name, groups=tuple(self._groups), node_names=tuple(self._names),
            op=np.array(self._op, dtype=np.int8), unit=np.array(self._unit, dtype=np.int8),
            group=np.array(self._group, dtype=np.int32), work=np.array(self._work, dtype=np.float64),
            tile=np.array(self._tile, dtype=np.int32), barrier=np.array(self._barrier, dtype=np.int32),
            phase=np.array(self._phase, dtype=np.int32), smem_io=np.array(self._smem_io, dtype=np.float64),
            tiles=tuple(self._tiles),
            barriers=tuple(self._barriers), edge_src=edges[:, 0].astype(np.int32),
            edge_dst=edges[:, 1].astype(np.int32), edge_kind=edges[:, 2].astype(np.int8),
            dtype=self.dtype, attrs=dict(self.attrs),
        )
        if validate:
            g.validate()
        return g
