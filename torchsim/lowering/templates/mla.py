"""FlashMLA split-KV kernel: DeepSeek multi-head latent attention decoding on sm90+ (TMA + warp-group MMA).

Used by torchsim.lowering.templates.decode.flash_mla, which picks the split count and adds the combine
kernel. All query heads share one latent K/V head: K is [c_kv (512) | k_rope (64)] = 576 wide and V is its
first 512 columns, so each K/V block is loaded once and read by both MMAs.
"""

from __future__ import annotations

import math

from torchsim.graph import CtaClass, DType, GraphBuilder, KernelGraph, Op, Space, TileDesc, TileGraph, Unit, aff
from torchsim.hwmodels.gpu import Arch, GpuProfile
from torchsim.lowering.templates.attention_config import FLOP_PER_LANE_OP, AttnShape
from torchsim.lowering.templates.attention_parts import OUT_DTYPE, AttnWriter, group_ctas, link
from torchsim.lowering.templates.prologue import add_prologue

MLA_BLOCK = 64  # query rows per CTA and tokens per K/V block (FlashMLA's page block size)
MLA_THREADS = 256  # two warp groups
MLA_REGS = 240  # each warp group keeps half of the 64 x 512 FP32 output in registers
MLA_HEAD_DIM, MLA_HEAD_DIM_V = 576, 512


def check_mla(batch: int, heads_q: int, seq_q: int, seq_kv: int, hw: GpuProfile, head_dim: int, head_dim_v: int,
              dtype: DType) -> AttnShape:
    if hw.arch not in (Arch.SM90, Arch.SM100):
        raise ValueError(f"FlashMLA needs TMA and warp-group MMA (sm90+), which {hw.name} ({hw.arch.value}) lacks; "
                         f"valid hardware: h100-sxm, h200, b200 (use attention decode on {hw.name})")
    if head_dim != MLA_HEAD_DIM:
        raise ValueError(f"FlashMLA head_dim must be {MLA_HEAD_DIM} (512 latent + 64 RoPE dims), got {head_dim}")
    if head_dim_v != MLA_HEAD_DIM_V:
        raise ValueError(f"FlashMLA head_dim_v must be {MLA_HEAD_DIM_V} (the latent width), got {head_dim_v}")
    if dtype not in (DType.BF16, DType.FP16):
        raise ValueError(f"FlashMLA dtype {dtype.name.lower()} is not supported; valid: bf16, fp16")
    return AttnShape(batch, heads_q, 1, seq_q, seq_kv, head_dim, False, dtype, head_dim_v)


def mla_smem(dtype: DType) -> int:
    """Q tile, two K/V block buffers and the P tile shared between the warp groups."""
    e = dtype.nbytes
    return int((MLA_BLOCK * MLA_HEAD_DIM * 3 + MLA_BLOCK * MLA_BLOCK) * e)


def latent_io_bytes(batch: int, rows: int, seq_kv: int, head_dim: int, head_dim_v: int, dtype: DType,
                    splits: int) -> float:
    """DRAM bytes of an MLA decode's split kernel: each sequence's `rows` query rows and its latent cache read
    once (V is the cache's first columns), and the output written: FP32 partials plus a log-sum-exp per row
    and split when the K/V sequence is split, else the 16-bit rows."""
    out_rows = batch * rows
    out = splits * out_rows * (head_dim_v + 1) * 4.0 if splits > 1 else out_rows * head_dim_v * 2.0
    return batch * (rows * head_dim + seq_kv * head_dim) * dtype.nbytes + out


def mla_split_kernel(shape: AttnShape, hw: GpuProfile, splits: int, page_size: int) -> KernelGraph:
    """CTAs over (batch, 64 packed query rows, K/V split); pages of `page_size` tokens via a block table."""
    rows = shape.seq_q * shape.heads_q
    mblocks = math.ceil(rows / MLA_BLOCK)
    n_blocks = math.ceil(shape.seq_kv / MLA_BLOCK)
    per = math.ceil(n_blocks / min(splits, n_blocks))
    splits = math.ceil(n_blocks / per)
    table = [((min(per, n_blocks - sp * per),), (b, 0, m, sp * per, sp))
             for b in range(shape.batch) for sp in range(splits) for m in range(mblocks)]
    classes = []
    for cr in group_ctas(table, ("b", "hk", "m", "n0", "sp"), order=lambda key: -key[0]):
        n = cr.key[0]
        w = AttnWriter(GraphBuilder(f"flash_mla/{n}blocks", shape.dtype), shape.dtype, MLA_HEAD_DIM,
                       MLA_HEAD_DIM_V, tma=True, q_head="hk", kv_base="n0", split="sp" if splits > 1 else "",
                       pages=math.ceil(n * MLA_BLOCK / page_size) if page_size else 0,
                       kv_gather=0 < page_size < MLA_BLOCK, datapath_rows=int(hw.tensor_datapath_rows.value))
        classes.append(CtaClass(_write(w, n, shape.seq_kv % MLA_BLOCK != 0, hw), cr.params, cr.names,
                                threads=MLA_THREADS, regs_per_thread=MLA_REGS, smem_bytes=mla_smem(shape.dtype)))
    io = latent_io_bytes(shape.batch, rows, shape.seq_kv, MLA_HEAD_DIM, MLA_HEAD_DIM_V, shape.dtype, splits)
    return KernelGraph(
        f"flash_mla_b{shape.batch}_h{shape.heads_q}_q{shape.seq_q}_kv{shape.seq_kv}_split{splits}", tuple(classes),
        flops=shape.flops(), dram_bytes=io,
        attrs={"template": "flash_mla", "splits": splits, "blocks_per_split": per, "page_size": page_size,
               "batch": shape.batch, "heads_q": shape.heads_q, "seq_q": shape.seq_q, "seq_kv": shape.seq_kv,
               "head_dim": MLA_HEAD_DIM, "head_dim_v": MLA_HEAD_DIM_V, "dtype": shape.dtype.name.lower(),
               "launches": 2 if splits > 1 else 1})


def _write(w: AttnWriter, n: int, ragged: bool, hw: GpuProfile) -> TileGraph:
    """FlashMLA splitkv kernel (sm90): warp group 0 computes S = Q K_j^T and the softmax, shares P and the
    row scales through shared memory, and accumulates O[:, :256]; warp group 1 issues the TMA loads (Q, a
    two-block K/V ring) and accumulates O[:, 256:] from the same P. V_j is K_j's first 512 columns."""
    b = w.b
    wg0 = b.group("wg0", 0, 4, role="wgmma S+softmax+O_left")
    wg1 = b.group("wg1", 4, 4, role="tma+O_right")
    half, e = MLA_HEAD_DIM_V // 2, w.dtype.nbytes
    q = w.load_q(wg1, MLA_BLOCK, aff(m=1))
    ks = {j: w.load_kv(wg1, "K", MLA_BLOCK, w.kv_block(n, j), f"load_KV[{j}]") for j in range(min(2, n))}
    p_tile = TileDesc(Space.SHARED, w.dtype, (MLA_BLOCK, MLA_BLOCK), "P_smem")
    pv_l = pv_r = -1
    for j in range(n):
        s = w.qk(wg0, MLA_BLOCK, MLA_BLOCK, f"S[{j}]")
        link(b, [ks[j], q if j == 0 else -1], s)
        sm = w.softmax(wg0, MLA_BLOCK, MLA_BLOCK, f"[{j}]", masked=ragged and j == 0, rescale_o=False)
        link(b, s, sm)
        rescale_l = b.node(wg0, Op.ELEMENTWISE, Unit.FMA, work=MLA_BLOCK * half * FLOP_PER_LANE_OP,
                           name=f"rescale_O_left[{j}]")
        link(b, [*sm, pv_l], rescale_l)
        sts = b.node(wg0, Op.STS, Unit.LDST, work=p_tile.nbytes, tile=p_tile, name=f"sts_P[{j}]")
        link(b, sm, sts)
        operands = (MLA_BLOCK * MLA_BLOCK + MLA_BLOCK * half) * e  # P and half of V_j from shared memory
        left = w.mma(wg0, MLA_BLOCK, half, MLA_BLOCK, f"O_left+=PV[{j}]", operands)
        link(b, [sts, rescale_l, ks[j]], left)
        rescale_r = b.node(wg1, Op.ELEMENTWISE, Unit.FMA, work=MLA_BLOCK * half * FLOP_PER_LANE_OP,
                           name=f"rescale_O_right[{j}]")
        link(b, [sts, pv_r], rescale_r)
        right = w.mma(wg1, MLA_BLOCK, half, MLA_BLOCK, f"O_right+=PV[{j}]", operands)
        link(b, [rescale_r, sts, ks[j]], right)
        if j + 2 < n:  # the ring slot of K/V block j is refilled once both halves of P V_j have read it
            ks[j + 2] = w.load_kv(wg1, "K", MLA_BLOCK, w.kv_block(n, j + 2), f"load_KV[{j + 2}]")
            link(b, [left, right], ks[j + 2])
        pv_l, pv_r = left, right
    for c, (g, last) in enumerate(((wg0, pv_l), (wg1, pv_r))):
        norm = b.node(g, Op.ELEMENTWISE, Unit.FMA, work=MLA_BLOCK * (half + 4) * FLOP_PER_LANE_OP,
                      name=f"normalize{c}")
        b.data(last, norm)
        b.data(norm, w.store_o(g, MLA_BLOCK, aff(m=1), f"store_O{c}", col_parts=2, col=c)[0])
    add_prologue(b, hw, wg1, tensormaps=3, barriers=5)  # Q, KV, O maps; Q + full/empty of the 2-block ring
    return b.build()


__all__ = ["MLA_BLOCK", "MLA_REGS", "MLA_THREADS", "OUT_DTYPE", "check_mla", "latent_io_bytes", "mla_smem",
           "mla_split_kernel"]
