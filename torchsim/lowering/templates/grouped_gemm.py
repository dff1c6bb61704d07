"""MoE grouped GEMM: one launch over all experts, each expert's M taken from the routing counts (tokens per expert).

Sits beside gemm.py and reuses the GEMM family's pipelines (sm80 multistage, sm90 warp-specialised, sm100
tcgen05): only the tile schedule is new. Its work units are (expert, m-tile, n-tile) listed expert by expert, the
way CUTLASS's grouped-GEMM problem visitor and DeepGEMM's grouped scheduler walk the groups; persistent CTAs
stride over that list. Rows of each expert are padded to the M tile (DeepGEMM's contiguous layout aligns every
expert's segment to BLOCK_M), so skewed routing costs tiles, and the per-SM load shows in the result.

Example:
    >>> from torchsim.hwmodels import get_profile
    >>> kg = grouped_gemm((96, 40, 45, 75), 4096, 1024, DType.BF16, get_profile("h100-sxm"))
    >>> kg.flops == 2 * 256 * 4096 * 1024, kg.attrs["active_experts"]
    (True, 4)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from torchsim.graph import CtaClass, DType, KernelGraph
from torchsim.hwmodels.gpu import GpuProfile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.templates.gemm import _regs, _write_cta, check_dims, check_quant, gemm_out_dtype
from torchsim.lowering.templates.gemm_config import Epilogue, GemmConfig, Pipeline, default_config, quant_format
from torchsim.lowering.templates.memory_bound import resident_ctas
from torchsim.lowering.templates.tiling import WorkUnit, cta_classes


def check_routing(tokens_per_expert: Any, tokens: int | None = None, top_k: int | None = None) -> tuple[int, ...]:
    """Validate routing counts; with `tokens` and `top_k` they must sum to tokens x top_k, none above tokens."""
    if isinstance(tokens_per_expert, (str, bytes)) or not isinstance(tokens_per_expert, Sequence) \
            or not tokens_per_expert:
        raise ValueError(f"grouped_gemm: tokens_per_expert must list one token count per expert, e.g. (96, 40, 45),"
                         f" got {tokens_per_expert!r}")
    counts = []
    for e, c in enumerate(tokens_per_expert):
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)):
            raise ValueError(f"grouped_gemm: tokens_per_expert[{e}] = {c!r} is not an integer token count")
        if c < 0:
            raise ValueError(f"grouped_gemm: tokens_per_expert[{e}] = {c} is negative; valid counts are >= 0 "
                             "tokens routed to that expert")
        counts.append(int(c))
    if sum(counts) == 0:
        raise ValueError(f"grouped_gemm: tokens_per_expert {tuple(counts)} routes no token; at least one expert "
                         "needs a count > 0")
    for name, v in (("tokens", tokens), ("top_k", top_k)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise ValueError(f"grouped_gemm: {name} must be a positive integer, got {v!r}")
    if tokens is not None and top_k is not None:
        if top_k > len(counts):
            raise ValueError(f"grouped_gemm: top_k={top_k} exceeds the {len(counts)} experts of tokens_per_expert; "
                             f"valid: 1..{len(counts)}")
        if sum(counts) != tokens * top_k:
            raise ValueError(f"grouped_gemm: tokens_per_expert sums to {sum(counts)}, but tokens x top_k = {tokens}"
                             f" x {top_k} = {tokens * top_k}; each token is routed to exactly top_k experts")
        over = [e for e, c in enumerate(counts) if c > tokens]
        if over:
            raise ValueError(f"grouped_gemm: tokens_per_expert[{over[0]}] = {counts[over[0]]} exceeds tokens="
                             f"{tokens}; a token goes to an expert at most once")
    return tuple(counts)


def grouped_config(tokens_per_expert: Sequence[int], n: int, k: int, dtype: DType, hw: GpuProfile,
                   pipeline: Pipeline | None = None, quant: str = "") -> GemmConfig:
    """The dense GEMM heuristic at the mean rows of an active expert, persistent, without split-K or B sharing
    (a cluster's CTAs could straddle two experts); `quant`: the experts' weight format (lowering.quant)."""
    active = [c for c in tokens_per_expert if c > 0]
    m_mean = max(1, math.ceil(sum(active) / max(1, len(active))))
    cfg = default_config(m_mean, n, k, dtype, hw, 1, pipeline, quant=quant)
    return replace(cfg, persistent=True, split_k=1, b_split=1, block_scales=False)


def grouped_units(tokens_per_expert: Sequence[int], n: int, k: int, cfg: GemmConfig) -> tuple[list[WorkUnit],
                                                                                                tuple[int, ...]]:
    """Work units expert by expert; inside an expert, groups of `raster_group` M tiles walked column by column
    (as gemm.py rasterises). `m` counts padded M tiles across experts, `nb` indexes expert e's B tile."""
    nt, kt = math.ceil(n / cfg.bn), math.ceil(k / cfg.bk)
    units: list[WorkUnit] = []
    m_tiles = tuple(math.ceil(c / cfg.bm) for c in tokens_per_expert)
    base = 0
    for e, mt in enumerate(m_tiles):
        for g0 in range(0, mt, cfg.raster_group):
            for j in range(nt):
                for i in range(g0, min(mt, g0 + cfg.raster_group)):
                    units.append(WorkUnit(base + i, j, e * nt + j, 0, kt, 0))
        base += mt
    return units, m_tiles


@dataclass(frozen=True)
class GroupedPlan:
    """A grouped GEMM before its CTAs are written: the schedule (work units on a persistent grid) and the full
    kernel's header (name, FLOPs, DRAM bytes, attrs). `grouped_gemm` writes its CTAs; torchsim.prediction.repeats
    builds truncated instances from it without writing the full kernel (65,536 tokens: seconds of graph)."""

    counts: tuple[int, ...]
    n: int
    k: int
    dtype: DType
    cfg: GemmConfig
    epilogue: Epilogue
    units: list[WorkUnit]
    m_tiles: tuple[int, ...]
    grid: int
    name: str
    flops: float
    dram_bytes: float
    attrs: dict[str, Any]


def grouped_plan(tokens_per_expert: Sequence[int], n: int, k: int, dtype: DType, hw: GpuProfile,
                 cfg: GemmConfig | None = None, epilogue: Epilogue = Epilogue.NONE, *, tokens: int | None = None,
                 top_k: int | None = None, quant: str = "") -> GroupedPlan:
    """The checked schedule and header of `grouped_gemm(...)` (same arguments), its CTAs not yet written."""
    counts = check_routing(tokens_per_expert, tokens, top_k)
    check_dims(n=n, k=k)
    fmt = quant_format(quant or (cfg.quant if cfg is not None else ""))
    if fmt is not None:
        check_quant(fmt, dtype, hw)
    if not hw.supports(dtype):
        raise ValueError(f"grouped_gemm: {hw.name} has no {dtype.name} tensor cores; valid dtypes here: "
                         + ", ".join(hw.tensor_formats()))
    cfg = cfg or grouped_config(counts, n, k, dtype, hw, quant=quant)
    if cfg.split_k != 1 or cfg.b_split != 1:
        raise ValueError(f"grouped_gemm: config has split_k={cfg.split_k}, b_split={cfg.b_split}; a grouped GEMM "
                         "neither splits K nor shares B tiles across CTAs (valid: 1 and 1)")
    out_dtype = gemm_out_dtype(dtype)
    units, m_tiles = grouped_units(counts, n, k, cfg)
    grid = min(len(units), hw.sms * resident_ctas(hw, cfg.threads(), _regs(cfg), cfg.smem_bytes(dtype)))
    # grid-stride over the units (tiling.cta_classes): each CTA takes floor or ceil of units / grid tiles
    per_cta = (len(units) // grid, -(-len(units) // grid))
    rows, active = sum(counts), sum(1 for c in counts if c)
    padded = sum(m_tiles) * cfg.bm
    w_bytes = fmt.weight_bytes(k, n) if fmt is not None else k * n * dtype.nbytes
    a_scales = fmt.act_scale_bytes(rows, k) if fmt is not None else 0.0
    return GroupedPlan(
        counts, n, k, dtype, cfg, epilogue, units, m_tiles, grid,
        name=f"grouped_gemm_{len(counts)}x{rows}x{n}x{k}", flops=2.0 * rows * n * k,
        dram_bytes=float(rows * k * dtype.nbytes + a_scales + active * w_bytes
                         + rows * n * out_dtype.nbytes * (2 if epilogue is Epilogue.RESIDUAL else 1)),
        attrs={"template": f"grouped_gemm/{cfg.pipeline.value}", "bm": cfg.bm, "bn": cfg.bn, "bk": cfg.bk,
               "stages": cfg.stages, "persistent": True, "b_split": 1, "split_k": 1, "epilogue": epilogue.value,
               "dtype": dtype.name.lower(), "n": n, "k": k, "experts": len(counts), "active_experts": active,
               "tokens_per_expert": counts, "m_tiles": m_tiles, "tiles": len(units), "grid": grid,
               "padded_rows": padded, "tile_efficiency": rows / padded,
               "tiles_per_cta": per_cta, **({"quant": fmt.name} if fmt is not None else {})},
    )


def grouped_gemm(tokens_per_expert: Sequence[int], n: int, k: int, dtype: DType, hw: GpuProfile,
                 cfg: GemmConfig | None = None, epilogue: Epilogue = Epilogue.NONE, *, tokens: int | None = None,
                 top_k: int | None = None, quant: str = "") -> KernelGraph:
    """Y_e[M_e, n] = X_e[M_e, k] @ W_e[k, n] for every expert e with M_e = tokens_per_expert[e] (FP32 accumulation;
    FP8 inputs write BF16). `tokens`/`top_k`, when given, are checked against the counts. `quant`: the experts'
    weights in a quantised format (lowering.quant; `dtype` is the MMA dtype, as for templates.gemm)."""
    return plan_kernel(grouped_plan(tokens_per_expert, n, k, dtype, hw, cfg, epilogue, tokens=tokens, top_k=top_k,
                                    quant=quant), hw)


def plan_kernel(plan: GroupedPlan, hw: GpuProfile) -> KernelGraph:
    """The full kernel of `plan`: every CTA of its persistent grid written."""
    cfg, regs = plan.cfg, _regs(plan.cfg)
    out_dtype = gemm_out_dtype(plan.dtype)
    classes = tuple(CtaClass(_write_cta(cp, cfg, plan.dtype, out_dtype, plan.epilogue, hw), cp.params, cp.names,
                             threads=cfg.threads(), regs_per_thread=regs, smem_bytes=cfg.smem_bytes(plan.dtype))
                    for cp in cta_classes(plan.units, plan.grid))
    return KernelGraph(name=plan.name, classes=classes, flops=plan.flops, dram_bytes=plan.dram_bytes,
                       attrs=dict(plan.attrs))


def load_balance(result: Any) -> dict[str, float]:
    """Load across SMs from a KernelResult: how many SMs got no CTA, tensor-pipe busy cycles per SM (max and min
    over the mean), the spread of the working SMs' finish times, and the share of SM-cycles left idle after each
    SM's last CTA retired (the tail, idle SMs included)."""
    ends = np.asarray(result.attrs.get("sm_end_cycles", ()), dtype=np.float64)
    busy = np.asarray(result.attrs.get("sm_busy_cycles", {}).get("tensor", ()), dtype=np.float64)
    if not ends.size:
        return {}
    worked = ends[ends > 0] if (ends > 0).any() else ends
    out = {"idle_sms": float((ends == 0).sum()), "sm_end_min_cycles": float(worked.min()),
           "sm_end_max_cycles": float(worked.max()),
           "tail_idle_share": float(1.0 - ends.mean() / max(1.0, float(result.cycles)))}
    if busy.size and busy.mean() > 0:
        out.update(tensor_busy_max_over_mean=float(busy.max() / busy.mean()),
                   tensor_busy_min_over_mean=float(busy.min() / busy.mean()))
    return out


def call_plan(call: KernelCall, hw: Any) -> GroupedPlan:
    """The GroupedPlan of a grouped-GEMM kernel call (the configuration its `variant` names, else the heuristic's)."""
    variant = call.p("variant", "")
    tpe = call.p("tokens_per_expert")
    quant = str(call.p("quant", ""))
    cfg = grouped_config(check_routing(tpe), call.p("n"), call.p("k"), call.dtype, hw,
                         Pipeline.parse(variant), quant) if variant else None
    tokens = call.p("tokens", 0) or None
    top_k = call.p("top_k", 0) or None
    return grouped_plan(tpe, call.p("n"), call.p("k"), call.dtype, hw, cfg, Epilogue.parse(call.p("epilogue", "none")),
                        tokens=tokens, top_k=top_k, quant=quant)


def _call(call: KernelCall, hw: Any) -> KernelGraph:
    return plan_kernel(call_plan(call, hw), hw)


CALLS: dict[KernelKind, Callable[[KernelCall, Any], KernelGraph]] = {KernelKind.GROUPED_GEMM: _call}
