"""Tensor parallelism: one rank's kernels of a plan split Megatron-style over `tp` GPUs, with its collectives.

`shard_plan(plan, tp, system)` rewrites the plan of the whole model (as lowering captured it) into the
plan one rank runs, the way vLLM and TensorRT-LLM lay a decoder out (Megatron-LM's column/row splits):

- column-parallel GEMMs (Q/K/V, gate/up, a fused QKV or gate-up, MoE experts' first GEMM): each rank computes
  n / tp outputs; KV heads are split too, or replicated (one per rank) when there are fewer KV heads than
  ranks, as vLLM's QKVParallelLinear does.
- row-parallel GEMMs (O, down, the MoE experts' second GEMM): each rank reduces over k / tp and holds a
  partial sum of the full hidden width; an all-reduce follows (for an MoE block after its combine, the
  `moe_sum` reduce, as vLLM's FusedMoE reduces once per block).
- the kernels between a column- and the next row-parallel GEMM work on this rank's heads or intermediate
  columns (attention, RoPE, the KV-cache write, q/k norms, SiLU-and-mul, other elementwise ops): they shrink
  with their heads; the kernels on the residual stream (norms, residual adds, the MoE router) are replicated.
- the embedding is vocabulary-parallel (each rank looks up its slice; an all-reduce of tokens x hidden
  follows) and the LM head is column-parallel over the vocabulary, its logits all-gathered before sampling.

Expert parallelism inside the tensor-parallel group (`ep` = `tp`, vLLM's `--enable-expert-parallel`): every
rank holds E / ep whole experts instead of a 1/tp slice of every expert's columns; the tokens are on every rank
already (attention is tensor-parallel), so a rank runs its experts' grouped GEMMs over the tokens routed to them
(the real routing counts of its experts) and the block's all-reduce sums the ranks' partial outputs, as in the
TP-within-expert layout. Ranks are no longer symmetric: `shard_plan(..., rank=r)` is rank r's plan, and the
prediction takes, layer by layer, the slowest rank's MoE kernels (torchsim.prediction.pipeline). Expert
parallelism with data-parallel attention (`tp` = 1, `ep` > 1: each rank its share of the batch, all-to-all
dispatch and combine around the experts, DeepEP-style) is `_expert_dispatch`.

A collective is a KernelCall of kind COLLECTIVE (op, nbytes per rank as nccl-tests counts them, ranks, the
system's name), costed by torchsim.sim.collectives on the system's links. Symmetric ranks: one rank's plan
stands for all. Kernels whose role is not known (a GEMM named neither way, DeepSeek's MLA) are an error that
names them: nothing is split by guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.plan import KernelPlan, Preset

# the last component of a GEMM's module path (a fused GEMM joins its parts with '+'), by Megatron role
COLUMN = frozenset({"q_proj", "k_proj", "v_proj", "qkv_proj", "gate_proj", "up_proj", "gate_up_proj",
                    "query_key_value", "c_attn", "c_fc", "fc1", "w1", "w3", "dense_h_to_4h", "Wqkv", "wqkv"})
ROW = frozenset({"o_proj", "down_proj", "dense", "out_proj", "c_proj", "fc2", "w2", "dense_4h_to_h", "wo"})
REPLICATED = frozenset({"gate", "router"})  # MoE routers: every rank routes every token
KV_PARTS = frozenset({"k_proj", "v_proj"})


class ParallelError(ValueError):
    """A model or plan that cannot be split as asked (names the kernel, field and what would be valid)."""


def kv_heads_per_rank(heads_kv: int, tp: int) -> int:
    """KV heads each rank holds: split when tp divides them, else replicated one per rank (tp a multiple)."""
    if heads_kv % tp == 0:
        return heads_kv // tp
    if tp % heads_kv == 0:
        return 1
    raise ParallelError(f"{heads_kv} KV heads cannot be split over tp={tp} ranks (tp must divide the KV heads or "
                        "be a multiple of them)")


def _parts(c: KernelCall) -> list[str]:
    return c.name.rsplit(".", 1)[-1].split("+")


def _role(c: KernelCall) -> str:
    parts = _parts(c)
    if c.name.endswith("lm_head"):
        return "vocab"
    for role, names in (("column", COLUMN), ("row", ROW), ("replicated", REPLICATED)):
        if all(p in names for p in parts):
            return role
    return ""


def _set(c: KernelCall, **params: Any) -> KernelCall:
    return replace(c, params=tuple(sorted({**dict(c.params), **params}.items())))


def _split(value: int, tp: int, what: str, c: KernelCall) -> int:
    if value % tp:
        raise ParallelError(f"{c.kind.value} kernel {c.name!r}: {what} = {value} is not divisible by tp={tp}")
    return value // tp


def _collective(op: str, nbytes: int, tp: int, system: str, after: KernelCall, *,
                custom_ar: bool = False) -> KernelCall:
    """A COLLECTIVE call after `after`; `custom_ar`: an all-reduce a serving engine runs, which may take its custom
    one-/two-stage kernels instead of NCCL (torchsim.sim.custom_allreduce)."""
    extra: dict[str, Any] = {"custom_ar": True} if custom_ar else {}
    return KernelCall.make(KernelKind.COLLECTIVE, after.dtype, name=f"{after.name}.{op}", phase=after.phase,
                           layer=after.layer, stream=after.stream, module_path=after.module_path,
                           source=after.source, op=op, nbytes=int(nbytes), ranks=tp, system=system, **extra)


def _heads(plan: KernelPlan) -> dict[int | None, tuple[int, int, int]]:
    """(heads_q, heads_kv, head_dim) of each layer's attention."""
    out: dict[int | None, tuple[int, int, int]] = {}
    for c in plan.calls:
        if c.kind in (KernelKind.ATTENTION_PREFILL, KernelKind.ATTENTION_DECODE):
            out.setdefault(c.layer, (c.p("heads_q"), c.p("heads_kv"), c.p("head_dim")))
        elif c.kind is KernelKind.MLA_DECODE or (c.kind is KernelKind.ATTENTION_PREFILL and c.p("head_dim_v", 0)):
            raise ParallelError(f"kernel {c.name!r} is multi-head latent attention (DeepSeek MLA): its split over "
                                "tensor-parallel ranks is not modelled yet; run it with tp=1")
    return out


def shard_plan(plan: KernelPlan, tp: int, system: str, *, ep: int = 1, rank: int = 0) -> KernelPlan:
    """The kernels rank `rank` of `tp` tensor-parallel ranks runs for `plan`, with its collectives; `ep` = tp
    splits the MoE experts whole over the ranks instead of each expert's columns."""
    if tp == 1 and ep > 1:
        return _expert_dispatch(plan, ep, system, rank)
    if ep not in (1, tp):
        raise ParallelError(f"ep={ep} with tp={tp}: expert parallelism is modelled inside the tensor-parallel group "
                            "(ep = tp) or with data-parallel attention (tp = 1)")
    if not 0 <= rank < tp:
        raise ParallelError(f"rank {rank} is not one of the {tp} ranks")
    if tp == 1:
        return plan
    heads = _heads(plan)
    out: list[KernelCall] = []
    sharded = False  # between a column- and the next row-parallel GEMM: this rank's heads or columns only
    pending: tuple[KernelCall, int] | None = None  # partial sums to all-reduce: after which kernel, their bytes
    engine = plan.preset is Preset.SERVING  # a serving engine's all-reduce: its custom kernels where they are faster
    for c in plan.calls:
        if pending is not None and c.kind is not KernelKind.REDUCE:
            out.append(_collective("all-reduce", pending[1], tp, system, pending[0], custom_ar=engine))
            pending = None
        hq, hkv, d = heads.get(c.layer, (0, 0, 0))
        kvr = kv_heads_per_rank(hkv, tp) if hkv else 0
        k = c.kind
        if k is KernelKind.EMBEDDING:
            out.append(c)
            pending = c, c.p("tokens") * c.p("hidden") * c.dtype.nbytes
            continue
        if k is KernelKind.GROUPED_GEMM and ep > 1:  # this rank's whole experts over the tokens routed to them
            c = _set(c, tokens_per_expert=_expert_slice(c, ep, rank))
            sharded = not sharded
            if not sharded:
                pending = c, _row_bytes(c)
            out.append(c)
            continue
        if k is KernelKind.SILU_MUL and ep > 1 and sharded and ".experts" in c.name:
            out.append(_set(c, rows=_routed_rows(out)))
            continue
        if k in (KernelKind.GEMM, KernelKind.GROUPED_GEMM):
            role = _role(c)
            if k is KernelKind.GROUPED_GEMM and not role:  # an MoE block's experts: gate-up, then down
                role = "row" if sharded else "column"
            if role == "vocab":
                c = _set(c, n=_split(c.p("n"), tp, "n (vocabulary)", c))
                out.append(c)
                out.append(_collective("all-gather", c.p("m") * c.p("n") * tp * c.dtype.nbytes, tp, system, c))
                continue
            if role == "column":
                c = _set(c, n=_column_n(c, tp, hq, hkv, kvr, d))
                sharded = True
            elif role == "row":
                c = _set(c, k=_split(c.p("k"), tp, "k", c))
                sharded = False
                pending = c, _row_bytes(c)
            elif role == "replicated" or not sharded:
                if not role and c.p("batch", 1) == 1:
                    raise ParallelError(f"GEMM {c.name!r} ({c.module_path}): its tensor-parallel role is not known "
                                        f"(a column-parallel name: {', '.join(sorted(COLUMN))}; row-parallel: "
                                        f"{', '.join(sorted(ROW))})")
            else:  # a batched GEMM inside attention (eager preset): one batch entry per head
                c = _set(c, batch=_split(c.p("batch"), tp, "batch (heads)", c))
            out.append(c)
            continue
        if sharded:
            c = _shard_inner(c, tp, hq, hkv, kvr)
        elif k is KernelKind.REDUCE and pending is not None:  # the MoE combine reduces before the all-reduce
            out.append(c)
            pending = c, c.p("numel_out") * c.dtype.nbytes
            continue
        out.append(c)
    if pending is not None:
        out.append(_collective("all-reduce", pending[1], tp, system, pending[0], custom_ar=engine))
    return replace(plan, calls=tuple(out))


def sequence_parallel(plan: KernelPlan, tp: int, system: str) -> KernelPlan:
    """Megatron sequence parallelism on a tensor-parallel rank's plan (`shard_plan`'s output): each all-reduce
    becomes a reduce-scatter over the tokens, the residual-stream kernels after it (norms, residual adds) run on
    this rank's tokens / tp, and an all-gather restores every token before the next GEMM (nccl-tests sizes: both
    the full tensor). A step whose token count tp does not divide (decode at a batch below tp) keeps its
    all-reduces: the plan comes back unchanged."""
    tokens = next((c.p("tokens") for c in plan.calls if c.kind is KernelKind.EMBEDDING), 0)
    if tp == 1 or not tokens or tokens % tp:
        return plan
    if any(c.kind is KernelKind.GROUPED_GEMM for c in plan.calls):
        raise ParallelError("sequence parallelism with MoE layers is not modelled (their router and dispatch see "
                            "every token); run the MoE model without it")
    out: list[KernelCall] = []
    scattered = 0  # bytes of the full tensor while this rank holds tokens / tp of it, else 0
    for c in plan.calls:
        if c.kind is KernelKind.COLLECTIVE and c.p("op") == "all-reduce":
            params = tuple((k, v) for k, v in _set(c, op="reduce-scatter").params if k != "custom_ar")  # NCCL's
            out.append(replace(c, params=params, name=c.name.replace("all-reduce", "reduce-scatter")))
            scattered = c.p("nbytes")
            continue
        if scattered and c.kind is KernelKind.GEMM:  # every token again before the next projection
            out.append(_collective("all-gather", scattered, tp, system, out[-1]))
            scattered = 0
        if scattered and c.kind in (KernelKind.RMSNORM, KernelKind.ADD_RMSNORM):
            c = _set(c, rows=_split(c.p("rows"), tp, "rows (tokens)", c))
        elif scattered and c.kind is KernelKind.ELEMENTWISE:
            c = _set(c, numel=_split(c.p("numel"), tp, "numel (tokens x hidden)", c))
        out.append(c)
    return replace(plan, calls=tuple(out))


def _expert_dispatch(plan: KernelPlan, ep: int, system: str, rank: int) -> KernelPlan:
    """Data-parallel attention + expert parallelism (DeepEP-style, as SGLang/vLLM run DeepSeek): `plan` is one
    rank's share of the batch; every rank runs the whole model on it except the MoE experts, of which it holds
    E / ep. Before an MoE block's experts an all-to-all sends each of the rank's token copies (top-k per token)
    to the rank holding its expert, and after them a second one brings the results back (each nccl-tests'
    all-to-all of the rank's copies x hidden). The rank's experts see every rank's tokens: `plan`'s routing
    counts (its own tokens) times ep, as if every rank's tokens routed alike."""
    if not 0 <= rank < ep:
        raise ParallelError(f"rank {rank} is not one of the {ep} ranks")
    out: list[KernelCall] = []
    first = True  # the next grouped GEMM is a block's first (gate-up)
    for c in plan.calls:
        if c.kind is KernelKind.GROUPED_GEMM:
            copies = sum(c.p("tokens_per_expert"))  # this rank's tokens x top-k
            local = tuple(n * ep for n in _expert_slice(c, ep, rank))
            if first:  # dispatch: the copies of the block's input (k = hidden) go to their experts' ranks
                out.append(_collective("all-to-all", copies * c.p("k") * 2, ep, system, c))
                out.append(_set(c, tokens_per_expert=local))
            else:  # combine: the experts' outputs (n = hidden) come back
                out.append(_set(c, tokens_per_expert=local))
                out.append(_collective("all-to-all", copies * c.p("n") * 2, ep, system, c))
            first = not first
            continue
        if c.kind is KernelKind.SILU_MUL and ".experts" in c.name:
            out.append(_set(c, rows=_routed_rows(out)))
            continue
        out.append(c)
    return replace(plan, calls=tuple(out))


def _routed_rows(calls: Sequence[KernelCall]) -> int:
    """The token copies the latest grouped GEMM of `calls` runs (the rows of the experts' activation after it)."""
    grouped = next(x for x in reversed(calls) if x.kind is KernelKind.GROUPED_GEMM)
    return int(sum(grouped.p("tokens_per_expert")))


def _expert_slice(c: KernelCall, ep: int, rank: int) -> tuple[int, ...]:
    counts = tuple(c.p("tokens_per_expert"))
    if len(counts) % ep:
        raise ParallelError(f"{c.kind.value} kernel {c.name!r}: {len(counts)} experts are not divisible over ep={ep} "
                            "ranks")
    per = len(counts) // ep
    return counts[rank * per:(rank + 1) * per]


def _row_bytes(c: KernelCall) -> int:
    """Bytes of the full-width output a row-parallel GEMM leaves as a partial sum."""
    if c.kind is KernelKind.GROUPED_GEMM:
        return sum(c.p("tokens_per_expert")) * c.p("n") * 2
    out_bytes = 2 if c.dtype.nbytes < 2 else c.dtype.nbytes  # FP8 GEMMs write bf16
    return c.p("m") * c.p("n") * c.p("batch", 1) * out_bytes


def _column_n(c: KernelCall, tp: int, hq: int, hkv: int, kvr: int, d: int) -> int:
    n, parts = c.p("n"), _parts(c)
    if not (KV_PARTS & set(parts) or "qkv_proj" in parts or "query_key_value" in parts or "c_attn" in parts):
        return _split(n, tp, "n", c)
    if not hq:
        raise ParallelError(f"GEMM {c.name!r} projects K/V but its layer has no attention kernel to take heads from")
    if set(parts) == {"k_proj"} or set(parts) == {"v_proj"}:
        return kvr * d
    if set(parts) == KV_PARTS:
        return 2 * kvr * d
    if n != (hq + 2 * hkv) * d:
        raise ParallelError(f"GEMM {c.name!r}: n = {n} is not (heads_q + 2 heads_kv) x head_dim = "
                            f"({hq} + 2 x {hkv}) x {d}, so its Q/K/V split is not known")
    return (_split(hq, tp, "heads_q", c) + 2 * kvr) * d


def _shard_inner(c: KernelCall, tp: int, hq: int, hkv: int, kvr: int) -> KernelCall:
    """A kernel between a column- and a row-parallel GEMM, on this rank's heads or intermediate columns."""
    k, p = c.kind, c.p
    if k in (KernelKind.ATTENTION_PREFILL, KernelKind.ATTENTION_DECODE):
        return _set(c, heads_q=_split(p("heads_q"), tp, "heads_q", c), heads_kv=kvr)
    if k is KernelKind.ROPE:
        return _set(c, heads_q=_split(p("heads_q"), tp, "heads_q", c), heads_kv=kvr)
    if k is KernelKind.SILU_MUL:
        return _set(c, hidden=_split(p("hidden"), tp, "hidden", c))
    if k in (KernelKind.RMSNORM, KernelKind.ADD_RMSNORM):  # per-head norms (Qwen3's q_norm / k_norm)
        if c.name.endswith("k_norm") and hkv:
            return _set(c, rows=p("rows") // hkv * kvr)
        return _set(c, rows=_split(p("rows"), tp, "rows", c))
    if k is KernelKind.ELEMENTWISE:
        if c.name.endswith("kv_cache_write") and hkv:  # this rank's KV heads, replicated ones included
            return _set(c, numel=p("numel") // hkv * kvr)
        return _set(c, numel=_split(p("numel"), tp, "numel", c))
    if k is KernelKind.SOFTMAX:
        return _set(c, rows=_split(p("rows"), tp, "rows", c))
    if k is KernelKind.REDUCE:
        return _set(c, numel_in=_split(p("numel_in"), tp, "numel_in", c),
                    numel_out=_split(p("numel_out"), tp, "numel_out", c))
    return c  # the router and its bookkeeping (top-k, MoE alignment) see every token on every rank


__all__ = ["COLUMN", "REPLICATED", "ROW", "ParallelError", "kv_heads_per_rank", "sequence_parallel", "shard_plan"]
