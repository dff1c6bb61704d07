"""Per-op lowerings: one ATen op -> the kernel calls PyTorch eager would launch for it (zero for views).

Used by lowering.plan for every op that no fused pattern claimed. Lowerings are registered by op overload
object (`torch.ops.aten.linear.default`), never by string; registering an overload twice raises.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from torchsim.graph.kinds import DType
from torchsim.lowering.kernel_call import KernelCall, KernelKind, even_split
from torchsim.lowering.opgraph import WINDOW_KEY, OpNode, TensorSpec

aten = torch.ops.aten


@dataclass(frozen=True)
class PlanContext:
    """What a lowering or pattern builder may know besides the op: the preset, the routing, the fallback mode."""

    preset: str = "serving"
    routing: Any = None  # MoE routing counts (torchsim.models.routing.RoutingCounts or `layer(i)`-like)
    fallback: bool = False  # unsupported ops become roofline-estimated calls instead of an error
    layer: int | None = None  # layer of the segment being planned (routing lookups)

    def call(self, kind: KernelKind, nodes: Sequence[OpNode], dtype: DType, *, label: str = "",
             path_nodes: Sequence[OpNode] = (), **params: Any) -> KernelCall:
        """A call named after the nodes' (or `path_nodes'`) common module path + `label`, with their source lines."""
        path = common_path([n.module_path for n in (path_nodes or nodes)])
        name = ".".join(p for p in (path, label) if p)
        return KernelCall.make(kind, dtype, name=name, module_path=path, source=source_range(nodes),
                               fx_nodes=tuple(n.name for n in nodes), **params)


Lowering = Callable[[OpNode, PlanContext], list[KernelCall]]
LOWERINGS: dict[Any, Lowering] = {}


class DuplicateLoweringError(ValueError):
    """An op overload was registered twice."""


def register_lowering(*targets: Any) -> Callable[[Lowering], Lowering]:
    """Decorator: `@register_lowering(aten.mm.default, aten.addmm.default)`."""
    def deco(fn: Lowering) -> Lowering:
        for t in dict.fromkeys(targets):
            if t in LOWERINGS:
                raise DuplicateLoweringError(f"{t} already has a lowering ({LOWERINGS[t].__qualname__}); "
                                             f"{fn.__qualname__} may not register it again")
        if len(set(targets)) != len(targets):
            raise DuplicateLoweringError(f"{fn.__qualname__} lists an op overload twice: {targets}")
        for t in targets:
            LOWERINGS[t] = fn
        return fn
    return deco


def common_path(paths: Sequence[str]) -> str:
    parts = [p.split(".") if p else [] for p in paths]
    out: list[str] = []
    for segs in zip(*parts):
        if len(set(segs)) != 1:
            break
        out.append(segs[0])
    return ".".join(out)


def source_range(nodes: Sequence[OpNode]) -> str:
    """`llama.py:106` for one line, `llama.py:106-109,196` for lines of one file, else the lines joined."""
    srcs = [n.source for n in nodes if n.source]
    files = list(dict.fromkeys(s.rsplit(":", 1)[0] for s in srcs))
    parts = []
    for f in files:
        lines = sorted({int(s.rsplit(":", 1)[1]) for s in srcs if s.rsplit(":", 1)[0] == f})
        runs: list[list[int]] = []
        for ln in lines:
            if runs and ln == runs[-1][-1] + 1:
                runs[-1].append(ln)
            else:
                runs.append([ln])
        parts.append(f"{f}:" + ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs))
    return ";".join(parts)


# ---- views: no kernel -----------------------------------------------------------------------------------------

VIEW_TARGETS = frozenset({
    aten.view.default, aten._unsafe_view.default, aten.transpose.int, aten.permute.default, aten.unsqueeze.default,
    aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.expand.default, aten.slice.Tensor,
    aten.select.int, aten.alias.default, aten.t.default, aten.detach.default, aten.split.Tensor,
    aten.split_with_sizes.default, aten.chunk.default, aten.unbind.int, aten.dropout.default,
    aten.lift_fresh_copy.default, aten.narrow.default, aten.unflatten.int, aten.flatten.using_ints,
    aten.view_as.default, aten.expand_as.default, aten.as_strided.default, operator.getitem,
})
_MAYBE_VIEW = frozenset({aten.reshape.default, aten.contiguous.default, aten.to.dtype, aten._to_copy.default,
                         aten.to.dtype_layout, aten.type_as.default, aten.to.device})


def is_view(node: OpNode) -> bool:
    """True when the op launches no kernel: a view, or a reshape/contiguous/cast that changes nothing."""
    if node.target in VIEW_TARGETS:
        return True
    if node.target in _MAYBE_VIEW and node.in_specs and node.out:
        a, o = node.in_specs[0], node.out[0]
        return a.contiguous and a.dtype == o.dtype
    return False


@register_lowering(*VIEW_TARGETS)
def _free(node: OpNode, ctx: PlanContext) -> list[KernelCall]:
    return []


# ---- normalisation ------------------------------------------------------------------------------------------------


@register_lowering(aten.layer_norm.default)
def _layer_norm(node: OpNode, ctx: PlanContext) -> list[KernelCall]:
    """LayerNorm over the last dimension: the row-norm kernel with the mean subtracted first (`centered`), and a
    bias vector read when the op has one (OLMo-1's non-parametric norm has neither weight nor bias)."""
    x = node.out[0]
    hidden = x.shape[-1]
    return [ctx.call(KernelKind.RMSNORM, [node], x.dtype, rows=x.numel // hidden, hidden=hidden, centered=True,
                     bias=len(node.in_specs) >= 3)]


# ---- matrix products ------------------------------------------------------------------------------------------


@register_lowering(aten.linear.default)
def _linear(node: OpNode, ctx: PlanContext) -> list[KernelCall]:
    x, w = node.in_specs[0], node.in_specs[1]
    k = w.shape[-1]
    return [ctx.call(KernelKind.GEMM, [node], x.dtype, m=x.numel // k, n=w.shape[0], k=k,
                     epilogue="bias" if len(node.in_specs) > 2 else "none")]


@register_lowering(aten.mm.default, aten.addmm.default, aten.bmm.default, aten.matmul.default,
                   aten.baddbmm.default)
def _matmul(node: OpNode, ctx: PlanContext) -> list[KernelCall]:
    a, b = node.in_specs[-2], node.in_specs[-1]
    out = node.out[0]
    m, n, k = a.shape[-2] if len(a.shape) > 1 else 1, out.shape[-1], a.shape[-1]
    batch = out.numel // max(m * n, 1)
    epilogue = "bias" if node.target in (aten.addmm.default, aten.baddbmm.default) else "none"
    return [ctx.call(KernelKind.GEMM, [node], b.dtype, m=m, n=n, k=k, batch=batch, epilogue=epilogue)]


@register_lowering(aten._grouped_mm.default)
def _grouped_mm(node: OpNode, ctx: PlanContext) -> list[KernelCall]:
    """MoE expert GEMMs: x [S, K] by W [E, K, N]; tokens per expert come from the routing counts (hook)."""
    x, w = node.in_specs[0], node.in_specs[1]
    experts, k, n = w.shape[0], w.shape[-2], w.shape[-1]
    tpe = tokens_per_expert(ctx, rows=x.shape[0], experts=experts)
    return [ctx.call(KernelKind.GROUPED_GEMM, [node], x.dtype, tokens_per_expert=tpe, n=n, k=k, epilogue="none")]


def tokens_per_expert(ctx: PlanContext, *, rows: int, experts: int) -> tuple[int, ...]:
    """Rows of each expert's GEMM in layer `ctx.layer`: from `ctx.routing`, or an even split when none is given.

    `rows` is tokens x top_k (the grouped GEMM's M); routing counts recorded on another token count are scaled.
    """
    routing = ctx.routing
    if routing is None:
        return even_split(rows, experts)
    top_k = int(getattr(routing, "top_k", 1))
    if hasattr(routing, "scaled") and rows % top_k == 0:
        routing = routing.scaled(rows // top_k)
    counts = tuple(int(c) for c in routing.layer(ctx.layer or 0))
    if len(counts) != experts:
        raise ValueError(f"routing gives {len(counts)} experts for layer {ctx.layer}, the model's grouped GEMM has "
                         f"{experts}")
    if sum(counts) != rows:
        raise ValueError(f"routing for layer {ctx.layer} sums to {sum(counts)} rows, the grouped GEMM has {rows}")
    return counts


# ---- attention, embedding ---------------------------------------------------------------------------------------


@register_lowering(aten.scaled_dot_product_attention.default)
def _sdpa(node: OpNode, ctx: PlanContext) -> list[KernelCall]:
    q, k = node.in_specs[0], node.in_specs[1]
    b, hq, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    has_mask = len(node.in_specs) > 3
    causal = bool(node.scalar(5, node.scalar("is_causal", False))) or (has_mask and sq > 1)
    # a sliding window the calling module declares (capture records it, lowering.capture.WINDOW_KEY)
    return attention_call(node, ctx, q.dtype, batch=b, heads_q=hq, heads_kv=hkv, seq_q=sq, seq_kv=skv, head_dim=d,
                          causal=causal, window=node.scalar(WINDOW_KEY))


def attention_call(node: OpNode, ctx: PlanContext, dtype: DType, *, batch: int, heads_q: int, heads_kv: int,
                   seq_q: int, seq_kv: int, head_dim: int, causal: bool, window: Any, **extra: Any) -> list[KernelCall]:
    """The kernel a serving runtime launches for one attention op: split-KV decode for one query token, else
    FlashAttention prefill. A sliding window is passed on only where it is shorter than the keys the call attends
    over, so a window that never binds is none."""
    if isinstance(window, int) and 0 < window < seq_kv and (causal or seq_q == 1):
        extra["window"] = window
    shape: dict[str, Any] = dict(batch=batch, heads_q=heads_q, heads_kv=heads_kv, seq_q=seq_q, seq_kv=seq_kv,
                                 head_dim=head_dim)
    if seq_q == 1:
        return [ctx.call(KernelKind.ATTENTION_DECODE, [node], dtype, paged=False, **shape, **extra)]
    return [ctx.call(KernelKind.ATTENTION_PREFILL, [node], dtype, causal=causal, **shape, **extra)]


@register_lowering(aten.embedding.default)
def _embedding(node: OpNode, ctx: PlanContext) -> list[KernelCall]:
    w, idx = node.in_specs[0], node.in_specs[1]
    return [ctx.call(KernelKind.EMBEDDING, [node], w.dtype, tokens=idx.numel, hidden=w.shape[-1], vocab=w.shape[0])]


# ---- elementwise, reductions ------------------------------------------------------------------------------------

_ELEMENTWISE = (
    aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar, aten.rsub.Scalar, aten.mul.Tensor,
    aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar, aten.neg.default, aten.rsqrt.default, aten.sqrt.default,
    aten.exp.default, aten.log.default, aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar,
    aten.reciprocal.default, aten.silu.default,
    aten.sigmoid.default, aten.gelu.default, aten.tanh.default, aten.relu.default, aten.cos.default,
    aten.sin.default, aten.abs.default, aten.clamp.default, aten.clamp.Tensor, aten.where.self,
    aten.masked_fill.Scalar,
    aten.eq.Tensor, aten.eq.Scalar, aten.ne.Scalar, aten.lt.Tensor, aten.le.Tensor, aten.gt.Tensor,
    aten.ge.Tensor, aten.lt.Scalar, aten.le.Scalar, aten.gt.Scalar, aten.ge.Scalar, aten.logical_and.default,
    aten.logical_not.default, aten.__and__.Tensor, aten.bitwise_and.Tensor, aten.bitwise_or.Tensor,
    aten.__or__.Tensor, aten.cat.default, aten.concat.default,
    aten.to.dtype, aten._to_copy.default, aten.to.dtype_layout, aten.to.device,
    aten.type_as.default, aten.reshape.default, aten.contiguous.default, aten.clone.default, aten.copy_.default,
    aten.copy.default, aten.index.Tensor, aten.index_select.default, aten.gather.default, aten.index_put_.default,
    aten.index_put.default, aten.scatter.src, aten.scatter_add.default, aten.tril.default, aten.triu.default,
    aten.stack.default, aten.repeat_interleave.self_int, aten.repeat.default, aten.arange.start, aten.arange.default,
    aten.arange.start_step, aten.full.default, aten.zeros.default, aten.ones.default, aten.ones_like.default,
    aten.zeros_like.default, aten.full_like.default, aten.scalar_tensor.default, aten.new_zeros.default,
    aten.new_ones.default, aten.fill_.Scalar, aten.one_hot.default,
)


@register_lowering(*_ELEMENTWISE)
def _elementwise(node: OpNode, ctx: PlanContext) -> list[KernelCall]:
    if is_view(node):
        return []
    if node.target in _GATHER:
        return [elementwise_call(ctx, [node], node.op_name, inputs=1)]
    return [elementwise_call(ctx, [node], node.op_name, layout=pytorch_path(node))]


def pytorch_path(node: OpNode) -> dict[str, Any]:
    """Which of PyTorch's elementwise kernels one eager op launches (templates.elementwise.PATHS), from its
    operands' layouts: {} for the vectorized kernel (every tensor operand contiguous, one dtype, none broadcast);
    else path "strided" (a broadcast or strided operand: the legacy kernel, with `dims` the output's dimensions
    of size > 1, an upper bound on what TensorIterator leaves after coalescing, and `operands` the tensor operands
    its offsets are computed for) or "cast" (contiguous operands of mixed dtypes: the unrolled kernel)."""
    if not node.out:
        return {}
    out = node.out[0]
    tensors = [t for t in node.in_specs if t.shape and t.numel > 1]
    broadcast = any(t.numel < out.numel for t in tensors)
    strided = broadcast or not out.contiguous or any(not t.contiguous for t in tensors)
    if strided:
        dims = max(1, min(25, sum(1 for d in out.shape if d > 1)))
        return {"path": "strided", "dims": dims, "operands": len(tensors) + len(node.out)}
    if any(t.dtype != out.dtype for t in tensors):
        return {"path": "cast"}
    return {}


_GATHER = frozenset({aten.index.Tensor, aten.index_select.default, aten.gather.default})


def elementwise_call(ctx: PlanContext, nodes: Sequence[OpNode], op: str, *, label: str = "",
                     inputs: int | None = None, layout: dict[str, Any] | None = None) -> KernelCall:
    """One elementwise kernel over the last node's output, reading the inputs the first node reads.

    `inputs` counts full-size input reads; by default the first node's tensor inputs' elements over the output's.
    `layout` names PyTorch's code path for it (`pytorch_path`; none: the vectorized kernel).
    """
    out = nodes[-1].out[0]
    ins = [s for s in nodes[0].in_specs if s.shape]
    if inputs is None:
        inputs = round(sum(s.numel for s in ins) / max(out.numel, 1))
    dtype = max([out.dtype, *(s.dtype for s in ins if s.numel >= out.numel)], key=lambda d: d.nbytes)
    return ctx.call(KernelKind.ELEMENTWISE, nodes, dtype, label=label or op, numel=out.numel, inputs=inputs,
                    outputs=len(nodes[-1].out), op=op, **(layout or {}))


@register_lowering(aten.mean.dim, aten.sum.dim_IntList, aten.sum.default, aten.amax.default, aten.max.dim,
                   aten.cumsum.default, aten.sort.default, aten.histc.default, aten.bincount.default,
                   aten.var_mean.correction, aten.any.default, aten.all.default, aten.prod.dim_int,
                   aten.max.default, aten.min.default)
def _reduce(node: OpNode, ctx: PlanContext) -> list[KernelCall]:
    a = node.in_specs[0]
    return [ctx.call(KernelKind.REDUCE, [node], a.dtype, label=node.op_name, numel_in=a.numel,
                     numel_out=sum(o.numel for o in node.out))]


@register_lowering(aten.argmax.default)
def _argmax(node: OpNode, ctx: PlanContext) -> list[KernelCall]:
    a = node.in_specs[0]
    vocab = a.shape[_dim(node, a)]
    return [ctx.call(KernelKind.ARGMAX, [node], a.dtype, label="argmax", rows=a.numel // vocab, vocab=vocab)]


@register_lowering(aten._softmax.default, aten.softmax.int, aten._log_softmax.default, aten.log_softmax.int)
def _softmax(node: OpNode, ctx: PlanContext) -> list[KernelCall]:
    a = node.in_specs[0]
    cols = a.shape[_dim(node, a)]
    return [ctx.call(KernelKind.SOFTMAX, [node], a.dtype, label=node.op_name, rows=a.numel // cols, cols=cols)]


@register_lowering(aten.topk.default)
def _topk(node: OpNode, ctx: PlanContext) -> list[KernelCall]:
    a = node.in_specs[0]
    experts = a.shape[-1]
    return [ctx.call(KernelKind.ROUTER_TOPK, [node], a.dtype, label="topk", tokens=a.numel // experts,
                     experts=experts, top_k=int(node.scalar(1, 1)))]


def _dim(node: OpNode, spec: TensorSpec) -> int:
    d = node.scalar(1, node.scalar("dim", -1))
    d = -1 if d is None else int(d[0] if isinstance(d, tuple) else d)
    return d % max(len(spec.shape), 1)


def unsupported_call(node: OpNode, ctx: PlanContext) -> KernelCall:
    """A roofline-only stand-in for an op without a lowering (`fallback="roofline"`): its bytes moved once."""
    out = node.out[0] if node.out else TensorSpec((1,), DType.BF16)
    ins = sum(s.numel for s in node.in_specs if s.shape)
    return ctx.call(KernelKind.ELEMENTWISE, [node], out.dtype, label=node.op_name, numel=max(out.numel, 1),
                    inputs=max(1, math.ceil(ins / max(out.numel, 1))), outputs=max(len(node.out), 1),
                    op=f"unsupported:{node.target}", roofline=True)


# ---- HF families' extra ops (Gemma-2/3, gpt-oss, DeepSeek-V2/V3 routers) ---------------------------------------
# In-place and mask ops the group-limited routers of DeepSeek-V3 write (scatter_ of a group mask, ~mask, the
# in-place renormalisation): elementwise kernels like their out-of-place forms.

_HF_FAMILY_ELEMENTWISE = (aten.scatter_.value, aten.scatter.value, aten.scatter_.src, aten.bitwise_not.default,
                          aten.div_.Tensor, aten.mul_.Tensor, aten.add_.Tensor, aten.masked_fill_.Scalar,
                          aten.floor_divide.default)
register_lowering(*(t for t in _HF_FAMILY_ELEMENTWISE if t not in LOWERINGS))(_elementwise)
# allocations without a fill launch no kernel (gpt-oss's experts allocate their output with empty_like)
register_lowering(*(t for t in (aten.empty_like.default, aten.empty.memory_format) if t not in LOWERINGS))(_free)
