"""Tensix attention as tt-metal's flash kernels structure it: prefill SDPA (a core per (batch, head, Q chunk),
streaming K/V chunks, causal chunks skipped) and flash-decode (the KV length split over cores, each core
streaming its K/V slice and writing a partial result that a reducer core combines). KernelCall -> KernelGraph.
"""

from __future__ import annotations

import numpy as np

from torchsim.graph import CtaClass, DType, GraphBuilder, KernelGraph, Op, Space, TileDesc, Unit, aff
from torchsim.hwmodels.tensix.core import CircularBuffer, CoreCosts, check_l1
from torchsim.hwmodels.tensix.formats import TILE_ELEMENTS, TILE_ROWS, MathFidelity, check_format, tile_bytes, tiles
from torchsim.hwmodels.tensix.profiles import TensixProfile
from torchsim.lowering.templates.tensix.matmul import parse_grid

MAX_STEPS = 32


def _flash_class(name: str, hw: TensixProfile, q_tiles: int, kv_tiles: int, hd_tiles: int, q_dt: DType,
                 kv_dt: DType, fid: MathFidelity, count: int, partial_out: bool, hd_v_tiles: int = 0,
                 v_in_k: bool = False) -> tuple[CtaClass, float]:
    """One CTA class: a core computing `q_tiles` query tile-rows against `kv_tiles` key tile-rows; keys (and
    queries) `hd_tiles` wide, values `hd_v_tiles` (0: as wide as the keys). `v_in_k`: the values are the first
    columns of the key tiles already read (MLA's latent cache), not a read of their own."""
    cost = CoreCosts(hw, fid)
    hd_v = hd_v_tiles or hd_tiles
    chunk = max(1, min(8, kv_tiles))
    nchunks = -(-kv_tiles // chunk)
    group = -(-nchunks // MAX_STEPS)
    steps = -(-nchunks // group)
    per_step = chunk * group
    cbs = [CircularBuffer("q", q_dt, q_tiles * hd_tiles), CircularBuffer("k", kv_dt, 2 * chunk * hd_tiles),
           *(() if v_in_k else (CircularBuffer("v", kv_dt, 2 * chunk * hd_v),)),
           CircularBuffer("scores", DType.BF16, q_tiles * chunk), CircularBuffer("out", q_dt, 2 * q_tiles * hd_v)]
    check_l1(hw, name, cbs)
    b = GraphBuilder(f"tensix_{name}_q{q_tiles}_kv{kv_tiles}", q_dt)
    reader = b.group("reader", role="NCRISC: Q, K, V reader")
    writer = b.group("writer", role="BRISC: output writer")
    unpack, math, pack = (b.group(g, role=r) for g, r in (("unpack", "TRISC0"), ("math", "TRISC1"),
                                                           ("pack", "TRISC2")))
    routes: list[dict[str, object]] = []
    qt = TileDesc(Space.GLOBAL, q_dt, (q_tiles * 32, hd_tiles * 32), "Q", (aff(cta=1), aff(0)))
    rq = b.node(reader, Op.NOC_READ, Unit.NOC, q_tiles * hd_tiles * tile_bytes(q_dt), qt, "read_q")
    routes.append({"node": rq, "noc": 0, "mcast": "none", "page_bytes": tile_bytes(q_dt), "pages_w": hd_tiles,
                   "block": [q_tiles, hd_tiles]})
    flops = 0.0
    ups: list[int] = []
    last_pack = -1
    for s in range(steps):
        n = min(per_step, kv_tiles - s * per_step)
        reads = []
        for t, width in (("K", hd_tiles),) if v_in_k else (("K", hd_tiles), ("V", hd_v)):
            tile = TileDesc(Space.GLOBAL, kv_dt, (n * 32, width * 32), t, (aff(s, cta=steps), aff(0)))
            rd = b.node(reader, Op.NOC_READ, Unit.NOC, n * width * tile_bytes(kv_dt), tile, f"read_{t}{s}")
            routes.append({"node": rd, "noc": 0, "mcast": "none", "page_bytes": tile_bytes(kv_dt),
                           "pages_w": width, "block": [n, width]})
            if s >= 2:
                b.data(ups[s - 2], rd)
            reads.append(rd)
        score_tiles = q_tiles * n
        up = b.node(unpack, Op.UNPACK, Unit.UNPACKER,
                    cost.unpack_work(q_dt, score_tiles * hd_tiles) + cost.unpack_work(kv_dt, n * (hd_tiles + hd_v))
                    + cost.unpack_work(DType.BF16, 2 * score_tiles), name=f"unpack{s}")
        b.data(rq, up)
        for rd in reads:
            b.data(rd, up)
        ups.append(up)
        mm_flops = 2.0 * score_tiles * (hd_tiles + hd_v) * 32 ** 3  # QK^T and PV
        eltwise = score_tiles * TILE_ELEMENTS * (2.0 / float(hw.fpu_eltwise_mul_datums_per_clk)
                                                 + 2.0 / float(hw.fpu_eltwise_add_datums_per_clk))
        fp = b.node(math, Op.MMA, Unit.FPU,
                    cost.fpu_node_work(mm_flops + eltwise * cost.fpu_flop_per_clk, 6 * q_tiles * group),
                    name=f"qk_pv{s}")
        b.data(up, fp)
        sf = b.node(math, Op.EXP, Unit.SFPU, cost.sfpu_work("exp", score_tiles), name=f"exp{s}")
        b.data(fp, sf)
        last_pack = b.node(pack, Op.PACK, Unit.PACKER, cost.pack_work(DType.BF16, score_tiles + q_tiles),
                           name=f"pack{s}")
        b.data(sf, last_pack)
        flops += mm_flops
    out_tiles = q_tiles * hd_v * (2 if partial_out else 1)  # flash-decode partials carry max/sum too
    ot = TileDesc(Space.GLOBAL, q_dt, (q_tiles * 32, hd_v * 32), "O", (aff(cta=1), aff(0)))
    wr = b.node(writer, Op.NOC_WRITE, Unit.NOC, out_tiles * tile_bytes(q_dt), ot, "write_out")
    routes.append({"node": wr, "noc": 1, "mcast": "none", "page_bytes": tile_bytes(q_dt), "pages_w": hd_v,
                   "block": [q_tiles, hd_v]})
    b.data(last_pack, wr)
    b.attrs.update({"noc": routes, "cbs": {cb.name: cb.nbytes for cb in cbs}})
    params = np.arange(count, dtype=np.int64).reshape(-1, 1)
    cls = CtaClass(b.build(), params, ("cta",), threads=5, regs_per_thread=1, smem_bytes=sum(c.nbytes for c in cbs))
    return cls, flops * count


def _window_tiles(window: int, seq_kv: int) -> int:
    """A sliding window that binds (shorter than the K/V sequence), else 0; a bad window is named."""
    if not isinstance(window, int) or isinstance(window, bool) or window < 0:
        raise ValueError(f"sdpa window must be an integer >= 0 (0 = no sliding window), got {window!r}")
    return window if window < seq_kv else 0


def sdpa_prefill(batch: int, heads_q: int, heads_kv: int, seq_q: int, seq_kv: int, head_dim: int, causal: bool,
                 q_dt: DType, kv_dt: DType, hw: TensixProfile, *, fidelity: MathFidelity | str = "HiFi2",
                 q_chunk: int = 256, grid: object = None, window: int = 0, head_dim_v: int = 0) -> KernelGraph:
    """Flash SDPA prefill: one CTA per (batch, head, Q chunk); causal Q chunk i reads K/V chunks 0..i.

    `window` > 0 (a sliding window, causal): Q chunk i reads only the K/V tiles from the one holding its
    first row's first key (row - window + 1) to its last row's last key. `head_dim_v`: the values' width when it
    is not the keys' (MLA's prefill, flash_mla_prefill: keys 192 wide, values 128)."""
    for dt, what in ((q_dt, "Q"), (kv_dt, "K/V")):
        check_format(dt, f"sdpa prefill {what}")
    fid = MathFidelity.parse(fidelity)
    gx, gy = parse_grid(grid, hw)
    qc = tiles(min(q_chunk, seq_q))
    nq = -(-tiles(seq_q) // qc)
    hd = tiles(head_dim)
    classes, flops = [], 0.0
    w = _window_tiles(window, seq_kv)
    if w and not causal and seq_q > 1:
        raise ValueError(f"a sliding window (window={window}) needs causal sdpa when seq_q > 1 (seq_q={seq_q})")
    off = seq_kv - seq_q
    for i in range(nq):
        kv = min(tiles(seq_kv), (i + 1) * qc + tiles(seq_kv) - tiles(seq_q)) if causal else tiles(seq_kv)
        if w:  # first key of the chunk's first row, in whole tiles
            kv -= min(kv, max(0, i * qc * TILE_ROWS + off - w + 1) // TILE_ROWS)
        cls, f = _flash_class("sdpa", hw, qc, max(1, kv), hd, q_dt, kv_dt, fid, batch * heads_q, False,
                              tiles(head_dim_v) if head_dim_v else 0)
        classes.append(cls)
        flops += f
    kv_read = seq_kv - max(0, off - w + 1) if w else seq_kv
    dv = head_dim_v or head_dim
    dram = batch * (heads_q * seq_q * (head_dim + dv) * q_dt.nbytes
                    + heads_kv * kv_read * (head_dim + dv) * kv_dt.nbytes)
    return KernelGraph("sdpa_prefill", tuple(classes), flops=flops, dram_bytes=dram,
                       attrs={"grid": (gx, gy), "fidelity": fid.label, "template": "tensix_flash_sdpa"})


def flash_decode(batch: int, heads_q: int, heads_kv: int, seq_kv: int, head_dim: int, q_dt: DType, kv_dt: DType,
                 hw: TensixProfile, *, fidelity: MathFidelity | str = "HiFi2", grid: object = None,
                 window: int = 0) -> KernelGraph:
    """Flash-decode: each (batch, KV head) gets cores/(batch*heads_kv) cores splitting the KV length; under a
    sliding window (`window` > 0) only the K/V tiles of the last `window` keys."""
    check_format(kv_dt, "flash decode K/V cache")
    w = _window_tiles(window, seq_kv)
    read = tiles(seq_kv) - (seq_kv - w) // TILE_ROWS if w else tiles(seq_kv)  # tiles from the window's first key
    keys = w or seq_kv
    fid = MathFidelity.parse(fidelity)
    gx, gy = parse_grid(grid, hw)
    units = batch * heads_kv
    split = max(1, min((gx * gy) // max(1, units), read))
    kv = -(-read // split)
    q_tiles = tiles(max(1, heads_q // heads_kv))  # the query heads of one KV group pad one tile row
    cls, flops = _flash_class("flash_decode", hw, q_tiles, kv, tiles(head_dim), q_dt, kv_dt, fid, units * split, True)
    dram = batch * heads_kv * 2 * keys * head_dim * kv_dt.nbytes + 2 * batch * heads_q * head_dim * q_dt.nbytes
    return KernelGraph("flash_decode", (cls,), flops=4.0 * batch * heads_q * keys * head_dim, dram_bytes=dram,
                       attrs={"grid": (gx, gy), "fidelity": fid.label, "template": "tensix_flash_decode",
                              "kv_split": split, "padded_flops": flops})


def flash_mla_decode(batch: int, heads_q: int, seq_kv: int, head_dim: int, head_dim_v: int, q_dt: DType,
                     kv_dt: DType, hw: TensixProfile, *, fidelity: MathFidelity | str = "HiFi2",
                     grid: object = None) -> KernelGraph:
    """MLA decode as tt-metal's paged_flash_multi_latent_attention_decode runs it: flash-decode over one latent
    K/V head (its cache row `head_dim` = kv_lora_rank + rope wide; the op requires one KV head), every query head
    of a sequence in the same tile rows, the values the first `head_dim_v` columns of the key tiles (read once:
    V = K[..., :head_dim_v]); the K/V length split over the cores, a reducer combining the partials."""
    check_format(kv_dt, "flash MLA decode latent cache")
    if head_dim_v > head_dim:
        raise ValueError(f"flash MLA decode: head_dim_v {head_dim_v} exceeds the cache row head_dim {head_dim} "
                         "(the values are its first head_dim_v columns)")
    fid = MathFidelity.parse(fidelity)
    gx, gy = parse_grid(grid, hw)
    read = tiles(seq_kv)
    split = max(1, min((gx * gy) // max(1, batch), read))
    kv = -(-read // split)
    cls, flops = _flash_class("flash_mla_decode", hw, tiles(heads_q), kv, tiles(head_dim), q_dt, kv_dt, fid,
                              batch * split, True, tiles(head_dim_v), v_in_k=True)
    dram = batch * (seq_kv * head_dim * kv_dt.nbytes + heads_q * (head_dim + head_dim_v) * q_dt.nbytes)
    return KernelGraph("flash_mla_decode", (cls,), flops=2.0 * batch * heads_q * seq_kv * (head_dim + head_dim_v),
                       dram_bytes=dram, attrs={"grid": (gx, gy), "fidelity": fid.label,
                                               "template": "tensix_flash_mla_decode", "kv_split": split,
                                               "padded_flops": flops})
