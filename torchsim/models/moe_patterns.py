"""MoE fusion patterns for the `serving` preset: the kernels a fused-MoE runtime launches around the experts.

Registered with lowering.patterns (`register_patterns("serving", moe_serving_patterns())`) when models/mixtral.py
(which defines the MoE modules) imports this module, so they are tried before the generic patterns; lowering never
imports this module.
It groups the ATen ops of an MoE block the way vLLM's fused_moe path runs them:
  router:  softmax + top-k + renormalise            -> one ROUTER_TOPK kernel (the router GEMM stays a GEMM)
  align:   sort, token-index math, histc, cumsum     -> one small `moe_align` kernel; the gather of the hidden
           rows is read by the first grouped GEMM (sorted token ids), not copied by a kernel of its own
  combine: routing-weight scale, un-permute, sum over the top-k copies -> one `moe_sum` reduction
The grouped GEMMs and the SiLU-and-mul between them stay with their own lowerings and patterns.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum

from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.lowerings import PlanContext, is_view
from torchsim.lowering.opgraph import OpGraph, OpNode
from torchsim.lowering.patterns import Match, Pattern, Patterns, register_patterns

# Innermost module class names of routers and expert containers: torchsim's own (TopKRouter, GroupedExperts) and
# HF transformers v5's, which every MoE family names <Family>TopKRouter / <Family>Experts (MixtralExperts,
# Qwen3MoeExperts, GraniteMoeExperts, ...).
ROUTER_SUFFIXES = ("TopKRouter", "TopkRouter")  # DeepSeek-V2/V3 spell it TopkRouter
EXPERTS_SUFFIXES = ("Experts",)
_KEEP = frozenset({"linear", "_grouped_mm"})  # ops with kernels of their own inside the MoE scopes


class MoeStage(Enum):
    ROUTER = "router"  # ops of a router module after its GEMM
    ALIGN = "align"  # ops of an experts module before its first grouped GEMM
    COMBINE = "combine"  # ops of an experts module after its last grouped GEMM


class MoeStagePattern(Pattern):
    """One match per MoE module path: the stage's ops (views and kernels of their own excluded)."""

    def __init__(self, stage: MoeStage) -> None:
        self.stage = stage

    def find(self, g: OpGraph, taken: set[str]) -> Iterator[Match]:
        suffixes = ROUTER_SUFFIXES if self.stage is MoeStage.ROUTER else EXPERTS_SUFFIXES
        scopes: dict[str, list[OpNode]] = {}
        for n in g.nodes:
            if n.module_type and n.module_type.endswith(suffixes):
                scopes.setdefault(n.module_path, []).append(n)
        for nodes in scopes.values():
            picked = self._select(g, nodes)
            picked = [n for n in picked if n.name not in taken and not is_view(n) and n.op_name not in _KEEP]
            if picked:
                taken |= {n.name for n in picked}
                yield Match(tuple(picked))

    def _select(self, g: OpGraph, nodes: list[OpNode]) -> list[OpNode]:
        if self.stage is MoeStage.ROUTER:  # after the router GEMM (its input cast, e.g. DeepSeek's fp32, stays out)
            if not any(n.op_name == "topk" for n in nodes):  # a router that selects without top-k (PhiMoE's
                # sparsemixer: masked maxima) is no fused kernel in vLLM either (phimoe_routing_function runs it as
                # torch ops): its ops keep their own lowerings
                return []
            gemm = [g.index(n.name) for n in nodes if n.op_name == "linear"]
            return [n for n in nodes if not gemm or g.index(n.name) > gemm[0]]
        gemms = [g.index(n.name) for n in nodes if n.op_name == "_grouped_mm"]
        if not gemms:
            return []
        if self.stage is MoeStage.ALIGN:
            return [n for n in nodes if g.index(n.name) < gemms[0]]
        return [n for n in nodes if g.index(n.name) > gemms[-1]]


def _node(m: Match, op_name: str, stage: MoeStage) -> OpNode:
    for n in m.nodes:
        if n.op_name == op_name:
            return n
    ops = sorted({n.op_name for n in m.nodes})
    raise ValueError(f"MoE {stage.value} ops at {m.nodes[0].module_path!r} have no {op_name!r} op (found {ops}); "
                     "this MoE block is not the softmax-top-k / sort-histc / sum form these patterns fuse")


def build_router(m: Match, g: OpGraph, ctx: PlanContext) -> list[KernelCall]:
    """One fused routing kernel; with group-limited routing (DeepSeek-V3: top-2 per group, top groups, then
    top-k over the kept experts; vLLM's grouped_topk) the last top-k is the one over all experts."""
    topk = [n for n in m.nodes if n.op_name == "topk"][-1] if any(n.op_name == "topk" for n in m.nodes) else \
        _node(m, "topk", MoeStage.ROUTER)
    logits = topk.in_specs[0]
    experts = logits.shape[-1]
    return [ctx.call(KernelKind.ROUTER_TOPK, m.nodes, logits.dtype, label="topk_softmax",
                     tokens=logits.numel // experts, experts=experts, top_k=int(topk.scalar(1, 1)))]


def build_align(m: Match, g: OpGraph, ctx: PlanContext) -> list[KernelCall]:
    sort = _node(m, "sort", MoeStage.ALIGN)
    assignments = sort.in_specs[0]
    return [ctx.call(KernelKind.ELEMENTWISE, m.nodes, assignments.dtype, label="moe_align",
                     numel=assignments.numel, inputs=1, outputs=2, op="moe_align")]


def build_combine(m: Match, g: OpGraph, ctx: PlanContext) -> list[KernelCall]:
    total = _node(m, "sum", MoeStage.COMBINE)
    copies, out = total.in_specs[0], total.out[0]
    return [ctx.call(KernelKind.REDUCE, m.nodes, out.dtype, label="moe_sum", numel_in=copies.numel,
                     numel_out=out.numel)]


def moe_serving_patterns() -> Patterns:
    """(pattern, builder) pairs to put in the serving preset (before the generic patterns)."""
    pairs = ((MoeStagePattern(MoeStage.ROUTER), build_router), (MoeStagePattern(MoeStage.ALIGN), build_align),
             (MoeStagePattern(MoeStage.COMBINE), build_combine))
    return pairs


register_patterns("serving", moe_serving_patterns())
