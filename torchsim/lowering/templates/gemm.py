"""The GEMM template family: one builder parameterised by the hardware profile and a GemmConfig.

Organisations follow CUTLASS's kernel schedules and the GPU-Tile-Sim pipelining study: sm80 multistage
cp.async (every warp loads and computes); sm90 TMA + wgmma as naive 2-stage, warp-specialised cooperative,
ping-pong, and 3-stage with a dedicated epilogue warp group; sm100 tcgen05 with TMEM accumulators.

Example:
    >>> from torchsim.hwmodels import get_profile
    >>> from torchsim.graph import DType
    >>> kg = gemm(1024, 1024, 1024, DType.BF16, get_profile("h100-sxm"))
    >>> kg.flops == 2 * 1024 ** 3
    True
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

from torchsim.graph import CtaClass, DType, GraphBuilder, KernelGraph, Op, Space, TileDesc, TileGraph, Unit
from torchsim.hwmodels.gpu import Arch, GpuProfile
from torchsim.lowering.quant import QuantFormat, check_supported, dequant_fma_work
from torchsim.lowering.templates.gemm_config import (
    Epilogue,
    GemmConfig,
    Pipeline,
    default_config,
    fit_config,
    quant_format,
)
from torchsim.lowering.templates.gemm_parts import GemmWriter
from torchsim.lowering.templates.prologue import add_prologue
from torchsim.lowering.templates.tiling import ClassPlan, cta_classes, work_units


def check_dims(**dims: int) -> None:
    for name, v in dims.items():
        if not isinstance(v, int) or v <= 0:
            raise ValueError(f"GEMM dimension {name} must be a positive integer, got {v!r}")


def gemm_out_dtype(dtype: DType) -> DType:
    """What a GEMM with MMA dtype `dtype` writes: bf16 for bf16, FP8, INT8 and FP4 inputs, else the input dtype."""
    return DType.BF16 if dtype.is_fp8 or dtype in (DType.BF16, DType.INT8, DType.FP4_E2M1) else dtype


def check_quant(fmt: QuantFormat, dtype: DType, hw: GpuProfile) -> None:
    """`dtype` must be the MMA dtype `fmt` runs (the model's bf16/fp16 for weight-only formats) and `hw` must have
    the tensor cores it needs."""
    check_supported(fmt, hw)
    want = fmt.mma_dtype(dtype)
    if want is not dtype or (fmt.weight_only and dtype not in (DType.BF16, DType.FP16)):
        raise ValueError(f"quantisation {fmt.name!r} multiplies in "
                         f"{'the model dtype (bf16 or fp16)' if fmt.weight_only else want.name}, got dtype "
                         f"{dtype.name}")


def gemm(m: int, n: int, k: int, dtype: DType, hw: GpuProfile, cfg: GemmConfig | None = None,
         epilogue: Epilogue = Epilogue.NONE, batch: int = 1, shared_b: bool = False,
         tiles_per_cta: int | None = None, quant: str = "") -> KernelGraph:
    """C[batch, m, n] = A[batch, m, k] @ B[(batch,) k, n] (+ epilogue), FP32 accumulation.

    `shared_b`: B is one weight shared by all batches (a linear layer); otherwise batched (bmm).
    `tiles_per_cta`: persistent grid sized so each CTA walks this many tiles (single-SM studies).
    `quant`: B (the weights) in a quantised format (torchsim.lowering.quant; `dtype` is then the MMA dtype: the
    model's for weight-only formats, the format's for W8A8/FP8/FP4); a given `cfg` must name the same format.
    """
    cfg = checked_config(m, n, k, dtype, hw, cfg, batch, quant)
    fmt = quant_format(cfg.quant)
    out_dtype = gemm_out_dtype(dtype)
    units = work_units(batch, m, n, k, cfg.bm, cfg.bn, cfg.bk, cfg.split_k, cfg.b_split, cfg.raster_group, shared_b)
    grid = None
    if cfg.persistent:
        grid = math.ceil(len(units) / tiles_per_cta) if tiles_per_cta else hw.sms
    classes = []
    for plan in cta_classes(units, grid):
        graph = _write_cta(plan, cfg, dtype, out_dtype, epilogue, hw)
        classes.append(CtaClass(graph, plan.params, plan.names, threads=cfg.threads(),
                                regs_per_thread=_regs(cfg), smem_bytes=cfg.smem_bytes(dtype)))
    return KernelGraph(name=f"gemm_{m}x{n}x{k}", classes=tuple(classes), flops=2.0 * batch * m * n * k,
                       dram_bytes=gemm_io_bytes(m, n, k, dtype, batch, shared_b, fmt, epilogue),
                       attrs=gemm_attrs(m, n, k, dtype, cfg, epilogue, batch, shared_b))


def checked_config(m: int, n: int, k: int, dtype: DType, hw: GpuProfile, cfg: GemmConfig | None = None,
                   batch: int = 1, quant: str = "") -> GemmConfig:
    """The configuration `gemm` builds with: `cfg` (default: the profile's default for the shape) checked against
    the shape, the quantisation and `hw`, its tiles shrunk to fit shared memory when they do not."""
    check_dims(m=m, n=n, k=k, batch=batch)
    fmt = quant_format(quant or (cfg.quant if cfg is not None else ""))
    if fmt is not None:
        check_quant(fmt, dtype, hw)
    if not hw.supports(dtype):
        raise ValueError(f"{hw.name} has no {dtype.name} tensor cores; it has {', '.join(hw.tensor_formats())}")
    cfg = cfg or default_config(m, n, k, dtype, hw, batch, quant=quant)
    if fmt is not None and cfg.quant != fmt.name:
        raise ValueError(f"GEMM config quant={cfg.quant!r} differs from quant={quant!r}")
    if cfg.smem_bytes(dtype) > hw.smem_per_cta_bytes.value:
        cfg = fit_config(cfg, m, n, k, dtype, hw, batch)
    return cfg


def gemm_io_bytes(m: int, n: int, k: int, dtype: DType, batch: int, shared_b: bool, fmt: QuantFormat | None,
                  epilogue: Epilogue) -> float:
    """The DRAM bytes a GEMM must move at least: A, B (in its quantised format, with the scales) and C (read
    again for a residual epilogue)."""
    a_bytes = batch * m * k * dtype.nbytes
    b_bytes = (1 if shared_b else batch) * k * n * dtype.nbytes
    if fmt is not None:  # the format's weights and scales (+ the activations' block scales)
        b_bytes = (1 if shared_b else batch) * fmt.weight_bytes(k, n)
        a_bytes += batch * fmt.act_scale_bytes(m, k)
    return float(a_bytes + b_bytes + batch * m * n * gemm_out_dtype(dtype).nbytes
                 * (2 if epilogue is Epilogue.RESIDUAL else 1))


def gemm_attrs(m: int, n: int, k: int, dtype: DType, cfg: GemmConfig, epilogue: Epilogue, batch: int,
               shared_b: bool) -> dict[str, Any]:
    """The attrs of the kernel `gemm` builds (also what torchsim.prediction.repeats gives a GEMM it never builds)."""
    return {"template": f"gemm/{cfg.pipeline.value}", "bm": cfg.bm, "bn": cfg.bn, "bk": cfg.bk,
            "stages": cfg.stages, "persistent": cfg.persistent, "b_split": cfg.b_split, "split_k": cfg.split_k,
            "epilogue": epilogue.value, "dtype": dtype.name.lower(), "m": m, "n": n, "k": k, "batch": batch,
            # one weight for all batches (a linear layer) or one B per batch (bmm): different B traffic
            **({"shared_b": shared_b} if batch > 1 else {}), **({"quant": cfg.quant} if cfg.quant else {})}


def _regs(cfg: GemmConfig) -> int:
    """Registers per thread: warp-specialised kernels rebalance with setmaxnreg to fill the register file."""
    if cfg.pipeline is Pipeline.SM80_MULTISTAGE:
        return 232 // max(1, cfg.warps // 4)
    return min(168, 65536 // cfg.threads())


# CTA templates written, by (K blocks of its tiles, config, dtypes, epilogue, profile object): a GEMM's full graph,
# its family's event count and its truncated instances (torchsim.prediction.repeats) have CTA classes of the same
# shape, and a call is built up to three times on its way to a simulation. A template is never changed once built
# (torchsim.sim.prepare.prepared relies on it too), so one object serves them all; most recently used kept.
_CTA_MEMO: OrderedDict[tuple[Any, ...], tuple[GpuProfile, TileGraph]] = OrderedDict()
CTA_MEMO_SIZE = 32


def _write_cta(plan: ClassPlan, cfg: GemmConfig, dtype: DType, out_dtype: DType, epi: Epilogue,
               hw: GpuProfile) -> TileGraph:
    """The CTA template of `plan`'s class (written once per shape, config and profile: `_CTA_MEMO`)."""
    key = (plan.kts, cfg, dtype, out_dtype, epi, id(hw))
    got = _CTA_MEMO.get(key)
    if got is not None and got[0] is hw:  # the id of a profile still alive (the entry holds it)
        _CTA_MEMO.move_to_end(key)
        return got[1]
    graph = _build_cta(plan.kts, cfg, dtype, out_dtype, epi, hw)
    _CTA_MEMO[key] = (hw, graph)
    while len(_CTA_MEMO) > CTA_MEMO_SIZE:
        _CTA_MEMO.popitem(last=False)
    return graph


def _build_cta(kts: tuple[int, ...], cfg: GemmConfig, dtype: DType, out_dtype: DType, epi: Epilogue,
               hw: GpuProfile) -> TileGraph:
    name = f"gemm/{cfg.pipeline.value}/{cfg.bm}x{cfg.bn}x{cfg.bk}/{len(kts)}tiles"
    b = GraphBuilder(name, dtype, program_order=cfg.order_edges)
    fmt = quant_format(cfg.quant)
    w = GemmWriter(b, cfg, dtype, out_dtype, epi, async_copy=cfg.pipeline is not Pipeline.SM80_MULTISTAGE,
                   multicast_b=cfg.pipeline is not Pipeline.SM100_TCGEN05,
                   datapath_rows=1 if cfg.pipeline is Pipeline.SM80_MULTISTAGE else int(hw.tensor_datapath_rows.value),
                   quant=fmt)
    if fmt is not None and fmt.weight_only:
        w.dequant_work = dequant_fma_work(fmt, dtype, hw)
        # Machete (sm90) swaps A and B so that the dequantised weights are wgmma's register (M-side) operand and the
        # few tokens its N; sm100's mixed-input mainloop is taken to swap the same way (assumed), its MMA reading
        # the converted weights from shared memory
        w.swap_ab = hw.arch in (Arch.SM90, Arch.SM100)
    writers = {
        Pipeline.SM80_MULTISTAGE: _sm80, Pipeline.NAIVE_2STAGE: _naive, Pipeline.WS_COOPERATIVE: _cooperative,
        Pipeline.WS_3STAGE: _cooperative, Pipeline.WS_PINGPONG: _pingpong, Pipeline.SM100_TCGEN05: _sm100,
    }
    writers[cfg.pipeline](w, kts)
    w.link_slots()
    if w.async_copy:  # TMA pipelines: A, B and C tensor maps (+ the bias / residual source); a full and an
        # empty mbarrier per stage (+ full/empty for each of sm100's two TMEM accumulators)
        tmem_acc = 4 if cfg.pipeline is Pipeline.SM100_TCGEN05 else 0
        add_prologue(b, hw, 0, tensormaps=3 + (epi in (Epilogue.BIAS, Epilogue.RESIDUAL)),
                     barriers=2 * cfg.stages + tmem_acc)
    return b.build()


def _sm80(w: GemmWriter, kts: tuple[int, ...]) -> None:
    """Multistage cp.async: loads run `stages - 1` steps ahead; a CTA barrier frees each slot."""
    b, cfg = w.b, w.cfg
    warps = b.group("warps", 0, cfg.warps, role="load+mma")
    wm = 2 if cfg.warps >= 4 else 1
    wn = cfg.warps // wm
    lds_bytes = (cfg.bm * wn * w.dtype.nbytes + cfg.bn * wm * w.b_dtype.nbytes) * cfg.bk
    if w.weight_only:  # Marlin: the warps split B's columns and K, so each weight is read (and converted) once
        lds_bytes = cfg.bm * cfg.bk * wn * w.dtype.nbytes
    smem = TileDesc(Space.SHARED, w.dtype, (cfg.bm + cfg.bn, cfg.bk), "AB_smem")
    split = cfg.split_k > 1
    for t, kt in enumerate(kts):
        loads: dict[int, tuple[int, ...]] = {}
        frags: dict[int, int] = {}
        for i in range(min(cfg.stages - 1, kt)):
            loads[i] = _sm80_load(w, warps, t, i, frags)
        last = -1
        for i in range(kt):
            if i + cfg.stages - 1 < kt:
                loads[i + cfg.stages - 1] = _sm80_load(w, warps, t, i + cfg.stages - 1, frags)
            lds = b.node(warps, Op.LDS, Unit.LDST, work=lds_bytes, tile=smem, name=f"ldmatrix[t{t},k{i}]")
            stage = loads.pop(i)
            for ld in stage:
                b.data(ld, lds)
            frags[i] = lds
            # weight-only (Marlin): the weights to registers, converted and scaled, then mma.sync
            cvt = w.dequant(warps, t, i, list(stage)) if w.weight_only else -1
            mma = w.mma(warps, cfg.bm, cfg.bn, f"mma[t{t},k{i}]", smem_operands=False)  # mma.sync: registers
            b.data(lds, mma)
            if cvt >= 0:
                b.data(cvt, mma)
                frags[i] = cvt
            last = mma
        w.epilogue_nodes(warps, t, cfg.bm, 0, 1, [last], split=split)


def _sm80_load(w: GemmWriter, warps: int, t: int, i: int, frags: dict[int, int]) -> tuple[int, ...]:
    """cp.async of stage i (A, B and the format's scales); the slot is free once every warp read the stage it
    held (__syncthreads)."""
    pair = (w.load_a(warps, t, i), w.load_b(warps, t, i), *w.scale_loads(warps, t, i))
    if w.cfg.order_edges and i - w.cfg.stages in frags:
        for ld in pair:
            w.b.data(frags[i - w.cfg.stages], ld)
    return pair


def _naive(w: GemmWriter, kts: tuple[int, ...]) -> None:
    """One warp group: prefetch two stages, then wait for each MMA before reloading its buffer."""
    b, cfg = w.b, w.cfg
    wg = b.group("warpgroup", 0, 4, role="tma+mma+epilogue")
    split = cfg.split_k > 1
    for t, kt in enumerate(kts):
        loads = {}
        for i in range(min(2, kt)):
            loads[i] = (w.load_a(wg, t, i), w.load_b(wg, t, i), *w.scale_loads(wg, t, i))
        last = -1
        for i in range(kt):
            stage = loads.pop(i)
            cvt = w.dequant(wg, t, i, list(stage)) if w.weight_only else -1
            mma = w.mma(wg, cfg.bm, cfg.bn, f"mma[t{t},k{i}]")
            for ld in stage:
                b.data(ld, mma)
            if cvt >= 0:
                b.data(cvt, mma)
            if w.promotes:
                w.promote(wg, mma, cfg.bm, f"promote[t{t},k{i}]")
            if i + 2 < kt:
                pair = (w.load_a(wg, t, i + 2), w.load_b(wg, t, i + 2), *w.scale_loads(wg, t, i + 2))
                if cfg.order_edges:
                    for ld in pair:  # wgmma.wait: the buffer is reused after the MMA that read it
                        b.data(mma, ld)
                loads[i + 2] = pair
            last = mma
        w.epilogue_nodes(wg, t, cfg.bm, 0, 1, [last], split=split)


def _cooperative(w: GemmWriter, kts: tuple[int, ...]) -> None:
    """Producer WG issues TMA; two consumer WGs split each tile by rows (CUTLASS KernelTmaWarpSpecialized-
    Cooperative). With `WS_3STAGE` a third consumer-side WG runs the epilogue so the mainloop never stops. A
    64-row tile has one consumer WG (one wgmma M; CUTLASS KernelTmaWarpSpecialized, DeepGEMM's BLOCK_M 64)."""
    b, cfg = w.b, w.cfg
    producer = b.group("producer", 0, 4, role="tma")
    parts = cfg.consumers
    consumers = [b.group(f"consumer{c}", 4 + 4 * c, 4, role="mma") for c in range(parts)]
    three = cfg.pipeline is Pipeline.WS_3STAGE
    epi_group = b.group("epilogue", 12, 4, role="epilogue") if three else -1
    split = cfg.split_k > 1
    g = 0
    for t, kt in enumerate(kts):
        stage_loads = []
        for i in range(kt):
            pair = [w.load_a(producer, t, i), w.load_b(producer, t, i), *w.scale_loads(producer, t, i)]
            w.stage(pair)
            stage_loads.append(pair)
        lasts = []
        # DeepGEMM's block-scaled FP8: both math warp groups load the tile's B scales, then synchronise (a named
        # barrier) before either starts its mainloop
        scales = [w.scales_b(cg, t, kt) for cg in consumers] if cfg.block_scales and w.promotes else []
        stores = []
        for c, cg in enumerate(consumers):
            prev_mma = _consumer_mainloop(w, cg, c, t, stage_loads, g, after=scales, rows=cfg.bm // parts,
                                          share=1 / parts)
            lasts.append(prev_mma)
            if not three:
                stores.append(w.epilogue_nodes(cg, t, cfg.bm // parts, c, parts, [prev_mma], split=split)[1])
        if scales and len(stores) == 2 and cfg.order_edges:  # DeepGEMM stores the tile once both staged it
            b.data(w.last_sts[consumers[1]], stores[0])
            b.data(w.last_sts[consumers[0]], stores[1])
        if three:
            w.epilogue_nodes(epi_group, t, cfg.bm, 0, 1, lasts, split=split)
        g += kt


def _consumer_mainloop(w: GemmWriter, cg: int, c: int, t: int, stage_loads: list[list[int]], g: int,
                       token: int = -1, after: list[int] | None = None, rows: int | None = None,
                       share: float = 0.5) -> int:
    """One consumer warp group's wgmma loop over its `rows` of a tile (default: half): each MMA waits for its
    stage's loads; with wgmma.wait<1> the previous stage is released once its MMA completed. `token`: an MMA of
    the other consumer that must have issued before this mainloop starts (ping-pong); `share`: the part of each
    stage's weights this consumer dequantises (weight-only formats). Returns the last MMA."""
    b, cfg = w.b, w.cfg
    rows = rows or cfg.bm // 2
    prev = -1
    for i, loads in enumerate(stage_loads):
        # weight-only (Machete): each consumer converts its half of the weight rows (the swapped M side)
        cvt = w.dequant(cg, t, i, list(loads), share=share) if w.weight_only else -1
        mma = w.mma(cg, rows, cfg.bn, f"mma{c}[t{t},k{i}]")
        for ld in loads:
            b.data(ld, mma)
        if cvt >= 0:
            b.data(cvt, mma)
        if w.promotes:
            w.promote(cg, mma, rows, f"promote{c}[t{t},k{i}]")
        if i == 0 and token >= 0 and cfg.order_edges:
            b.order(token, mma)  # the other consumer's mainloop has issued its last MMA
        if i == 0 and after:
            for node in after:  # the tile's set-up every consumer synchronises on (block scales)
                b.data(node, mma)
        if prev >= 0:
            _release(w, cg, c, t, i - 1, prev, g)
        prev = mma
    _release(w, cg, c, t, len(stage_loads) - 1, prev, g)
    return prev


def _release(w: GemmWriter, cg: int, c: int, t: int, i: int, mma: int, g: int) -> None:
    arrive = w.b.node(cg, Op.BARRIER_ARRIVE, Unit.NONE, name=f"release{c}[t{t},k{i}]", barrier=_empty_barrier(w.b))
    w.b.data(mma, arrive)
    w.slot_users[g + i].append(arrive)


def _empty_barrier(b: GraphBuilder) -> int:
    if not hasattr(b, "_empty_id"):
        b._empty_id = b.barrier("smem_empty", expected=1)  # type: ignore[attr-defined]
    return int(b._empty_id)  # type: ignore[attr-defined]


def _pingpong(w: GemmWriter, kts: tuple[int, ...]) -> None:
    """Each tile splits into two row halves; consumer WGs take turns on the tensor pipe (an ordering token
    passes from one mainloop to the next) so one WG's epilogue overlaps the other's mainloop. B is loaded
    once per half: more TMA traffic for more overlap (CUTLASS KernelTmaWarpSpecializedPingpong)."""
    b, cfg = w.b, w.cfg
    producer = b.group("producer", 0, 4, role="tma")
    consumers = [b.group(f"consumer{c}", 4 + 4 * c, 4, role="mma") for c in range(2)]
    split = cfg.split_k > 1
    g = 0
    token = -1
    for t, kt in enumerate(kts):
        for c, cg in enumerate(consumers):
            stage_loads = []
            for i in range(kt):
                pair = [w.load_a(producer, t, i, parts=2, sub=c), w.load_b(producer, t, i),
                        *w.scale_loads(producer, t, i)]
                w.stage(pair)
                stage_loads.append(pair)
            prev_mma = token = _consumer_mainloop(w, cg, c, t, stage_loads, g, token, share=1.0)
            w.epilogue_nodes(cg, t, cfg.bm // 2, c, 2, [prev_mma], split=split)
            g += kt


def _sm100(w: GemmWriter, kts: tuple[int, ...]) -> None:
    """TMA warp, single-thread tcgen05 MMA warp, epilogue WG reading TMEM; two TMEM accumulators let the
    epilogue of tile t overlap the mainloop of tile t+1 (CUTLASS sm100 warp-specialised kernels)."""
    b, cfg = w.b, w.cfg
    producer = b.group("tma", 0, 1, role="tma")
    mma_warp = b.group("mma", 1, 1, role="mma")
    epi = b.group("epilogue", 4, 4, role="epilogue")
    # weight-only: a transform warp group dequantises each stage's weights into shared memory for the MMA (a
    # mixed-input mainloop); block-scaled formats: the MMA warp copies each stage's scale factors into TMEM
    transform = b.group("transform", 8, 4, role="transform") if w.weight_only else -1
    scaled = w.quant is not None and (w.quant.block_scaled_mma or w.quant.a_group > 0)
    split = cfg.split_k > 1
    g = 0
    acc_free: dict[int, int] = {}
    for t, kt in enumerate(kts):
        stage_loads = []
        ready: list[list[int]] = []  # per stage: what the MMA waits for
        for i in range(kt):
            scales = w.scale_loads(producer, t, i)
            pair = [w.load_a(producer, t, i), w.load_b(producer, t, i), *scales]
            w.stage(pair)
            stage_loads.append(pair)
            if transform >= 0:
                ready.append([pair[0], w.dequant(transform, t, i, pair[1:], to_smem=True)])
            else:
                ready.append(pair)
        last = -1
        for i in range(kt):
            if scaled:  # in the MMA warp's program order, right before the MMA that reads them
                ready[i] = ready[i][:2] + [w.scale_factors_to_tmem(mma_warp, t, i, ready[i][2:])]
            mma = w.mma(mma_warp, cfg.bm, cfg.bn, f"umma[t{t},k{i}]")
            for ld in ready[i]:
                b.data(ld, mma)
            if i == 0 and t - 2 in acc_free and cfg.order_edges:
                b.data(acc_free[t - 2], mma)  # TMEM accumulator buffer reused after its epilogue read it
            commit = b.node(mma_warp, Op.BARRIER_ARRIVE, Unit.NONE, name=f"commit[t{t},k{i}]",
                            barrier=_empty_barrier(b), ordered=False)
            b.data(mma, commit)
            w.slot_users[g + i].append(commit)
            last = mma
        acc_free[t], _ = w.epilogue_nodes(epi, t, cfg.bm, 0, 1, [last], tmem=True, split=split)
        g += kt
