"""tt-metal's DeepSeek-V3 layout on a 2D Tenstorrent mesh (a Galaxy's 4x8, a dual Galaxy's 8x8): what one chip
runs for a captured DeepSeek (MLA + MoE) plan, with its CCL ops as COLLECTIVE calls on the mesh's axes.

Source: tenstorrent/tt-metal models/demos/deepseek_v3/tt (mla/mla1d.py @ 0035d040 decode, mla/mla2d.py @ 077da10f
prefill, mlp/mlp.py @ 02adedd9, moe.py @ 790deede, moe_decoder_block_2d.py @ 03191247, experts.py @ 03d8f5ca,
lm_head1d.py @ 111b77a8; utils/test_utils.py: mesh shapes TG (4, 8), DUAL (8, 8), QUAD (16, 8); USERS_PER_ROW 32).
The mesh's columns (cluster axis 1, `cols` chips) split attention and the dense MLPs tensor-parallel; its rows
(cluster axis 0, `rows` chips) are data-parallel in decode (each row its own users) and carry the MoE's token
dispatch; the routed experts are spread whole over every chip.

Decode, per chip (its row's users U; residual [U, hidden / cols]):
- residual norms distributed: rms_norm_pre_all_gather, the statistics all-gathered along the row, post;
- MLA: wq_a and wkv_a fused with their input dimension split (partial sums all-gathered along the row and summed,
  fast_reduce_nc), the q/kv norms and RoPE, the chip's U / cols users' latent rows written to its cache; wq_b and
  wkv_b1 (the query absorbed into the latent) on the chip's heads / cols; an all-to-all along the row turns head
  shards into user shards (U / cols users x every head); flash MLA decode; wkv_b2 on every head; the users
  all-gathered back along the row; wo with its output columns split (no reduction after it);
- dense MLP (the first layers): the residual all-gathered along the row, w1 / w3 column-split, w2 row-split, a
  reduce-scatter along the row;
- MoE: the residual all-gathered along the row; the gate (bf16) and grouped top-k on every chip; all_to_all_dispatch
  down the column (every chip receives its column's U x rows tokens); each of the chip's E / chips experts runs
  dense over all of them (batched ttnn.linear, routing ignored); all_to_all_combine back down the column (top-k
  outputs per token) and their weighted sum; the shared expert split along the row; one reduce-scatter along the
  row of the sum;
- LM head: the residual all-gathered along the row, the vocabulary split over the row.

Prefill (mla2d): the sequence is split over the rows (T / rows tokens of residual per chip); before attention an
all-gather down the column rebuilds it, every row runs the attention on all T tokens with its heads / cols, the
heads' outputs are all-gathered along the row for wo and the result reduce-scattered down the column; the MLP
and MoE run as in decode on the chip's T / rows tokens. torchsim's prefill attention is the captured
non-absorbed form (kv_b_proj, 192-wide keys), tt-metal's flash_mla_prefill runs on the latent: an approximation.

Formats (the demo's, set on the calls): MLA, dense MLP, shared expert, LM head, KV cache bfloat8_b at HiFi2;
routed experts gate/up bfloat4_b at LoFi, down bfloat8_b at HiFi2; the gate bf16. Not modelled: the embedding's
CCLs (hidden split over every chip), the QUAD ring fabric's fused MoE ops.
"""

from __future__ import annotations

from dataclasses import replace

from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.parallel import ParallelError, _collective, _set
from torchsim.lowering.plan import KernelPlan
from torchsim.lowering.templates.tensix.mesh_plan import ACT_BYTES, distributed_norm
from torchsim.lowering.templates.tensix.tt_ops import derive

MLA_FORMAT = {"in1_dtype": "bfp8_b", "fidelity": "HiFi2"}
EXPERT_FORMATS = ({"in1_dtype": "bfp4_b", "fidelity": "LoFi"}, {"in1_dtype": "bfp8_b", "fidelity": "HiFi2"})
FORMATS = ("tt-metal DeepSeek-V3 demo formats (MLA, dense MLP, shared expert, LM head, KV cache bfp8_b HiFi2; "
           "routed experts gate/up bfp4_b LoFi, down bfp8_b HiFi2)")


def is_mla_moe(plan: KernelPlan) -> bool:
    """A plan with latent attention and routed experts (DeepSeek-V2/V3): the layout this module lays out."""
    kinds = {c.kind for c in plan.calls}
    mla = KernelKind.MLA_DECODE in kinds or any(c.p("head_dim_v", 0) for c in plan.calls
                                                if c.kind is KernelKind.ATTENTION_PREFILL)
    return mla and KernelKind.GROUPED_GEMM in kinds


def _embedding(plan: KernelPlan) -> tuple[int, int]:
    """(tokens, hidden size) of the plan's embedding lookup."""
    emb = next((c for c in plan.calls if c.kind is KernelKind.EMBEDDING), None)
    if emb is None:
        raise ParallelError("a DeepSeek plan without its embedding kernel: its tokens and hidden size are not known")
    return int(emb.p("tokens")), int(emb.p("hidden"))


def _split(value: int, parts: int, what: str, c: KernelCall) -> int:
    if value % parts:
        raise ParallelError(f"{c.kind.value} kernel {c.name!r}: {what} {value} does not split over {parts} chips "
                            "(tt-metal's DeepSeek-V3 layout)")
    return value // parts


def _ccl(op: str, nbytes: int, ranks: int, axis: int, system: str, after: KernelCall) -> KernelCall:
    """A CCL op along cluster axis `axis` (0: down a column of `ranks` chips, 1: along a row)."""
    return _collective(op, nbytes, ranks, system, after).with_params(axis=axis)


def tt_deepseek_plan(plan: KernelPlan, rows: int, cols: int, system: str) -> KernelPlan:
    """What one chip of a `rows` x `cols` mesh runs for the DeepSeek plan `plan` (module docstring): captured at
    one row's users in decode, at the whole prompt in prefill."""
    tokens, hidden = _embedding(plan)
    chips = rows * cols
    prefill = plan.phase == "prefill"
    # the attention sees every token of the row (decode: its users) or of the prompt (prefill); the residual
    # stream, MLP and MoE hold the chip's share (decode: its row's users; prefill: the prompt's tokens / rows)
    local = max(1, -(-tokens // rows)) if prefill else tokens
    out: list[KernelCall] = []
    seen_grouped: dict[int | None, int] = {}
    for c in plan.calls:
        k, name = c.kind, c.name
        last = name.rsplit(".", 1)[-1]
        if k is KernelKind.EMBEDDING:
            out.append(_set(c, tokens=local, hidden=_split(hidden, cols, "hidden", c)))
            continue
        if k in (KernelKind.RMSNORM, KernelKind.ADD_RMSNORM) and int(c.p("hidden")) == hidden:
            out += distributed_norm(c, local, hidden // cols, cols, system, axis=1)
            continue
        if k is KernelKind.GEMM and "kv_a_proj_with_mqa" in name:  # wq_kv_a: input dimension split
            if prefill:  # the sequence rebuilt on every row
                out.append(_ccl("all-gather", tokens * (hidden // cols) * ACT_BYTES, rows, 0, system, c))
            part = _set(c, k=_split(int(c.p("k")), cols, "k", c), **MLA_FORMAT)
            gathered = _ccl("all-gather", cols * tokens * int(c.p("n")) * ACT_BYTES, cols, 1, system, part)
            out += [part, gathered, derive(part, "fast_reduce_nc", KernelKind.ELEMENTWISE,
                                           numel=tokens * int(c.p("n")), inputs=cols, outputs=1, op="add")]
            continue
        if k is KernelKind.GEMM and last in ("q_b_proj", "kv_b_proj"):
            out.append(_set(c, n=_split(int(c.p("n")), cols, "n", c), **MLA_FORMAT))
            continue
        if k is KernelKind.GEMM and c.p("batch", 1) > 1 and last == "self_attn":  # the absorbed wkv_b1 / wkv_b2
            heads = int(c.p("batch"))
            if not any(x.kind is KernelKind.MLA_DECODE for x in out if x.layer == c.layer):  # wkv_b1: its heads
                out.append(replace(_set(c, batch=_split(heads, cols, "heads", c), **MLA_FORMAT),
                                   name=f"{name}.wkv_b1"))
            else:  # wkv_b2 on every head of the chip's users, then the users all-gathered along the row
                users = _split(int(c.p("m")), cols, "users", c)
                b2 = replace(_set(c, m=users, **MLA_FORMAT), name=f"{name}.wkv_b2")
                out += [b2, _ccl("all-gather", int(c.p("m")) * heads * int(c.p("n")) * ACT_BYTES, cols, 1, system,
                                 b2)]
            continue
        if k is KernelKind.ROPE:
            out.append(_set(c, heads_q=_split(int(c.p("heads_q")), cols, "heads_q", c)))
            continue
        if k is KernelKind.ELEMENTWISE and ".self_attn." in f"{name}." and c.p("op", "") in ("kv_cache_write",
                                                                                                "reshape", "cat"):
            share = int(c.p("numel")) if prefill and c.p("op") == "kv_cache_write" else \
                _split(int(c.p("numel")), cols, "numel", c)
            out.append(_set(c, numel=share))
            continue
        if k is KernelKind.MLA_DECODE:  # head shards -> user shards along the row, then flash MLA decode
            users = int(c.p("batch"))
            a2a = _ccl("all-to-all", users * (int(c.p("heads_q")) // cols) * int(c.p("head_dim")) * ACT_BYTES,
                       cols, 1, system, c)
            out += [replace(a2a, name=f"{name}.heads_to_users.all-to-all"),
                    _set(c, batch=_split(users, cols, "users", c))]
            continue
        if k is KernelKind.ATTENTION_PREFILL:
            att = _set(c, heads_q=_split(int(c.p("heads_q")), cols, "heads_q", c),
                       heads_kv=_split(int(c.p("heads_kv")), cols, "heads_kv", c))
            dv = int(c.p("head_dim_v", 0) or c.p("head_dim"))
            out += [att, _ccl("all-gather", tokens * int(c.p("heads_q")) * dv * ACT_BYTES, cols, 1, system, att)]
            continue
        if k is KernelKind.GEMM and last == "o_proj":  # output columns split, full K
            wo = _set(c, n=_split(int(c.p("n")), cols, "n", c), **MLA_FORMAT)
            out.append(wo)
            if prefill:  # back to the chip's share of the sequence
                out.append(_ccl("reduce-scatter", tokens * (hidden // cols) * ACT_BYTES, rows, 0, system, wo))
            continue
        if k is KernelKind.GEMM and ".mlp." in f"{name}." and last == "gate_proj+up_proj":  # dense or shared
            if ".shared_experts." not in name:
                out.append(_ccl("all-gather", local * hidden * ACT_BYTES, cols, 1, system, c))
            out.append(_set(c, m=local, n=_split(int(c.p("n")), cols, "n", c), **MLA_FORMAT))
            continue
        if k is KernelKind.SILU_MUL and ".experts." not in f"{name}.":
            out.append(_set(c, rows=local, hidden=_split(int(c.p("hidden")), cols, "hidden", c)))
            continue
        if k is KernelKind.GEMM and last == "down_proj":
            down = _set(c, m=local, k=_split(int(c.p("k")), cols, "k", c), **MLA_FORMAT)
            out.append(down)
            if ".shared_experts." not in name:  # the dense MLP's reduce-scatter (the MoE's follows its sum)
                out.append(_ccl("reduce-scatter", local * hidden * ACT_BYTES, cols, 1, system, down))
            continue
        if k is KernelKind.GEMM and last == "gate" and c.layer is not None:  # the router, on every chip
            out += [_ccl("all-gather", local * hidden * ACT_BYTES, cols, 1, system, c), _set(c, m=local)]
            continue
        if k is KernelKind.ROUTER_TOPK:
            out.append(_set(c, tokens=local))
            continue
        if k is KernelKind.ELEMENTWISE and c.p("op", "") == "moe_align":
            continue  # no token sort: the experts run over every dispatched token
        if k is KernelKind.GROUPED_GEMM:
            experts = len(c.p("tokens_per_expert"))
            mine = _split(experts, chips, "experts", c)
            first = seen_grouped.setdefault(c.layer, 0) == 0
            seen_grouped[c.layer] += 1
            if first:  # every row's tokens of this column reach the chip
                a2a = _ccl("all-to-all", local * rows * hidden * ACT_BYTES, rows, 0, system, c)
                out.append(replace(a2a, name=f"{name}.all_to_all_dispatch"))
            out.append(_set(c, tokens_per_expert=(local * rows,) * mine, **EXPERT_FORMATS[0 if first else 1]))
            continue
        if k is KernelKind.SILU_MUL:  # the routed experts' activation, over every dispatched token
            experts = next(len(x.p("tokens_per_expert")) for x in reversed(out) if x.kind is KernelKind.GROUPED_GEMM)
            out.append(_set(c, rows=local * rows * experts))
            continue
        if k is KernelKind.REDUCE and last == "moe_sum":  # the top-k outputs back down the column, weighted, summed
            topk = int(c.p("numel_in")) // max(1, int(c.p("numel_out")))
            a2a = _ccl("all-to-all", topk * local * hidden * ACT_BYTES, rows, 0, system, c)
            out += [replace(a2a, name=f"{name}.all_to_all_combine"),
                    _set(c, numel_in=topk * local * hidden, numel_out=local * hidden)]
            continue
        if k is KernelKind.ELEMENTWISE and last == "add" and ".mlp" in name:  # routed + shared, then reduce-scatter
            add = _set(c, numel=local * hidden)
            out += [add, _ccl("reduce-scatter", local * hidden * ACT_BYTES, cols, 1, system, add)]
            continue
        if k is KernelKind.GEMM and last == "lm_head":  # its rows: every user (decode), the last token (prefill)
            out += [_ccl("all-gather", int(c.p("m")) * hidden * ACT_BYTES, cols, 1, system, c),
                    _set(c, n=-(-int(c.p("n")) // cols), **MLA_FORMAT)]
            continue
        if k is KernelKind.ARGMAX:
            out.append(_set(c, vocab=-(-int(c.p("vocab")) // cols)))
            continue
        if k in (KernelKind.RMSNORM,):  # q_a / kv_a layernorm: every chip, on the attention's tokens
            out.append(c)
            continue
        raise ParallelError(f"{k.value} kernel {name!r} ({c.module_path}): its place in tt-metal's DeepSeek-V3 "
                            "layout is not known")
    return replace(plan, calls=tuple(out))


__all__ = ["FORMATS", "is_mla_moe", "tt_deepseek_plan"]
