"""Attention prefill templates: FlashAttention-2 (sm80), -3 (sm90), -4 (sm100) and Triton's tutorial kernel
(sm90), one builder.

`attention(shape, hw, cfg)` lays out one CTA per (batch, query head, query block), query blocks fastest so
the CTAs sharing a K/V head run together (L2 reuse). Under causal masking CTAs visit different numbers of
K/V blocks (fully masked blocks are skipped): each trip count is its own CTA class, longest first as
FlashAttention-3's scheduler orders them. A sliding window (`AttnShape.window`) also skips the blocks left of
the window (FlashAttention's local attention), so a query block reads only the K/V blocks its rows' windows
intersect, from its own first block (CTA parameter k0). The CTA programs follow the published kernels' warp roles.

Example:
    >>> from torchsim.hwmodels import get_profile
    >>> kg = attention(AttnShape(1, 8, 8, 1024, 1024, 128), get_profile("h100-sxm"))
    >>> kg.attrs["template"], kg.num_ctas
    ('attention/fa3', 64)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from torchsim.graph import CtaClass, GraphBuilder, KernelGraph, Op, Space, TileDesc, TileGraph, Unit, aff
from torchsim.hwmodels.gpu import GpuProfile
from torchsim.lowering.templates.attention_config import (
    AttnConfig,
    AttnShape,
    AttnVariant,
    check_variant,
    datapath_rows,
    default_config,
    kv_span,
    mma_work_scale,
    tmem_accumulators,
)
from torchsim.lowering.templates.attention_parts import AttnWriter, ClassRows, group_ctas, link
from torchsim.lowering.templates.prologue import add_prologue

PARAMS = ("b", "h", "hk", "m")


def attention(shape: AttnShape, hw: GpuProfile, cfg: AttnConfig | None = None,
              variant: AttnVariant | None = None, seqs: Sequence[tuple[int, int]] | None = None) -> KernelGraph:
    """softmax(Q K^T) V for `shape` on `hw` with the FlashAttention generation `variant` (default: the
    architecture's own) and its tile configuration `cfg` (default: FlashAttention's heuristic).

    `seqs` (q_len, kv_len) per sequence makes it the varlen kernel (FlashAttention's `cu_seqlens_q/k`): `shape`
    then holds the longest q and kv (`varlen_shape`), sequence i has its own query blocks, each visiting its own
    causal span of sequence i's keys; tile coordinates are (sequence, head, block of that sequence), so no two
    sequences' tiles coincide. FLOPs and DRAM bytes are the sums over the sequences."""
    cfg = cfg or default_config(shape, hw, variant)
    check_variant(cfg.variant, shape, hw)
    given, shape = shape, executed_shape(shape, cfg)
    per_seq = [shape] * shape.batch if seqs is None else sequence_shapes(shape, seqs)
    spans_of: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for s in per_seq:  # one list of spans per distinct (q, kv) length
        if (s.seq_q, s.seq_kv) not in spans_of:
            spans_of[s.seq_q, s.seq_kv] = [kv_span(s, cfg.bm, cfg.bn, m) for m in range(math.ceil(s.seq_q / cfg.bm))]
    # a sliding window: each query block starts at its own first K/V block (CTA parameter k0)
    window = {"kv_base": "k0"} if any(s.binding_window for s in per_seq) else {}
    names = (*PARAMS, "k0") if window else PARAMS
    if seqs is None:  # every sequence alike: the classes as arrays (a 10^7-token prompt has 10^6 CTAs a head)
        grouped = _uniform_classes(shape, spans_of[shape.seq_q, shape.seq_kv], names, bool(window))
    else:
        rows = [((n, masked), (b, h, h // shape.group, m, *((first,) if window else ())))
                for b, s in enumerate(per_seq) for h in range(shape.heads_q)
                for m, (n, masked, first) in enumerate(spans_of[s.seq_q, s.seq_kv])]
        grouped = group_ctas(rows, names, order=lambda key: -key[0])
    classes = []
    tmem = tmem_accumulators(cfg.variant, hw)
    for cr in grouped:
        n, masked = cr.key
        graph = write_cta(cfg, shape, n, masked, hw=hw, datapath_rows=datapath_rows(cfg.variant, hw),
                          tmem_accumulators=tmem, **window)
        classes.append(CtaClass(graph, cr.params, cr.names, threads=threads(cfg),
                                regs_per_thread=cfg.regs_per_thread, smem_bytes=smem_bytes(cfg, shape)))
    varlen_blocks = sum(len(spans_of[s.seq_q, s.seq_kv]) for s in per_seq) if seqs is not None else 0
    name, flops, dram_bytes, attrs = attention_header(given, cfg, hw, per_seq if seqs is not None else None,
                                                      varlen_blocks)
    return KernelGraph(name=name, classes=tuple(classes), flops=flops, dram_bytes=dram_bytes, attrs=attrs)


def executed_shape(shape: AttnShape, cfg: AttnConfig) -> AttnShape:
    """The shape the kernel runs: FA2 has one head dim for Q/K and V (its kernels are instantiated per head dim),
    so a V of a smaller head dim runs zero-padded to it, as vLLM pads V for FA2 in MLA prefill
    (MLACommonImpl._flash_attn_varlen_diff_headdims: the PV product and the V reads at the padded width; the pad's
    own copy and the output's slice are not modelled)."""
    if cfg.variant is AttnVariant.FA2 and shape.dv != shape.head_dim:
        return replace(shape, head_dim_v=shape.head_dim)
    return shape


def attention_header(shape: AttnShape, cfg: AttnConfig, hw: GpuProfile, per_seq: Sequence[AttnShape] | None = None,
                     varlen_blocks: int = 0) -> tuple[str, float, float, dict[str, Any]]:
    """(name, FLOPs, DRAM bytes, attrs) of the kernel `attention(shape, hw, cfg)` builds, without its CTAs (a
    causal 128k prompt's classes take a minute to write); `per_seq` and `varlen_blocks`: a varlen kernel's
    sequences and query blocks."""
    v = cfg.variant.value
    run = executed_shape(shape, cfg)
    padded_from, shape = (shape.dv if run is not shape else 0), run
    per_seq = None if per_seq is None else [executed_shape(s, cfg) for s in per_seq]
    tmem = tmem_accumulators(cfg.variant, hw)
    mblocks = math.ceil(shape.seq_q / cfg.bm)
    name = f"attention_{v}_b{shape.batch}_h{shape.heads_q}x{shape.heads_kv}_q{shape.seq_q}_kv{shape.seq_kv}"
    varlen: dict[str, Any] = {}
    if per_seq is not None:
        tq, tkv = sum(s.seq_q for s in per_seq), sum(s.seq_kv for s in per_seq)
        name = (f"attention_{v}_varlen{shape.batch}_h{shape.heads_q}x{shape.heads_kv}_q{tq}_kv{tkv}"
                f"_max{shape.seq_q}x{shape.seq_kv}")
        mblocks = varlen_blocks
        varlen = {"varlen": True, "total_q": tq, "total_kv": tkv}
    name += f"_d{shape.head_dim}" + ("_causal" if shape.causal else "") \
        + (f"_window{shape.binding_window}" if shape.binding_window else "")
    flops = sum(s.flops() for s in per_seq) if per_seq is not None else shape.flops()
    dram_bytes = sum(s.io_bytes() for s in per_seq) if per_seq is not None else shape.io_bytes()
    attrs = {"template": f"attention/{v}", "variant": v, "bm": cfg.bm, "bn": cfg.bn, "stages": cfg.stages,
             "batch": shape.batch, "heads_q": shape.heads_q, "heads_kv": shape.heads_kv, "seq_q": shape.seq_q,
             "seq_kv": shape.seq_kv, "head_dim": shape.head_dim, "causal": shape.causal,
             "dtype": shape.dtype.name.lower(), "query_blocks": mblocks, **varlen,
             **({"window": shape.binding_window} if shape.binding_window else {}),
             **({"softcap": shape.softcap} if shape.softcap else {}),  # (truncated instances rebuild it)
             **({"sinks": True} if shape.sinks else {}),
             **({"head_dim_v": shape.dv} if shape.dv != shape.head_dim else {}),
             **({"v_padded_from": padded_from} if padded_from else {}),
             # where the MMAs accumulate, when not where the profile's own MMA does (FA2's mma.sync on sm100)
             **({"tmem_accumulators": tmem} if tmem != (hw.tmem_bytes_per_sm.value > 0) else {})}
    return name, flops, dram_bytes, attrs


def _uniform_classes(shape: AttnShape, spans: list[tuple[int, int, int]], names: tuple[str, ...],
                     window: bool) -> list[ClassRows]:
    """The CTA classes of `batch` alike sequences, as group_ctas would group the rows (b, h, h // group, m[, k0])
    in launch order (b, then h, then query block m), keyed by each block's (KV blocks, masked) span; classes
    with more KV blocks first, ties in order of first appearance."""
    blocks: dict[tuple[int, int], list[int]] = {}
    for m, (n, masked, _) in enumerate(spans):
        blocks.setdefault((n, masked), []).append(m)
    heads = np.array([(b, h, h // shape.group) for b in range(shape.batch) for h in range(shape.heads_q)],
                     dtype=np.int64).reshape(-1, 3)
    out = []
    for key in sorted(blocks, key=lambda k: -k[0]):  # stable: equal KV blocks keep first appearance
        ms = blocks[key]
        per_m = np.array([(m, spans[m][2]) if window else (m,) for m in ms], dtype=np.int64).reshape(len(ms), -1)
        params = np.concatenate([np.repeat(heads, len(ms), axis=0), np.tile(per_m, (len(heads), 1))], axis=1)
        out.append(ClassRows(key, params.reshape(len(heads) * len(ms), len(names)), names))
    return out


def sequence_shapes(shape: AttnShape, seqs: Sequence[tuple[int, int]]) -> list[AttnShape]:
    """The one-sequence shape of each (q_len, kv_len) of a varlen batch whose longest lengths `shape` holds."""
    if len(seqs) != shape.batch or max(q for q, _ in seqs) != shape.seq_q or max(k for _, k in seqs) != shape.seq_kv:
        raise ValueError(f"varlen attention: batch={shape.batch}, seq_q={shape.seq_q}, seq_kv={shape.seq_kv} must be "
                         f"the number of sequences and the longest q and kv of seqs ({len(seqs)} sequences)")
    return [replace(shape, batch=1, seq_q=q, seq_kv=kv) for q, kv in seqs]


def threads(cfg: AttnConfig) -> int:
    if cfg.variant in (AttnVariant.FA2, AttnVariant.TRITON):
        return 32 * cfg.warps
    if cfg.variant is AttnVariant.FA3:
        return 128 * (1 + cfg.consumers)
    return 512  # FA4: 2 softmax WGs, correction WG, MMA, load, epilogue and one idle warp


def smem_bytes(cfg: AttnConfig, shape: AttnShape) -> int:
    e = shape.dtype.nbytes
    q = cfg.bm * shape.head_dim * e
    k, v = cfg.bn * shape.head_dim * e, cfg.bn * shape.dv * e
    if cfg.variant is AttnVariant.FA4:  # K and V tiles share one ring of `stages` slots
        o = 2 * 128 * shape.dv * 2
        if shape.head_dim == 192:  # flash_fwd_sm100.py: O is staged in Q's buffer (overlap_sO_sQ), and a (192, 128)
            # ring holds K, V, K at a stride of (K + V) / 2 (uneven_kv_smem): three stages in 224 KB
            return int(max(q, o) + cfg.stages * (k + v) // 2)
        return int(q + cfg.stages * max(k, v) + o)
    vt = v if shape.dtype.is_fp8 else 0  # FA3 FP8: V transposed in shared memory by the producer
    return int(q + cfg.stages * (k + v + vt))


def write_cta(cfg: AttnConfig, shape: AttnShape, n: int, masked: int, name: str = "attention",
              hw: GpuProfile | None = None, **writer: Any) -> TileGraph:
    """The program of a CTA that visits `n` K/V blocks, the first `masked` of them needing a mask (under a
    sliding window the blocks its left edge crosses are counted there too: the same mask work, visited last
    in the kernel, which changes no node's cost);
    `writer` options (AttnWriter fields) say where its tiles come from and go (split-KV, paged K/V).
    With `hw`, a TMA variant's CTA starts with its prologue (Q, K, V, O tensor maps; a full and an empty
    mbarrier per K/V stage and one for Q), and FA2's mma.sync MMAs hold the datapath at `hw`'s warp-MMA rate."""
    b = GraphBuilder(f"{name}/{cfg.variant.value}/{cfg.bm}x{cfg.bn}/{n}blocks/{masked}masked", shape.dtype)
    if hw is not None:
        writer.setdefault("mma_scale", mma_work_scale(cfg.variant, hw, shape.dtype))
    writer.setdefault("softcap", shape.softcap > 0)
    writer.setdefault("sinks", shape.sinks)
    tma = cfg.variant not in (AttnVariant.FA2, AttnVariant.TRITON)
    w = AttnWriter(b, shape.dtype, shape.head_dim, shape.dv, tma=tma, **writer)
    {AttnVariant.FA2: _fa2, AttnVariant.FA3: _fa3, AttnVariant.FA4: _fa4,
     AttnVariant.TRITON: _triton}[cfg.variant](w, cfg, n, masked)
    if hw is not None and w.tma:
        add_prologue(b, hw, 0, tensormaps=4, barriers=2 * cfg.stages + 1)
    return b.build()


def _fa2(w: AttnWriter, cfg: AttnConfig, n: int, masked: int) -> None:
    """FlashAttention-2 forward (flash_fwd_kernel.h): every warp loads with cp.async and computes; warp w owns
    rows w*bm/warps.. of the Q tile, so softmax needs no cross-warp exchange. One K and one V buffer: V_j is
    fetched while S = Q K_j^T runs, K_(j-1) while softmax and O += P V_j run; __syncthreads guard reuse."""
    b = w.b
    warps = b.group("warps", 0, cfg.warps, role="cp.async+mma.sync+softmax")
    bm, bn, d, dv, e = cfg.bm, cfg.bn, w.head_dim, w.head_dim_v, w.dtype.nbytes
    q = w.load_q(warps, bm, aff(m=1))
    k = w.load_kv(warps, "K", bn, w.kv_block(n, 0), "load_K[0]") if n else -1
    prev_pv = prev_lds_v = -1
    smem = TileDesc(Space.SHARED, w.dtype, (bn, d), "KV_smem")
    for i in range(n):
        v = w.load_kv(warps, "V", bn, w.kv_block(n, i), f"load_V[{i}]")
        link(b, prev_lds_v, v)  # single V buffer: refilled once every warp read the previous V
        # ldmatrix: each warp reads its Q rows and all of K
        lds_qk = b.node(warps, Op.LDS, Unit.LDST, work=(bm * d + cfg.warps * bn * d) * e, tile=smem,
                        name=f"ldsm_QK[{i}]")
        link(b, [k, q], lds_qk)
        s = w.qk(warps, bm, bn, f"qk[{i}]", q_in_smem=False)
        b.data(lds_qk, s)
        if i + 1 < n:
            k = w.load_kv(warps, "K", bn, w.kv_block(n, i + 1), f"load_K[{i + 1}]")
            b.data(lds_qk, k)
        sm = w.softmax(warps, bm, bn, f"[{i}]", masked=i < masked)
        link(b, s, sm)
        link(b, prev_pv, sm)  # O is rescaled once the previous P V has accumulated
        lds_v = b.node(warps, Op.LDS, Unit.LDST, work=cfg.warps * bn * dv * e, tile=smem, name=f"ldsm_V[{i}]")
        b.data(v, lds_v)
        pv = w.pv(warps, bm, bn, f"pv[{i}]")
        link(b, [lds_v, *sm], pv)
        prev_pv, prev_lds_v = pv, lds_v
    norm = w.normalize(warps, bm, "normalize", [prev_pv, q])
    b.data(norm, w.store_o(warps, bm, aff(m=1), "store_O", via_smem=True)[0])


def _triton(w: AttnWriter, cfg: AttnConfig, n: int, masked: int) -> None:
    """Triton's fused-attention tutorial (06-fused-attention.py, `_attn_fwd`) as Triton lowers it on sm90:
    tl.dot becomes wgmma, so warp group g of the CTA owns rows g*bm/groups.. and issues its own MMAs from
    shared-memory operands (Q resident, K; P from registers); every warp also issues the cp.async loads of its
    share of each K/V tile, `stages`-1 tiles ahead into a `stages`-deep ring (Triton's software pipeliner).
    No warp specialisation and no ping-pong: in each warp group S_j = Q K_j^T, its softmax (row max first,
    then exp2 beside the FMA work) and O += P_j V_j follow in program order (S_(j+1) may issue while P_j V_j
    still runs). Every iteration starts with cp.async.wait and a CTA barrier (the ring is shared by all
    warps), so no group issues S_j before every group issued P_(j-1) V_(j-1): the groups run in step. Nothing
    staggers them (FlashAttention-3 adds its ping-pong named barriers because the warp schedulers do not by
    themselves run one group's GEMMs while another runs its softmax: 570 -> 620 TFLOPS at d = 128, 8k; Shah
    et al., arXiv:2407.08608 §3.1), so the groups' wgmmas of one phase interleave on the tensor cores and a
    group's S_j is complete only when every group's is: their softmaxes coincide instead of hiding under each
    other's MMAs. A ring slot is refilled once every group's MMA that read it completed. O is written with
    ordinary stores after a layout change through shared memory."""
    b = w.b
    groups = cfg.warp_groups
    rows = cfg.bm // groups
    wgs = [b.group(f"warpgroup{g}", 4 * g, 4, role="cp.async+wgmma+softmax") for g in range(groups)]
    bn, e = cfg.bn, w.dtype.nbytes
    part = -(-bn // groups)  # rows of each K/V tile one warp group loads
    qs = [w.load_q(wg, rows, aff(g, m=groups), f"load_Q{g}") for g, wg in enumerate(wgs)]
    ks: dict[int, list[int]] = {}
    vs: dict[int, list[int]] = {}
    qk: dict[tuple[int, int], int] = {}
    pv: dict[tuple[int, int], int] = {}

    def load(j: int) -> None:
        ks[j], vs[j] = [], []
        for g, wg in enumerate(wgs):
            for which, out in (("K", ks[j]), ("V", vs[j])):
                t = TileDesc(Space.GLOBAL, w.dtype, (1, 1, part, w.head_dim if which == "K" else w.head_dim_v),
                             which, (aff(b=1), aff(**{w.kv_head: 1}),
                                     aff(groups * (n - 1 - j) + g, **({w.kv_base: groups} if w.kv_base else {})),
                                     aff()))
                out.append(b.node(wg, Op.CP_ASYNC, Unit.LDST, work=t.nbytes, tile=t, name=f"load_{which}{g}[{j}]"))
            if j >= cfg.stages:  # the slot held tile j - stages: every group's MMA on it has completed
                link(b, [qk[c, j - cfg.stages] for c in range(groups)], ks[j][-1])
                link(b, [pv[c, j - cfg.stages] for c in range(groups)], vs[j][-1])

    for j in range(min(n, cfg.stages - 1)):  # prologue: the pipeliner's first stages-1 tiles
        load(j)
    for i in range(n):
        if i + cfg.stages - 1 < n:
            load(i + cfg.stages - 1)
        firsts: list[int] = []
        for g, wg in enumerate(wgs):
            qk[g, i] = w.mma(wg, rows, bn, w.head_dim, f"qk{g}[{i}]", (rows + bn) * w.head_dim * e)
            link(b, [*ks[i], qs[g] if i == 0 else -1], qk[g, i])
            for c in range(groups):  # the CTA barrier after cp.async.wait: every warp reached iteration i
                if (c, i - 1) in pv:
                    b.order(pv[c, i - 1], qk[g, i])
            first, sm = w.softmax_chain(wg, rows, bn, f"{g}[{i}]", masked=i < masked)
            # no ping-pong: the groups' wgmmas of one phase interleave on the tensor cores (each sub-core
            # holds a warp of every group), so a group's S_j is complete only when every group's is
            link(b, [qk[c, i] for c in range(g + 1)], first)
            for c in range(g):  # ... and the earlier groups' softmaxes wait for this group's S_j too
                b.data(qk[g, i], firsts[c])
            firsts.append(first)
            link(b, pv.get((g, i - 1), -1), sm)  # acc * alpha needs the previous P V accumulated
            pv[g, i] = w.pv(wg, rows, bn, f"pv{g}[{i}]")
            link(b, [*vs[i], *sm], pv[g, i])
    for g, wg in enumerate(wgs):  # epilogue: acc / l_i element-wise (div.full.f32), then the store
        norm = w.divide(wg, rows, f"normalize{g}", [pv[g, n - 1] if n else qs[g]])
        link(b, norm, w.store_o(wg, rows, aff(g, m=groups), f"store_O{g}", via_smem=True)[0])


def _fa3(w: AttnWriter, cfg: AttnConfig, n: int, masked: int) -> None:
    """FlashAttention-3 forward (hopper/flash_fwd_kernel_sm90.h, mainloop_fwd_sm90_tma_gmma_ws.hpp): a producer
    warp group issues TMA loads of Q and a `stages`-deep K/V ring; bm/64 consumer warp groups each own 64 Q
    rows. Intra-warp-group overlap: a consumer issues S_j = Q K_j^T, then O += P_(j-1) V_(j-1), and runs the
    softmax of S_j while that second wgmma executes. Ping-pong: a named barrier hands the tensor core from
    one consumer's pair of wgmmas to the next, so one group's softmax hides under the other's GEMMs.

    On sm100 (the GPU-Tile-Sim paper's FA3-on-Blackwell adaptation: Blackwell primitives, Hopper tiles) each
    wgmma becomes an M=64 tcgen05 MMA whose result lands in TMEM, so the consumer loads S from TMEM before its
    softmax, stores P back for the P V MMA (A operand from TMEM), and rescales O by a TMEM load and store once
    the previous P V has accumulated; the MMA cannot read P or the rescaled O before those stores land."""
    b = w.b
    producer = b.group("producer", 0, 4, role="tma")
    cons = [b.group(f"consumer{c}", 4 + 4 * c, 4, role="wgmma+softmax") for c in range(cfg.consumers)]
    bn = cfg.bn
    q = w.load_q(producer, cfg.bm, aff(m=1))
    ks, vs, vload = {}, {}, {}
    if n:
        ks[0] = w.load_kv(producer, "K", bn, w.kv_block(n, 0), "load_K[0]")
    for i in range(n):
        if i + 1 < n:
            ks[i + 1] = w.load_kv(producer, "K", bn, w.kv_block(n, i + 1), f"load_K[{i + 1}]")
        vs[i] = vload[i] = w.load_kv(producer, "V", bn, w.kv_block(n, i), f"load_V[{i}]")
        if w.dtype.is_fp8:  # wgmma needs V k-major: the producer transposes it in shared memory (LDSM.T/STSM)
            vt = TileDesc(Space.SHARED, w.dtype, (bn, w.head_dim_v), "Vt_smem")
            t = b.node(producer, Op.STS, Unit.LDST, work=2 * vt.nbytes, tile=vt, name=f"transpose_V[{i}]")
            b.data(vs[i], t)
            vs[i] = t
    qk: dict[tuple[int, int], int] = {}
    pv: dict[tuple[int, int], int] = {}
    soft: dict[tuple[int, int], list[int]] = {}
    token = -1
    for i in range(n + 1):
        for c, cg in enumerate(cons):
            first = -1
            if i < n:
                first = qk[c, i] = w.qk(cg, 64, bn, f"qk{c}[{i}]")
                link(b, [ks[i], q if i == 0 else -1], first)
            if i > 0:
                pv[c, i - 1] = w.pv(cg, 64, bn, f"pv{c}[{i - 1}]")
                link(b, [vs[i - 1], *soft[c, i - 1]], pv[c, i - 1])
                first = first if first >= 0 else pv[c, i - 1]
            if token >= 0:
                b.order(token, first)  # warp_scheduler_barrier_sync: wait for the other group's GEMMs
            token = pv[c, i - 1] if i > 0 else first
            if i < n and w.tmem_accumulators:
                ld = w.tmem(cg, Op.TMEM_LOAD, 64, bn, 4.0, f"tmem_ld_S{c}[{i}]")
                b.data(qk[c, i], ld)
                sm = w.softmax(cg, 64, bn, f"{c}[{i}]", masked=i < masked)
                link(b, ld, sm)
                st = w.tmem(cg, Op.TMEM_STORE, 64, bn, 2.0, f"tmem_st_P{c}[{i}]")
                link(b, sm, st)
                soft[c, i] = [st]
                if i > 0:  # O (FP32 in TMEM) rescaled by a load and a store after the previous P V accumulated
                    corr = w.tmem(cg, Op.TMEM_STORE, 64, w.head_dim_v, 8.0, f"correct_O{c}[{i}]")
                    link(b, [sm[0], pv[c, i - 1]], corr)
                    soft[c, i].append(corr)
            elif i < n:
                soft[c, i] = w.softmax(cg, 64, bn, f"{c}[{i}]", masked=i < masked)
                link(b, qk[c, i], soft[c, i])
                if i > 0:
                    link(b, pv[c, i - 1], soft[c, i])  # O rescale after the previous P V accumulated
    for i in range(cfg.stages, n):  # a ring slot is refilled when every consumer's wgmma that read it completed
        link(b, [qk[c, i - cfg.stages] for c in range(len(cons))], ks[i])
        link(b, [pv[c, i - cfg.stages] for c in range(len(cons))], vload[i])
    for c, cg in enumerate(cons):
        last = pv[c, n - 1] if n else q
        if w.tmem_accumulators:
            ld_o = w.tmem(cg, Op.TMEM_LOAD, 64, w.head_dim_v, 4.0, f"tmem_ld_O{c}")
            b.data(last, ld_o)
            last = ld_o
        norm = w.normalize(cg, 64, f"normalize{c}", last)
        b.data(norm, w.store_o(cg, 64, aff(c, m=len(cons)), f"store_O{c}")[0])


def _fa4(w: AttnWriter, cfg: AttnConfig, n: int, masked: int) -> None:
    """FlashAttention-4 forward (flash_attn/cute, sm100): a CTA owns two 128-row Q tiles. A load warp issues
    TMA into a K/V ring; one MMA warp issues tcgen05 MMAs (single thread) writing S0, S1 and O0, O1 in TMEM;
    softmax warp group s reads S_s from TMEM, computes exp2 partly by polynomial on the FMA pipe, writes P_s
    back over S_s; the correction warp group rescales O_s in TMEM (skipped while the row max barely moves)
    and runs the epilogue. MMA order S0_0, S1_0, O0 += P0_0 V_0, S0_1, O1 += P1_0 V_0, S1_1, ...: while the
    tensor core computes one tile's MMAs, the other tile's softmax runs."""
    b = w.b
    soft_g = [b.group(f"softmax{s}", 4 * s, 4, role="softmax") for s in range(2)]
    corr_g = b.group("correction", 8, 4, role="correction+epilogue")
    mma_g = b.group("mma", 12, 1, role="tcgen05")
    load_g = b.group("load", 13, 1, role="tma")
    epi_g = b.group("epilogue", 14, 1, role="tma-store")
    bn, dv = cfg.bn, w.head_dim_v
    qs = [w.load_q(load_g, 128, aff(s, m=2), f"load_Q{s}") for s in range(2)]
    ring: list[int] = []  # loads in slot order K_0, V_0, K_1, V_1, ...
    for i in range(n):
        ring.append(w.load_kv(load_g, "K", bn, w.kv_block(n, i), f"load_K[{i}]"))
        ring.append(w.load_kv(load_g, "V", bn, w.kv_block(n, i), f"load_V[{i}]"))
    s_mma: dict[tuple[int, int], int] = {}
    pv: dict[tuple[int, int], int] = {}
    p_ready: dict[tuple[int, int], list[int]] = {}
    corr: dict[tuple[int, int], int] = {}

    def issue_s(s: int, i: int) -> None:
        s_mma[s, i] = w.qk(mma_g, 128, bn, f"S{s}[{i}]")
        link(b, [ring[2 * i], qs[s] if i == 0 else -1], s_mma[s, i])

    def issue_pv(s: int, i: int) -> None:
        pv[s, i] = w.pv(mma_g, 128, bn, f"O{s}+=P{s}V[{i}]")
        link(b, [ring[2 * i + 1], *p_ready[s, i], corr.get((s, i), -1)], pv[s, i])

    for i in range(n):
        for s in range(2):
            if i > 0:  # O_s += P_s V of the previous block reads P_s before S_s is overwritten (TMEM alias)
                issue_pv(s, i - 1)
            issue_s(s, i)
        for s in range(2):
            ld = w.tmem(soft_g[s], Op.TMEM_LOAD, 128, bn, 4.0, f"tmem_ld_S{s}[{i}]")
            b.data(s_mma[s, i], ld)
            sm = w.softmax(soft_g[s], 128, bn, f"{s}[{i}]", masked=i < masked, rescale_o=False,
                           poly_fraction=cfg.exp_poly_fraction)
            link(b, ld, sm)
            st = w.tmem(soft_g[s], Op.TMEM_STORE, 128, bn, 2.0, f"tmem_st_P{s}[{i}]")
            link(b, sm, st)
            p_ready[s, i] = [st]
            if i > 0:  # rescale O_s (TMEM -> registers -> TMEM) between P V of block i-1 and block i
                corr[s, i] = w.tmem(corr_g, Op.TMEM_STORE, 128, dv, 8.0, f"correct_O{s}[{i}]",
                                    fraction=cfg.rescale_fraction)
                link(b, [sm[0], pv.get((s, i - 1), -1)], corr[s, i])
    for s in range(2):
        if n:
            issue_pv(s, n - 1)
    for slot in range(cfg.stages, len(ring)):  # a ring slot is refilled once both MMAs that read it completed
        i, is_v = divmod(slot - cfg.stages, 2)
        link(b, [(pv if is_v else s_mma)[s, i] for s in range(2)], ring[slot])
    for s in range(2):
        ld = w.tmem(corr_g, Op.TMEM_LOAD, 128, dv, 4.0, f"tmem_ld_O{s}")
        link(b, [pv[s, n - 1] if n else qs[s]], ld)
        norm = w.normalize(corr_g, 128, f"normalize{s}", ld)
        sts = TileDesc(Space.SHARED, w.dtype, (128, dv), "O_smem")
        st = b.node(corr_g, Op.STS, Unit.LDST, work=sts.nbytes, tile=sts, name=f"sts_O{s}")
        b.data(norm, st)
        out = w.store_o(epi_g, 128, aff(s, m=2), f"store_O{s}", via_smem=False)
        b.data(st, out[0])
