"""GEMM tile configurations: pipeline organisations, tile sizes, and the default heuristic per architecture.

Used by torchsim.lowering.templates.gemm; a configuration is a parameter of the one GEMM template family.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum

from torchsim.graph.kinds import DType
from torchsim.hwmodels.gpu import Arch, GpuProfile
from torchsim.lowering.quant import QuantFormat, parse


def quant_format(name: str) -> QuantFormat | None:
    """The format a config's `quant` names (None for "")."""
    return parse(name) if name else None


class Pipeline(Enum):
    """How the mainloop is organised (GPU-Tile-Sim §4 'Software pipelining'; CUTLASS kernel schedules)."""

    SM80_MULTISTAGE = "sm80-multistage"  # cp.async multistage; every warp loads and computes
    NAIVE_2STAGE = "naive-2stage"  # sm90: one warp group issues TMA and wgmma in sequence, 2 buffers
    WS_COOPERATIVE = "ws-cooperative"  # sm90: producer WG + 2 consumer WGs splitting one tile
    WS_PINGPONG = "ws-pingpong"  # sm90: producer + 2 consumer WGs on alternating sub-tiles
    WS_3STAGE = "ws-3stage"  # sm90: producer + 2 consumer WGs + a dedicated epilogue WG
    SM100_TCGEN05 = "sm100-tcgen05"  # TMA warp + single-thread tcgen05 MMA warp + epilogue WG, TMEM accumulators

    @classmethod
    def parse(cls, name: str) -> Pipeline:
        for p in cls:
            if p.value == name:
                return p
        raise ValueError(f"unknown GEMM variant {name!r}; valid: {', '.join(p.value for p in cls)}")


ARCH_PIPELINES = {
    Arch.SM80: (Pipeline.SM80_MULTISTAGE,),
    Arch.SM90: (Pipeline.WS_COOPERATIVE, Pipeline.WS_PINGPONG, Pipeline.WS_3STAGE, Pipeline.NAIVE_2STAGE),
    Arch.SM100: (Pipeline.SM100_TCGEN05,),
}


class Epilogue(Enum):
    NONE = "none"
    SILU = "silu"
    BIAS = "bias"
    RESIDUAL = "residual"

    @classmethod
    def parse(cls, name: str) -> Epilogue:
        try:
            return cls(name)
        except ValueError:
            raise ValueError(f"unknown epilogue {name!r}; valid: {', '.join(e.value for e in cls)}") from None


@dataclass(frozen=True, slots=True)
class GemmConfig:
    """Tile sizes, pipeline depth and organisation. `b_split` CTAs share each B tile (TMA multicast in a
    cluster on sm90, the CTA pair of cta_group::2 on sm100); `split_k` slices K across CTAs."""

    bm: int
    bn: int
    bk: int
    stages: int
    pipeline: Pipeline
    persistent: bool = True
    b_split: int = 1
    split_k: int = 1
    warps: int = 8  # sm80: warps of the CTA
    order_edges: bool = True  # False: ablation that drops ORDER edges (synchronisation, buffer reuse)
    raster_group: int = 8  # CTA rasterisation: column-major groups of this many M tiles (L2 locality)
    fp8_fast_accum: bool = False  # sm90 FP8: keep wgmma's reduced-precision accumulator (no FP32 promotion)
    # sm90 FP8 with DeepGEMM's fine-grained scaling: per tile the math warp groups load the B scales (LDG ->
    # shared memory) and synchronise before the mainloop, and store the tile once both have staged it
    block_scales: bool = False
    # a quantised weight/activation format (torchsim.lowering.quant: "w4a16", "nvfp4", ...): B holds the format's
    # weights (+ scales), weight-only formats dequantise B in the main loop; "" = both operands in the MMA dtype
    quant: str = ""

    def __post_init__(self) -> None:
        for name in ("bm", "bn", "bk", "stages", "b_split", "split_k", "warps", "raster_group"):
            if getattr(self, name) <= 0:
                raise ValueError(f"GEMM config field {name} must be > 0, got {getattr(self, name)}")
        if self.bn % self.b_split:
            raise ValueError(f"GEMM config: bn={self.bn} is not divisible by b_split={self.b_split}")
        if self.pipeline in (Pipeline.WS_3STAGE, Pipeline.WS_PINGPONG) and self.bm < 128:
            raise ValueError(f"GEMM variant {self.pipeline.value} splits the tile over two consumer warp "
                             f"groups and needs bm >= 128 (got {self.bm}); use naive-2stage or ws-cooperative "
                             f"(one consumer warp group) for bm=64")
        if self.pipeline is Pipeline.WS_COOPERATIVE and self.bm < 128 and self.bm != 64:
            raise ValueError(f"GEMM variant ws-cooperative runs one consumer warp group per 64 rows of a bm=64 tile "
                             f"or two splitting bm >= 128, got bm={self.bm}")

    def smem_bytes(self, dtype: DType) -> int:
        """Shared memory of the pipeline's stages (+ the C staging tile) for MMA dtype `dtype`. With a quantised
        format (`quant`) B holds the format's weight elements, block-scaled MMAs add their scale factors per stage,
        and a weight-only kernel on sm100 (whose MMA reads both operands from shared memory) also holds each
        stage's B dequantised to `dtype`."""
        a = self.bm * self.bk
        b = self.bn * self.bk // self.b_split * self.b_split  # the full B tile lands in each CTA's smem
        if self.pipeline is Pipeline.WS_PINGPONG:
            a, b = self.bm * self.bk // 2, self.bn * self.bk  # one buffer holds one consumer's sub-tile
        epi = self.bm * self.bn * 2 if self.pipeline is not Pipeline.SM80_MULTISTAGE else 0
        fmt = quant_format(self.quant)
        if fmt is None:
            return int((a + b) * dtype.nbytes * self.stages + epi)
        b_bytes = fmt.weight.nbytes + (dtype.nbytes if fmt.weight_only and self.pipeline is Pipeline.SM100_TCGEN05
                                       else 0.0)
        sf = 0.0
        if fmt.block_scaled_mma:
            sf = fmt.act_scale_bytes(self.bm, self.bk) + fmt.weight_scales(self.bk, self.bn) * fmt.w_scale_bytes
        return int((a * dtype.nbytes + b * b_bytes + sf) * self.stages + epi)

    @property
    def consumers(self) -> int:
        """Consumer (math) warp groups of a warp-specialised sm90 kernel: one for a 64-row tile (one wgmma M),
        two splitting the rows of a larger tile."""
        return 1 if self.bm < 128 else 2

    def threads(self) -> int:
        if self.pipeline is Pipeline.SM80_MULTISTAGE:
            return 32 * self.warps
        if self.pipeline is Pipeline.WS_COOPERATIVE:
            return 128 * (1 + self.consumers)
        if self.pipeline is Pipeline.NAIVE_2STAGE:
            return 128
        if self.pipeline is Pipeline.WS_3STAGE:
            return 512
        if self.pipeline is Pipeline.SM100_TCGEN05:
            fmt = quant_format(self.quant)
            return 384 if fmt is not None and fmt.weight_only else 192  # + a transform warp group (warps 8-11)
        return 384


def k_bytes_per_stage(dtype: DType) -> int:
    """BK of the sm90/sm100 default tiles: 128 bytes of K per stage (64 bf16, 128 FP8/int8, 256 FP4, 32 for the
    4-byte fp32/tf32, whose 64-deep 128x256 stages would not fit shared memory even at two stages)."""
    return 128 if dtype.is_fp8 or dtype is DType.INT8 else 256 if dtype is DType.FP4_E2M1 else \
        32 if dtype.nbytes == 4 else 64


def mma_k(dtype: DType) -> int:
    """K of one tensor-core MMA instruction (mma.sync / wgmma / tcgen05): 32 bytes of K, 16 bf16/fp16, 32 FP8/int8,
    8 tf32, 64 FP4; a GEMM's BK is a multiple of it."""
    return max(1, int(32 // dtype.nbytes))


def default_config(m: int, n: int, k: int, dtype: DType, hw: GpuProfile, batch: int = 1,
                   pipeline: Pipeline | None = None, quant: str = "") -> GemmConfig:
    """The tile configuration a tuned library would pick: large tiles for large problems, split-K when the
    output has too few tiles to fill the SMs, and the largest pipeline depth that fits shared memory. With a
    quantised format (`quant`), the tiles the format's kernels use (`quant_config`)."""
    if quant:
        return quant_config(m, n, k, dtype, hw, batch, pipeline, quant)
    allowed = ARCH_PIPELINES.get(hw.arch)
    if allowed is None:
        raise ValueError(f"no GPU GEMM template for architecture {hw.arch.value} of {hw.name}")
    if pipeline is not None and pipeline not in allowed:
        raise ValueError(f"GEMM variant {pipeline.value} needs units {hw.name} ({hw.arch.value}) lacks; "
                         f"valid here: {', '.join(p.value for p in allowed)}")
    pipe = pipeline or allowed[0]
    bk = k_bytes_per_stage(dtype)
    if hw.arch is Arch.SM80:
        bm, bn, bk = (128, 256, 32) if m > 64 else (64, 128, 64)
        bk = bk * 2 if dtype is DType.INT8 else bk  # the same bytes of K per stage as bf16
        cfg = GemmConfig(bm, bn, bk, 3, pipe, persistent=False, warps=8 if m > 64 else 4)
    elif hw.arch is Arch.SM90:
        small = m <= 64 and pipe in (Pipeline.NAIVE_2STAGE, Pipeline.WS_COOPERATIVE)
        if small:
            pipe = Pipeline.NAIVE_2STAGE
        bm = 64 if small else 128
        bn = 256 if n >= 256 else 128
        cfg = GemmConfig(bm, bn, bk, 4, pipe, persistent=True, b_split=1 if small else 2)
    else:
        bm = 128
        bn = 256 if n >= 256 else 128
        cfg = GemmConfig(bm, bn, bk, 4, pipe, persistent=True, b_split=1 if m <= 128 else 2)
    return fit_config(cfg, m, n, k, dtype, hw, batch)


def fit_config(cfg: GemmConfig, m: int, n: int, k: int, dtype: DType, hw: GpuProfile, batch: int = 1) -> GemmConfig:
    """Deepest pipeline that fits shared memory; split-K when output tiles cannot fill the SMs."""
    limit = float(hw.smem_per_cta_bytes.value)
    while cfg.stages > 2 and cfg.smem_bytes(dtype) > limit:
        cfg = replace(cfg, stages=cfg.stages - 1)
    tiles = batch * math.ceil(m / cfg.bm) * math.ceil(n / cfg.bn)
    k_tiles = math.ceil(k / cfg.bk)
    if tiles < hw.sms // 2 and k_tiles >= 8:
        split = min(hw.sms // max(1, tiles), k_tiles // 4, 16)
        cfg = replace(cfg, split_k=max(1, split))
    if cfg.b_split > 1 and math.ceil(m / cfg.bm) < cfg.b_split:
        cfg = replace(cfg, b_split=1)
    return cfg


# DeepGEMM's own tile selection for its sm90 FP8 GEMMs (deep_gemm/jit_kernels/gemm.py get_best_configs at
# deepseek-ai/DeepGEMM 55ab91f, the commit of its published performance table): BLOCK_K 128, BLOCK_M 64 for
# M <= 64 else 128, BLOCK_N from 16..128 (step 8), 144, 160; the pipeline as deep as the 232448-byte sm90 shared
# memory allows (8..4 stages, with the output staging tile); TMA multicast 2 when M >= 512 and the shape allows.
# Its kernel (deep_gemm/include/deep_gemm/fp8_gemm.cuh, get_num_threads_per_sm) runs one TMA warp group and one
# math warp group per 64 rows of BLOCK_M: one for BLOCK_M 64, two for 128 (ws-cooperative here).
DEEPGEMM_BLOCK_NS = tuple(range(16, 129, 8)) + (144, 160)
DEEPGEMM_SMEM = 232448


def deepgemm_config(m: int, n: int, k: int, dtype: DType, hw: GpuProfile, groups: int = 1) -> GemmConfig:
    """The configuration DeepGEMM picks for an FP8 GEMM (or `groups` masked/contiguous grouped GEMMs): fewest
    waves, then the fullest last wave, then the smaller BLOCK_N; the deepest pipeline that fits. Its kernel is a
    persistent TMA producer warp group + one math warp group per 64 rows (ws-cooperative: two for BLOCK_M 128,
    one for BLOCK_M 64, which it picks for M <= 64). DeepGEMM multicasts A or B, whichever side is legal first;
    the template shares B only, so a multicast of either side is modelled as B's (the same L2 saving for the
    similar A and B tiles that BLOCK_N ~ BLOCK_M gives)."""
    if hw.arch is not Arch.SM90 or not dtype.is_fp8:
        raise ValueError(f"deepgemm_config: DeepGEMM's sm90 FP8 kernels need an sm90 profile and an FP8 dtype, got "
                         f"{hw.name} ({hw.arch.value}) and {dtype.name}")
    sms = hw.sms
    bm = 64 if m <= 64 else 128

    def waves(bn: int) -> tuple[int, int]:
        tiles = math.ceil(m / bm) * math.ceil(n / bn) * groups
        last = tiles % sms or sms
        return math.ceil(tiles / sms), last

    best = DEEPGEMM_BLOCK_NS[0]
    for bn in DEEPGEMM_BLOCK_NS[1:]:
        (w, u), (bw, bu) = waves(bn), waves(best)
        if w < bw or (w == bw and u > bu):
            best = bn
    bn = best
    stages = 4
    candidates = (4,) if 128 % bn and 128 // math.gcd(128, bn) <= 4 else (8, 7, 6, 5, 4)
    for s in candidates:
        smem = (bm * bn * 2 + s * (bm * 128 + bm * 4 + bn * 128) + math.ceil(
            math.ceil(k / 128) * 4 * (1 if 128 % bn == 0 else 2) / 8) * 8 + s * 16)
        if smem <= DEEPGEMM_SMEM:
            stages = s
            break
    legal_a = n % (bn * 2) == 0 and sms % 2 == 0
    legal_b = m % (bm * 2) == 0 and sms % 2 == 0
    multicast = 2 if m >= 512 and groups == 1 and (legal_a or legal_b) else 1
    cfg = GemmConfig(bm, bn, 128, stages, Pipeline.WS_COOPERATIVE, persistent=True, b_split=multicast,
                     block_scales=True)
    limit = float(hw.smem_per_cta_bytes.value)
    while cfg.stages > 2 and cfg.smem_bytes(dtype) > limit:
        cfg = replace(cfg, stages=cfg.stages - 1)
    return cfg


def quant_config(m: int, n: int, k: int, dtype: DType, hw: GpuProfile, batch: int, pipeline: Pipeline | None,
                 quant: str) -> GemmConfig:
    """Tiles of a quantised GEMM (MMA dtype `dtype`, weights in format `quant`).

    Weight-only formats at decode sizes (M <= 64) take the small-batch tiles of their kernels: on sm80 Marlin's
    (16-row MMA blocks per 16 tokens, thread_k 128 x thread_n 128, 256 threads, 4 stages: lowering.quant's
    MARLIN_CONFIGS), on sm90 Machete's 128-weight-row x 16..64-token tile on the one-warp-group pipeline (its A/B
    swap puts the weights on wgmma's M side: the tokens are N, so they are not padded to 64 rows), on sm100 the
    same swapped tile on the tcgen05 pipeline with a transform warp group (assumed); FP8 with 128x128
    block scales on sm90 takes DeepGEMM's configuration (deepgemm_config); the rest the default heuristic for the
    MMA dtype (FP4 takes BK = 256: 128 bytes of K as bf16's 64)."""
    fmt = parse(quant)
    small = m <= 64 and pipeline is None
    if fmt.weight_only and small and hw.arch is Arch.SM80:
        cfg = GemmConfig(16 * math.ceil(m / 16), 128, 128, 4, Pipeline.SM80_MULTISTAGE, persistent=False, warps=8,
                         quant=quant)
        return fit_config(cfg, m, n, k, dtype, hw, batch)
    if fmt.weight_only and small and hw.arch in (Arch.SM90, Arch.SM100):  # the same swapped 128 x tokens tile
        pipe = Pipeline.NAIVE_2STAGE if hw.arch is Arch.SM90 else Pipeline.SM100_TCGEN05
        cfg = GemmConfig(16 * math.ceil(m / 16), 128, 64, 4, pipe, persistent=True, quant=quant)
        return fit_config(cfg, m, n, k, dtype, hw, batch)
    if fmt.name == "fp8-block" and hw.arch is Arch.SM90 and m > 64 and pipeline is None and batch == 1:
        return replace(deepgemm_config(m, n, k, dtype, hw), quant=quant)
    cfg = replace(default_config(m, n, k, dtype, hw, batch, pipeline), quant=quant)
    return fit_config(cfg, m, n, k, dtype, hw, batch)
