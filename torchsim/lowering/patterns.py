"""Fusion patterns: which groups of ATen ops a serving runtime runs as one kernel, as data.

Used by lowering.plan before the per-op lowerings: a preset is a list of (pattern, builder) pairs, tried in
order; a pattern finds matches among ops no earlier pattern claimed, the builder turns a match into kernel
calls. Views never belong to a match: they are free and are looked through.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.lowerings import LOWERINGS, PlanContext, elementwise_call, is_view
from torchsim.lowering.opgraph import OpGraph, OpNode

aten = torch.ops.aten
_CASTS = frozenset({aten.to.dtype, aten._to_copy.default, aten.to.dtype_layout, aten.type_as.default})
_ADD = frozenset({aten.add.Tensor})
_MUL = frozenset({aten.mul.Tensor})
_SDPA = aten.scaled_dot_product_attention.default


@dataclass(frozen=True)
class Match:
    """Ops a pattern claimed (graph order) and, for multi-part patterns, the named parts builders read."""

    nodes: tuple[OpNode, ...]
    parts: tuple[tuple[str, OpNode], ...] = ()

    def part(self, name: str) -> list[OpNode]:
        return [n for k, n in self.parts if k == name]


class Pattern:
    """Finds matches among the unclaimed ops of a graph (`taken` holds claimed node names)."""

    def find(self, g: OpGraph, taken: set[str]) -> Iterator[Match]:
        raise NotImplementedError


Builder = Callable[[Match, OpGraph, PlanContext], list[KernelCall]]


# ---- graph helpers ---------------------------------------------------------------------------------------------


def through_views(g: OpGraph, name: str) -> str:
    """The value a (chain of) view(s) reads: producer names are followed back while the producer is a view."""
    n = g.producer(name)
    while n is not None and is_view(n) and n.inputs:
        name = n.inputs[0]
        n = g.producer(name)
    return name


def users_through_views(g: OpGraph, name: str) -> list[OpNode]:
    """Non-view consumers of a value, looking through views."""
    out: list[OpNode] = []
    for u in g.users(name):
        if u == "<output>":
            continue
        node = g.node(u)
        out.extend(users_through_views(g, u) if is_view(node) else [node])
    return out


def escapes(g: OpGraph, node: OpNode, inside: set[str]) -> bool:
    """True when the node's value is read outside the match (or is a graph output)."""
    stack = [node.name]
    while stack:
        name = stack.pop()
        for u in g.users(name):
            if u == "<output>":
                return True
            un = g.node(u)
            if is_view(un):
                stack.append(u)
            elif u not in inside:
                return True
    return False


# ---- pattern kinds ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    targets: frozenset[object]
    optional: bool = False
    may_escape: bool = False  # the value may also be read outside the match (e.g. a residual sum)
    where: Callable[[OpNode], bool] | None = None

    def accepts(self, n: OpNode) -> bool:
        return n.target in self.targets and (self.where is None or self.where(n))


@dataclass(frozen=True)
class Chain(Pattern):
    """A producer -> consumer chain of ops (views looked through); inner values may not escape the chain."""

    steps: tuple[Step, ...]

    def find(self, g: OpGraph, taken: set[str]) -> Iterator[Match]:
        for n in g.nodes:
            if n.name in taken or is_view(n):
                continue
            found = self._from(g, n, 0, taken)
            if not found:
                continue
            nodes = [x for x, _ in found]
            inside = {x.name for x in nodes}
            if any(escapes(g, x, inside) for x, i in found[:-1] if not self.steps[i].may_escape):
                continue
            taken |= inside
            yield Match(tuple(nodes))

    def _from(self, g: OpGraph, n: OpNode, i: int, taken: set[str]) -> list[tuple[OpNode, int]] | None:
        """(node, step index) pairs of the chain starting with `n` at step `i`, or None."""
        last = len(self.steps) - 1
        step = self.steps[i]
        if n.name not in taken and step.accepts(n):
            if i == last:
                return [(n, i)]
            for u in users_through_views(g, n.name):
                rest = self._from(g, u, i + 1, taken)
                if rest:
                    return [(n, i), *rest]
            if all(s.optional for s in self.steps[i + 1:]):
                return [(n, i)]
        if step.optional and i < last:
            return self._from(g, n, i + 1, taken)
        return None


@dataclass(frozen=True)
class Siblings(Pattern):
    """Ops of one target reading the same value as their first input (QKV, gate/up): horizontal fusion."""

    targets: frozenset[object]
    min_count: int = 2

    def find(self, g: OpGraph, taken: set[str]) -> Iterator[Match]:
        groups: dict[tuple[str, int], list[OpNode]] = {}
        for n in g.nodes:  # with or without a bias (QKV of Qwen2): fused when all siblings have one or none
            if n.target in self.targets and n.name not in taken and len(n.inputs) in (2, 3):
                groups.setdefault((through_views(g, n.inputs[0]), len(n.inputs)), []).append(n)
        for members in groups.values():
            ks = {m.in_specs[1].shape[-1] for m in members}
            if len(members) >= self.min_count and len(ks) == 1:
                taken |= {m.name for m in members}
                yield Match(tuple(members))


def rope_matches(g: OpGraph, by_table: dict[str, list[tuple[str, OpNode]]], taken: set[str], *,
                 root: str | tuple[str, ...]) -> Iterator[Match]:
    """One match per rotary table: the (part, node) pairs found reading it, in graph order, unless a part
    other than the `root` (the op whose output is the rotated tensor; several names: any of them) feeds something
    outside the match."""
    roots = (root,) if isinstance(root, str) else root
    for parts in by_table.values():
        nodes = tuple(sorted({n for _, n in parts}, key=lambda n: g.index(n.name)))
        inside = {n.name for n in nodes}
        if any(escapes(g, n, inside) for k, n in parts if k not in roots):
            continue
        taken |= inside
        yield Match(nodes, tuple(parts))


@dataclass(frozen=True)
class RotateHalfRope(Pattern):
    """`x * cos + cat(-x2, x1) * sin` for every tensor rotated with the same cos table: one RoPE kernel. Where the
    rotated part is put back beside the part that is not rotated (HF's partial rotary form, `cat([rotated, x_pass])`:
    Phi-3, StableLM; with a full rotary x_pass is empty), that cat is the same kernel: vLLM's rotary kernel rotates
    the first rotary_dim dims of each head in place."""

    def find(self, g: OpGraph, taken: set[str]) -> Iterator[Match]:
        by_table: dict[str, list[tuple[str, OpNode]]] = {}
        for add in g.nodes:
            if add.target not in _ADD or add.name in taken or len(add.inputs) != 2:
                continue
            found = self._one(g, add)
            if found and not any(n.name in taken for _, n in found):
                cos = through_views(g, next(n for k, n in found if k == "mul_cos").inputs[1])
                by_table.setdefault(cos, []).extend(found)
        yield from rope_matches(g, by_table, taken, root=("add", "pass_cat"))

    @staticmethod
    def _one(g: OpGraph, add: OpNode) -> list[tuple[str, OpNode]] | None:
        found = RotateHalfRope._rotation(g, add)
        if found is None:
            return None
        x = through_views(g, found[0][1].inputs[0])
        users = users_through_views(g, add.name)
        if len(users) == 1 and users[0].target is aten.cat.default and len(users[0].inputs) == 2 \
                and through_views(g, users[0].inputs[0]) == add.name and through_views(g, users[0].inputs[1]) == x:
            return [*found, ("pass_cat", users[0])]
        return found

    @staticmethod
    def _rotation(g: OpGraph, add: OpNode) -> list[tuple[str, OpNode]] | None:
        a, b = (g.producer(through_views(g, x)) for x in add.inputs)
        for mul_cos, mul_sin in ((a, b), (b, a)):
            if mul_cos is None or mul_sin is None or mul_cos.target not in _MUL or mul_sin.target not in _MUL:
                continue
            cat = g.producer(through_views(g, mul_sin.inputs[0]))
            if cat is None or cat.target is not aten.cat.default or len(cat.inputs) != 2:
                continue
            neg = g.producer(cat.inputs[0])
            if neg is None or neg.target is not aten.neg.default:
                continue
            x = through_views(g, mul_cos.inputs[0])
            if through_views(g, neg.inputs[0]) != x or through_views(g, cat.inputs[1]) != x:
                continue
            return [("x", mul_cos), ("mul_cos", mul_cos), ("mul_sin", mul_sin), ("cat", cat), ("neg", neg),
                    ("add", add)]
        return None


@dataclass(frozen=True)
class KvCacheAppend(Pattern):
    """`cat([cache, new], seq_dim)` of the K and V caches feeding one attention: a paged-cache write."""

    def find(self, g: OpGraph, taken: set[str]) -> Iterator[Match]:
        by_attn: dict[str, list[OpNode]] = {}
        for n in g.nodes:
            if n.target is aten.cat.default and n.name not in taken and len(n.inputs) == 2 and n.inputs[0] in g.inputs:
                attn = [u for u in users_through_views(g, n.name) if u.target is _SDPA]
                if attn:
                    by_attn.setdefault(attn[0].name, []).append(n)
        for cats in by_attn.values():
            taken |= {c.name for c in cats}
            yield Match(tuple(cats))


@dataclass(frozen=True)
class ModuleScope(Pattern):
    """Every op inside modules whose class name ends with one of the given names (e.g. the rotary tables a fused
    RoPE kernel reads itself: RotaryEmbedding, LlamaRotaryEmbedding, Qwen2RotaryEmbedding, ...)."""

    suffixes: tuple[str, ...]

    def find(self, g: OpGraph, taken: set[str]) -> Iterator[Match]:
        nodes = tuple(n for n in g.nodes if n.module_type and n.module_type.endswith(self.suffixes)
                      and n.name not in taken)
        if nodes:
            taken |= {n.name for n in nodes}
            yield Match(nodes)


# ---- builders ----------------------------------------------------------------------------------------------------


def _rows_hidden(n: OpNode) -> tuple[int, int]:
    s = n.out[0]
    return s.numel // s.shape[-1], s.shape[-1]


def build_rmsnorm(m: Match, g: OpGraph, ctx: PlanContext) -> list[KernelCall]:
    rows, hidden = _rows_hidden(m.nodes[-1])
    return [ctx.call(KernelKind.RMSNORM, m.nodes, m.nodes[-1].out[0].dtype, rows=rows, hidden=hidden)]


def build_add_rmsnorm(m: Match, g: OpGraph, ctx: PlanContext) -> list[KernelCall]:
    rows, hidden = _rows_hidden(m.nodes[-1])
    return [ctx.call(KernelKind.ADD_RMSNORM, m.nodes, m.nodes[-1].out[0].dtype, path_nodes=m.nodes[1:], rows=rows,
                     hidden=hidden)]


def build_fused_gemm(m: Match, g: OpGraph, ctx: PlanContext) -> list[KernelCall]:
    x, k = m.nodes[0].in_specs[0], m.nodes[0].in_specs[1].shape[-1]
    n = sum(node.in_specs[1].shape[0] for node in m.nodes)
    leaves = "+".join(node.module_path.rsplit(".", 1)[-1] for node in m.nodes)
    call = ctx.call(KernelKind.GEMM, m.nodes, x.dtype, m=x.numel // k, n=n, k=k,
                    epilogue="bias" if len(m.nodes[0].inputs) == 3 else "none")
    name = f"{call.module_path}.{leaves}" if call.module_path else leaves
    return [KernelCall.make(call.kind, call.dtype, name=name, module_path=call.module_path, source=call.source,
                            fx_nodes=call.fx_nodes, **dict(call.params))]


def build_rope(m: Match, g: OpGraph, ctx: PlanContext) -> list[KernelCall]:
    heads: list[int] = []
    tokens, dim = 0, 0
    for x in m.part("x"):
        xs, cs = x.in_specs[0], x.in_specs[1]
        dim = xs.shape[-1]
        bdims = [i for i in range(len(xs.shape) - 1) if i < len(cs.shape) and cs.shape[i] == 1 and xs.shape[i] > 1]
        h = xs.shape[bdims[-1]] if bdims and bdims[-1] > 0 else xs.shape[1]
        heads.append(h)
        tokens = xs.numel // (h * dim)
    heads.sort(reverse=True)
    return [ctx.call(KernelKind.ROPE, m.nodes, m.nodes[-1].out[0].dtype, label="rope", tokens=tokens,
                     heads_q=heads[0], heads_kv=sum(heads[1:]), head_dim=dim)]


def build_kv_write(m: Match, g: OpGraph, ctx: PlanContext) -> list[KernelCall]:
    new = sum(c.in_specs[1].numel for c in m.nodes)
    call = elementwise_call(ctx, m.nodes, "kv_cache_write", label="kv_cache_write")
    return [KernelCall.make(call.kind, call.dtype, name=call.name, module_path=call.module_path, source=call.source,
                            fx_nodes=call.fx_nodes, numel=new, inputs=1, outputs=1, op="kv_cache_write")]


def build_silu_mul(m: Match, g: OpGraph, ctx: PlanContext) -> list[KernelCall]:
    rows, hidden = _rows_hidden(m.nodes[-1])
    return [ctx.call(KernelKind.SILU_MUL, m.nodes, m.nodes[-1].out[0].dtype, label="silu_mul", rows=rows,
                     hidden=hidden)]


def build_sampling(m: Match, g: OpGraph, ctx: PlanContext) -> list[KernelCall]:
    a = m.nodes[0].in_specs[0]
    vocab = a.shape[-1]
    return [ctx.call(KernelKind.ARGMAX, m.nodes, a.dtype, label="sample_argmax", rows=a.numel // vocab, vocab=vocab)]


def build_attention(m: Match, g: OpGraph, ctx: PlanContext) -> list[KernelCall]:
    return LOWERINGS[aten.scaled_dot_product_attention.default](m.nodes[0], ctx)


def build_nothing(m: Match, g: OpGraph, ctx: PlanContext) -> list[KernelCall]:
    return []


# ---- presets -----------------------------------------------------------------------------------------------------


def _full_binary(n: OpNode) -> bool:
    return len(n.in_specs) == 2 and n.in_specs[0].shape == n.in_specs[1].shape


def _square(n: OpNode) -> bool:
    return n.scalar(1) == 2


RMSNORM_STEPS = (Step(_CASTS, optional=True), Step(frozenset({aten.pow.Tensor_Scalar}), where=_square),
                 Step(frozenset({aten.mean.dim})), Step(frozenset({aten.add.Tensor, aten.add.Scalar})),
                 Step(frozenset({aten.rsqrt.default})), Step(_MUL), Step(_CASTS, optional=True), Step(_MUL))
ADD_RMSNORM_STEPS = (Step(_ADD, may_escape=True, where=_full_binary), *RMSNORM_STEPS)

Patterns = Sequence[tuple[Pattern, Builder]]

EAGER: Patterns = ()
SERVING: Patterns = (
    (ModuleScope(("RotaryEmbedding",)), build_nothing),
    (Siblings(frozenset({aten.linear.default})), build_fused_gemm),
    (Chain(ADD_RMSNORM_STEPS), build_add_rmsnorm),
    (Chain(RMSNORM_STEPS), build_rmsnorm),
    (RotateHalfRope(), build_rope),
    (KvCacheAppend(), build_kv_write),
    (Chain((Step(frozenset({aten.scaled_dot_product_attention.default})),
            Step(frozenset({aten.reshape.default, aten.contiguous.default, aten.clone.default}), optional=True))),
     build_attention),
    (Chain((Step(frozenset({aten.silu.default})), Step(_MUL))), build_silu_mul),
    (Chain((Step(_CASTS, optional=True), Step(frozenset({aten.argmax.default})))), build_sampling),
)

# ---- HF families: eager-only attention, MLA, Gemma norms and GeGLU, gpt-oss RoPE and experts ------------------
# Tried after the generic serving patterns above, so they only claim what those leave (no other family's plan
# changes). lowering.attention_ops holds the attention ops (torchsim::attention, torchsim::mla_decode).

from torchsim.lowering.attention_ops import ATTENTION_OP, MLA_DECODE_OP  # noqa: E402

_FAMILY_ATTENTION = frozenset({ATTENTION_OP, MLA_DECODE_OP})


@dataclass(frozen=True)
class LatentKvAppend(Pattern):
    """`cat([cache, new])` of the caches an attention module appends to (K/V before torchsim::attention; MLA's
    latent c_kv and k_pe, which a prefill decompresses before attending): one cache-write kernel per module, as
    vLLM's reshape_and_cache / concat_and_cache_mla write them."""

    def find(self, g: OpGraph, taken: set[str]) -> Iterator[Match]:
        by_module: dict[str, list[OpNode]] = {}
        for n in g.nodes:
            if (n.target is aten.cat.default and n.name not in taken and len(n.inputs) == 2
                    and n.inputs[0] in g.inputs and n.module_type.endswith("Attention")):
                by_module.setdefault(n.module_path, []).append(n)
        for path, cats in by_module.items():
            if any(m.target in _FAMILY_ATTENTION for m in g.nodes if m.module_path == path):
                taken |= {c.name for c in cats}
                yield Match(tuple(cats))


@dataclass(frozen=True)
class NormLeftovers(Pattern):
    """What a fused RMSNorm kernel also does in a norm module whose chain another pattern claimed: Gemma's
    `(1 + weight)` on the weight vector and the cast of the output back to the activation dtype."""

    def find(self, g: OpGraph, taken: set[str]) -> Iterator[Match]:
        scopes: dict[str, list[OpNode]] = {}
        for n in g.nodes:
            if n.module_type.endswith("RMSNorm"):
                scopes.setdefault(n.module_path, []).append(n)
        for nodes in scopes.values():
            if not any(n.name in taken for n in nodes):
                continue  # no fused norm here
            left = [n for n in nodes if n.name not in taken and not is_view(n)
                    and (n.target in _CASTS or n.target in _ADD or n.target is aten.add.Scalar)]
            for n in left:  # one match each: the weight prep feeds the norm, the output cast reads it
                taken.add(n.name)
                yield Match((n,))


@dataclass(frozen=True)
class ChunkRope(Pattern):
    """gpt-oss's rotation: `cat(x1 * cos - x2 * sin, x2 * cos + x1 * sin)` of x's two halves, per tensor; every
    tensor rotated with one table is one RoPE kernel (as RotateHalfRope)."""

    def find(self, g: OpGraph, taken: set[str]) -> Iterator[Match]:
        by_table: dict[str, list[tuple[str, OpNode]]] = {}
        for cat in g.nodes:
            if cat.target is not aten.cat.default or cat.name in taken or len(cat.inputs) != 2:
                continue
            found = self._one(g, cat)
            if found and not any(n.name in taken for _, n in found):
                by_table.setdefault(found[-1][0], []).extend(found[:-1])
        yield from rope_matches(g, by_table, taken, root="cat")

    @staticmethod
    def _one(g: OpGraph, cat: OpNode) -> list[tuple[str, OpNode]] | None:
        sub, add = (g.producer(through_views(g, x)) for x in cat.inputs)
        if sub is None or add is None or sub.target is not aten.sub.Tensor or add.target not in _ADD:
            return None
        muls = [g.producer(through_views(g, x)) for x in (*sub.inputs, *add.inputs)]
        if len(muls) != 4 or any(m is None or m.target not in _MUL or len(m.inputs) != 2 for m in muls):
            return None
        xs = {through_views(g, m.inputs[0]) for m in muls if m is not None}
        first = muls[0]
        assert first is not None
        if len(xs) != 1:  # the halves are views (chunk) of one tensor
            return None
        table = through_views(g, first.inputs[1])
        return [("x", first), *(("mul", m) for m in muls[1:] if m is not None), ("sub", sub), ("add", add),
                ("cat", cat), (table, cat)]


@dataclass(frozen=True)
class BetweenGroupedGemms(Pattern):
    """Ops of an experts module between its first and last grouped GEMM that no pattern claimed (gpt-oss: the
    gate/up bias, the clamped SwiGLU with its limit): one activation kernel, as vLLM's fused-MoE path runs an
    activation-and-mul kernel between the two expert GEMMs (the biases in the GEMMs' epilogues)."""

    def find(self, g: OpGraph, taken: set[str]) -> Iterator[Match]:
        scopes: dict[str, list[OpNode]] = {}
        for n in g.nodes:
            if n.module_type.endswith("Experts"):
                scopes.setdefault(n.module_path, []).append(n)
        for nodes in scopes.values():
            gemms = [g.index(n.name) for n in nodes if n.op_name == "_grouped_mm"]
            if len(gemms) < 2:
                continue
            left = [n for n in nodes if gemms[0] < g.index(n.name) < gemms[-1] and n.name not in taken
                    and not is_view(n) and n.op_name != "_grouped_mm"]
            if left:
                taken |= {n.name for n in left}
                yield Match(tuple(left))


@dataclass(frozen=True)
class CastRouterGemm(Pattern):
    """A router GEMM whose code casts its activations and weight to fp32 first (DeepSeek-V2/V3's TopkRouter):
    serving runtimes run it on the model-dtype operands with an fp32 result (vLLM's DeepSeek gate is a
    ReplicatedLinear in the model dtype; SGLang's dsv3_router_gemm reads bf16 and writes fp32), so the casts
    and the GEMM are one GEMM in the operands' own dtype."""

    def find(self, g: OpGraph, taken: set[str]) -> Iterator[Match]:
        for n in g.nodes:
            if (n.target is not aten.linear.default or n.name in taken
                    or not n.module_type.endswith(("TopkRouter", "TopKRouter"))):
                continue
            casts = [c for x in n.inputs[:2] if (c := g.producer(through_views(g, x))) is not None
                     and c.target in _CASTS and c.name not in taken and not escapes(g, c, {n.name})]
            if casts:
                taken |= {n.name, *(c.name for c in casts)}
                yield Match((*casts, n))


def build_cast_router_gemm(m: Match, g: OpGraph, ctx: PlanContext) -> list[KernelCall]:
    gemm = m.nodes[-1]
    x, w = gemm.in_specs[0], gemm.in_specs[1]
    dtype = min((c.in_specs[0].dtype for c in m.nodes[:-1]), key=lambda d: d.nbytes)
    k = w.shape[-1]
    return [ctx.call(KernelKind.GEMM, [gemm], dtype, m=x.numel // k, n=w.shape[0], k=k, epilogue="none")]


def _is_tanh_gelu(n: OpNode) -> bool:
    return n.target is aten.gelu.default


def build_act_mul(m: Match, g: OpGraph, ctx: PlanContext) -> list[KernelCall]:
    """GeGLU / clamped SwiGLU as the act-and-mul kernel (vLLM's act_and_mul kernel is one template over the
    activation): rows x hidden of the output, reading gate and up."""
    out = max((n.out[0] for n in m.nodes if n.out), key=lambda s: s.numel)
    hidden = out.shape[-1]
    label = "gelu_mul" if any(n.target is aten.gelu.default for n in m.nodes) else "act_mul"
    return [ctx.call(KernelKind.SILU_MUL, m.nodes, out.dtype if out.dtype.nbytes <= 2 else m.nodes[0].in_specs[0].dtype,
                     label=label, rows=out.numel // hidden, hidden=hidden)]


def build_chunk_rope(m: Match, g: OpGraph, ctx: PlanContext) -> list[KernelCall]:
    heads: list[int] = []
    tokens, dim = 0, 0
    for cat in m.part("cat"):
        xs = cat.out[0]
        dim, h = xs.shape[-1], xs.shape[1] if len(xs.shape) == 4 else 1
        heads.append(h)
        tokens = xs.numel // (h * dim)
    heads.sort(reverse=True)
    return [ctx.call(KernelKind.ROPE, m.nodes, m.nodes[-1].out[0].dtype, label="rope", tokens=tokens,
                     heads_q=heads[0], heads_kv=sum(heads[1:]), head_dim=dim)]


def build_family_attention(m: Match, g: OpGraph, ctx: PlanContext) -> list[KernelCall]:
    return LOWERINGS[m.nodes[0].target](m.nodes[0], ctx)


HF_FAMILY_SERVING: Patterns = (
    (CastRouterGemm(), build_cast_router_gemm),
    (LatentKvAppend(), build_kv_write),
    (Chain((Step(_FAMILY_ATTENTION),
            Step(frozenset({aten.reshape.default, aten.contiguous.default, aten.clone.default}), optional=True))),
     build_family_attention),
    (NormLeftovers(), build_nothing),
    (ChunkRope(), build_chunk_rope),
    (Chain((Step(frozenset({aten.gelu.default}), where=_is_tanh_gelu), Step(_MUL))), build_act_mul),
    (BetweenGroupedGemms(), build_act_mul),
)
SERVING = (*SERVING, *HF_FAMILY_SERVING)

# What plan_graph tries, per preset: the patterns model families registered (register_patterns), then the
# generic ones above. The registry lives here so lowering never imports models: a family registers its
# fusions when its module is imported (models/mixtral.py imports models/moe_patterns.py, which registers the MoE
# router/align/combine stages).
PRESETS: dict[str, Patterns] = {"eager": EAGER, "serving": SERVING}


def register_patterns(preset: str, pairs: Patterns) -> None:
    """Try `pairs` before the generic patterns of `preset` (once: registering the same builders again is a no-op).

    >>> n = len(PRESETS["serving"])
    >>> register_patterns("serving", ((KvCacheAppend(), build_kv_write),))  # its builder is there already
    >>> len(PRESETS["serving"]) == n
    True
    >>> register_patterns("nope", ())
    Traceback (most recent call last):
    ...
    ValueError: unknown preset 'nope'; valid: eager, serving
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r}; valid: {', '.join(PRESETS)}")
    known = {build for _, build in PRESETS[preset]}
    new = tuple(pair for pair in pairs if pair[1] not in known)
    PRESETS[preset] = (*new, *PRESETS[preset])
