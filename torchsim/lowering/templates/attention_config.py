"""Attention problem shapes, variants and tile configurations (FlashAttention-2/-3/-4, Flash-Decoding, FlashMLA).

Used by torchsim.lowering.templates.attention and .decode: a shape says what is computed and checks itself
(naming the bad parameter and what would be valid); a config says how (tiles, stages, warp roles).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from torchsim.graph.kinds import DType
from torchsim.hwmodels.gpu import Arch, GpuProfile

# Lane instructions per score element of the online softmax (algorithmic counts, not hardware numbers):
# row max (FMNMX), scale-and-subtract (FFMA), row sum (FADD), pack P to 16 bit (F2FP, two per instruction).
SOFTMAX_LANE_OPS = 3.5
MASK_LANE_OPS = 1.0  # compare-and-select on blocks that cross the causal diagonal or the sequence end
# exp2 by polynomial on the FMA pipe (FlashAttention-4): Cody-Waite range reduction (floor, subtract),
# a degree-3 Horner polynomial (3 FFMA) and the exponent shift-add (2 integer ops).
POLY_EXP_LANE_OPS = 7.0
# The FMA pipe's rate counts an FFMA as 2 FLOP; any other lane instruction takes the same issue slot.
FLOP_PER_LANE_OP = 2.0
# Triton's code generation for the tutorial softmax (counts per score element, in FMA-pipe issue slots):
# FMNMX (row max) runs on the ALU pipe, half the FP32 lane rate on sm80/sm90 (64 vs 128 results/clk/SM,
# GpuProfile.int32_ops_per_clk_per_sm / fma lanes), so each costs two slots.
ALU_SLOT_COST = 2.0
# tl.math.exp2 on fp32 lowers to PTX ex2.approx.f32 without .ftz (Triton's ftz flag reaches libdevice only,
# triton-lang/triton#5735), which ptxas expands around MUFU.EX2 with a subnormal range check: FSETP (ALU, two
# slots) and two predicated FMULs (assumed from compiler SASS dumps of ex2.approx.f32), plus the MUFU
# instruction's own dispatch slot (one instruction issued per SMSP per clock).
EXP2_NOFTZ_SLOTS = ALU_SLOT_COST + 2.0 + 1.0
# `acc / l_i[:, None]` in the epilogue is an element-wise fp32 division, div.full.f32 (Triton's DivF lowering):
# one MUFU.RCP and (assumed) three FMA-pipe instructions per output element, where FlashAttention multiplies by
# one reciprocal per row.
DIV_FULL_FMA_SLOTS = 3.0


class AttnVariant(Enum):
    """Which FlashAttention generation's structure the prefill template follows."""

    FA2 = "fa2"  # sm80: all warps load (cp.async) and compute, each warp owns a slice of the Q rows
    FA3 = "fa3"  # sm90: TMA producer warp group + ping-ponging wgmma consumer warp groups
    FA4 = "fa4"  # sm100: TMA warp, tcgen05 MMA warp, 2 softmax warp groups, correction warp group, TMEM
    TRITON = "triton"  # Triton's fused-attention tutorial on sm90: every warp loads (cp.async) and computes
    # (wgmma, softmax); no warp specialisation, no ping-pong; a `stages`-deep K/V ring filled stages-1 ahead

    @classmethod
    def parse(cls, name: str) -> AttnVariant:
        for v in cls:
            if v.value == name.strip().lower():
                return v
        raise ValueError(f"unknown attention variant {name!r}; valid: {', '.join(v.value for v in cls)}")


# Architectures whose units a variant needs (FA2's cp.async + mma.sync path also runs on later GPUs;
# FA3 needs TMA and warp-group MMA; FA4 needs tcgen05 and TMEM).
VARIANT_ARCHS = {
    AttnVariant.FA2: (Arch.SM80, Arch.SM90, Arch.SM100),
    AttnVariant.FA3: (Arch.SM90, Arch.SM100),
    AttnVariant.FA4: (Arch.SM100,),
    AttnVariant.TRITON: (Arch.SM90,),  # Triton lowers tl.dot to wgmma on sm90 only (mma.sync before, tcgen05 after)
}
VARIANT_NEEDS = {AttnVariant.FA2: "cp.async and mma.sync (sm80+)", AttnVariant.FA3: "TMA and wgmma (sm90+)",
                 AttnVariant.FA4: "tcgen05 and TMEM (sm100)",
                 AttnVariant.TRITON: "the sm90 wgmma lowering of Triton's tutorial kernel (modelled on sm90 only)"}
# FA4 keeps S (2 x 128 columns) and O (2 x head_dim columns) of two Q tiles in TMEM's 512 columns. Head dim 192
# (DeepSeek's MLA prefill: 128 no-RoPE + 64 RoPE dims of Q/K, V of 128) is instantiated by FA2
# (flash_fwd_launch_template.h run_mha_fwd_hdim192) and FA3 (hopper/tile_size.h, V of 128 or 192); FA4 takes it
# only with a V of 128 (flash_attn/cute/interface.py _validate_head_dims: "(192, 128) for DeepSeek"). Head dim 96
# (Phi-3/3.5-mini) is instantiated by FA2 (run_mha_fwd_hdim96), FA3 (hopper/tile_size.h `headdim <= 96`) and FA4
# (its standard range, 8 to 128 in steps of the alignment).
HEAD_DIMS = {AttnVariant.FA2: (64, 96, 128, 192, 256), AttnVariant.FA3: (64, 96, 128, 192, 256),
             AttnVariant.FA4: (64, 96, 128),
             AttnVariant.TRITON: (64, 128, 256)}
HEAD_DIM_PAIRS = {AttnVariant.FA4: ((192, 128),)}  # (head_dim, head_dim_v) a variant takes beyond HEAD_DIMS
DEFAULT_VARIANT = {Arch.SM80: AttnVariant.FA2, Arch.SM90: AttnVariant.FA3, Arch.SM100: AttnVariant.FA4}


@dataclass(frozen=True, slots=True)
class AttnShape:
    """softmax(Q K^T / sqrt(d)) V for Q [batch, heads_q, seq_q, head_dim], K/V [batch, heads_kv, seq_kv, .].

    `causal` masks bottom-right aligned (query row r sees keys up to r + seq_kv - seq_q), as FlashAttention.
    `window` > 0 is a sliding window (Mistral, Qwen2, Gemma-2 sliding layers): row r sees only the `window`
    keys ending at its own, r + seq_kv - seq_q - window + 1 .. r + seq_kv - seq_q (FlashAttention's
    window_size = (window - 1, 0)); it implies that alignment, so it needs causal attention unless seq_q is 1.
    A window of seq_kv keys or more never binds and is the same problem as none (`binding_window`).
    """

    batch: int
    heads_q: int
    heads_kv: int
    seq_q: int
    seq_kv: int
    head_dim: int
    causal: bool = False
    dtype: DType = DType.BF16
    head_dim_v: int = 0  # 0: same as head_dim
    window: int = 0  # sliding window in keys, 0: none
    # logit soft-capping (Gemma-2): s -> cap * tanh(s / cap) before the softmax, as FlashAttention-2/3's
    # `softcap` argument computes it (one MUFU.TANH and two FMULs per score); 0: none
    softcap: float = 0.0
    # attention sinks (gpt-oss): one learned logit per query head joins every row's softmax; FlashAttention-3 as
    # vLLM serves it folds it into the row max and sum once per row at the end (sinks in attention_parts)
    sinks: bool = False

    def __post_init__(self) -> None:
        for name in ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"attention parameter {name} must be a positive integer, got {v!r}")
        if self.head_dim_v < 0:
            raise ValueError(f"attention parameter head_dim_v must be >= 0 (0 = head_dim), got {self.head_dim_v}")
        if not isinstance(self.window, int) or isinstance(self.window, bool) or self.window < 0:
            raise ValueError(f"attention parameter window must be an integer >= 0 (0 = no sliding window), got "
                             f"{self.window!r}")
        if self.binding_window and not self.causal and self.seq_q > 1:
            raise ValueError(f"a sliding window (window={self.window}) needs causal attention when seq_q > 1 "
                             f"(seq_q={self.seq_q}); pass causal=True")
        if self.heads_q % self.heads_kv:
            divisors = [d for d in range(1, self.heads_q + 1) if self.heads_q % d == 0]
            raise ValueError(f"heads_q={self.heads_q} is not a multiple of heads_kv={self.heads_kv} (GQA/MQA "
                             f"share each K/V head among heads_q/heads_kv query heads); valid heads_kv: "
                             f"{', '.join(map(str, divisors))}")
        if self.dtype not in (DType.BF16, DType.FP16, DType.FP8_E4M3, DType.FP8_E5M2):
            raise ValueError(f"attention dtype {self.dtype.name.lower()} is not supported; valid: bf16, fp16, fp8")

    @property
    def dv(self) -> int:
        return self.head_dim_v or self.head_dim

    @property
    def group(self) -> int:
        return self.heads_q // self.heads_kv

    @property
    def binding_window(self) -> int:
        """The sliding window when it is shorter than the K/V sequence, else 0 (a longer one never binds)."""
        return self.window if 0 < self.window < self.seq_kv else 0

    def key_range(self, row: int) -> tuple[int, int]:
        """[first, end) of the keys query row `row` attends to (empty when first >= end)."""
        if not self.causal and not self.binding_window:
            return 0, self.seq_kv
        end = max(0, min(self.seq_kv, row + 1 + self.seq_kv - self.seq_q))
        first = max(0, end - self.binding_window) if self.binding_window else 0
        return first, max(first, end)

    def visible(self, row: int) -> int:
        """Keys query row `row` attends to."""
        first, end = self.key_range(row)
        return end - first

    def score_pairs(self) -> int:
        """(query, key) pairs that are not masked, per batch and query head."""
        if not self.causal and not self.binding_window:
            return self.seq_q * self.seq_kv
        # row r sees ramp(r + 1 + off) keys up to its own, less ramp(r + 1 + off - window) left of the window
        off = self.seq_kv - self.seq_q
        pairs = _ramp_sum(1 + off, self.seq_q)
        return pairs - _ramp_sum(1 + off - self.binding_window, self.seq_q) if self.binding_window else pairs

    def kv_read(self) -> int:
        """Keys some query attends to: all of them, or under a window those from the first row's first key."""
        return self.seq_kv - self.key_range(0)[0] if self.binding_window else self.seq_kv

    def flops(self) -> float:
        return 2.0 * self.batch * self.heads_q * self.score_pairs() * (self.head_dim + self.dv)

    def io_bytes(self) -> float:
        """Compulsory DRAM traffic: Q, K, V read once, O written once (16-bit output)."""
        e = self.dtype.nbytes
        q = self.batch * self.heads_q * self.seq_q * self.head_dim * e
        kv = self.batch * self.heads_kv * self.kv_read() * (self.head_dim + self.dv) * e
        o = self.batch * self.heads_q * self.seq_q * self.dv * 2
        return q + kv + o


def _ramp_sum(c: int, n: int) -> int:
    """sum of max(0, r + c) over r = 0 .. n - 1."""
    if c >= 0:
        return n * c + n * (n - 1) // 2
    m = n + c  # rows with r + c >= 0 contribute 0, 1, .., m - 1
    return m * (m - 1) // 2 if m > 0 else 0


@dataclass(frozen=True, slots=True)
class AttnConfig:
    """Tiles and roles: `bm` query rows and `bn` keys per iteration, `stages` K/V buffers in shared memory."""

    variant: AttnVariant
    bm: int
    bn: int
    stages: int = 2
    warps: int = 4  # FA2: warps of the CTA, each owning bm / warps query rows
    exp_poly_fraction: float = 0.0  # FA4: share of exp2 computed by polynomial on the FMA pipe
    rescale_fraction: float = 1.0  # FA4: share of iterations whose O rescale is not skipped
    regs_per_thread: int = 168

    def __post_init__(self) -> None:
        for name in ("bm", "bn", "stages", "warps", "regs_per_thread"):
            if getattr(self, name) <= 0:
                raise ValueError(f"attention config field {name} must be > 0, got {getattr(self, name)}")
        for name in ("exp_poly_fraction", "rescale_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"attention config field {name} must lie in [0, 1], got {getattr(self, name)}")
        if self.variant is AttnVariant.FA3 and self.bm % 64:
            raise ValueError(f"fa3 splits bm over 64-row consumer warp groups; bm={self.bm} is not a multiple of 64")
        if self.variant is AttnVariant.FA4 and self.bm != 256:
            raise ValueError(f"fa4 processes two 128-row Q tiles per CTA (bm=256), got bm={self.bm}")
        if self.variant is AttnVariant.TRITON and (self.warps % 4 or (self.bm * 4 // self.warps) % 64
                                                   or self.bm * 4 % self.warps):
            raise ValueError(f"triton splits bm over warp groups of 4 warps, each a multiple of 64 rows (wgmma M); "
                             f"bm={self.bm} with warps={self.warps} does not")
        if self.variant is AttnVariant.TRITON and self.stages < 2:
            raise ValueError(f"triton's software pipeline needs stages >= 2, got {self.stages}")

    @property
    def consumers(self) -> int:
        return self.bm // 64

    @property
    def warp_groups(self) -> int:
        """Triton: warp groups of the CTA, each owning bm / warp_groups query rows."""
        return self.warps // 4


def check_variant(variant: AttnVariant, shape: AttnShape, hw: GpuProfile) -> None:
    """Raise a clear error when `hw` lacks the variant's units or the variant lacks the head dim or dtype."""
    archs = VARIANT_ARCHS[variant]
    if hw.arch not in archs:
        ok = [v.value for v, a in VARIANT_ARCHS.items() if hw.arch in a]
        raise ValueError(f"attention variant {variant.value} needs {VARIANT_NEEDS[variant]}, which {hw.name} "
                         f"({hw.arch.value}) lacks; valid variants on {hw.name}: {', '.join(ok) or 'none'}")
    dims = HEAD_DIMS[variant]
    pairs = HEAD_DIM_PAIRS.get(variant, ())
    if (shape.head_dim, shape.dv) in pairs:
        dims = (shape.head_dim, shape.dv)
    if shape.head_dim in dims and shape.dv not in dims:
        raise ValueError(f"head_dim_v={shape.dv} is not supported by attention variant {variant.value} on {hw.name}; "
                         f"valid V head dims: {', '.join(map(str, dims))} (default: head_dim={shape.head_dim})")
    if shape.head_dim not in dims or shape.dv not in dims:
        other = [v.value for v, d in HEAD_DIMS.items() if shape.head_dim in d and hw.arch in VARIANT_ARCHS[v]]
        hint = f"; variants that support it on {hw.name}: {', '.join(other)}" if other else ""
        also = "".join(f", or ({d}, {dv}) as (head_dim, head_dim_v)" for d, dv in pairs)
        raise ValueError(f"head_dim={shape.head_dim} is not supported by attention variant {variant.value} on "
                         f"{hw.name}; valid head dims: {', '.join(map(str, dims))}{also}{hint}")
    if shape.dtype.is_fp8 and (variant in (AttnVariant.FA2, AttnVariant.TRITON) or not hw.supports(shape.dtype)):
        raise ValueError(f"attention dtype fp8 needs FP8 tensor cores and the fa3/fa4 kernels; {variant.value} on "
                         f"{hw.name} runs bf16 or fp16")


def default_config(shape: AttnShape, hw: GpuProfile, variant: AttnVariant | None = None) -> AttnConfig:
    """The tile configuration FlashAttention's own heuristics pick for this head dim, dtype and masking."""
    if hw.arch not in DEFAULT_VARIANT:
        raise ValueError(f"no GPU attention template for architecture {hw.arch.value} of {hw.name}")
    v = variant or DEFAULT_VARIANT[hw.arch]
    check_variant(v, shape, hw)
    d, fp8, causal = shape.head_dim, shape.dtype.is_fp8, shape.causal
    if v is AttnVariant.FA2:  # flash_fwd_launch_template.h (sm80 traits)
        if d <= 64:
            return AttnConfig(v, 128, 128 if not causal else 64, 1, 4, regs_per_thread=255)
        if d <= 128:
            return AttnConfig(v, 128, 64 if not causal else 64, 1, 4, regs_per_thread=255)
        return AttnConfig(v, 128, 64, 1, 8, regs_per_thread=255)
    if v is AttnVariant.FA3:  # hopper/tile_size.h: (kBlockM, kBlockN) per head dim, dtype and masking
        if d <= 64:
            bm, bn = 192, (128 if causal else (160 if fp8 else 192))
        elif d <= 96:  # 192 x 144 whether causal or not; a sliding window (is_local) and fp8 take 128 keys
            bm, bn = 192, (128 if fp8 or shape.binding_window else 144)
        elif d <= 128:
            bm, bn = 128, (128 if causal else (224 if fp8 else 176))
        elif d <= 192:  # 128 x 112 fills shared memory with a V of 192; a V of 128 leaves room for 128 keys
            bm, bn = 128, (160 if fp8 else (128 if shape.dv <= 128 else 112))
        else:
            bm, bn = 128, (128 if fp8 else 80)
        regs = 128 if bm // 64 >= 3 else 168
        return AttnConfig(v, bm, bn, 2, regs_per_thread=regs)
    if v is AttnVariant.TRITON:
        # The tutorial autotunes BLOCK_M in {64, 128}, BLOCK_N in {64, 128} (BLOCK_N <= head dim), num_stages in
        # {3, 4, 7}, num_warps in {4, 8}, dropping 8 warps below 128 x 128 tiles; which config wins is not
        # recorded, so the largest tiles whose 3-stage K/V ring fits shared memory are taken (assumed).
        if d <= 64:
            return AttnConfig(v, 128, 64, 3, 4, regs_per_thread=255)
        if d <= 128:
            return AttnConfig(v, 128, 128, 3, 8, regs_per_thread=255)
        return AttnConfig(v, 64, 64, 3, 4, regs_per_thread=255)
    # FA4 (flash_attn/cute, sm100 forward): two 128-row Q tiles, 128-key blocks, 3-slot K/V ring
    return AttnConfig(v, 256, 128, 3, exp_poly_fraction=0.25, rescale_fraction=0.125, regs_per_thread=128)


def datapath_rows(variant: AttnVariant, hw: GpuProfile) -> int:
    """MMA rows that fill `hw`'s tensor datapath for the variant's MMA instruction: FA2's mma.sync tiles are
    multiples of its 16 rows everywhere; wgmma and tcgen05 use the profile's figure (an M=64 tcgen05 MMA holds
    the sm100 datapath as long as M=128)."""
    return 1 if variant is AttnVariant.FA2 else int(hw.tensor_datapath_rows.value)


def tmem_accumulators(variant: AttnVariant, hw: GpuProfile) -> bool:
    """Whether the variant's MMAs accumulate in TMEM on `hw` (tcgen05: FA3's sm100 adaptation, FA4) rather than
    in the issuing warps' registers (FA2's mma.sync on any part, Triton's and FA3's wgmma on sm90). The engine
    pairs the SFU with the tensor pipe only for register accumulators (GpuProfile.sfu_overlaps_tensor)."""
    return variant in (AttnVariant.FA3, AttnVariant.FA4) and hw.tmem_bytes_per_sm.value > 0


def mma_work_scale(variant: AttnVariant, hw: GpuProfile, dtype: DType) -> float:
    """How much longer than at `hw`'s tensor rate the variant's MMAs hold the tensor datapath: FA2 issues
    sm80's mma.sync, which runs at the profile's warp_mma_flop_per_clk_per_sm on every part (a quarter of
    tcgen05's rate on sm100); wgmma and tcgen05 run at the tensor rate itself."""
    if variant is not AttnVariant.FA2:
        return 1.0
    warp = float(hw.warp_mma_flop_per_clk_per_sm.value)
    if warp <= 0:
        raise ValueError(f"profile {hw.name} has no warp-level MMA rate (warp_mma_flop_per_clk_per_sm = 0), which "
                         f"attention variant fa2 (mma.sync) needs")
    return max(1.0, hw.tensor_flop_per_clk_per_sm(dtype) / warp)


def kv_blocks(shape: AttnShape, bm: int, bn: int, m: int) -> tuple[int, int]:
    """(KV blocks query block `m` visits, how many of them need masking) for tiles of bm x bn."""
    n, masked, _first = kv_span(shape, bm, bn, m)
    return n, masked


def kv_span(shape: AttnShape, bm: int, bn: int, m: int) -> tuple[int, int, int]:
    """(KV blocks query block `m` visits, how many of them need masking, the first of them) for bm x bn tiles.

    Causal: blocks up to the one holding the last row's last key. A sliding window also skips the blocks
    left of the first row's first key, as FlashAttention's local masking does (n_block_min); blocks the
    window's left edge crosses need the mask as those on the diagonal do."""
    total = math.ceil(shape.seq_kv / bn)
    ragged = shape.seq_kv % bn != 0
    if not shape.causal and not shape.binding_window:
        return total, int(ragged), 0
    r0, r1 = m * bm, min(shape.seq_q, (m + 1) * bm) - 1
    end = shape.key_range(r1)[1]
    start = shape.key_range(r0)[0]
    hi = math.ceil(end / bn)
    lo = min(start // bn, hi)
    n = hi - lo
    # blocks every row of the tile sees whole: keys [j*bn, (j+1)*bn) inside row r0's end and row r1's start
    full_hi = min(shape.key_range(r0)[1], shape.seq_kv) // bn
    full_lo = math.ceil(shape.key_range(r1)[0] / bn)
    masked = n - max(0, min(full_hi, hi) - max(full_lo, lo))
    if ragged and hi == total and masked == 0:
        masked = 1
    return n, min(n, masked), lo
