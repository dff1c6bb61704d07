"""tt_transformers' multi-device layout on a 1D Tenstorrent mesh (n300, T3000, a Blackhole QuietBox): the Tensix
counterpart of torchsim.lowering.parallel.shard_plan, applied to a plan before `adapt_plan` turns it into tt ops.

What one chip of `tp` runs, as tt-metal models/tt_transformers/tt (attention.py, mlp.py, distributed_norm.py,
ccl.py, lm_head.py, embedding.py) lays Llama out on a 1xN mesh:

- the residual stream is fractured: each chip holds hidden / tp columns (the embedding is sharded on its hidden
  dimension; the residual adds run on the chip's columns);
- before each RMSNorm an all-gather restores the full hidden width (DistributedNorm; num_links=1), and the norm
  runs on every column; in prefill at hidden >= 8192 the norm is distributed instead (is_distributed_norm): each
  chip normalises its columns after an all-gather of the per-row statistics, then the output is all-gathered;
- QKV and FF1/FF3 are column-parallel (Q heads split, KV heads split or replicated, intermediate split);
- attention output: on a ring (8 chips of a T3K, USE_FUSED_ALL_GATHER_MATMUL when (hidden / 32 / tp) % tp == 0) an
  all-gather of the heads' output feeds a column-parallel WO (all_gather_matmul: its output is the chip's hidden
  columns); otherwise WO is row-parallel and `tt_all_reduce` runs a reduce-scatter (on N300 and T3K meshes the
  "all-reduce" is a reduce-scatter: the output stays fractured);
- FF2 (W2) is row-parallel followed by that reduce-scatter;
- the LM head is split over the vocabulary (ShardTensorToMesh dim -1); the logits stay on their chips (the CCL
  on cluster axis 1 of a 1xN mesh is a no-op) and the host concatenates them.

CCL sizes are nccl-tests' (all-gather: the gathered output; reduce-scatter: its input), in bf16 activations, with
the token rows padded to whole 32-row tiles (decode runs its users as one 32-row tile). The fused all_gather_matmul
is modelled as its all-gather followed by its matmul (not overlapped): an upper bound on that op.
"""

from __future__ import annotations

from dataclasses import replace

from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.parallel import (
    ParallelError,
    _collective,
    _column_n,
    _heads,
    _role,
    _set,
    _shard_inner,
    _split,
    kv_heads_per_rank,
)
from torchsim.lowering.plan import KernelPlan

TILE = 32
ACT_BYTES = 2  # activations and CCL buffers in bf16 (tt_transformers' ccl_dtype is bfloat8_b on Galaxy only)
DISTRIBUTED_NORM_HIDDEN = 8192  # ModelArgs.is_distributed_norm: 1D mesh, prefill, dim >= 8192


def _pad(rows: int) -> int:
    return -(-int(rows) // TILE) * TILE


def fused_all_gather_matmul(hidden: int, tp: int, ring: bool) -> bool:
    """tt_transformers' USE_FUSED_ALL_GATHER_MATMUL: a ring topology and (hidden / 32 / tp) % tp == 0."""
    return ring and tp > 1 and hidden % (TILE * tp) == 0 and (hidden // TILE // tp) % tp == 0


def _is_residual_norm(c: KernelCall) -> bool:
    return c.kind in (KernelKind.RMSNORM, KernelKind.ADD_RMSNORM) and not c.name.endswith(("q_norm", "k_norm"))


def tt_shard_plan(plan: KernelPlan, tp: int, system: str, *, ring: bool) -> KernelPlan:
    """The kernels one chip of `tp` runs for `plan` under tt_transformers' 1D layout (module docstring), with
    its CCL ops as COLLECTIVE calls on `system`; `ring`: the CCL ops run a ring over the `tp` chips."""
    if tp == 1:
        return plan
    heads = _heads(plan)
    for layer, (hq, hkv, _d) in sorted(heads.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
        if hq % tp:
            raise ParallelError(f"tp={tp} does not divide the {hq} query heads of layer {layer} (tt_transformers "
                                f"splits the heads over the chips); valid tp: "
                                f"{', '.join(str(t) for t in range(2, hq + 1) if hq % t == 0 and t <= 32)}")
        kv_heads_per_rank(hkv, tp)  # KV heads split, or replicated when tp is a multiple of them
    out: list[KernelCall] = []
    sharded = False  # between a column- and a row-parallel GEMM: this chip's heads or columns only
    for c in plan.calls:
        k = c.kind
        hq, hkv, d = heads.get(c.layer, (0, 0, 0))
        kvr = kv_heads_per_rank(hkv, tp) if hkv else 0
        if k is KernelKind.EMBEDDING:
            out.append(_set(c, hidden=_split(c.p("hidden"), tp, "hidden", c)))
            continue
        if _is_residual_norm(c):
            out += _norm(c, tp, system, plan.phase)
            continue
        if k is KernelKind.GROUPED_GEMM or (k is KernelKind.GEMM and c.p("batch", 1) != 1):
            raise ParallelError(f"{k.value} kernel {c.name!r}: tt_transformers' multi-device layout is modelled for "
                                "dense decoders with fused attention (MoE experts and batched attention GEMMs are not)")
        if k is KernelKind.GEMM:
            role = _role(c)
            rows = _pad(c.p("m"))
            if role == "vocab":  # padded vocabulary split over the chips, logits left where they are
                out.append(_set(c, n=_pad(-(-c.p("n") // tp))))
            elif role == "column":
                out.append(_set(c, n=_column_n(c, tp, hq, hkv, kvr, d)))
                sharded = True
            elif role == "row" and c.name.endswith("o_proj") and fused_all_gather_matmul(c.p("n"), tp, ring):
                gathered = _set(c, n=_split(c.p("n"), tp, "n (hidden)", c))
                out.append(_collective("all-gather", rows * c.p("k") * ACT_BYTES, tp, system, c))
                out.append(gathered)
                sharded = False
            elif role == "row":
                row = _set(c, k=_split(c.p("k"), tp, "k", c))
                out.append(row)
                out.append(_collective("reduce-scatter", rows * c.p("n") * ACT_BYTES, tp, system, row))
                sharded = False
            else:
                raise ParallelError(f"GEMM {c.name!r} ({c.module_path}): its role in tt_transformers' multi-device "
                                    "layout is not known")
            continue
        if k is KernelKind.ARGMAX and c.p("vocab", 0):  # each chip's logits; the host takes the best of them
            out.append(_set(c, vocab=_pad(-(-c.p("vocab") // tp))))
            continue
        if sharded:
            c = _shard_inner(c, tp, hq, hkv, kvr)
        elif k is KernelKind.ELEMENTWISE and "residual" in c.name:
            c = _set(c, numel=_split(c.p("numel"), tp, "numel", c))
        out.append(c)
    return replace(plan, calls=tuple(out))


def _norm(c: KernelCall, tp: int, system: str, phase: str) -> list[KernelCall]:
    """A residual-stream norm on a fractured residual: the add on this chip's columns, then the all-gather and
    the norm (or, in a long prefill, the distributed norm and its two all-gathers)."""
    rows, hidden = c.p("rows"), c.p("hidden")
    local = _split(hidden, tp, "hidden", c)
    out: list[KernelCall] = []
    if c.kind is KernelKind.ADD_RMSNORM:
        out.append(replace(c, kind=KernelKind.ELEMENTWISE, name=f"{c.name}.residual_add",
                           params=tuple(sorted({"numel": rows * local, "inputs": 2, "outputs": 1,
                                                "op": "add"}.items()))))
    norm = replace(c, kind=KernelKind.RMSNORM, name=f"{c.name}.rms_norm",
                   params=tuple(sorted({"rows": rows, "hidden": hidden}.items())))
    full = _pad(rows) * hidden * ACT_BYTES
    if phase == "prefill" and hidden >= DISTRIBUTED_NORM_HIDDEN:
        part = replace(norm, params=tuple(sorted({"rows": rows, "hidden": local}.items())))
        stats = _collective("all-gather", _pad(rows) * TILE * tp * ACT_BYTES, tp, system, part)
        out += [replace(part, name=f"{c.name}.rms_norm_pre_all_gather"), replace(stats, name=f"{c.name}.stats."
                                                                                 "all-gather"),
                replace(part, name=f"{c.name}.rms_norm_post_all_gather"),
                _collective("all-gather", full, tp, system, norm)]
        return out
    return [*out, _collective("all-gather", full, tp, system, c), norm]


__all__ = ["fused_all_gather_matmul", "tt_shard_plan"]
