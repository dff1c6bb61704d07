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
from torchsim.lowering.templates.tensix.tt_ops import derive

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


def _check_heads(plan: KernelPlan, tp: int) -> dict[int | None, tuple[int, int, int]]:
    heads = _heads(plan)
    for layer, (hq, hkv, _d) in sorted(heads.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
        if hq % tp:
            raise ParallelError(f"tp={tp} does not divide the {hq} query heads of layer {layer} (tt_transformers "
                                f"splits the heads over the chips); valid tp: "
                                f"{', '.join(str(t) for t in range(2, hq + 1) if hq % t == 0 and t <= 32)}")
        kv_heads_per_rank(hkv, tp)  # KV heads split, or replicated when tp is a multiple of them
    return heads


def tt_shard_plan(plan: KernelPlan, tp: int, system: str, *, ring: bool) -> KernelPlan:
    """The kernels one chip of `tp` runs for `plan` under tt_transformers' 1D layout (module docstring), with
    its CCL ops as COLLECTIVE calls on `system`; `ring`: the CCL ops run a ring over the `tp` chips. A plan with
    MoE layers takes tt-metal's Mixtral layout instead (`tt_expert_plan`)."""
    if tp == 1:
        return plan
    if any(c.kind is KernelKind.GROUPED_GEMM for c in plan.calls):
        experts = {int(c.p("experts")) for c in plan.calls if c.kind is KernelKind.ROUTER_TOPK}
        return tt_expert_plan(plan, tp, system) if experts == {tp} else tt_tp_experts_plan(plan, tp, system)
    heads = _check_heads(plan, tp)
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
    the norm (or, in a long prefill, the distributed norm and the all-gather of its output)."""
    rows, hidden = c.p("rows"), c.p("hidden")
    local = _split(hidden, tp, "hidden", c)
    norm = replace(c, kind=KernelKind.RMSNORM, name=f"{c.name}.rms_norm",
                   params=tuple(sorted({"rows": rows, "hidden": hidden}.items())))
    full = _pad(rows) * hidden * ACT_BYTES
    if phase == "prefill" and hidden >= DISTRIBUTED_NORM_HIDDEN:
        return [*distributed_norm(c, rows, local, tp, system), _collective("all-gather", full, tp, system, norm)]
    return [*_residual_add(c, rows * local), _collective("all-gather", full, tp, system, c), norm]


def _residual_add(c: KernelCall, numel: int) -> list[KernelCall]:
    """An ADD_RMSNORM's residual add on the chip's `numel` elements (none for a plain RMSNORM)."""
    if c.kind is not KernelKind.ADD_RMSNORM:
        return []
    return [derive(c, "residual_add", KernelKind.ELEMENTWISE, numel=numel, inputs=2, outputs=1, op="add")]


def distributed_norm(c: KernelCall, rows: int, local: int, chips: int, system: str,
                     axis: int | None = None) -> list[KernelCall]:
    """A residual norm over `chips` chips each holding `local` columns (tt_transformers' tt_distributed_rmsnorm,
    DeepSeek-V3's DistributedRMSNorm): the residual add, rms_norm_pre_all_gather, the statistics (32 columns per
    chip) all-gathered (along cluster axis `axis` of a 2D mesh, when given), rms_norm_post_all_gather; the output
    stays on the chip's columns."""
    pre = derive(c, "rms_norm_pre_all_gather", KernelKind.RMSNORM, rows=rows, hidden=local)
    stats = _collective("all-gather", _pad(rows) * TILE * chips * ACT_BYTES, chips, system, pre)
    if axis is not None:
        stats = stats.with_params(axis=axis)
    return [*_residual_add(c, rows * local), pre, replace(stats, name=f"{c.name}.stats.all-gather"),
            derive(c, "rms_norm_post_all_gather", KernelKind.RMSNORM, rows=rows, hidden=local)]


def tt_tp_experts_plan(plan: KernelPlan, tp: int, system: str, *, ep: int = 1, rank: int = 0) -> KernelPlan:
    """What one chip of `tp` runs for an MoE model in tt-metal's gpt-oss layout on a 1 x N mesh (models/demos/
    gpt_oss/config.py mesh_1x8: decode TP=8, EP=1; prefill TP=8, SP=1): the residual stream replicated; attention's
    heads split over the chips (QKV column-parallel, WO row-parallel) and every expert split tensor-parallel (its
    gate-up columns and its down rows: experts/weights.py shards the intermediate dimension), the router replicated;
    an all-reduce (MeshConfig.allreduce: ttnn.all_reduce) after WO and after the experts' combine. The layout is the
    Megatron one torchsim's GPU tensor parallelism lays out (lowering.parallel.shard_plan), whose collectives a
    Tenstorrent system costs as tt-metal's CCL ops; the chip's expert matmuls take ttnn's own program configs (the
    demo's sparse_matmul configs are tuned for one p150's unsplit shapes).

    `ep` > 1 is the demo's 2D layout (mesh_4x8: decode TP=8 along a row, EP=4 along a column): the chips of row
    `rank` hold 1/ep of the experts, each still split over the row's `tp` chips, and run them on the tokens routed
    to them (`rank`'s slice of the routing counts; every row sees every token: attention is replicated down the
    column); after the experts' combine an all-reduce over the column's `ep` chips (experts/operations.py
    apply_expert_parallel_allreduce, cluster axis 0) sums the rows' partial outputs, then the row's all-reduce
    (apply_tensor_parallel_allreduce). The rows differ only in their experts: the prediction takes the slowest
    row's (pipeline._slowest_experts)."""
    from torchsim.lowering.parallel import _expert_slice, _routed_rows, shard_plan

    _check_heads(plan, tp)
    if not 0 <= rank < ep:
        raise ParallelError(f"rank {rank} is not one of the {ep} expert-parallel rows")
    sharded = shard_plan(plan, tp, system)
    calls: list[KernelCall] = []
    moe = {c.layer for c in plan.calls if c.kind is KernelKind.GROUPED_GEMM}
    for c in sharded.calls:
        if c.kind is KernelKind.COLLECTIVE:
            # a serving engine's custom all-reduce (a GPU kernel) has no Tenstorrent counterpart: ttnn's CCL op runs
            c = replace(c, params=tuple((k, v) for k, v in c.params if k != "custom_ar"))
            if ep > 1:  # a 2D mesh: the row's collectives along cluster axis 1, the experts' sum down the column
                c = c.with_params(axis=1)
                if c.layer in moe and calls and calls[-1].kind is KernelKind.REDUCE:  # after the experts' combine
                    calls.append(replace(c.with_params(ranks=ep, axis=0),
                                         name=f"{calls[-1].name}.expert_parallel.all-reduce"))
        elif ep > 1 and c.kind is KernelKind.GROUPED_GEMM:
            c = _set(c, tokens_per_expert=_expert_slice(c, ep, rank))
        elif ep > 1 and c.kind is KernelKind.SILU_MUL and c.layer in moe and ".experts" in c.name:
            c = _set(c, rows=_routed_rows(calls))
        calls.append(c)
    return replace(sharded, calls=tuple(calls))


ROUTER_COLS = 64  # ttnn.topk's smallest row: Mixtral's 8 gate columns padded to 64 (mixtral_moe.py)


def tt_expert_plan(plan: KernelPlan, tp: int, system: str) -> KernelPlan:
    """What one chip of `tp` runs for an MoE model in tt-metal's Mixtral-8x7B T3000 layout
    (models/demos/t3000/mixtral8x7b/tt: mixtral_attention.py, mixtral_moe.py, mixtral_mlp.py):

    - the residual stream is replicated: every chip holds the full hidden width, and the norms run on it whole
      (no CCL before them);
    - attention: QKV column-parallel (the chip's query heads and its KV head), SDPA on them, WO row-parallel;
      its partial sums of the full hidden width are all-gathered and summed on every chip (decode: a matmul with
      a 32 x 32 * chips reduce mask; prefill: fast_reduce_nc over the gathered copies);
    - MoE: each chip holds one expert (as many chips as experts): the gate GEMM (padded to 64 columns) and the
      top-k run on every chip for every token; the chip's expert runs its W1, W3, SiLU-and-mul and W2 on every
      token (dense: weights of unselected tokens are zero), its output is scaled by the routing weight, then
      all-gathered and summed as WO's;
    - the LM head is split over the vocabulary (logits stay on their chips).

    No token dispatch (the GPU plan's moe_align) and no sorted grouped GEMM run here. CCL sizes as in
    `tt_shard_plan` (all-gather: the gathered output, bf16, rows padded to 32)."""
    experts = {c.layer: int(c.p("experts")) for c in plan.calls if c.kind is KernelKind.ROUTER_TOPK}
    for layer, e in sorted(experts.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
        if e != tp:
            raise ParallelError(f"layer {layer} has {e} experts on tp={tp} chips: tt-metal's MoE layout on a "
                                f"Tenstorrent mesh (Mixtral's 8 experts on a T3000's 8 chips) holds one expert per "
                                f"chip, so it needs tp={e}; other expert layouts are not modelled on Tensix")
    if not experts:
        raise ParallelError("an MoE plan without a router (ROUTER_TOPK) kernel: its experts cannot be laid out "
                            "over the chips")
    heads = _check_heads(plan, tp)
    out: list[KernelCall] = []
    sharded = False
    tokens: dict[int | None, int] = {}  # per layer: every token the chip's expert runs on (the gate GEMM's rows)
    grouped_seen: dict[int | None, int] = {}
    for c in plan.calls:
        k = c.kind
        hq, hkv, d = heads.get(c.layer, (0, 0, 0))
        kvr = kv_heads_per_rank(hkv, tp) if hkv else 0
        if k is KernelKind.GEMM and c.layer in experts and c.p("n") == experts[c.layer]:  # the router's gate
            tokens[c.layer] = int(c.p("m")) * int(c.p("batch", 1))
            out.append(_set(c, n=ROUTER_COLS))
            continue
        if k is KernelKind.GEMM:
            role = _role(c)
            rows = _pad(c.p("m"))
            if role == "vocab":
                out.append(_set(c, n=_pad(-(-c.p("n") // tp))))
            elif role == "column":
                out.append(_set(c, n=_column_n(c, tp, hq, hkv, kvr, d)))
                sharded = True
            elif role == "row":
                row = _set(c, k=_split(c.p("k"), tp, "k", c))
                site = (c.module_path or c.name).rsplit(".", 1)[0]  # the attention module, not its WO
                out += [row, *_gather_sum(row, site, rows, c.p("n"), tp, system, plan.phase)]
                sharded = False
            else:
                raise ParallelError(f"GEMM {c.name!r} ({c.module_path}): its role in tt-metal's MoE layout is not "
                                    "known")
            continue
        if k is KernelKind.ELEMENTWISE and c.p("op", "") == "moe_align":
            continue  # no token dispatch: the chip's expert runs on every token
        if k is KernelKind.GROUPED_GEMM:
            m = tokens.get(c.layer)
            if m is None:
                raise ParallelError(f"grouped GEMM {c.name!r}: no gate GEMM before it in layer {c.layer}")
            first = grouped_seen.setdefault(c.layer, 0) == 0
            grouped_seen[c.layer] += 1
            if first:  # W1 and W3 (the gate-up projection of the chip's expert)
                half = _split(int(c.p("n")), 2, "n (gate and up)", c)
                out += [_expert_gemm(c, proj, m, half, int(c.p("k"))) for proj in ("gate_proj", "up_proj")]
            else:  # W2
                out.append(_expert_gemm(c, "down_proj", m, int(c.p("n")), int(c.p("k"))))
            continue
        if k is KernelKind.SILU_MUL and c.layer in tokens and grouped_seen.get(c.layer):
            out.append(_set(c, rows=tokens[c.layer]))
            continue
        if k is KernelKind.REDUCE and c.layer in tokens and grouped_seen.get(c.layer):  # the experts' combine
            m, hidden = tokens[c.layer], int(c.p("numel_out")) // tokens[c.layer]
            scale = derive(c, "routing_weight_mul", KernelKind.ELEMENTWISE, numel=m * hidden, inputs=2, outputs=1,
                           op="mul")
            out += [scale, *_gather_sum(scale, c.module_path or c.name, _pad(m), hidden, tp, system, plan.phase)]
            continue
        if k is KernelKind.ARGMAX and c.p("vocab", 0):
            out.append(_set(c, vocab=_pad(-(-c.p("vocab") // tp))))
            continue
        if sharded:
            c = _shard_inner(c, tp, hq, hkv, kvr)
        out.append(c)
    return replace(plan, calls=tuple(_demo_config(c, plan.phase) for c in out))


# The Mixtral T3000 demo's own matmul program configs (models/demos/t3000/mixtral8x7b/tt/model_config.py), by
# projection: decode (32 rows) as 1D multicasts of the activations over the cores, each core reading its
# columns of the DRAM-interleaved weights -- (per_core_N, in0_block_w, out_subblock_w) of QKV_MM_OUTPUT_PROGCFG,
# LM_HEAD_OUTPUT_PROGCFG (WO), FF1/FF3_OUTPUT_PROGCFG and FF2_OUTPUT_PROGCFG, with the LoFi compute kernel config;
# a 128-token prefill's expert matmuls as the 2D PREFILL_MLP_W1/W3/W2_PRG_CONFIG_128 (per_core_M 1).
DEMO_DECODE = {"qkv": (1, 4, 1), "o_proj": (2, 1, 2), "gate_proj": (7, 2, 1), "up_proj": (7, 2, 1),
               "down_proj": (2, 7, 1)}
DEMO_PREFILL_128 = {"gate_proj": (56, 1, 1), "up_proj": (56, 1, 1), "down_proj": (16, 1, 1)}
DEMO_FIDELITY = "LoFi"
DEMO_GRID = 64  # the 8 x 8 compute grid the demo's configs run on


def _demo_config(c: KernelCall, phase: str) -> KernelCall:
    """`c` with the demo's program config where it has one for the projection and the shape divides as the demo's
    does (another MoE model's shapes keep the template's own selection)."""
    if c.kind is not KernelKind.GEMM:
        return c
    from torchsim.lowering.templates.tensix.matmul import MatmulConfig, program_config_param

    parts = c.name.replace("+", ".").split(".")
    proj = "qkv" if "q_proj" in parts else next((p for p in reversed(parts) if p in DEMO_DECODE), "")
    mt, nt, kt = -(-int(c.p("m")) // TILE), -(-int(c.p("n")) // TILE), -(-int(c.p("k")) // TILE)
    if phase == "decode" and mt == 1 and proj in DEMO_DECODE:
        pn, bw, sw = DEMO_DECODE[proj]
        cores = -(-nt // pn)
        cfg = MatmulConfig((min(8, cores), -(-cores // 8)), 1, pn, bw, 1, sw, "all", "none",
                           rule="Mixtral T3000 demo: 1D mcast in0")
    elif phase == "prefill" and mt == 4 and proj in DEMO_PREFILL_128:
        pn, bw, sw = DEMO_PREFILL_128[proj]
        cores = -(-nt // pn)
        cfg = MatmulConfig((cores, mt), 1, pn, bw, 1, sw, "row", "col", rule="Mixtral T3000 demo: 2D, 128 tokens")
    else:
        return c
    if (cores if phase == "decode" else cores * mt) > DEMO_GRID or nt % pn or kt % bw:
        return c
    return _set(c, program_config=program_config_param(cfg), fidelity=DEMO_FIDELITY)


def _expert_gemm(c: KernelCall, proj: str, m: int, n: int, k: int) -> KernelCall:
    """One dense GEMM of the chip's expert over every token, named by its projection (its tt_transformers
    weight role: gate/up as FF1/FF3, down as FF2)."""
    return derive(c, proj, KernelKind.GEMM, m=m, n=n, k=k, epilogue="none")


def _gather_sum(after: KernelCall, where: str, rows: int, hidden: int, tp: int, system: str,
                phase: str) -> list[KernelCall]:
    """The chips' partial outputs ([rows, hidden] each) all-gathered and summed on every chip: in decode a matmul
    of the 32 x (32 x chips) reduce mask with the gathered rows, in prefill fast_reduce_nc over the copies."""
    gathered = _collective("all-gather", tp * rows * hidden * ACT_BYTES, tp, system, after)
    at = replace(after, name=where)  # named after the module, not its projection (whose role would be its weights')
    if phase == "decode" and rows <= TILE:
        total = derive(at, "reduce_mask_matmul", KernelKind.GEMM, m=TILE, n=hidden, k=TILE * tp, epilogue="none")
    else:
        total = derive(at, "fast_reduce_nc", KernelKind.ELEMENTWISE, numel=rows * hidden, inputs=tp, outputs=1,
                       op="add")
    return [gathered, total]


__all__ = ["distributed_norm", "fused_all_gather_matmul", "tt_expert_plan", "tt_shard_plan",
           "tt_tp_experts_plan"]
