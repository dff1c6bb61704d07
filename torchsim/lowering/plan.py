"""Kernel planning: captured OpGraphs -> a KernelPlan, the kernels one forward step launches, in stream order.

Second stage of lowering (capture -> plan -> templates). A preset (`eager`: one kernel per ATen op as PyTorch
eager launches; `serving`: the fused kernels of vLLM/TensorRT-LLM-style runtimes) decides kernel boundaries.
Each identical layer's plan is computed once and relocated; MoE grouped GEMMs are re-sized per layer.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum
from functools import lru_cache
from typing import Any

from torchsim.lowering.capture import ModelCapture, capture_model
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.lowerings import LOWERINGS, PlanContext, is_view, tokens_per_expert, unsupported_call
from torchsim.lowering.opgraph import OpGraph, OpNode
from torchsim.lowering.patterns import PRESETS, through_views


class Preset(Enum):
    """Where kernel boundaries fall: `eager` as PyTorch eager, `serving` as a fused serving runtime."""

    EAGER = "eager"
    SERVING = "serving"

    @classmethod
    def parse(cls, value: str | Preset) -> Preset:
        if isinstance(value, Preset):
            return value
        for p in cls:
            if p.value == str(value).strip().lower():
                return p
        raise ValueError(f"unknown preset {value!r}; valid: {', '.join(p.value for p in cls)}")


class UnsupportedOpsError(ValueError):
    """ATen ops without a lowering; lists every one with its module path and source line."""


@dataclass(frozen=True)
class SegmentPlan:
    """A segment's kernels (names relative to the segment) and which of them touch the segment's interface."""

    calls: tuple[KernelCall, ...]
    in0_consumers: frozenset[int]  # calls reading the segment's first input
    out0_producer: int | None  # call producing the segment's first output
    unsupported: tuple[OpNode, ...]


@dataclass(frozen=True)
class KernelPlan:
    """The kernels of one forward step, in stream order, with where each came from."""

    calls: tuple[KernelCall, ...]
    preset: Preset
    phase: str
    batch: int
    q_len: int
    past_len: int
    unsupported: tuple[str, ...] = ()  # ops estimated by roofline (fallback), "op at module (source)"
    proofs: tuple[str, ...] = ()  # why layers could share one capture

    def kinds(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.calls:
            out[c.kind.value] = out.get(c.kind.value, 0) + 1
        return out

    def describe(self, limit: int = 0) -> str:
        rows = [f"{i:4d} {c.kind.value:<18} {_params(c):<60} {c.name:<48} {c.source}"
                for i, c in enumerate(self.calls)]
        return "\n".join(rows[:limit] if limit else rows)


def _params(c: KernelCall) -> str:
    return ",".join(f"{k}={v}" for k, v in c.params if k not in ("op", "roofline"))


def plan_graph(g: OpGraph, preset: Preset | str = Preset.SERVING, *, fallback: bool = False) -> SegmentPlan:
    """Match the preset's fused patterns, lower what is left op by op, and order the kernels by data flow."""
    return _plan_graph(g, Preset.parse(preset), fallback)


@lru_cache(maxsize=256)
def _plan_graph(g: OpGraph, preset: Preset, fallback: bool) -> SegmentPlan:
    ctx = PlanContext(preset=preset.value, fallback=fallback)
    taken: set[str] = set()
    groups: list[tuple[tuple[OpNode, ...], list[KernelCall]]] = []
    for pattern, build in PRESETS[preset.value]:
        for match in pattern.find(g, taken):
            groups.append((match.nodes, build(match, g, ctx)))
    unsupported: list[OpNode] = []
    for n in g.nodes:
        if n.name in taken or is_view(n):
            continue
        lower = LOWERINGS.get(n.target)
        if lower is None:
            unsupported.append(n)
            groups.append(((n,), [unsupported_call(n, ctx)] if fallback else []))
        else:
            groups.append(((n,), lower(n, ctx)))
    order = _topo_order(g, [nodes for nodes, _ in groups])
    calls: list[KernelCall] = []
    first_call: dict[int, int] = {}
    last_call: dict[int, int] = {}
    for gi in order:
        if groups[gi][1]:
            first_call[gi] = len(calls)
            calls.extend(groups[gi][1])
            last_call[gi] = len(calls) - 1
    group_of = {n.name: gi for gi, (nodes, _) in enumerate(groups) for n in nodes}
    in0: set[int] = set()
    if g.inputs:
        for gi, (nodes, _) in enumerate(groups):
            if gi in first_call and any(through_views(g, a) == g.inputs[0] for n in nodes for a in n.inputs):
                in0.add(first_call[gi])
    out0 = None
    if g.outputs:
        src = group_of.get(through_views(g, g.outputs[0]))
        out0 = last_call.get(src) if src is not None else None
    return SegmentPlan(tuple(calls), frozenset(in0), out0, tuple(unsupported))


def _topo_order(g: OpGraph, groups: Sequence[tuple[OpNode, ...]]) -> list[int]:
    """Groups in data-flow order (views looked through); ties go to the group whose first op comes first."""
    group_of = {n.name: gi for gi, nodes in enumerate(groups) for n in nodes}
    deps: list[set[int]] = [set() for _ in groups]
    for gi, nodes in enumerate(groups):
        for n in nodes:
            for a in n.inputs:
                src = group_of.get(through_views(g, a))
                if src is not None and src != gi:
                    deps[gi].add(src)
    users: list[list[int]] = [[] for _ in groups]
    for gi, ds in enumerate(deps):
        for d in ds:
            users[d].append(gi)
    key = [min(g.index(n.name) for n in nodes) for nodes in groups]
    waiting = [len(ds) for ds in deps]
    heap = [(key[gi], gi) for gi in range(len(groups)) if not waiting[gi]]
    heapq.heapify(heap)
    order: list[int] = []
    while heap:
        _, gi = heapq.heappop(heap)
        order.append(gi)
        for u in users[gi]:
            waiting[u] -= 1
            if not waiting[u]:
                heapq.heappush(heap, (key[u], u))
    if len(order) != len(groups):
        raise RuntimeError(f"op graph {g.label!r}: fused groups form a cycle; a pattern claimed ops around a "
                           "value it does not produce")
    return order


def plan_capture(cap: ModelCapture, preset: Preset | str = Preset.SERVING, *, routing: Any = None,
                 fallback: bool = False) -> KernelPlan:
    """The KernelPlan of a captured step: segment plans relocated to their layers and stitched in order."""
    preset = Preset.parse(preset)
    phase = cap.phase
    seg_calls: list[list[KernelCall | None]] = []
    seg_plans: list[SegmentPlan] = []
    unsupported: dict[tuple[str, str], str] = {}
    for seg in cap.segments:
        sp = _plan_graph(seg.graph, preset, fallback)
        seg_plans.append(sp)
        ctx = PlanContext(preset=preset.value, routing=routing, fallback=fallback, layer=seg.layer)
        seg_calls.append([_relocate(c, seg.path, seg.layer, phase, ctx) for c in sp.calls])
        for n in sp.unsupported:
            where = ".".join(p for p in (seg.path, n.module_path) if p)
            unsupported.setdefault((str(n.target), n.module_path), f"{n.target} at {where} ({n.source})")
    if unsupported and not fallback:
        raise UnsupportedOpsError(
            f"{len(unsupported)} ATen op(s) have no lowering: " + "; ".join(unsupported.values())
            + ". Register lowerings for them (torchsim.lowering.lowerings.register_lowering) or pass "
            "fallback='roofline' to estimate them by a roofline")
    if preset is Preset.SERVING:
        for i in range(1, len(seg_calls)):
            _fuse_residual_into_norm(seg_calls[i - 1], seg_plans[i - 1].out0_producer, seg_calls[i],
                                     seg_plans[i].in0_consumers)
    calls = tuple(c for seg in seg_calls for c in seg if c is not None)
    return KernelPlan(calls, preset, phase, cap.batch, cap.q_len, cap.past_len, tuple(unsupported.values()),
                      cap.proofs)


def plan_model(model: Any, *, batch: int, q_len: int, past_len: int, preset: Preset | str = Preset.SERVING,
               routing: Any = None, fallback: bool = False) -> KernelPlan:
    """Capture and plan one forward step of `model` (built on the meta device).

    >>> from torchsim.models.registry import build_model
    >>> plan = plan_model(build_model("llama-tiny"), batch=1, q_len=16, past_len=0)
    >>> plan.kinds()["gemm"]  # QKV, O, gate/up, down per layer (2 layers) + LM head
    9
    """
    cap = capture_model(model, batch, q_len, past_len)
    return plan_capture(cap, preset, routing=routing, fallback=fallback)


def _relocate(c: KernelCall, path: str, layer: int | None, phase: str, ctx: PlanContext) -> KernelCall:
    name = ".".join(p for p in (path, c.name) if p)
    module_path = ".".join(p for p in (path, c.module_path) if p)
    params = c.params
    if c.kind is KernelKind.GROUPED_GEMM:
        old = c.p("tokens_per_expert")
        tpe = tokens_per_expert(ctx, rows=sum(old), experts=len(old))
        params = tuple(sorted({**dict(params), "tokens_per_expert": tpe}.items()))
    return replace(c, name=name, module_path=module_path, layer=layer, phase=phase, params=params)


def _fuse_residual_into_norm(prev: list[KernelCall | None], out0: int | None, nxt: list[KernelCall | None],
                             in0: frozenset[int]) -> None:
    """A segment ending in a residual add whose sum feeds the next segment's RMSNorm: one add+RMSNorm kernel."""
    if out0 is None:
        return
    add = prev[out0]
    if add is None or add.kind is not KernelKind.ELEMENTWISE or add.p("op", "") != "add":
        return
    for i in sorted(in0):
        c = nxt[i]
        if c is not None and c.kind is KernelKind.RMSNORM and c.p("rows") * c.p("hidden") == add.p("numel"):
            nxt[i] = replace(c, kind=KernelKind.ADD_RMSNORM, fx_nodes=add.fx_nodes + c.fx_nodes)
            prev[out0] = None
            return
