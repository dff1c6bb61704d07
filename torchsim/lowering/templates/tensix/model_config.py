"""tt_transformers' model configuration applied to a torchsim KernelPlan on a Tensix profile: weight data formats
and math fidelity per tensor role (performance / accuracy mode), the matmul program per phase, and the ops
tt-metal launches around them (tt_ops.py).

Sits between lowering.plan and kernel simulation: the prediction stage calls `adapt_plan(plan, hw, weights)` on every
plan; GPU plans pass through unchanged. Source of every setting: tt-metal models/tt_transformers/tt/model_config.py
(ModelOptimizations.performance / .accuracy, _default_settings, the DECODE_*/PREFILL_* program configs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from torchsim.graph.kinds import DType
from torchsim.hwmodels.tensix.formats import MathFidelity, default_fidelity
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.plan import KernelPlan
from torchsim.lowering.templates.tensix.tt_ops import tt_ops

SOURCE = "tt-metal models/tt_transformers/tt/model_config.py"


class WeightMode(Enum):
    """tt_transformers' `--optimizations`: performance (its demo default) or accuracy."""

    PERFORMANCE = "performance"
    ACCURACY = "accuracy"

    @classmethod
    def parse(cls, name: str | WeightMode | None) -> WeightMode:
        if isinstance(name, WeightMode):
            return name
        if name is None:
            return cls.PERFORMANCE
        for m in cls:
            if m.value == str(name).strip().lower():
                return m
        raise ValueError(f"unknown weights mode {name!r}; valid: {', '.join(m.value for m in cls)}")


class Role(Enum):
    """tt_transformers' TensorGroup of a weight matrix."""

    WQKV = "wqkv"
    WO = "wo"
    FF1_FF3 = "ff1_3"
    FF2 = "ff2"
    LM_HEAD = "lm_head"


@dataclass(frozen=True, slots=True)
class Precision:
    """Weight data format and the math fidelity of the matmul that reads it."""

    weights: DType
    fidelity: MathFidelity
    fp32_acc: bool  # fp32_dest_acc_en of the compute kernel config


_BFP8_HIFI2 = Precision(DType.BFP8_B, MathFidelity.HIFI2, True)  # COMPUTE_KERNEL_CONFIG_HIFI2 (fp32 dest acc)
_BFP8_HIFI2_FP16 = Precision(DType.BFP8_B, MathFidelity.HIFI2, False)  # HIFI2_FP16: MLP default, 16-bit Dst
_BFP4_LOFI = Precision(DType.BFP4_B, MathFidelity.LOFI, False)  # compute_kernel_config_lofi
_LM_HEAD = Precision(DType.BFP8_B, MathFidelity.HIFI2, False)  # lm_head.py: HiFi2, fp32_dest_acc_en=False

# _default_settings: BFP8 everywhere, MLP at HiFi2 with fp16 accumulation, attention linears at HiFi2;
# performance: FF1/FF3 in BFP4 at LoFi; accuracy (Llama-3 / Mistral-7B branch): BFP8 attention + KV, MLP HiFi2.
# The LM head weights are bfloat8_b (tt_transformers lm_head.py) at HiFi2 with 16-bit accumulation.
MODES: dict[WeightMode, dict[Role, Precision]] = {
    WeightMode.PERFORMANCE: {Role.WQKV: _BFP8_HIFI2, Role.WO: _BFP8_HIFI2, Role.FF1_FF3: _BFP4_LOFI,
                             Role.FF2: _BFP8_HIFI2_FP16, Role.LM_HEAD: _LM_HEAD},
    WeightMode.ACCURACY: {Role.WQKV: _BFP8_HIFI2, Role.WO: _BFP8_HIFI2, Role.FF1_FF3: _BFP8_HIFI2_FP16,
                          Role.FF2: _BFP8_HIFI2_FP16, Role.LM_HEAD: _LM_HEAD},
}
KV_CACHE = DType.BFP8_B  # TensorGroup.KV_CACHE: bfp8 in both modes for Llama 3
SDPA_FIDELITY = {"decode": MathFidelity.HIFI2, "prefill": MathFidelity.HIFI4}  # OpGroup.SDPA_DECODE / _PREFILL

# Models ModelOptimizations treats apart (tt_transformers model_config.py, by get_base_model_name: the name up to
# its size, "Qwen2.5-7B-Instruct" -> "Qwen2.5-7B"):
BF16_ATTENTION_PERF = ("Qwen2.5-7B", "Qwen2.5-VL-7B")  # performance: "degraded under standard high-performance
# settings, using BF16 attention and BFP8 MLP" (WQKV, WO, KV cache bf16; QKV/O linears and SDPA at HiFi4)
LARGE_BFP4_ACC = ("Llama-3.1-70B", "Llama-3.2-90B", "DeepSeek-R1-Distill-Llama-70B", "Qwen2.5-72B")  # accuracy
# mode keeps BFP4 MLPs at LoFi ("large models test insensitive precision")
BFP8_ATTENTION_ACC = ("Llama-3", "Mistral-7B", "Phi-3-mini", "phi-4",  # accuracy: BFP8 attention and KV cache
                      "Mixtral")  # (name prefixes; Mixtral runs tt-metal's own T3000 demo, bfloat8_b attention and
# KV cache in its model_config, not ModelOptimizations); every other model's accuracy mode runs BF16 attention and
# KV cache at HiFi4
_BF16_HIFI4 = Precision(DType.BF16, MathFidelity.HIFI4, True)  # compute_kernel_config_hifi4 (fp32 dest acc)


@dataclass(frozen=True)
class ModelPrecision:
    """What one of tt_transformers' modes gives a model: each weight role's format and fidelity, the KV cache's
    format, SDPA's fidelity per phase, and which of ModelOptimizations' branches that is (`rule`)."""

    roles: dict[Role, Precision]
    kv_cache: DType
    sdpa: dict[str, MathFidelity]
    rule: str


def tt_base_name(model: str | None) -> str:
    """tt_transformers' get_base_model_name of a model name: the organisation dropped and the name cut after its
    size ("Qwen/Qwen2.5-7B-Instruct" -> "Qwen2.5-7B"); "" for None."""
    name = str(model or "").strip().rsplit("/", 1)[-1]
    m = re.match(r"(.*?\d+(?:\.\d+)?[bB])(?:-|$)", name)
    return m.group(1) if m else name


def _key(name: str) -> str:
    """A name without case and separators, so torchsim's names meet tt_transformers' ("llama3.1-70b" and
    "Llama-3.1-70B" are both "llama3170b")."""
    return re.sub(r"[-_. ]", "", name.lower())


def model_precision(mode: WeightMode, model: str | None = None) -> ModelPrecision:
    """ModelOptimizations.performance / .accuracy for `model` (a model name; None, or a name without a size such
    as torchsim's llama-tiny: the Llama-3 rules)."""
    name = tt_base_name(model)
    sized = bool(re.search(r"\d[bB]", name))
    base = _key(name) if sized else ""
    bf16_attention = {Role.WQKV: _BF16_HIFI4, Role.WO: _BF16_HIFI4}
    hifi4 = {"decode": MathFidelity.HIFI4, "prefill": MathFidelity.HIFI4}
    if mode is WeightMode.PERFORMANCE and base in (_key(n) for n in BF16_ATTENTION_PERF):
        roles = {**MODES[WeightMode.ACCURACY], **bf16_attention}
        return ModelPrecision(roles, DType.BF16, hifi4, f"{name}: BF16 attention and KV cache at HiFi4, BFP8 MLP")
    if mode is WeightMode.ACCURACY and sized:
        if base in (_key(n) for n in LARGE_BFP4_ACC):
            return ModelPrecision(dict(MODES[WeightMode.PERFORMANCE]), KV_CACHE, dict(SDPA_FIDELITY),
                                  f"{name}: BFP4 MLP even in accuracy mode")
        if not base.startswith(tuple(_key(n) for n in BFP8_ATTENTION_ACC)):
            roles = {**MODES[WeightMode.ACCURACY], **bf16_attention}
            return ModelPrecision(roles, DType.BF16, hifi4, "BF16 attention and KV cache at HiFi4 (not a Llama-3, "
                                                            "Mistral-7B or Phi-3-mini model)")
    return ModelPrecision(dict(MODES[mode]), KV_CACHE, dict(SDPA_FIDELITY), "")
PREFILL_GRID = "8x8"  # find_prefill_grid(8, ...) and SDPAProgramConfig(compute_with_storage_grid_size=(8, 8))
DECODE_ROWS = 32  # tile_padded_batch_rows: decode matmuls run DRAM-sharded for up to 32 users

_NAMES: tuple[tuple[Role, tuple[str, ...]], ...] = (
    (Role.WQKV, ("q_proj", "k_proj", "v_proj", "qkv", "qkv_proj", "wq", "wk", "wv",  # qkv_proj: Phi-3's fused
                 "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "wkv_b1", "wkv_b2")),  # DeepSeek MLA
    (Role.WO, ("o_proj", "wo", "out_proj")),
    (Role.FF1_FF3, ("gate_proj", "up_proj", "gate_up", "gate_up_proj", "w1", "w3")),  # gate_up_proj: Phi-3, experts
    (Role.FF2, ("down_proj", "w2")),
    (Role.LM_HEAD, ("lm_head", "output")),
)


def role_of(name: str) -> Role | None:
    """The tensor role of a weight named `name` (a parameter or a call name); None for non-matmul weights."""
    parts = name.replace("+", ".").split(".")
    for role, keys in _NAMES:
        if any(p in keys for p in parts):
            return role
    return None


# Rows one program pass of a prefill matmul covers (tenstorrent/tt-metal models/tt_transformers/tt/model_config.py):
# the QKV projection up to MAX_QKV_MM_SEQ_LEN = 2048 rows at once (XQKV_PREFILL_PROGCFG: per_core_M 8 from 2048
# rows on, fuse_batch while seq_len <= 2048), the output projection 1024 (WO_PREFILL_PROGCFG: m = min(seq_len,
# 1024)), the MLP prefill_len_cutoff (PREFILL_MLP_W1_W3 / W2_PRG_CONFIG: m = min(seq_len, prefill_len_cutoff),
# "512 if Blackhole, 1024 if Wormhole"). A longer prompt is reshaped to [1, seq_len // rows, rows, dim] (mlp.py,
# attention.py) and the matmul runs its one program config over the row blocks in turn.
MAX_QKV_MM_SEQ_LEN = 2048
WO_PREFILL_ROWS = 1024
PREFILL_LEN_CUTOFF = {"wormhole_b0": 1024, "blackhole": 512}


def prefill_len_cutoff(hw: Any) -> int:
    """tt_transformers' prefill_len_cutoff for `hw`'s chip (512 on Blackhole, 1024 on Wormhole)."""
    return PREFILL_LEN_CUTOFF.get(str(getattr(getattr(hw, "chip", None), "value", "")), 1024)


def pass_rows(role: Role, cutoff: int) -> int:
    """Rows of one program pass of a prefill matmul of `role` (`cutoff`: the MLP's prefill_len_cutoff)."""
    if role is Role.WQKV:
        return MAX_QKV_MM_SEQ_LEN
    return WO_PREFILL_ROWS if role is Role.WO else cutoff


def prefill_blocking(role: Role, rows: int, k: int, n: int, cutoff: int = 1024) -> dict[str, int]:
    """tt_transformers' prefill program configs on the 8x8 grid: XQKV_PREFILL_PROGCFG (in0_block_w 1, 1x1
    subblocks, per_core_N = N tiles / 8) and matmul_config for WO / MLP (per_core_M = M tiles / 8 rows,
    per_core_N = N tiles / 8, out_subblock_w = largest <= 4 dividing it, in0_block_w = largest divisor <= 8 of
    K tiles / 8 that also divides K tiles, as ttnn's matmul requires: a tensor-parallel shard of 50 K tiles takes
    2, not 6). M is one program pass's rows (`pass_rows`); a prompt longer than that runs the config over
    `block_rows`-row blocks in turn (a partial last block padded, as tt_transformers pads the prompt)."""
    block = pass_rows(role, cutoff)
    mt, kt, nt = -(-min(rows, block) // 32), -(-k // 32), -(-n // 32)
    pm, pn = -(-mt // 8), -(-nt // 8)
    passes = {"block_rows": block} if rows > block else {}
    if role is Role.WQKV:
        return {"per_core_m": pm, "per_core_n": pn, "in0_block_w": 1, "subblock_w": 1} | passes
    sw = max(w for w in range(1, 5) if pn % w == 0)
    bw = max(d for d in range(1, 9) if max(1, kt // 8) % d == 0 and kt % d == 0)
    return {"per_core_m": pm, "per_core_n": pn, "in0_block_w": bw, "subblock_w": sw} | passes


def storage_cores(role: Role, kt: int, nt: int) -> int:
    """Cores the decode activation is width-sharded on (the DRAM-sharded matmul's in0 senders), per role:
    attention linears on dram_shard_core_grid_for_k(dim) (find_grid: the divisor of K tiles nearest 32 cores),
    MLP on dram_shard_core_grid_for_k_and_n (the most cores <= 64 dividing K and N tiles), the LM head on its
    lm_head_core_grid (`lm_head_cores`)."""
    if role in (Role.WQKV, Role.WO):
        return min((c for c in range(1, 65) if kt % c == 0), key=lambda c: (abs(c - 32), c))
    if role is Role.LM_HEAD:
        return lm_head_cores(kt)
    return max(c for c in range(1, 65) if kt % c == 0 and nt % c == 0)


def with_params(call: KernelCall, **params: Any) -> KernelCall:
    """`call` with extra (or replaced) params; name, layer and source stay."""
    return call.with_params(**params)


# A layer's grouped GEMMs in the order every MoE lowering emits them: the experts' gate-up projection (W1 and W3
# fused), then their down projection (W2).
EXPERT_ROLES = (Role.FF1_FF3, Role.FF2)

# MXFP4 expert weights as tt-metal's gpt-oss demo stores them on a Tensix chip: bfloat4_b (models/demos/gpt_oss/tt/
# experts/weights.py load_expert_weights, weight_dtype=ttnn.bfloat4_b); its sparse_matmul passes no compute kernel
# config, so the math fidelity is the format's default (LoFi for bfp4_b; assumed from ttnn's defaults).
MXFP4_EXPERTS = DType.BFP4_B

# tt-metal's gpt-oss expert program configs (models/demos/gpt_oss/tt/expert_configs.py GPTOSSProgramConfig @ 0390332,
# "tuned via moe_sparse_matmul_sweep.py on a single p150"; experts/config.py _build_matmul_config): decode gate-up and
# down projections as MatmulMultiCoreReuseMultiCast1DProgramConfig (in0 multicast, per_core_M = 1 tile, per_core_N
# = N tiles / cores, out_block_w = out_subblock_w), keyed by the (K, N) of gpt-oss's experts (hidden 2880,
# intermediate 2880): (cores x, cores y, in0_block_w, out_subblock_w).
GPT_OSS_DECODE_EXPERTS = {(2880, 5760): (9, 5, 15, 4), (2880, 2880): (9, 5, 30, 2)}


def expert_program_config(call: KernelCall, phase: str) -> dict[str, Any]:
    """tt-metal's gpt-oss decode program config for a grouped GEMM of its expert shapes, as a `program_config`
    param (every expert's rows within one tile); {} for other shapes and in prefill (whose experts take ttnn's own
    selection on the chip's whole grid: the demo's prefill configs use 10x9 of a p150's cores, not modelled)."""
    from torchsim.lowering.templates.tensix.matmul import MatmulConfig, program_config_param

    key = (int(call.p("k")), int(call.p("n")))
    counts = [int(c) for c in call.p("tokens_per_expert", ())]
    if phase != "decode" or key not in GPT_OSS_DECODE_EXPERTS or not counts or max(counts) > 32:
        return {}
    gx, gy, bw, sw = GPT_OSS_DECODE_EXPERTS[key]
    nt = -(-key[1] // 32)
    pn = -(-nt // (gx * gy))
    cfg = MatmulConfig((gx, gy), 1, pn, bw, 1, sw, "all", "none", out_block_h=1, out_block_w=sw,
                       rule="gpt-oss expert sparse_matmul (tt-metal expert_configs.py)")
    return {"program_config": program_config_param(cfg)}


def configure(call: KernelCall, mode: WeightMode | ModelPrecision, phase: str, cutoff: int = 1024,
              role: Role | None = None, experts: DType | None = None) -> KernelCall:
    """Tensix params of one call: weight format, fidelity and matmul program of its role; KV format for attention.
    `mode`: the weights mode, or what it gives the model (`model_precision`); `cutoff`: the chip's
    prefill_len_cutoff (`prefill_len_cutoff`); `role` a grouped GEMM's (EXPERT_ROLES); `experts`: the experts'
    weight format when a checkpoint fixes it (MXFP4_EXPERTS), instead of the role's."""
    mp = mode if isinstance(mode, ModelPrecision) else model_precision(mode)
    if call.kind is KernelKind.GROUPED_GEMM and role is not None:
        p = mp.roles[role] if experts is None else Precision(experts, default_fidelity(experts), False)
        extra_g: dict[str, Any] = {"in1_dtype": call.p("in1_dtype", "") or p.weights.name.lower(),
                                   "fidelity": call.p("fidelity", "") or p.fidelity.label}  # a layout's own stand
        return with_params(call, **extra_g, **expert_program_config(call, phase))
    if call.kind in (KernelKind.GEMM, KernelKind.GROUPED_GEMM):
        role = role_of(call.name)
        if role is None:
            return call
        p = mp.roles[role]
        # a layout that names a model's own formats (deepseek_mesh: the DeepSeek-V3 demo's) keeps them
        extra: dict[str, Any] = {"in1_dtype": call.p("in1_dtype", "") or p.weights.name.lower(),
                                 "fidelity": call.p("fidelity", "") or p.fidelity.label}
        if call.p("program_config", ()):  # a layout that names the model's own program config (mesh_plan's MoE
            # layout): its config and math fidelity stand, the role gives the weights' format
            return with_params(call, **extra)
        rows = int(call.p("m", 0)) * int(call.p("batch", 1)) if call.kind is KernelKind.GEMM else 0
        if call.kind is KernelKind.GEMM and 0 < rows <= DECODE_ROWS and (phase == "decode" or role is Role.LM_HEAD):
            kt, nt = -(-int(call.p("k")) // 32), -(-int(call.p("n")) // 32)
            extra |= {"program": "dram_sharded", "fp32_acc": p.fp32_acc, "storage_cores": storage_cores(role, kt, nt)}
        elif phase == "prefill" and call.kind is KernelKind.GEMM:
            extra |= {"grid": PREFILL_GRID} | prefill_blocking(role, rows, int(call.p("k")), int(call.p("n")),
                                                                cutoff)
        elif phase == "prefill":
            extra["grid"] = PREFILL_GRID
        return with_params(call, **extra)
    if call.kind in (KernelKind.ATTENTION_DECODE, KernelKind.ATTENTION_PREFILL, KernelKind.MLA_DECODE):
        ph = "prefill" if call.kind is KernelKind.ATTENTION_PREFILL else "decode"
        # SDPAProgramConfig uses an 8x8 grid: the whole compute grid on Wormhole; on Blackhole the model keeps the
        # chip's grid (the flash templates place CTAs by engine core, not by a sub-grid)
        return with_params(call, kv_dtype=mp.kv_cache.name.lower(), fidelity=mp.sdpa[ph].label)
    return call


def is_tensix(hw: Any) -> bool:
    arch = getattr(hw, "arch", None)
    return getattr(arch, "name", "") == "TENSIX"


def adapt_plan(plan: KernelPlan, hw: Any, weights: str | None = None, experts: DType | None = None,
               model: str | None = None) -> KernelPlan:
    """The plan as tt_transformers runs it on a Tensix `hw` (GPU plans unchanged; `weights` is an error there), in
    the formats its weights mode gives `model` (a model name: `model_precision`; None: the Llama-3 rules).
    A layer's grouped GEMMs (MoE experts on one chip) take the roles EXPERT_ROLES in turn, or `experts` as their
    weight format (an MXFP4 checkpoint: MXFP4_EXPERTS).

    >>> from torchsim.hwmodels.tensix.profiles import wormhole_n150
    >>> from torchsim.lowering.plan import Preset
    >>> c = KernelCall.make(KernelKind.GEMM, m=1, n=4096, k=4096, name="layers.0.mlp.down_proj", layer=0)
    >>> p = adapt_plan(KernelPlan((c,), Preset.SERVING, "decode", 1, 1, 8), wormhole_n150(), "performance")
    >>> p.calls[0].p("in1_dtype"), p.calls[0].p("program")
    ('bfp8_b', 'dram_sharded')
    """
    if not is_tensix(hw):
        if weights is not None:
            raise ValueError(f"weights={weights!r} selects tt_transformers' per-role data formats, which apply to "
                             f"Tenstorrent profiles only; {getattr(hw, 'name', hw)} runs the model's dtype "
                             "(use dtype='fp8' for FP8 weights on GPUs)")
        return plan
    mode = model_precision(WeightMode.parse(weights), model)
    cutoff = prefill_len_cutoff(hw)
    seen: dict[int | None, int] = {}  # grouped GEMMs of each layer so far

    def role(c: KernelCall) -> Role | None:
        if c.kind is not KernelKind.GROUPED_GEMM:
            return None
        index = seen.get(c.layer, 0)
        seen[c.layer] = index + 1
        return EXPERT_ROLES[min(index, len(EXPERT_ROLES) - 1)]

    ops = dense_prefill_experts(plan.calls) if plan.phase == "prefill" else plan.calls
    calls = tuple(configure(c, mode, plan.phase, cutoff, role(c), experts) for op in ops
                  for c in tt_ops(op, plan.phase, lambda kt: lm_head_split_cols(hw, kt))
                  if not _token_dispatch(c))
    return replace(plan, calls=calls)


def dense_prefill_experts(calls: tuple[KernelCall, ...]) -> tuple[KernelCall, ...]:
    """A prefill's MoE layers as tt-metal runs them on Tensix (models/demos/gpt_oss/tt/experts/prefill.py, the
    generic experts module): its sparse_matmuls take an all-ones prefill sparsity ("all experts active in
    prefill"), so every expert multiplies every token and the SwiGLU and the routing-weight combine run over all
    E copies (the chip's experts: a 2D mesh's row holds 1/ep of them); the routing weights zero what the router did
    not pick. Decode reads the router's sparsity (the routed experts only). Layers without a fused top-k router
    kernel (the token count unknown) keep their routing."""
    # layer -> the chip's experts (a layout that ran its experts as dense GEMMs already, Mixtral's T3000 one, has none)
    local = {c.layer: len(c.p("tokens_per_expert")) for c in calls if c.kind is KernelKind.GROUPED_GEMM}
    routers = {c.layer: (int(c.p("tokens")), local[c.layer]) for c in calls
               if c.kind is KernelKind.ROUTER_TOPK and c.layer in local}  # layer -> (tokens, the chip's experts)
    out: list[KernelCall] = []
    for c in calls:
        tokens, experts = routers.get(c.layer, (0, 0))
        if not tokens:
            out.append(c)
        elif c.kind is KernelKind.GROUPED_GEMM:
            out.append(with_params(c, tokens_per_expert=(tokens,) * len(c.p("tokens_per_expert"))))
        elif c.kind is KernelKind.SILU_MUL and ".experts" in c.name:
            out.append(with_params(c, rows=tokens * experts))
        elif c.kind is KernelKind.REDUCE and c.name.endswith("moe_sum"):
            out.append(with_params(c, numel_in=tokens * experts * (int(c.p("numel_out")) // tokens)))
        else:
            out.append(c)
    return tuple(out)


def _token_dispatch(c: KernelCall) -> bool:
    """A GPU MoE layer's token sort (vLLM's moe_align_block_size): tt-metal's expert matmuls read the router's
    sparsity instead (sparse_matmul; Mixtral's layout runs every token), so no such kernel runs on Tensix."""
    return c.kind is KernelKind.ELEMENTWISE and c.p("op", "") == "moe_align"


def lm_head_cores(kt: int) -> int:
    """Cores of tt_transformers' lm_head_core_grid for a hidden size of `kt` tiles (tenstorrent/tt-metal
    models/tt_transformers/tt/model_config.py, single-chip and T3000 branch): from an 8 x 8 grid, rows are dropped
    one at a time, and when none is left a column and all 8 rows again, until rows x columns divides the
    hidden size in tiles (4096 -> 64 cores, 3072 -> 48, 3584 -> 56, 1152 -> 36)."""
    if kt < 1:
        raise ValueError(f"LM head: hidden size of {kt} tiles; it must be at least one 32-wide tile")
    for cols in range(8, 0, -1):
        for rows in range(8, 0, -1):
            if kt % (rows * cols) == 0:
                return rows * cols
    return 1  # not reached: 1 x 1 divides every size


def lm_head_split_cols(hw: Any, kt: int) -> int:
    """Vocabulary columns per LM-head matmul for a hidden size of `kt` tiles: tt_transformers'
    `max_columns_per_device_lm_head`, 128256 // 8 on Blackhole and on Wormhole 668 columns per core of the
    lm_head_core_grid ("128256 / 4 / 48 = 668 columns per core is close to the L1 limit", model_config.py)."""
    if getattr(getattr(hw, "chip", None), "value", "") == "blackhole":
        return 128256 // 8
    return 668 * lm_head_cores(kt)


def tensix_weight_bytes(module: Any, hw: Any, weights: str | None = None, experts: DType | None = None,
                        model: str | None = None) -> float | None:
    """Bytes of the model's weights as tt_transformers stores them (matrices per role in the formats the mode
    gives `model`; embeddings and norms in bf16; `experts`: the format of the MoE experts' matrices when a
    checkpoint fixes it); None for GPU profiles."""
    if not is_tensix(hw):
        return None
    mp = model_precision(WeightMode.parse(weights), model)
    total = 0.0
    for name, p in module.named_parameters():
        role = role_of(name) if p.dim() >= 2 else None
        if experts is not None and role is not None and ".experts." in f".{name}":
            per = experts.nbytes
        else:
            per = mp.roles[role].weights.nbytes if role is not None else 2.0
        total += p.numel() * per
    return total
