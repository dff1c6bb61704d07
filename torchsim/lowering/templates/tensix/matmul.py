"""Tensix multi-core matmul as tt-metal writes it: one program instance per core with five RISC-V threads.

KernelCall -> KernelGraph for Arch.TENSIX. Reader (NCRISC) fetches in0 blocks, the writer (BRISC) fetches in1
blocks and writes the output; the first core of each row reads in0 from DRAM and multicasts it along the row,
the first core of each column does the same for in1 down the column (2D block sharding of the output). The
compute kernel is split over TRISC0 (unpack), TRISC1 (math: FPU at the math fidelity) and TRISC2 (pack); the
circular buffers in L1 are edges (a CB slot is refilled only after the block using it was consumed).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from torchsim.graph import CtaClass, DType, GraphBuilder, KernelGraph, Op, Space, TileDesc, Unit, aff
from torchsim.hwmodels.tensix.core import CircularBuffer, CoreCosts, check_l1, dst_tiles
from torchsim.hwmodels.tensix.formats import MathFidelity, check_format, default_fidelity, tile_bytes, tiles
from torchsim.hwmodels.tensix.profiles import TensixProfile, parse_grid


@dataclass(frozen=True, slots=True)
class MatmulConfig:
    """tt-metal's MatmulMultiCoreReuseMultiCast(1D) program config, in tiles.

    The per-core output (per_core_m x per_core_n) is produced in out_block_h x out_block_w blocks (tt-metal's
    out_block_h/out_block_w, which its program configs use to fit L1 at large sizes), block row by block row;
    each block runs the whole K loop, so in0 is read once per block column and in1 once per block row."""

    grid: tuple[int, int]  # cores used (x, y)
    per_core_m: int
    per_core_n: int
    in0_block_w: int
    sub_h: int
    sub_w: int
    mcast_in0: str  # "row" (2D), "all" (1D: every core shares in0) or "none" (1D tall: each core its own rows)
    mcast_in1: str  # "col" (2D), "none" (1D wide: each core reads its own weights) or "all" (1D tall)
    out_block_h: int = 0  # 0: per_core_m
    out_block_w: int = 0  # 0: per_core_n
    rule: str = ""  # which selection made it (shown in the kernel's attrs)

    @property
    def block_h(self) -> int:
        return self.out_block_h or self.per_core_m

    @property
    def block_n(self) -> int:
        return self.out_block_w or self.per_core_n

    @property
    def blocks_h(self) -> int:
        return self.per_core_m // self.block_h

    @property
    def blocks_w(self) -> int:
        return self.per_core_n // self.block_n

    @property
    def passes(self) -> int:
        return self.blocks_h * self.blocks_w


# tt-metal's subblock preference (ttnn matmul SUBBLOCK_HW_CHOICES, also in tests/ttnn/unit_tests/benchmarks/
# test_benchmark.py): (h, w), largest h*w first, taller first at equal size; h*w <= 8 = Dst half-sync tiles.
SUBBLOCK_HW_CHOICES = ((4, 2), (2, 4), (8, 1), (1, 8), (7, 1), (1, 7), (3, 2), (2, 3), (6, 1), (1, 6), (5, 1),
                       (1, 5), (2, 2), (4, 1), (1, 4), (3, 1), (1, 3), (2, 1), (1, 2), (1, 1))


def subblock(block_h: int, block_w: int, limit: int = 8, w_equals_block: bool = False) -> tuple[int, int]:
    """tt-metal's get_matmul_subblock_params: the first of SUBBLOCK_HW_CHOICES that divides the block and fits
    `limit` Dst tiles (4 with fp32 accumulation); `w_equals_block` (sharded output) wants h = 1, w = block_w."""
    for h, w in SUBBLOCK_HW_CHOICES:
        if h * w > limit or (w_equals_block and (h != 1 or w != block_w)):
            continue
        if block_h % h == 0 and block_w % w == 0:
            return h, w
    return 1, 1


# Pieces the output-finishing block is split into (at most; a divisor of its subblock rows): enough for the
# writes of all but the last piece to overlap the block's remaining math, few enough to keep graphs small.
LAST_BLOCK_PARTS = 4


def _last_block_parts(sub_rows: int) -> int:
    return max(d for d in range(1, min(LAST_BLOCK_PARTS, sub_rows) + 1) if sub_rows % d == 0)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _l1_estimate(m: int, n: int, bw: int, in0: DType, in1: DType, out: DType) -> int:
    """tt-metal's estimate of a blocking's CBs (ttnn matmul utilities get_estimated_size_of_cbs): double-
    buffered in0/in1 blocks, the output block and its intermediate (packer L1 accumulation: at least bf16)."""
    t_out = tile_bytes(out)
    return (2 * m * bw * tile_bytes(in0) + 2 * n * bw * tile_bytes(in1) + m * n * t_out
            + m * n * max(tile_bytes(DType.BF16), t_out))


def _out_blocks(pm: int, pn: int, bw: int, in0: DType, in1: DType, out: DType, budget: int,
                adjust_k: bool) -> tuple[int, int, int]:
    """tt-metal's get_multi_dim_per_core_factor: the whole per-core output if its CBs fit, else the out block
    (divisors of per_core_M x per_core_N, the squarest of each size) of largest area that fits, trying
    in0_block_w first and then (when `adjust_k`) its smaller divisors."""
    if _l1_estimate(pm, pn, bw, in0, in1, out) < budget:
        return pm, pn, bw
    mf = [pm, 1] + [f for f in range(pm // 2, 1, -1) if pm % f == 0]
    nf = [pn, 1] + [f for f in range(pn // 2, 1, -1) if pn % f == 0]
    by_area: dict[int, tuple[int, int]] = {}
    for fm in mf:
        for fn in nf:
            ratio = max(fm, fn) / min(fm, fn)
            old = by_area.get(fm * fn)
            if old is None or not max(old) / min(old) < ratio:
                by_area[fm * fn] = (fm, fn)
    for k in range(bw, 0 if adjust_k else bw - 1, -1):
        if bw % k:
            continue
        for area in sorted(by_area, reverse=True):
            fm, fn = by_area[area]
            if _l1_estimate(fm, fn, k, in0, in1, out) < budget:
                return fm, fn, k
    return 1, 1, 1


def choose_config(mt: int, nt: int, kt: int, grid: tuple[int, int], in0: DType, in1: DType, out: DType,
                  hw: TensixProfile, name: str) -> tuple[MatmulConfig, list[CircularBuffer]]:
    """The program config ttnn.matmul selects by itself for DRAM-interleaved inputs and output (ttnn matmul
    create_simple_matmul_program_config, all-DRAM-interleaved path; the 'out-of-box' configs of tt-metal's
    GEMM_FLOPS report):

    - per-core factor f: the largest of 16, 8, 4, 2 whose f x f blocking with in0_block_w 2 fits L1;
    - narrow shapes (M/N or N/M > 8, or M or N within one tile) and outputs that are one block of f rows
      (or columns) tall use the 1D configs: in0 multicast to every core, each core N/cores columns (wide), or
      in1 multicast, each core M/cores rows (tall); in0_block_w 2 (1 for odd Kt);
    - else the 2D multicast over the whole grid: per_core = ceil(Mt / rows) x ceil(Nt / cols), in0_block_w =
      Kt / cols (1 if it does not divide), then out blocks and in0_block_w shrunk until the CBs fit L1;
    - the subblock is the first of tt-metal's SUBBLOCK_HW_CHOICES that divides the out block."""
    gx, gy = grid
    budget = int(hw.l1_bytes_per_core) - int(hw.l1_reserved_bytes)
    f = next((c for c in (16, 8, 4, 2) if _l1_estimate(c, c, 2, in0, in1, out) < budget), 1)
    nby, nbx = -(-mt // f), -(-nt // f)
    m_el, n_el = mt * 32, nt * 32
    narrow = max(m_el, n_el) // min(m_el, n_el) > 8 or m_el <= 32 or n_el <= 32
    fits = not (nby == 1 and nbx == 1) and nby <= gy and nbx <= gx
    wide, tall = narrow and n_el > m_el, narrow and n_el <= m_el
    cores = gx * gy
    if (fits and nby == 1) or wide or (fits and nbx == 1) or tall:
        in0_mcast = (fits and nby == 1) or wide
        bw = 2 if kt % 2 == 0 else 1
        if in0_mcast:
            pm, pn = mt, _cdiv(_cdiv(n_el, cores), 32)
            used_cores = -(-nt // pn)
        else:
            pm, pn = _cdiv(_cdiv(m_el, cores), 32), nt
            used_cores = -(-mt // pm)
        obh, obw, bw = _out_blocks(pm, pn, bw, in0, in1, out, budget, adjust_k=False)
        used = (min(gx, used_cores), -(-used_cores // gx))
        m0, m1 = ("all", "none") if in0_mcast else ("none", "all")
        rule = "tt-metal auto: 1D mcast in0 (wide)" if in0_mcast else "tt-metal auto: 1D mcast in1 (tall)"
    else:
        bw = kt // gx if kt % gx == 0 else 1
        pm, pn = -(-mt // gy), -(-nt // gx)
        obh, obw, bw = _out_blocks(pm, pn, bw, in0, in1, out, budget, adjust_k=True)
        used = (-(-nt // pn), -(-mt // pm))
        m0, m1 = "row", "col"
        rule = "tt-metal auto: 2D mcast"
    sh, sw = subblock(obh, obw, dst_tiles(hw))
    cfg = MatmulConfig(used, pm, pn, bw, sh, sw, m0, m1, obh, obw, rule)
    return cfg, check_config(cfg, kt, in0, in1, out, hw, name)


def check_config(cfg: MatmulConfig, kt: int, in0: DType, in1: DType, out: DType, hw: TensixProfile,
                 name: str) -> list[CircularBuffer]:
    """The CBs of `cfg` (double-buffered in0/in1 blocks, the output block, the bf16 intermediate of a
    non-bf16 output accumulated over several K blocks); raises naming what does not fit or divide."""
    where = (f"{name}: program config per_core_M={cfg.per_core_m}, per_core_N={cfg.per_core_n}, in0_block_w="
             f"{cfg.in0_block_w}, out_block={cfg.block_h}x{cfg.block_n}, subblock={cfg.sub_h}x{cfg.sub_w}")
    if (min(cfg.per_core_m, cfg.per_core_n, cfg.in0_block_w, cfg.sub_h, cfg.sub_w, cfg.block_h, cfg.block_n) < 1
            or kt % cfg.in0_block_w or cfg.per_core_m % cfg.block_h or cfg.per_core_n % cfg.block_n
            or cfg.block_h % cfg.sub_h or cfg.block_n % cfg.sub_w):
        raise ValueError(f"{where}: in0_block_w must divide K ({kt} tiles), out blocks the per-core output and "
                         "subblocks the out block")
    bh, bn, bw = cfg.block_h, cfg.block_n, cfg.in0_block_w
    cbs = [CircularBuffer("in0", in0, 2 * bh * bw), CircularBuffer("in1", in1, 2 * bn * bw),
           CircularBuffer("out", out, bh * bn)]
    if kt > bw and out is not DType.BF16:
        cbs.append(CircularBuffer("interm", DType.BF16, bh * bn))
    check_l1(hw, name, cbs)
    return cbs


def explicit_config(mt: int, nt: int, kt: int, grid: tuple[int, int], blocking: tuple[int, int, int, int],
                    in0: DType, in1: DType, out: DType, hw: TensixProfile, name: str
                    ) -> tuple[MatmulConfig, list[CircularBuffer]]:
    """tt-metal's MatmulMultiCoreReuseMultiCastProgramConfig as a model sets it: (per_core_M, per_core_N,
    in0_block_w, out_subblock_w) with out_subblock_h = 1; the cores used are the blocks the output needs."""
    pm, pn, bw, sw = blocking
    where = f"{name}: program config per_core_M={pm}, per_core_N={pn}, in0_block_w={bw}, out_subblock_w={sw}"
    if min(blocking) < 1 or kt % bw or pn % sw:
        raise ValueError(f"{where}: in0_block_w must divide K ({kt} tiles) and out_subblock_w per_core_N")
    used = (-(-nt // pn), -(-mt // pm))
    if used[0] > grid[0] or used[1] > grid[1]:
        raise ValueError(f"{where} needs {used[0]}x{used[1]} cores, more than the grid {grid[0]}x{grid[1]}")
    cfg = MatmulConfig(used, pm, pn, bw, 1, sw, "row", "col", rule="explicit (model program config)")
    return cfg, check_config(cfg, kt, in0, in1, out, hw, name)


def matmul(m: int, n: int, k: int, in0: DType, hw: TensixProfile, *, in1: DType | None = None,
           out: DType | None = None, fidelity: MathFidelity | str | None = None, grid: object = None,
           name: str = "matmul", prefix: str = "", blocking: tuple[int, int, int, int] | None = None,
           config: MatmulConfig | None = None, packer_l1_acc: bool = True, block_rows: int = 0,
           weight_sets: int = 1) -> KernelGraph:
    """Multi-core matmul (M x K) @ (K x N) on `hw`.

    The program config is ttnn's own selection (`choose_config`), a model's (per_core_M, per_core_N,
    in0_block_w, out_subblock_w) `blocking`, or a whole `config` (a benchmark's manually tuned one).
    `packer_l1_acc` (tt-metal's compute-kernel option, on in its GEMM benchmark: tests/ttnn/unit_tests/benchmarks/
    test_benchmark.py sets packer_l1_acc=True): the packer accumulates each K block's partial sums into L1 (a
    read-modify-write per 16 B, packer_l1_acc_cycles) instead of spilling them and unpacking them back into Dst
    before the next block (which costs the unpacker a bf16 tile per output tile per block).
    `block_rows` (> 0, less than M): the program config is for that many rows and runs over M's row blocks in
    turn, as ttnn's matmul loops over a batched in0 ([1, M / block_rows, block_rows, K], tt_transformers' long
    prefill): every pass reads in1 again (its reader walks the weights once per batch); a partial last block is
    padded to a whole one.
    `weight_sets` (> 1): the program runs that many times in turn, each pass over its own weights and its own M
    rows, as ttnn's sparse_matmul loops over the active experts of an MoE layer (one program, the same cores).

    Example:
        >>> from torchsim.hwmodels.tensix.profiles import wormhole_n150
        >>> kg = matmul(1024, 1024, 1024, DType.BFP8_B, wormhole_n150(), fidelity="lofi", grid="8x8")
        >>> kg.attrs["grid"], kg.attrs["fidelity"]
        ((8, 8), 'LoFi')
    """
    in1 = in1 or in0
    out = out or in0
    for dt, what in ((in0, "in0 (activations)"), (in1, "in1 (weights)"), (out, "output")):
        check_format(dt, f"matmul {name!r} {what}")
    fid = MathFidelity.parse(fidelity) if fidelity else default_fidelity(in1 if in1 != DType.BF16 else in0)
    g = parse_grid(grid, hw)
    if block_rows < 0:
        raise ValueError(f"matmul {name!r}: block_rows must be >= 0 (0: one pass over all {m} rows), got {block_rows}")
    if weight_sets < 1 or (weight_sets > 1 and 0 < block_rows < m):
        raise ValueError(f"matmul {name!r}: weight_sets must be >= 1 and cannot be combined with row blocks "
                         f"(block_rows); got weight_sets={weight_sets}, block_rows={block_rows}")
    passes = weight_sets if weight_sets > 1 else -(-m // block_rows) if 0 < block_rows < m else 1
    m_pass = block_rows if passes > 1 and weight_sets == 1 else m
    mt, nt, kt = tiles(m_pass), tiles(n), tiles(k)
    if config is not None:
        if config.grid[0] > g[0] or config.grid[1] > g[1]:
            raise ValueError(f"matmul {name!r}: program config needs {config.grid[0]}x{config.grid[1]} cores, "
                             f"more than the grid {g[0]}x{g[1]}")
        cfg, cbs = config, check_config(config, kt, in0, in1, out, hw, f"matmul {name!r}")
    elif blocking is None:
        cfg, cbs = choose_config(mt, nt, kt, g, in0, in1, out, hw, f"matmul {name!r}")
    else:
        cfg, cbs = explicit_config(mt, nt, kt, g, blocking, in0, in1, out, hw, f"matmul {name!r}")
    cost = CoreCosts(hw, fid)
    pm, pn, bw = cfg.block_h, cfg.block_n, cfg.in0_block_w  # one out block
    nblocks = -(-kt // bw)
    nsub = (pm // cfg.sub_h) * (pn // cfg.sub_w)
    b = GraphBuilder(f"{prefix}tensix_matmul_{cfg.per_core_m}x{cfg.per_core_n}x{bw}_{fid.label}", in0)
    reader = b.group("reader", role="NCRISC: in0 reader / row multicast")
    writer = b.group("writer", role="BRISC: in1 reader / column multicast, output writer")
    unpack = b.group("unpack", role="TRISC0")
    math = b.group("math", role="TRISC1")
    pack = b.group("pack", role="TRISC2")
    routes: list[dict[str, object]] = []
    a_name, b_name, c_name = f"{prefix}A", f"{prefix}B", f"{prefix}C"
    mm_nodes: list[int] = []
    up_nodes: list[int] = []  # the last unpack node of each K step
    block_mm: list[int] = []  # the last math node of each K step
    gx = cfg.grid[0]
    nbh, nbw = cfg.blocks_h, cfg.blocks_w
    # which block of the output a core owns, as affine functions of its (cx, cy)
    if cfg.mcast_in1 == "col":  # 2D: rows of cores share in0 blocks, columns share in1 blocks
        m_of, n_of = {"cy": nbh}, {"cx": nbw}
    elif cfg.mcast_in0 == "all":  # 1D wide: all of M on every core, N split over the cores
        m_of, n_of = {}, {"cx": nbw, "cy": gx * nbw}
    else:  # 1D tall: M split over the cores, all of N on every core
        m_of, n_of = {"cx": nbh, "cy": gx * nbh}, {}
    pass_blocks = -(-mt // cfg.block_h)  # out-block rows of one pass (row-block offset of the next pass)
    for step in range(passes * nbh * nbw * nblocks):
        ps, rest = divmod(step, nbh * nbw * nblocks)
        ob, blk = divmod(rest, nblocks)
        oh, ow = divmod(ob, nbw)  # out blocks row by row, as tt-metal's readers walk them
        oh += ps * pass_blocks
        ob += ps * nbh * nbw
        row_of, col_of = aff(oh, **m_of), aff(ow, **n_of)
        t0 = TileDesc(Space.GLOBAL, in0, (pm * 32, bw * 32), a_name, (row_of, aff(blk)))
        t1 = TileDesc(Space.GLOBAL, in1, (bw * 32, pn * 32), f"{b_name}{ps}" if weight_sets > 1 else b_name,
                      (aff(blk), col_of))
        r0 = b.node(reader, Op.NOC_READ, Unit.NOC, pm * bw * tile_bytes(in0), t0, f"in0_block{step}")
        r1 = b.node(writer, Op.NOC_READ, Unit.NOC, pn * bw * tile_bytes(in1), t1, f"in1_block{step}")
        routes.append({"node": r0, "noc": 1, "mcast": cfg.mcast_in0, "page_bytes": tile_bytes(in0),
                       "pages_w": kt, "block": [pm, bw]})
        routes.append({"node": r1, "noc": 0, "mcast": cfg.mcast_in1, "page_bytes": tile_bytes(in1),
                       "pages_w": nt, "block": [bw, pn]})
        if step >= 2:  # double-buffered CBs: a slot is free again once its block is unpacked and multiplied
            for done in (up_nodes[step - 2], block_mm[step - 2]):
                b.data(done, r0)
                b.data(done, r1)
        # without packer L1 accumulation the partials spilled to the intermediate CB are unpacked back
        reload = pm * pn if blk and not packer_l1_acc else 0
        unpacked = nsub * cost.matmul_unpack_work(in0, in1, cfg.sub_h, cfg.sub_w, bw) + \
            cost.unpack_work(DType.BF16, reload)
        flops = 2.0 * pm * pn * bw * 32 ** 3
        mm_work = cost.fpu_node_work(flops, nsub * (bw + (2 if reload else 1)))
        last = blk == nblocks - 1
        if packer_l1_acc and nblocks > 1:  # partials accumulated in L1; the last block also packs the result
            work = cost.pack_work(DType.BF16, pm * pn) * (float(hw.packer_l1_acc_cycles) if blk else 1.0)
            work += cost.pack_work(out, pm * pn) if last else 0.0
        else:
            work = cost.pack_work(out if last else DType.BF16, pm * pn)
        # the block's subblocks are multiplied and packed one after another; in the block that finishes the
        # output the writer sends each subblock row to DRAM as soon as it is packed (tt-metal's writer waits on
        # the output CB per subblock), so that block runs as `parts` pieces whose writes overlap the rest
        # (pieces of subblock rows; a block one subblock tall is cut into pieces of subblock columns)
        by_rows = pm // cfg.sub_h > 1
        parts = _last_block_parts(pm // cfg.sub_h if by_rows else pn // cfg.sub_w) if last else 1
        for part in range(parts):
            sfx = f".{part}" if parts > 1 else ""
            up = b.node(unpack, Op.UNPACK, Unit.UNPACKER, unpacked / parts, name=f"unpack{step}{sfx}")
            b.data(r0, up)
            b.data(r1, up)
            if mm_nodes:  # Src registers: the unpacker runs at most a block (piece) ahead of the FPU
                b.data(mm_nodes[-1], up)
            mm = b.node(math, Op.MMA, Unit.FPU, mm_work / parts, name=f"matmul{step}{sfx}")
            # unpack and math of a block run in lockstep, tile by tile through the double-banked SrcA/SrcB (the
            # unpacker fills one bank while the FPU reads the other): the block's math starts with its unpacking
            # (an order edge, released at issue) and the block is done when both are
            b.order(up, mm)
            mm_nodes.append(mm)
            pk = b.node(pack, Op.PACK, Unit.PACKER, work / parts, name=f"pack{step}{sfx}")
            b.data(mm, pk)
            b.data(up, pk)
            if last:
                rows, cols = (pm // parts, pn) if by_rows else (pm, pn // parts)
                r_part, c_part = (parts, 1) if by_rows else (1, parts)
                coord = (aff(oh * r_part + part * (r_part > 1), **{k: v * r_part for k, v in m_of.items()}),
                         aff(ow * c_part + part * (c_part > 1), **{k: v * c_part for k, v in n_of.items()}))
                tc = TileDesc(Space.GLOBAL, out, (rows * 32, cols * 32), c_name, coord)
                wr = b.node(writer, Op.NOC_WRITE, Unit.NOC, rows * cols * tile_bytes(out), tc, f"out_write{ob}{sfx}")
                b.data(pk, wr)
                routes.append({"node": wr, "noc": 1, "mcast": "none", "page_bytes": tile_bytes(out),
                               "pages_w": nt, "block": [rows, cols]})
        up_nodes.append(up)
        block_mm.append(mm)
    b.attrs.update({"noc": routes, "cbs": {cb.name: cb.nbytes for cb in cbs}})
    graph = b.build()
    gxu, gyu = cfg.grid
    if cfg.mcast_in1 == "col":
        ncores = gxu * gyu
    elif cfg.mcast_in0 == "all":
        ncores = -(-nt // cfg.per_core_n)
    else:
        ncores = -(-mt // cfg.per_core_m)
    coords = [(i % gxu, i // gxu) for i in range(ncores)]
    params = np.array(coords, dtype=np.int64).reshape(-1, 2)
    smem = sum(cb.nbytes for cb in cbs)
    cls = CtaClass(graph, params, ("cx", "cy"), threads=5, regs_per_thread=1, smem_bytes=smem)
    rows = passes * m_pass
    dram = rows * k * in0.nbytes + passes * k * n * in1.nbytes + rows * n * out.nbytes
    template = "tensix_matmul_2d_mcast" if cfg.mcast_in1 == "col" else "tensix_matmul_1d_mcast"
    return KernelGraph(name, (cls,), flops=2.0 * m * n * k, dram_bytes=dram,
                       attrs={"grid": cfg.grid, "fidelity": fid.label, "packer_l1_acc": packer_l1_acc,
                              "template": template,
                              **({"weight_sets": passes} if weight_sets > 1 else
                                 {"row_passes": passes} if passes > 1 else {}),
                              "config": {"per_core_m": cfg.per_core_m, "per_core_n": cfg.per_core_n,
                                         "in0_block_w": bw, "out_block": [pm, pn], "passes": cfg.passes,
                                         "subblock": [cfg.sub_h, cfg.sub_w], "rule": cfg.rule},
                              # the whole program config, as a call's `program_config` parameter runs it again
                              "program_config": program_config_param(cfg)})


def program_config_param(cfg: MatmulConfig) -> tuple[tuple[str, Any], ...]:
    """A program config as a KernelCall parameter value (sorted (field, value) pairs; `matmul` runs it given
    back through the Tensix registry's `program_config`)."""
    return tuple((f.name, getattr(cfg, f.name)) for f in fields(cfg))
