"""The tile graph of one CTA class, the kernel graph (CTA classes + grid), validation and JSON round-trip.

Hot data are numpy arrays (node op, unit, group, work; CSR successor lists). A `KernelGraph` holds one
`TileGraph` per CTA class and a parameter table with one row per logical CTA: nodes are never copied per CTA.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from torchsim.graph.kinds import MEMORY_OPS, DType, Edge, Op, Space, Unit
from torchsim.graph.tile import ExecGroup, TileDesc

_MEMORY_OP_CODES = np.array(sorted(int(op) for op in MEMORY_OPS), dtype=np.int64)
_BARRIER_OP_CODES = np.array([int(Op.BARRIER_ARRIVE), int(Op.BARRIER_WAIT)], dtype=np.int64)


@contextmanager
def _reading(what: str) -> Iterator[None]:
    """Turn the KeyError/IndexError/TypeError of a malformed JSON object into a GraphError naming `what`."""
    try:
        yield
    except GraphError:
        raise
    except KeyError as exc:
        raise GraphError(f"{what}: unknown or missing name {exc.args[0]!r} in the JSON (an op, unit, dtype, space, "
                         f"edge kind or field torchsim does not know)") from None
    except (IndexError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise GraphError(f"{what}: malformed JSON ({type(exc).__name__}: {exc})") from None


class GraphError(ValueError):
    """A tile graph is malformed; the message names the node (and template) at fault."""


def _check_fields(obj: Any, allowed: tuple[str, ...], what: str) -> None:
    """A JSON object of `what` has only the fields `allowed` (a misspelt one is named, with the nearest)."""
    if not isinstance(obj, dict):
        raise GraphError(f"{what}: expected a JSON object, got {type(obj).__name__}")
    for key in obj:
        if key not in allowed:
            near = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise GraphError(f"{what}: unknown field {key!r}; {hint}fields: {', '.join(allowed)}")


def _attrs(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise GraphError(f"{what}: attrs must be a JSON object of names to values, got {type(value).__name__}")
    return dict(value)


def _amount(value: Any, field_name: str, what: str) -> float:
    """A finite, non-negative number (FLOPs, bytes) of a JSON object."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise GraphError(f"{what}: {field_name} must be a finite number >= 0, got {value!r}")
    return float(value)


MAX_WARPS = 64  # warps of one CTA at most: a 2048-thread SM's worth (1024-thread CTAs use 32)
MAX_ARRIVALS = (1 << 20) - 1  # an mbarrier's arrival count field
MAX_TILE_ELEMENTS = 1 << 32


@dataclass(frozen=True, slots=True)
class Barrier:
    """A named barrier (mbarrier / named barrier): a wait of phase p needs `expected * (p + 1)` arrivals."""

    name: str
    expected: int = 1


@dataclass(frozen=True, eq=False)
class TileGraph:
    """One CTA template: nodes as parallel arrays, edges as an edge list plus CSR successor lists."""

    name: str
    groups: tuple[ExecGroup, ...]
    node_names: tuple[str, ...]
    op: np.ndarray  # int8 [n]  Op
    unit: np.ndarray  # int8 [n]  Unit
    group: np.ndarray  # int32 [n] index into groups
    work: np.ndarray  # float64 [n] FLOPs (MMA), bytes (memory), elements (SIMT), 0 (sync)
    tile: np.ndarray  # int32 [n] index into tiles, -1 none
    barrier: np.ndarray  # int32 [n] index into barriers for arrive/wait nodes, -1 none
    phase: np.ndarray  # int32 [n] barrier phase a wait node waits for
    smem_io: np.ndarray  # float64 [n] bytes through the shared-memory port besides the unit's work
    tiles: tuple[TileDesc, ...]
    barriers: tuple[Barrier, ...]
    edge_src: np.ndarray  # int32 [e]
    edge_dst: np.ndarray  # int32 [e]
    edge_kind: np.ndarray  # int8 [e] Edge
    dtype: DType = DType.BF16
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def num_nodes(self) -> int:
        return int(self.op.shape[0])

    @property
    def num_edges(self) -> int:
        return int(self.edge_src.shape[0])

    def describe_node(self, i: int) -> str:
        return (f"node {i} {self.node_names[i]!r} ({Op(int(self.op[i])).name} on "
                f"{Unit(int(self.unit[i])).name}, group {self.groups[int(self.group[i])].name!r}) "
                f"of template {self.name!r}")

    def smem_bytes(self) -> float:
        """Shared memory the template's distinct shared tiles need (buffers are tiles with distinct slots)."""
        seen: dict[tuple[str, tuple[Any, ...]], float] = {}
        for t in self.tiles:
            if t.space is Space.SHARED:
                seen[(t.tensor, tuple(c.to_json().__repr__() for c in t.coord))] = t.nbytes
        return float(sum(seen.values()))

    # -- validation ---------------------------------------------------------------------------------
    def validate(self) -> None:
        """Acyclic, in-range edges, memory nodes carry tiles, barrier nodes name barriers, work >= 0."""
        n = self.num_nodes
        if n == 0:
            raise GraphError(f"template {self.name!r} has no nodes")
        for arr, what in ((self.edge_src, "source"), (self.edge_dst, "destination")):
            bad = np.nonzero((arr < 0) | (arr >= n))[0]
            if bad.size:
                e = int(bad[0])
                raise GraphError(f"template {self.name!r}: edge {e} has {what} {int(arr[e])}, "
                                 f"but the graph has nodes 0..{n - 1}")
        for arr, size, what in ((self.group, len(self.groups), "execution group"), (self.tile, len(self.tiles), "tile"),
                                (self.barrier, len(self.barriers), "barrier")):
            low = 0 if what == "execution group" else -1  # tile/barrier -1: none
            bad = np.nonzero((arr < low) | (arr >= size))[0]
            if bad.size:
                i = int(bad[0])
                raise GraphError(f"node {i} ({self.node_names[i]!r}) of template {self.name!r} names {what} "
                                 f"{int(arr[i])}, but the template has {what}s 0..{size - 1}")
        for b in self.barriers:
            if isinstance(b.expected, bool) or not isinstance(b.expected, (int, np.integer)) \
                    or not 1 <= b.expected <= MAX_ARRIVALS:
                raise GraphError(f"template {self.name!r}: barrier {b.name!r} expects {b.expected!r} arrivals; "
                                 f"a barrier needs a whole number in 1..{MAX_ARRIVALS} (an mbarrier's count)")
        self._validate_groups()
        bad = np.nonzero((self.phase < 0) | ~np.isfinite(self.smem_io) | (self.smem_io < 0) | (self.smem_io > 1e18))[0]
        if bad.size:
            i = int(bad[0])
            raise GraphError(f"{self.describe_node(i)} has phase {int(self.phase[i])} and smem_io {self.smem_io[i]} "
                             f"(valid: phase >= 0, smem_io 0 .. 1e18 bytes)")
        for j, t in enumerate(self.tiles):
            if t.elements > MAX_TILE_ELEMENTS:
                raise GraphError(f"template {self.name!r}: tile {j} of {t.tensor!r} has shape {t.shape}, "
                                 f"{t.elements:,} elements (a tile holds at most {MAX_TILE_ELEMENTS:,})")
        # per-node checks, vectorised; the first offending node (in node order) is named, whichever check it fails
        bad_work = (self.work < 0) | ~np.isfinite(self.work) | (self.work > 1e18)
        no_tile = np.isin(self.op, _MEMORY_OP_CODES) & (self.tile < 0)
        no_barrier = np.isin(self.op, _BARRIER_OP_CODES) & (self.barrier < 0)
        bad = np.nonzero(bad_work | no_tile | no_barrier)[0]
        if bad.size:
            i = int(bad[0])
            if bad_work[i]:
                raise GraphError(f"{self.describe_node(i)} has invalid work {self.work[i]} (valid: 0 .. 1e18)")
            if no_tile[i]:
                raise GraphError(f"{self.describe_node(i)} moves memory but has no tile descriptor")
            raise GraphError(f"{self.describe_node(i)} is a barrier operation without a barrier")
        cycle = self.find_cycle()
        if cycle:
            names = " -> ".join(f"{i}:{self.node_names[i]}" for i in cycle)
            raise GraphError(f"template {self.name!r} has a cycle: {names}")

    def _validate_groups(self) -> None:
        """Execution groups are disjoint ranges of the CTA's warps, within the most warps a CTA can have."""
        taken: dict[int, str] = {}
        for g in self.groups:
            counts = (g.first_warp, g.num_warps)
            if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in counts) \
                    or g.first_warp < 0 or g.num_warps < 1 or g.first_warp + g.num_warps > MAX_WARPS:
                raise GraphError(f"template {self.name!r}: group {g.name!r} has first_warp {g.first_warp!r} and "
                                 f"num_warps {g.num_warps!r}; a group is warps first_warp .. first_warp + num_warps "
                                 f"- 1 within 0..{MAX_WARPS - 1}")
            for w in range(g.first_warp, g.first_warp + g.num_warps):
                if w in taken:
                    raise GraphError(f"template {self.name!r}: groups {taken[w]!r} and {g.name!r} both hold warp {w}; "
                                     f"each warp belongs to one group")
                taken[w] = g.name

    def find_cycle(self) -> list[int]:
        """Kahn's algorithm; returns the nodes of one cycle (closed) or [] when acyclic. A graph whose every edge
        runs from a lower node index to a higher one (the order templates write nodes in) is acyclic without it."""
        n = self.num_nodes
        if bool(np.all(self.edge_src < self.edge_dst)):
            return []
        indeg = np.bincount(self.edge_dst, minlength=n).astype(np.int64)
        succ = self.successors()
        stack = [i for i in range(n) if indeg[i] == 0]
        seen = 0
        while stack:
            i = stack.pop()
            seen += 1
            for j in succ[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    stack.append(j)
        if seen == n:
            return []
        # walk back along remaining edges to print one cycle
        remaining = set(int(i) for i in np.nonzero(indeg > 0)[0])
        pred: dict[int, int] = {}
        for s, d in zip(self.edge_src.tolist(), self.edge_dst.tolist()):
            if s in remaining and d in remaining:
                pred.setdefault(d, s)
        node = min(remaining)
        path: list[int] = []
        while node not in path:
            path.append(node)
            node = pred[node]
        cyc = path[path.index(node):][::-1]
        return cyc + [cyc[0]]

    def successors(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(self.num_nodes)]
        for s, d in zip(self.edge_src.tolist(), self.edge_dst.tolist()):
            out[s].append(d)
        return out

    # -- JSON ------------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "dtype": self.dtype.name, "attrs": self.attrs,
            "groups": [{"name": g.name, "first_warp": g.first_warp, "num_warps": g.num_warps, "role": g.role}
                       for g in self.groups],
            "nodes": [{"name": self.node_names[i], "op": Op(int(self.op[i])).name,
                       "unit": Unit(int(self.unit[i])).name, "group": int(self.group[i]),
                       "work": float(self.work[i]), "tile": int(self.tile[i]),
                       "barrier": int(self.barrier[i]), "phase": int(self.phase[i]),
                       "smem_io": float(self.smem_io[i])}
                      for i in range(self.num_nodes)],
            "tiles": [t.to_json() for t in self.tiles],
            "barriers": [{"name": b.name, "expected": b.expected} for b in self.barriers],
            "edges": [[int(s), int(d), Edge(int(k)).name]
                      for s, d, k in zip(self.edge_src, self.edge_dst, self.edge_kind)],
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TileGraph:
        with _reading(f"template {obj.get('name', '?') if isinstance(obj, dict) else '?'!r}"):
            return cls._from_json(obj)

    @classmethod
    def _from_json(cls, obj: dict[str, Any]) -> TileGraph:
        what = f"template {obj.get('name', '?') if isinstance(obj, dict) else '?'!r}"
        _check_fields(obj, GRAPH_FIELDS, what)
        for i, d in enumerate(obj["nodes"]):
            _check_fields(d, NODE_FIELDS, f"{what}, node {i}")
        for e in obj["edges"]:
            if len(e) != 3 or any(isinstance(x, bool) or not isinstance(x, int) for x in e[:2]):
                raise GraphError(f"edge {e!r} is not [source node, destination node, kind] with whole-number nodes")
        nodes = obj["nodes"]
        edges = obj["edges"]
        g = cls(
            name=obj["name"],
            groups=tuple(ExecGroup(d["name"], d["first_warp"], d["num_warps"], d.get("role", ""))
                         for d in obj["groups"]),
            node_names=tuple(d["name"] for d in nodes),
            op=np.array([Op[d["op"]] for d in nodes], dtype=np.int8),
            unit=np.array([Unit[d["unit"]] for d in nodes], dtype=np.int8),
            group=np.array([d["group"] for d in nodes], dtype=np.int32),
            work=np.array([d["work"] for d in nodes], dtype=np.float64),
            tile=np.array([d["tile"] for d in nodes], dtype=np.int32),
            barrier=np.array([d["barrier"] for d in nodes], dtype=np.int32),
            phase=np.array([d["phase"] for d in nodes], dtype=np.int32),
            smem_io=np.array([d.get("smem_io", 0.0) for d in nodes], dtype=np.float64),
            tiles=tuple(TileDesc.from_json(t) for t in obj["tiles"]),
            barriers=tuple(Barrier(b["name"], b["expected"]) for b in obj["barriers"]),
            edge_src=np.array([e[0] for e in edges], dtype=np.int32),
            edge_dst=np.array([e[1] for e in edges], dtype=np.int32),
            edge_kind=np.array([Edge[e[2]] for e in edges], dtype=np.int8),
            dtype=DType[obj["dtype"]],
            attrs=_attrs(obj.get("attrs", {}), what),
        )
        g.validate()
        return g


@dataclass(frozen=True, eq=False)
class CtaClass:
    """A class of isomorphic CTAs: one template, one parameter row per logical CTA, launch resources."""

    graph: TileGraph
    params: np.ndarray  # int64 [count, len(param_names)]
    param_names: tuple[str, ...]
    threads: int
    regs_per_thread: int = 128
    smem_bytes: int | None = None  # None: derived from the template's shared tiles

    def __post_init__(self) -> None:
        if self.params.ndim != 2 or self.params.shape[1] != len(self.param_names):
            raise GraphError(f"CTA class {self.graph.name!r}: params must be [count, {len(self.param_names)}]")
        if self.threads <= 0:
            raise GraphError(f"CTA class {self.graph.name!r}: threads must be > 0")

    @property
    def count(self) -> int:
        return int(self.params.shape[0])

    @property
    def smem(self) -> int:
        return int(self.smem_bytes if self.smem_bytes is not None else self.graph.smem_bytes())


GRAPH_FIELDS = ("name", "dtype", "attrs", "groups", "nodes", "tiles", "barriers", "edges")
NODE_FIELDS = ("name", "op", "unit", "group", "work", "tile", "barrier", "phase", "smem_io")
KERNEL_FIELDS = ("name", "classes", "flops", "dram_bytes", "attrs")
CLASS_FIELDS = ("graph", "params", "param_names", "threads", "regs_per_thread", "smem_bytes")


def _param_rows(rows: Any, names: Any, where: str) -> np.ndarray:
    """A class's `params` as an int64 [count, len(names)] array: each row one whole number per name (a row of the
    wrong length was reshaped into a different CTA count)."""
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise GraphError(f"{where}: param_names must be a list of names, got {names!r}")
    if not isinstance(rows, list):
        raise GraphError(f"{where}: params must be a list of rows, got {type(rows).__name__}")
    for j, row in enumerate(rows):
        if (not isinstance(row, list) or len(row) != len(names)
                or not all(isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**63 for v in row)):
            raise GraphError(f"{where}: params row {j} is {row!r}; each row is {len(names)} whole number(s), one "
                             f"per param_names {names}")
    return np.array(rows, dtype=np.int64).reshape(len(rows), len(names))


@dataclass(frozen=True, eq=False)
class KernelGraph:
    """A kernel launch: its CTA classes (launched in order) and what the template says about its work."""

    name: str
    classes: tuple[CtaClass, ...]
    flops: float = 0.0  # useful FLOPs of the kernel (for TFLOPS and rooflines)
    dram_bytes: float = 0.0  # compulsory DRAM traffic (each operand read once, outputs written once)
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def num_ctas(self) -> int:
        return sum(c.count for c in self.classes)

    def unit_work(self, unit: Unit) -> float:
        """Work all CTAs put on `unit` (FLOPs, bytes or ops in the unit's own measure)."""
        return sum(c.count * float(np.sum(c.graph.work[c.graph.unit == unit])) for c in self.classes)

    def tensor_datapath_fill(self) -> float | None:
        """Useful FLOPs per FLOP of tensor-datapath time the MMAs hold (1.0 when every MMA fills the
        datapath; 0.5 for 64-row tcgen05 MMAs on sm100); None without MMAs or FLOPs."""
        work = self.unit_work(Unit.TENSOR)
        return self.flops / work if work > 0 and self.flops > 0 else None

    def validate(self, checked: Any = None) -> None:
        """Every class's template (TileGraph.validate) and the CTA parameters its tiles use. `checked`: a set of
        templates already validated (a template is never changed once built), skipped and added to."""
        if not self.classes:
            raise GraphError(f"kernel {self.name!r} has no CTA classes")
        for c in self.classes:
            if checked is None or c.graph not in checked:
                c.graph.validate()
                if checked is not None:
                    checked.add(c.graph)
            tiles_params = {n for t in c.graph.tiles for a in t.coord for n, _ in a.terms}
            missing = tiles_params - set(c.param_names)
            if missing:
                raise GraphError(f"template {c.graph.name!r}: tile coordinates use CTA parameters "
                                 f"{sorted(missing)} that the CTA class does not define")

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "flops": self.flops, "dram_bytes": self.dram_bytes, "attrs": self.attrs,
            "classes": [{"graph": c.graph.to_json(), "params": c.params.tolist(),
                         "param_names": list(c.param_names), "threads": c.threads,
                         "regs_per_thread": c.regs_per_thread, "smem_bytes": c.smem_bytes}
                        for c in self.classes],
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> KernelGraph:
        what = f"kernel {obj.get('name', '?') if isinstance(obj, dict) else '?'!r}"
        _check_fields(obj, KERNEL_FIELDS, what)
        if not isinstance(obj["name"], str):
            raise GraphError(f"{what}: name must be a string, got {obj['name']!r}")
        classes = []
        for i, c in enumerate(obj["classes"]):
            where = f"{what}, CTA class {i}"
            _check_fields(c, CLASS_FIELDS, where)
            for name in ("threads", "regs_per_thread"):
                if isinstance(c[name], bool) or not isinstance(c[name], int) or c[name] <= 0:
                    raise GraphError(f"{where}: {name} must be a whole number > 0, got {c[name]!r}")
            smem = c["smem_bytes"]
            if smem is not None and (isinstance(smem, bool) or not isinstance(smem, int) or smem < 0):
                raise GraphError(f"{where}: smem_bytes must be null or a whole number >= 0, got {smem!r}")
            if not c["params"]:
                raise GraphError(f"{where}: params lists no CTA (one row of {len(c['param_names'])} values per CTA)")
            classes.append(CtaClass(TileGraph.from_json(c["graph"]), _param_rows(c["params"], c["param_names"], where),
                                    tuple(c["param_names"]), c["threads"], c["regs_per_thread"], smem))
        kg = cls(obj["name"], tuple(classes), _amount(obj["flops"], "flops", what),
                 _amount(obj["dram_bytes"], "dram_bytes", what), _attrs(obj.get("attrs", {}), what))
        kg.validate()
        return kg

    @classmethod
    def loads(cls, text: str) -> KernelGraph:
        """A kernel graph from `dumps()` text; anything else is one GraphError naming what was wrong."""
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise GraphError(f"kernel graph JSON does not parse: {exc}") from None
        with _reading(f"kernel {obj.get('name', '?') if isinstance(obj, dict) else '?'!r}"):
            return cls.from_json(obj)
