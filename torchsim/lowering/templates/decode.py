"""Decoding attention as kernel launches: Flash-Decoding (split-KV kernel + combine kernel) and FlashMLA.

Each builder returns the list of KernelGraphs a decode step launches, in order: the split kernel, then the
combine kernel when the K/V sequence was split across CTAs. Query heads that share a K/V head are packed as
rows of one tile (FlashAttention's pack-GQA), so any query length >= 1 works: single-token decoding and the
128-token chunks of speculative or chunked decoding alike.

Example:
    >>> from torchsim.hwmodels import get_profile
    >>> ks = flash_decode(AttnShape(8, 32, 8, 1, 8192, 128), get_profile("h100-sxm"))
    >>> [k.attrs["template"] for k in ks]
    ['flash_decode/fa3', 'flash_decode/combine']
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from torchsim.graph import CtaClass, DType, GraphBuilder, KernelGraph, Op, Space, TileDesc, TileGraph, Unit, aff
from torchsim.hwmodels.gpu import Arch, GpuProfile
from torchsim.lowering.templates.attention import smem_bytes, threads, write_cta
from torchsim.lowering.templates.attention_config import (
    FLOP_PER_LANE_OP,
    AttnConfig,
    AttnShape,
    AttnVariant,
    check_variant,
    datapath_rows,
    default_config,
    mma_work_scale,
)
from torchsim.lowering.templates.attention_parts import OUT_DTYPE, AttnWriter, group_ctas, link
from torchsim.lowering.templates.mla import (
    MLA_BLOCK,
    MLA_REGS,
    MLA_THREADS,
    check_mla,
    latent_io_bytes,
    mla_smem,
    mla_split_kernel,
)

COMBINE_ROWS = 32  # rows (batch x head x query) per combine CTA
MAX_SPLITS = 128


def occupancy(hw: GpuProfile, threads_per_cta: int, regs_per_thread: int, smem: int) -> int:
    """CTAs of this footprint that fit on one SM at the same time."""
    return max(1, min(int(hw.max_threads_per_sm.value) // threads_per_cta,
                      int(hw.registers_per_sm.value) // (threads_per_cta * regs_per_thread),
                      int(hw.smem_per_sm_bytes.value) // max(1, smem), int(hw.max_ctas_per_sm.value)))


def split_heuristic(ctas: int, slots: int, n_blocks: int, max_splits: int = MAX_SPLITS) -> int:
    """FlashAttention's num_splits_heuristic: no split when the grid already fills 80% of the CTA slots;
    otherwise the fewest splits whose wave efficiency is within 85% of the best, skipping split counts that
    give the same blocks per split as one fewer."""
    if ctas >= 0.8 * slots:
        return 1
    limit = max(1, min(max_splits, slots, n_blocks))
    eligible = [s for s in range(1, limit + 1) if s == 1 or math.ceil(n_blocks / s) != math.ceil(n_blocks / (s - 1))]
    eff = {s: (ctas * s / slots) / math.ceil(ctas * s / slots) for s in eligible}
    best = max(eff.values())
    return next(s for s in eligible if eff[s] >= 0.85 * best)


def decode_config(shape: AttnShape, hw: GpuProfile, variant: AttnVariant | None, page_size: int) -> AttnConfig:
    """The split kernel's tiles: 64 packed query rows per CTA (128 when a tile of queries fills them),
    FlashAttention's K/V block for the head dim; paged K/V smaller than a block uses 128-key blocks."""
    if variant in (AttnVariant.FA4, AttnVariant.TRITON):
        raise ValueError("Flash-Decoding follows the fa2 (sm80) or fa3 (sm90+) split-KV kernels; valid variants: "
                         "fa2, fa3")
    v = variant or (AttnVariant.FA2 if hw.arch is Arch.SM80 else AttnVariant.FA3)
    base = default_config(replace(shape, causal=False, window=0), hw, v)
    rows = shape.seq_q * shape.group
    bm = 64 if rows <= 64 or v is AttnVariant.FA2 else 128
    bn = 128 if 0 < page_size < base.bn and v is AttnVariant.FA3 else base.bn
    if v is AttnVariant.FA2:  # flash_fwd_splitkv kernel traits: kBlockM 64, kBlockN 256/128/64 by head dim
        bn = 256 if shape.head_dim <= 64 else (128 if shape.head_dim <= 128 else 64)
    return replace(base, bm=bm, bn=bn, regs_per_thread=255 if v is AttnVariant.FA2 else 240 if bm == 64 else 168)


def check_num_splits(num_splits: int | None, default: str) -> None:
    """A given K/V split count is a positive integer (None: the builder's `default`)."""
    if num_splits is not None and (not isinstance(num_splits, int) or num_splits <= 0):
        raise ValueError(f"num_splits must be a positive integer (or None for {default}), got {num_splits!r}")


def check_page_size(page_size: int) -> None:
    if not isinstance(page_size, int) or page_size < 0 or page_size & (page_size - 1):
        raise ValueError(f"page_size must be 0 (contiguous K/V) or a power of two (tokens per page), got {page_size!r}")


def flash_decode(shape: AttnShape, hw: GpuProfile, num_splits: int | None = None, page_size: int = 0,
                 variant: AttnVariant | None = None, kv_lens: Sequence[int] | None = None) -> list[KernelGraph]:
    """Flash-Decoding: CTAs over (batch, K/V head, packed query block, K/V split), each running the
    FlashAttention mainloop over its split and writing FP32 partials; a combine kernel merges the splits.

    `page_size` > 0 reads K/V through a block table of pages of that many tokens (vLLM/FlashAttention
    paged KV); pages smaller than a K/V block are gathered with cp.async instead of TMA.

    `kv_lens` (one K/V length per sequence; `shape` then holds the longest, `seq_kv`) is the varlen decode
    (FlashAttention's `seqused_k` over a paged cache): the split count is chosen once for the launch from the
    longest sequence, as FlashAttention-2's `set_params_splitkv` does with max_seqlen_k, every split spans
    the same number of blocks, and sequence b's split CTAs walk only its own blocks; a split past the end of
    a shorter sequence exits at once and writes an empty partial (zeros, log-sum-exp -inf) for the combine."""
    check_page_size(page_size)
    check_num_splits(num_splits, "the heuristic")
    if num_splits is not None and num_splits > MAX_SPLITS:  # FlashAttention refuses these (flash_api.cpp
        # set_params_splitkv: TORCH_CHECK(params.num_splits <= 128, "num_splits > 128 not supported"))
        raise ValueError(f"num_splits {num_splits} is above FlashAttention's limit of {MAX_SPLITS} K/V splits")
    per_seq = [shape] * shape.batch if kv_lens is None else sequence_kv_shapes(shape, kv_lens)
    cfg = decode_config(shape, hw, variant, page_size)
    check_variant(cfg.variant, shape, hw)
    rows = shape.seq_q * shape.group
    mblocks = math.ceil(rows / cfg.bm)

    def blocks(s: AttnShape) -> tuple[int, int, int]:
        """(first K/V block, blocks, whether the first is masked) of one sequence: under a sliding window the
        splits cover only the blocks from the one holding the window's first key."""
        first = s.key_range(0)[0] // cfg.bn if s.binding_window else 0
        return (first, math.ceil(s.seq_kv / cfg.bn) - first,
                int(s.binding_window > 0 and s.key_range(0)[0] % cfg.bn != 0))

    first_block, n_blocks, _ = blocks(shape)  # the longest sequence sets the split count and length
    packed = AttnShape(shape.batch, shape.heads_kv, shape.heads_kv, rows, shape.seq_kv, shape.head_dim,
                       shape.causal, shape.dtype, shape.dv, softcap=shape.softcap, sinks=shape.sinks)
    slots = hw.sms * occupancy(hw, threads(cfg), cfg.regs_per_thread, smem_bytes(cfg, packed))
    ctas = shape.batch * shape.heads_kv * mblocks
    splits = num_splits or split_heuristic(ctas, slots, n_blocks)
    per = math.ceil(n_blocks / min(splits, n_blocks))
    splits = math.ceil(n_blocks / per)
    table = []
    for b, s in enumerate(per_seq):
        first_b, n_b, head_masked = blocks(s) if s is not shape else (first_block, n_blocks, blocks(shape)[2])
        tail_masked = int(s.seq_kv % cfg.bn != 0 or s.causal)
        for hk in range(shape.heads_kv):
            for sp in range(splits):
                n = max(0, min(per, n_b - sp * per))
                last = sp == splits - 1 or (sp + 1) * per >= n_b
                masked = (tail_masked if last else 0) + (head_masked if sp == 0 else 0)
                for m in range(mblocks):
                    table.append(((n, min(n, masked)), (b, hk, m, first_b + sp * per, sp)))
    opts = {"q_head": "hk", "kv_base": "n0", "split": "sp" if splits > 1 else "",
            "kv_gather": 0 < page_size < cfg.bn, "pages": 0, "datapath_rows": datapath_rows(cfg.variant, hw),
            "tmem_accumulators": hw.tmem_bytes_per_sm.value > 0}
    classes = []
    for cr in group_ctas(table, ("b", "hk", "m", "n0", "sp"), order=lambda key: -key[0]):
        n, masked = cr.key
        pages = math.ceil(n * cfg.bn / page_size) if page_size else 0
        graph = write_cta(cfg, packed, n, masked, name="flash_decode", hw=hw, **{**opts, "pages": pages}) if n \
            else empty_split(cfg, packed)
        classes.append(CtaClass(graph, cr.params, cr.names, threads=threads(cfg),
                                regs_per_thread=cfg.regs_per_thread, smem_bytes=smem_bytes(cfg, packed)))
    out_rows = shape.batch * shape.heads_q * shape.seq_q
    partial = splits * out_rows * (shape.dv + 1) * 4.0 if splits > 1 else 0.0
    io = shape.io_bytes() if kv_lens is None else sum(s.io_bytes() for s in per_seq)
    split_io = io - (out_rows * shape.dv * 2 if splits > 1 else 0.0) + partial
    attrs = {"template": f"flash_decode/{cfg.variant.value}", "variant": cfg.variant.value, "bm": cfg.bm,
             "bn": cfg.bn, "splits": splits, "blocks_per_split": per, "page_size": page_size,
             "batch": shape.batch, "heads_q": shape.heads_q, "heads_kv": shape.heads_kv, "seq_q": shape.seq_q,
             "seq_kv": shape.seq_kv, "head_dim": shape.head_dim, "dtype": shape.dtype.name.lower(),
             "packed_rows": rows, "launches": 2 if splits > 1 else 1,
             **({"varlen": True, "total_kv": sum(s.seq_kv for s in per_seq)} if kv_lens is not None else {}),
             **({"window": shape.binding_window} if shape.binding_window else {}),
             **({"softcap": shape.softcap} if shape.softcap else {}), **({"sinks": True} if shape.sinks else {})}
    window = f"_window{shape.binding_window}" if shape.binding_window else ""
    name = f"flash_decode_b{shape.batch}_h{shape.heads_q}x{shape.heads_kv}_q{shape.seq_q}_kv{shape.seq_kv}"
    if kv_lens is not None:
        name = (f"flash_decode_varlen{shape.batch}_h{shape.heads_q}x{shape.heads_kv}_q{shape.seq_q}"
                f"_kv{attrs['total_kv']}_max{shape.seq_kv}")
    flops = shape.flops() if kv_lens is None else sum(s.flops() for s in per_seq)
    kernels = [KernelGraph(f"{name}_d{shape.head_dim}{window}_split{splits}", tuple(classes),
                           flops=flops, dram_bytes=split_io, attrs=attrs)]
    if splits > 1:
        kernels.append(combine(out_rows, shape.dv, splits, OUT_DTYPE.get(shape.dtype, shape.dtype), hw,
                               sinks=shape.sinks))
    return kernels


def sequence_kv_shapes(shape: AttnShape, kv_lens: Sequence[int]) -> list[AttnShape]:
    """The one-sequence shape of each K/V length of a varlen decode batch whose longest length `shape` holds."""
    if len(kv_lens) != shape.batch or max(kv_lens) != shape.seq_kv:
        raise ValueError(f"varlen decode: batch={shape.batch} and seq_kv={shape.seq_kv} must be the number of "
                         f"sequences and the longest of kv_lens ({len(kv_lens)} sequences, longest {max(kv_lens)})")
    return [replace(shape, batch=1, seq_kv=kv) for kv in kv_lens]


def empty_split(cfg: AttnConfig, packed: AttnShape) -> TileGraph:
    """A split CTA past the end of its (shorter) sequence: FlashAttention's split kernel finds no K/V block in its
    range and exits at once after writing a zero partial and a -inf log-sum-exp, which the combine weighs by 0."""
    b = GraphBuilder(f"flash_decode/{cfg.variant.value}/{cfg.bm}x{cfg.bn}/empty_split", packed.dtype)
    g = b.group("warps", 0, 4, role="stg")
    w = AttnWriter(b, packed.dtype, packed.head_dim, packed.dv, tma=False, q_head="hk", split="sp")
    w.store_o(g, cfg.bm, aff(m=1), "store_O_empty")
    return b.build()


def combine(rows: int, dv: int, splits: int, out_dtype: DType, hw: GpuProfile, sinks: bool = False) -> KernelGraph:
    """Merge split partials (FlashAttention's splitkv combine): per block of rows, read every split's
    log-sum-exp, form the weights exp(lse_s - lse), and accumulate the weighted FP32 partials. With attention
    sinks the sink logit joins each row's log-sum-exp here, once (one more exponential and a max-and-sum step
    per row)."""
    if splits < 2:
        raise ValueError(f"combine needs at least 2 splits, got {splits}")
    rm = min(COMBINE_ROWS, rows)
    b = GraphBuilder(f"flash_decode_combine/{rm}rows/{splits}splits", out_dtype)
    g = b.group("warps", 0, 4, role="ldg+combine+stg")
    lse = TileDesc(Space.GLOBAL, DType.FP32, (splits, rm), "LSE", (aff(), aff(r=1)))
    ld_lse = b.node(g, Op.LDG, Unit.LDST, work=lse.nbytes, tile=lse, name="ldg_lse")
    terms = splits + int(sinks)  # the sink is one more term of every row's log-sum-exp
    weights = b.node(g, Op.EXP, Unit.SFU, work=float(terms * rm), name="exp_weights")
    scale = b.node(g, Op.ELEMENTWISE, Unit.FMA, work=4.0 * terms * rm * FLOP_PER_LANE_OP, name="lse_max_sum")
    for n in (weights, scale):
        b.data(ld_lse, n)
    prev = [weights, scale]
    loads = []
    for s in range(splits):
        t = TileDesc(Space.GLOBAL, DType.FP32, (1, rm, dv), "O_partial", (aff(s), aff(r=1), aff()))
        loads.append(b.node(g, Op.LDG, Unit.LDST, work=t.nbytes, tile=t, name=f"ldg_partial[{s}]"))
    for s, ld in enumerate(loads):
        acc = b.node(g, Op.ELEMENTWISE, Unit.FMA, work=rm * dv * FLOP_PER_LANE_OP, name=f"accumulate[{s}]")
        for p in (*prev, ld):
            b.data(p, acc)
        prev = [acc]
    out = TileDesc(Space.GLOBAL, out_dtype, (rm, dv), "O", (aff(r=1), aff()))
    st = b.node(g, Op.STG, Unit.LDST, work=out.nbytes, tile=out, name="stg_O")
    b.data(prev[0], st)
    ctas = math.ceil(rows / rm)
    cls = CtaClass(b.build(), np.arange(ctas, dtype=np.int64).reshape(ctas, 1), ("r",), threads=128,
                   regs_per_thread=64, smem_bytes=0)
    io = splits * rows * (dv + 1) * 4.0 + rows * dv * out_dtype.nbytes
    return KernelGraph(f"flash_decode_combine_r{rows}_d{dv}_split{splits}", (cls,), flops=0.0, dram_bytes=io,
                       attrs={"template": "flash_decode/combine", "splits": splits, "rows": rows, "head_dim_v": dv,
                              **({"sinks": True} if sinks else {})})


def flash_mla(batch: int, heads_q: int, seq_q: int, seq_kv: int, hw: GpuProfile, head_dim: int = 576,
              head_dim_v: int = 512, dtype: DType = DType.BF16, num_splits: int | None = None,
              page_size: int = 64) -> list[KernelGraph]:
    """FlashMLA (DeepSeek latent attention decoding, one shared latent K/V head): the split kernel of
    torchsim.lowering.templates.mla over a FlashAttention split heuristic, then the combine kernel."""
    check_page_size(page_size)
    shape = check_mla(batch, heads_q, seq_q, seq_kv, hw, head_dim, head_dim_v, dtype)
    check_num_splits(num_splits, "the heuristic")
    mblocks = math.ceil(seq_q * heads_q / MLA_BLOCK)
    n_blocks = math.ceil(seq_kv / MLA_BLOCK)
    slots = hw.sms * occupancy(hw, MLA_THREADS, MLA_REGS, mla_smem(dtype))
    splits = num_splits or split_heuristic(batch * mblocks, slots, n_blocks)
    kernel = mla_split_kernel(shape, hw, splits, page_size)
    kernels = [kernel]
    if kernel.attrs["splits"] > 1:
        kernels.append(combine(batch * heads_q * seq_q, head_dim_v, kernel.attrs["splits"],
                               OUT_DTYPE.get(dtype, dtype), hw))
    return kernels


# vLLM's TRITON_MLA decode backend, the MLA decode vLLM selects on sm80 (FlashMLA needs sm90): the grouped
# stage-1 kernel of vllm/attention/ops/triton_decode_attention.py (_decode_grouped_att_m_fwd: BLOCK_H 16 query
# heads a CTA, BLOCK 32 keys an iteration, Lk 576 as 512 + 64 RoPE dims, num_stages 2, 4 warps) over the
# triton_mla backend's fixed num_kv_splits = 4, then its stage-2 reduce over the splits.
TRITON_MLA_HEADS = 16  # BLOCK_H
TRITON_MLA_KEYS = 32  # BLOCK (keys per iteration)
TRITON_MLA_SPLITS = 4  # vllm/v1/attention/backends/mla/triton_mla.py: num_kv_splits = 4 ("TODO: heuristic")


def triton_mla(batch: int, heads_q: int, seq_q: int, seq_kv: int, hw: GpuProfile, head_dim: int = 576,
               head_dim_v: int = 512, dtype: DType = DType.BF16, num_splits: int | None = None,
               page_size: int = 16) -> list[KernelGraph]:
    """vLLM's Triton MLA decode (TRITON_MLA): CTAs over (batch, 16 packed query heads, K/V split), each walking
    its split of the latent cache 32 tokens at a time (S = Q K^T over the 576 dims, the softmax, O += P V over
    the first 512), K/V gathered token by token through the block table with cp.async, tl.dot lowered to
    mma.sync as on every sm80 kernel (the FA2 mainloop's nodes: torchsim.lowering.templates.attention), FP32
    partials plus a log-sum-exp per row; then the combine kernel over the splits."""
    check_page_size(page_size)
    if dtype not in (DType.BF16, DType.FP16):
        raise ValueError(f"Triton MLA dtype {dtype.name.lower()} is not supported; valid: bf16, fp16 (vLLM's "
                         "TRITON_MLA has no FP8 KV cache)")
    if (head_dim, head_dim_v) != (576, 512):
        raise ValueError(f"Triton MLA decodes DeepSeek's latent cache: (head_dim, head_dim_v) must be (576, 512) "
                         f"(512 latent + 64 RoPE dims), got ({head_dim}, {head_dim_v})")
    check_num_splits(num_splits, "vLLM's 4")
    rows = seq_q * heads_q
    cfg = AttnConfig(AttnVariant.FA2, bm=TRITON_MLA_HEADS, bn=TRITON_MLA_KEYS, stages=2, warps=4,
                     regs_per_thread=255)
    n_blocks = math.ceil(seq_kv / cfg.bn)
    splits = min(num_splits or TRITON_MLA_SPLITS, n_blocks)
    per = math.ceil(n_blocks / splits)
    splits = math.ceil(n_blocks / per)
    mblocks = math.ceil(rows / cfg.bm)
    ragged = int(seq_kv % cfg.bn != 0)
    table = []
    for b in range(batch):
        for sp in range(splits):
            n = min(per, n_blocks - sp * per)
            for m in range(mblocks):
                table.append(((n, ragged if sp == splits - 1 else 0), (b, 0, m, sp * per, sp)))
    # shared memory: the Q tile and a two-slot ring of 576-wide K blocks (V is a block's first 512 columns, read
    # from the same slot: "with is_mla there is only a single c_kv in smem")
    smem = int((cfg.bm + cfg.stages * cfg.bn) * head_dim * dtype.nbytes)
    classes = []
    for cr in group_ctas(table, ("b", "hk", "m", "n0", "sp"), order=lambda key: -key[0]):
        n, masked = cr.key
        w = AttnWriter(GraphBuilder(f"triton_mla/{n}blocks", dtype), dtype, head_dim, head_dim_v, tma=False,
                       q_head="hk", kv_base="n0", split="sp" if splits > 1 else "", kv_gather=page_size > 0,
                       pages=math.ceil(n * cfg.bn / page_size) if page_size else 0,
                       datapath_rows=datapath_rows(cfg.variant, hw), mma_scale=mma_work_scale(cfg.variant, hw, dtype))
        classes.append(CtaClass(_write_triton_mla(w, cfg, n, bool(masked)), cr.params, cr.names,
                                threads=threads(cfg), regs_per_thread=cfg.regs_per_thread, smem_bytes=smem))
    out_rows = batch * rows
    io = latent_io_bytes(batch, rows, seq_kv, head_dim, head_dim_v, dtype, splits)
    shape = AttnShape(batch, heads_q, 1, seq_q, seq_kv, head_dim, False, dtype, head_dim_v)
    kernels = [KernelGraph(
        f"triton_mla_b{batch}_h{heads_q}_q{seq_q}_kv{seq_kv}_split{splits}", tuple(classes), flops=shape.flops(),
        dram_bytes=io,
        attrs={"template": "triton_mla", "variant": "triton", "bm": cfg.bm, "bn": cfg.bn, "splits": splits,
               "blocks_per_split": per, "page_size": page_size, "batch": batch, "heads_q": heads_q,
               "seq_q": seq_q, "seq_kv": seq_kv, "head_dim": head_dim, "head_dim_v": head_dim_v,
               "dtype": dtype.name.lower(), "launches": 2 if splits > 1 else 1})]
    if splits > 1:
        kernels.append(combine(out_rows, head_dim_v, splits, OUT_DTYPE.get(dtype, dtype), hw))
    return kernels


def _write_triton_mla(w: AttnWriter, cfg: AttnConfig, n: int, ragged: bool) -> TileGraph:
    """One CTA of the Triton MLA stage-1 kernel: its four warps load the 16 heads' Q once, then per 32-token
    block: a cp.async gather of the 576-wide K block into a two-slot ring (num_stages 2), S = Q K^T, the online
    softmax (O rescaled), O += P V with V the block's first 512 columns from the same slot, and the slot
    refilled two blocks ahead once P V has read it; the FP32 partial and log-sum-exp at the end."""
    b = w.b
    g = b.group("warps", 0, cfg.warps, role="cp.async+mma.sync+softmax")
    q = w.load_q(g, cfg.bm, aff(m=1))
    ks = {j: w.load_kv(g, "K", cfg.bn, w.kv_block(n, j), f"load_KV[{j}]") for j in range(min(cfg.stages, n))}
    last = -1
    for j in range(n):
        s = w.qk(g, cfg.bm, cfg.bn, f"S[{j}]")
        link(b, [ks[j], q if j == 0 else -1], s)
        sm = w.softmax(g, cfg.bm, cfg.bn, f"[{j}]", masked=ragged and j == 0)
        link(b, [s, last], sm)
        o = w.pv(g, cfg.bm, cfg.bn, f"O+=PV[{j}]")
        link(b, [*sm, ks[j]], o)
        if j + cfg.stages < n:
            ks[j + cfg.stages] = w.load_kv(g, "K", cfg.bn, w.kv_block(n, j + cfg.stages), f"load_KV[{j + cfg.stages}]")
            link(b, o, ks[j + cfg.stages])
        last = o
    norm = w.normalize(g, cfg.bm, "normalize", last)
    for st in w.store_o(g, cfg.bm, aff(m=1), "store_O", via_smem=False):
        b.data(norm, st)
    return b.build()

