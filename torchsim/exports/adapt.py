"""Turn engine output into export records: a `KernelResult` (+ its `KernelGraph`) into a KernelRecord and,
when the run recorded node events, a KernelDetail with per-node bytes and cross-group dependencies.

Sits between `torchsim.sim` and the writers (parquet, perfetto, report), which read only records.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torchsim.exports.records import Dependency, KernelDetail, KernelRecord, NodeEvent, RunInfo
from torchsim.graph import Edge, KernelGraph, Op, Space, TileGraph
from torchsim.graph.kinds import GLOBAL_READS, GLOBAL_WRITES

if TYPE_CHECKING:
    from torchsim.lowering.kernel_call import KernelCall
    from torchsim.sim.result import KernelResult, NodeRecord

_GLOBAL_OPS = GLOBAL_READS | GLOBAL_WRITES
# attrs of a KernelGraph that describe the problem (shapes), as opposed to the template's configuration
SHAPE_KEYS = frozenset({"m", "n", "k", "batch", "rows", "hidden", "cols", "tokens", "numel", "heads_q", "heads_kv",
                        "seq_q", "seq_kv", "head_dim", "head_dim_v", "experts", "top_k", "vocab"})
_NOT_CONFIG = SHAPE_KEYS | {"template", "kind", "dtype", "wall_s", "sms"}


def _from_attrs(attrs: Mapping[str, Any]) -> tuple[str, tuple[tuple[str, Any], ...], dict[str, Any]]:
    """(kind, shape params, template config) read from a result's attrs when no KernelCall is at hand."""
    template = str(attrs.get("template", ""))
    kind = str(attrs.get("kind") or template.split("/")[0])
    params = tuple(sorted((k, v) for k, v in attrs.items() if k in SHAPE_KEYS))
    config = {k: v for k, v in attrs.items() if k not in _NOT_CONFIG and isinstance(v, (int, float, str, bool))}
    return kind, params, config


def kernel_record(result: KernelResult, *, index: int = 0, call: KernelCall | None = None, start_cycles: int = 0,
                  start_us: float = 0.0, template: str | None = None,
                  template_config: Mapping[str, Any] | None = None) -> KernelRecord:
    """The export row of one simulated kernel; `call` supplies where it came from (name, phase, layer, source).

    Without a call, the kind, shapes and configuration come from the kernel graph's attrs (`template`, `m`...).
    """
    kind, attr_params, attr_config = _from_attrs(result.attrs)
    return KernelRecord(
        kernel_index=index,
        kernel_name=(call.name if call is not None and call.name else result.name),
        kernel_kind=call.kind.value if call is not None else kind,
        phase=call.phase if call is not None else "",
        layer=call.layer if call is not None else None,
        stream=call.stream if call is not None else 0,
        module_path=call.module_path if call is not None else "",
        source_line=call.source if call is not None else "",
        dtype=call.dtype.name.lower() if call is not None else str(result.attrs.get("dtype", "")),
        params=call.params if call is not None else attr_params,
        start_cycles=start_cycles, duration_cycles=int(result.cycles), clock_hz=float(result.clock_hz),
        start_us=start_us, duration_us=result.time_us,
        template=template if template is not None else result.attrs.get("template"),
        template_config=template_config if template_config is not None else (attr_config or None),
        flops=float(result.flops), dram_bytes=float(result.dram_bytes), l2_hit_rate=float(result.l2_hit_rate),
        unit_busy=dict(result.unit_busy), stalls_cycles=dict(result.stalls), bound=result.bound,
        roofline_fallback=False,
    )


@dataclass(frozen=True, slots=True)
class _GraphFacts:
    """Per-template lookups, computed once per CTA class (not per CTA or per event)."""

    global_bytes: list[float | None]  # bytes a node moves to/from global memory, None for other nodes
    cross_edges: list[tuple[int, int, str]]  # (src, dst, "data"|"order") between different groups
    arrive_barrier: dict[int, int]  # barrier-arrive node -> barrier
    wait_barrier: dict[int, int]  # barrier-wait node -> barrier

    @classmethod
    def of(cls, g: TileGraph) -> _GraphFacts:
        ops = g.op.tolist()
        tiles = g.tile.tolist()
        work = g.work.tolist()
        global_ops = {int(o) for o in _GLOBAL_OPS}
        gbytes: list[float | None] = [
            float(w) if op in global_ops and (t < 0 or g.tiles[t].space is Space.GLOBAL) else None
            for op, t, w in zip(ops, tiles, work)]
        group = g.group.tolist()
        cross = [(s, d, "data" if k == int(Edge.DATA) else "order")
                 for s, d, k in zip(g.edge_src.tolist(), g.edge_dst.tolist(), g.edge_kind.tolist())
                 if group[s] != group[d]]
        barrier = g.barrier.tolist()
        arrive, wait = int(Op.BARRIER_ARRIVE), int(Op.BARRIER_WAIT)
        return cls(gbytes, cross, {i: b for i, (op, b) in enumerate(zip(ops, barrier)) if op == arrive and b >= 0},
                   {i: b for i, (op, b) in enumerate(zip(ops, barrier)) if op == wait and b >= 0})


def _event(rec: NodeRecord, facts: _GraphFacts | None) -> NodeEvent:
    dram = getattr(rec, "dram_bytes", None)  # recorded by engines that attribute DRAM traffic per node
    return NodeEvent(
        sm=rec.sm, cta=rec.cta, group=rec.group, node=rec.name, op=rec.op, unit=rec.unit,
        issue_cycle=rec.issue, start_cycle=rec.start, end_cycle=rec.end,
        wait_reason=None if rec.wait_reason in ("none", "") else rec.wait_reason, wait_cycles=rec.wait_cycles,
        node_index=rec.node, global_bytes=facts.global_bytes[rec.node] if facts is not None else None,
        dram_bytes=None if dram is None else float(dram),
    )


def dependencies(events: list[NodeEvent], records: tuple[NodeRecord, ...],
                 facts: Mapping[str, _GraphFacts]) -> list[Dependency]:
    """Cross-group edges of each CTA (data and order) plus barrier arrive -> the waits it released."""
    index: dict[tuple[int, int], int] = {(r.cta, r.node): i for i, r in enumerate(records)}
    by_cta: dict[int, list[int]] = defaultdict(list)
    for i, r in enumerate(records):
        by_cta[r.cta].append(i)
    deps: list[Dependency] = []
    for cta, idxs in by_cta.items():
        f = facts.get(records[idxs[0]].cta_class)
        if f is None:
            continue
        for s, d, kind in f.cross_edges:
            src, dst = index.get((cta, s)), index.get((cta, d))
            if src is not None and dst is not None:
                deps.append(Dependency(src, dst, kind))
        arrives: dict[tuple[int, int], int] = {}  # (barrier, issue cycle) -> event of the last arrival then
        for i in idxs:
            b = f.arrive_barrier.get(records[i].node)
            if b is not None:
                arrives[(b, records[i].issue)] = i
        for i in idxs:
            r = records[i]
            b = f.wait_barrier.get(r.node)
            if b is not None and r.wait_reason == "barrier":
                src = arrives.get((b, r.ready))
                if src is not None and events[src].group != events[i].group:
                    deps.append(Dependency(src, i, "barrier"))
    return deps


def kernel_detail(result: KernelResult, kernel: KernelGraph, run: RunInfo,
                  record: KernelRecord | None = None) -> KernelDetail:
    """The detail-view input of a result simulated with `record=True`."""
    if result.records is None:
        raise ValueError(f"kernel {result.name!r} was simulated without node records; "
                         "call simulate(kernel, hw, record=True) for a detail view or a nodes table")
    facts = {c.graph.name: _GraphFacts.of(c.graph) for c in kernel.classes}
    records = result.records
    events = [_event(r, facts.get(r.cta_class)) for r in records]
    num_sms = int(result.attrs.get("sms", max((e.sm for e in events), default=0) + 1))
    return KernelDetail(record or kernel_record(result), run, num_sms, events, dependencies(events, records, facts))
