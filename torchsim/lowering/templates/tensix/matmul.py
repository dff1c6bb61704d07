"""Tensix multi-core matmul as tt-metal writes it: one program instance per core with five RISC-V threads.

KernelCall -> KernelGraph for Arch.TENSIX. Reader (NCRISC) fetches in0 blocks, the writer (BRISC) fetches in1
blocks and writes the output; the first core of each row reads in0 from DRAM and multicasts it along the row,
the first core of each column does the same for in1 down the column (2D block sharding of the output). The
compute kernel is split over TRISC0 (unpack), TRISC1 (math: FPU at the math fidelity) and TRISC2 (pack); the
circular buffers in L1 are edges (a CB slot is refilled only after the block using it was consumed).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from torchsim.graph import CtaClass, DType, GraphBuilder, KernelGraph, Op, Space, TileDesc, Unit, aff
from torchsim.hwmodels.tensix.core import CircularBuffer, CoreCosts, check_l1, dst_tiles
from torchsim.hwmodels.tensix.formats import MathFidelity, check_format, default_fidelity, tile_bytes, tiles
from torchsim.hwmodels.tensix.profiles import TensixProfile, parse_grid


@dataclass(frozen=True, slots=True)
class MatmulConfig:
    """tt-metal's MatmulMultiCoreReuseMultiCast(1D) program config, in tiles."""

    grid: tuple[int, int]  # cores used (x, y)
    per_core_m: int
    per_core_n: int
    in0_block_w: int
    sub_h: int
    sub_w: int
    mcast_in0: str  # "row" (2D) or "all" (1D: every core shares in0)
    mcast_in1: str  # "col" (2D) or "none" (1D: each core reads its own weights)
    passes: int = 1  # the per-core output is produced in `passes` blocks along N when it does not fit L1

    @property
    def block_n(self) -> int:
        return self.per_core_n // self.passes


def _divisor_at_most(n: int, limit: int) -> int:
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def choose_config(mt: int, nt: int, kt: int, grid: tuple[int, int], in0: DType, in1: DType, out: DType,
                  hw: TensixProfile, name: str) -> tuple[MatmulConfig, list[CircularBuffer]]:
    """Block the output over the grid (2D when M spans the rows, else 1D over N), then take the fewest passes
    along N and the largest in0_block_w whose CBs fit L1 (in0_block_w below 4 only when nothing else fits)."""
    gx, gy = grid
    if mt >= gy:
        pm, pn = -(-mt // gy), -(-nt // gx)
        used = (-(-nt // pn), -(-mt // pm))
        m0, m1 = "row", "col"
    else:
        pm = mt
        cores = min(gx * gy, nt)
        pn = -(-nt // cores)
        ncores = -(-nt // pn)
        used = (min(gx, ncores), -(-ncores // gx))
        m0, m1 = "all", "none"
    limit = dst_tiles(hw)
    # Each K block makes the packer read-modify-write the whole output block in L1 (packer_l1_acc_cycles per
    # 16 B: 64 cycles per bf16 tile on 4 packers), against in0_block_w tile multiplies per output tile on the FPU
    # (16-64 cycles each): with in0_block_w >= 4 the accumulate stays below the FPU's work. So a blocking with a
    # smaller in0_block_w is taken only when no number of passes along N fits one with it.
    want = max(d for d in range(1, min(kt, 4) + 1) if kt % d == 0)
    err: ValueError | None = None
    fallback: tuple[MatmulConfig, list[CircularBuffer]] | None = None
    for passes in (d for d in range(1, pn + 1) if pn % d == 0):
        bn = pn // passes
        for bw in (d for d in range(min(kt, 8), 0, -1) if kt % d == 0):  # in0_block_w: a divisor of Kt, <= 8
            cbs = [CircularBuffer("in0", in0, 2 * pm * bw), CircularBuffer("in1", in1, 2 * bn * bw),
                   CircularBuffer("out", out, pm * bn)]
            if kt > bw and out is not DType.BF16:
                cbs.append(CircularBuffer("interm", DType.BF16, pm * bn))
            try:
                check_l1(hw, name, cbs)
            except ValueError as exc:
                err = exc  # report the smallest blocking that still does not fit
                continue
            sub = max(((h, w) for h in range(1, pm + 1) if pm % h == 0 for w in range(1, bn + 1)
                       if bn % w == 0 and h * w <= limit), key=lambda s: (s[0] * s[1], s[1]))
            cfg = MatmulConfig(used, pm, pn, bw, sub[0], sub[1], m0, m1, passes)
            if bw >= want:
                return cfg, cbs
            fallback = fallback or (cfg, cbs)
            break  # the largest in0_block_w that fits at this number of passes
    if fallback is not None:
        return fallback
    assert err is not None
    raise err


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
    cbs = [CircularBuffer("in0", in0, 2 * pm * bw), CircularBuffer("in1", in1, 2 * pn * bw),
           CircularBuffer("out", out, pm * pn)]
    if kt > bw and out is not DType.BF16:
        cbs.append(CircularBuffer("interm", DType.BF16, pm * pn))
    check_l1(hw, name, cbs)
    return MatmulConfig(used, pm, pn, bw, 1, sw, "row", "col"), cbs


def matmul(m: int, n: int, k: int, in0: DType, hw: TensixProfile, *, in1: DType | None = None,
           out: DType | None = None, fidelity: MathFidelity | str | None = None, grid: object = None,
           name: str = "matmul", prefix: str = "", blocking: tuple[int, int, int, int] | None = None,
           packer_l1_acc: bool = True) -> KernelGraph:
    """Multi-core matmul (M x K) @ (K x N) on `hw`.

    `packer_l1_acc` (tt-metal's compute-kernel option, on in its GEMM benchmark: tests/ttnn/unit_tests/benchmarks/
    test_benchmark.py sets packer_l1_acc=True): the packer accumulates each K block's partial sums into L1 (a
    read-modify-write per 16 B, packer_l1_acc_cycles) instead of spilling them and unpacking them back into Dst
    before the next block (which costs the unpacker a bf16 tile per output tile per block).

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
    mt, nt, kt = tiles(m), tiles(n), tiles(k)
    if blocking is None:
        cfg, cbs = choose_config(mt, nt, kt, g, in0, in1, out, hw, f"matmul {name!r}")
    else:
        cfg, cbs = explicit_config(mt, nt, kt, g, blocking, in0, in1, out, hw, f"matmul {name!r}")
    cost = CoreCosts(hw, fid)
    pm, pn, bw = cfg.per_core_m, cfg.block_n, cfg.in0_block_w
    nblocks = -(-kt // bw)
    nsub = (pm // cfg.sub_h) * (pn // cfg.sub_w)
    b = GraphBuilder(f"{prefix}tensix_matmul_{pm}x{pn}x{bw}_{fid.label}", in0)
    reader = b.group("reader", role="NCRISC: in0 reader / row multicast")
    writer = b.group("writer", role="BRISC: in1 reader / column multicast, output writer")
    unpack = b.group("unpack", role="TRISC0")
    math = b.group("math", role="TRISC1")
    pack = b.group("pack", role="TRISC2")
    routes: list[dict[str, object]] = []
    a_name, b_name, c_name = f"{prefix}A", f"{prefix}B", f"{prefix}C"
    mm_nodes: list[int] = []
    pk = -1
    two_d = cfg.mcast_in1 == "col"
    row_of = aff(cy=1) if two_d else aff(0)  # 1D: every core holds all M rows and a slice of N
    npass = cfg.passes
    for step in range(npass * nblocks):
        ps, blk = divmod(step, nblocks)
        col_of = aff(ps, cx=npass) if two_d else aff(ps, cx=npass, cy=cfg.grid[0] * npass)
        t0 = TileDesc(Space.GLOBAL, in0, (pm * 32, bw * 32), a_name, (row_of, aff(blk)))
        t1 = TileDesc(Space.GLOBAL, in1, (bw * 32, pn * 32), b_name, (aff(blk), col_of))
        r0 = b.node(reader, Op.NOC_READ, Unit.NOC, pm * bw * tile_bytes(in0), t0, f"in0_block{step}")
        r1 = b.node(writer, Op.NOC_READ, Unit.NOC, pn * bw * tile_bytes(in1), t1, f"in1_block{step}")
        routes.append({"node": r0, "noc": 1, "mcast": cfg.mcast_in0, "page_bytes": tile_bytes(in0),
                       "pages_w": kt, "block": [pm, bw]})
        routes.append({"node": r1, "noc": 0, "mcast": cfg.mcast_in1, "page_bytes": tile_bytes(in1),
                       "pages_w": nt, "block": [bw, pn]})
        if step >= 2:  # double-buffered CBs: a slot is free again once its block's matmul is done
            b.data(mm_nodes[step - 2], r0)
            b.data(mm_nodes[step - 2], r1)
        # without packer L1 accumulation the partials spilled to the intermediate CB are unpacked back
        reload = pm * pn if blk and not packer_l1_acc else 0
        unpacked = nsub * cost.matmul_unpack_work(in0, in1, cfg.sub_h, cfg.sub_w, bw) + \
            cost.unpack_work(DType.BF16, reload)
        up = b.node(unpack, Op.UNPACK, Unit.UNPACKER, unpacked, name=f"unpack{step}")
        b.data(r0, up)
        b.data(r1, up)
        flops = 2.0 * pm * pn * bw * 32 ** 3
        mm = b.node(math, Op.MMA, Unit.FPU, cost.fpu_node_work(flops, nsub * (bw + (2 if reload else 1))),
                    name=f"matmul{step}")
        b.data(up, mm)
        mm_nodes.append(mm)
        last = blk == nblocks - 1
        if packer_l1_acc and nblocks > 1:  # partials accumulated in L1; the last block also packs the result
            work = cost.pack_work(DType.BF16, pm * pn) * (float(hw.packer_l1_acc_cycles) if blk else 1.0)
            work += cost.pack_work(out, pm * pn) if last else 0.0
        else:
            work = cost.pack_work(out if last else DType.BF16, pm * pn)
        pk = b.node(pack, Op.PACK, Unit.PACKER, work, name=f"pack{step}")
        b.data(mm, pk)
        if last:
            tc = TileDesc(Space.GLOBAL, out, (pm * 32, pn * 32), c_name, (row_of, col_of))
            wr = b.node(writer, Op.NOC_WRITE, Unit.NOC, pm * pn * tile_bytes(out), tc, f"out_write{ps}")
            b.data(pk, wr)
            routes.append({"node": wr, "noc": 1, "mcast": "none", "page_bytes": tile_bytes(out), "pages_w": nt,
                           "block": [pm, pn]})
    b.attrs.update({"noc": routes, "cbs": {cb.name: cb.nbytes for cb in cbs}})
    graph = b.build()
    gx, gy = cfg.grid
    ncores = gx * gy if two_d else -(-nt // cfg.per_core_n)
    coords = [(i % gx, i // gx) for i in range(ncores)]
    params = np.array(coords, dtype=np.int64).reshape(-1, 2)
    smem = sum(cb.nbytes for cb in cbs)
    cls = CtaClass(graph, params, ("cx", "cy"), threads=5, regs_per_thread=1, smem_bytes=smem)
    dram = m * k * in0.nbytes + k * n * in1.nbytes + m * n * out.nbytes
    return KernelGraph(name, (cls,), flops=2.0 * m * n * k, dram_bytes=dram,
                       attrs={"grid": cfg.grid, "fidelity": fid.label, "packer_l1_acc": packer_l1_acc,
                              "template": "tensix_matmul_2d_mcast"
                              if two_d else "tensix_matmul_1d_mcast",
                              "config": {"per_core_m": pm, "per_core_n": cfg.per_core_n, "in0_block_w": bw,
                                         "passes": npass, "subblock": [cfg.sub_h, cfg.sub_w]}})
