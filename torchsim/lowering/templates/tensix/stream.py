"""Tensix streaming kernels (eltwise binary/unary, SiLU-and-mul, RMSNorm, softmax, RoPE, embedding) as tt-metal
writes them: tiles split over the cores; per core a reader streams blocks of tiles from interleaved DRAM into
double-buffered CBs, the compute kernel unpacks, runs FPU (eltwise/reduce/bcast) and SFPU work, packs, and the
writer streams the result back. KernelCall -> KernelGraph for Arch.TENSIX.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from torchsim.graph import CtaClass, DType, GraphBuilder, KernelGraph, Op, Space, TileDesc, Unit, aff
from torchsim.hwmodels.tensix.core import CircularBuffer, CoreCosts, check_l1
from torchsim.hwmodels.tensix.formats import TILE_ELEMENTS, MathFidelity, check_format, tile_bytes
from torchsim.hwmodels.tensix.profiles import TensixProfile
from torchsim.lowering.templates.tensix.matmul import parse_grid

MAX_BLOCKS_PER_CORE = 16


@dataclass(frozen=True, slots=True)
class TileWork:
    """What the compute kernel does per output tile: FPU eltwise ops (ELWADD-class, ELWMUL-class), tile
    matmuls (e.g. RoPE's rotation matrix), reduce tiles, and SFPU functions."""

    adds: float = 0.0
    muls: float = 0.0
    matmuls: float = 0.0
    reduces: float = 0.0
    sfpu: tuple[tuple[str, float], ...] = ()  # (op, tiles of it per output tile)
    llk_calls: float = 1.0


def stream_kernel(name: str, tiles_total: int, inputs: list[tuple[str, DType, float]], out: DType,
                  work: TileWork, hw: TensixProfile, *, grid: object = None, flops: float = 0.0,
                  fidelity: MathFidelity = MathFidelity.HIFI4, extra_read_bytes: float = 0.0) -> KernelGraph:
    """`tiles_total` output tiles; `inputs` = (tensor, dtype, tiles read per output tile).

    Example:
        >>> from torchsim.hwmodels.tensix.profiles import wormhole_n150
        >>> kg = stream_kernel("add", 4096, [("a", DType.BF16, 1), ("b", DType.BF16, 1)], DType.BF16,
        ...                    TileWork(adds=1), wormhole_n150())
        >>> kg.classes[0].count
        64
    """
    for t, dt, _ in inputs:
        check_format(dt, f"{name} input {t!r}")
    check_format(out, f"{name} output")
    gx, gy = parse_grid(grid, hw)
    cores = max(1, min(gx * gy, tiles_total))
    per_core = -(-tiles_total // cores)
    block = max(1, min(8, per_core), -(-per_core // MAX_BLOCKS_PER_CORE))
    nblocks = -(-per_core // block)
    cbs = [CircularBuffer(f"in_{t}", dt, max(1, int(2 * block * r))) for t, dt, r in inputs]
    cbs.append(CircularBuffer("out", out, 2 * block))
    check_l1(hw, name, cbs)
    cost = CoreCosts(hw, fidelity)
    rate = cost.fpu_flop_per_clk
    fpu_cycles = (work.adds * TILE_ELEMENTS / float(hw.fpu_eltwise_add_datums_per_clk)
                  + work.muls * TILE_ELEMENTS / float(hw.fpu_eltwise_mul_datums_per_clk) * fidelity.phases
                  + work.matmuls * cost.matmul_tile_cycles()
                  + work.reduces * 2 * TILE_ELEMENTS / float(hw.fpu_reduce_flop_per_clk))
    b = GraphBuilder(f"tensix_{name}_b{block}", out)
    reader = b.group("reader", role="NCRISC")
    writer = b.group("writer", role="BRISC")
    unpack, math, pack = b.group("unpack", role="TRISC0"), b.group("math", role="TRISC1"), b.group("pack",
                                                                                                   role="TRISC2")
    routes: list[dict[str, object]] = []
    ups: list[int] = []
    pages = -(-tiles_total // 1)
    for blk in range(nblocks):
        where = aff(blk, cx=nblocks, cy=gx * nblocks)
        reads = []
        for t, dt, r in inputs:
            nbytes = block * r * tile_bytes(dt)
            if nbytes <= 0:
                continue
            tile = TileDesc(Space.GLOBAL, dt, (32, max(1, int(block * r)) * 32), t, (aff(0), where))
            rd = b.node(reader, Op.NOC_READ, Unit.NOC, nbytes, tile, f"read_{t}{blk}")
            routes.append({"node": rd, "noc": 0, "mcast": "none", "page_bytes": tile_bytes(dt),
                           "pages_w": max(pages, 1), "block": [1, max(1, int(block * r))]})
            if blk >= 2:
                b.data(ups[blk - 2], rd)
            reads.append(rd)
        up = b.node(unpack, Op.UNPACK, Unit.UNPACKER,
                    sum(cost.unpack_work(dt, block * r) for _, dt, r in inputs) or 1.0, name=f"unpack{blk}")
        for rd in reads:
            b.data(rd, up)
        ups.append(up)
        last = up
        if fpu_cycles > 0:
            fp = b.node(math, Op.ELEMENTWISE, Unit.FPU,
                        cost.fpu_node_work(block * fpu_cycles * rate, block * work.llk_calls), name=f"fpu{blk}")
            b.data(last, fp)
            last = fp
        for op, per in work.sfpu:
            sf = b.node(math, Op.ELEMENTWISE, Unit.SFPU, cost.sfpu_work(op, block * per), name=f"sfpu_{op}{blk}")
            b.data(last, sf)
            last = sf
        pk = b.node(pack, Op.PACK, Unit.PACKER, cost.pack_work(out, block), name=f"pack{blk}")
        b.data(last, pk)
        wt = TileDesc(Space.GLOBAL, out, (32, block * 32), f"{name}_out", (aff(0), where))
        wr = b.node(writer, Op.NOC_WRITE, Unit.NOC, block * tile_bytes(out), wt, f"write{blk}")
        routes.append({"node": wr, "noc": 1, "mcast": "none", "page_bytes": tile_bytes(out),
                       "pages_w": max(pages, 1), "block": [1, block]})
        b.data(pk, wr)
    b.attrs.update({"noc": routes, "cbs": {cb.name: cb.nbytes for cb in cbs}})
    graph = b.build()
    coords = np.array([(i % gx, i // gx) for i in range(cores)], dtype=np.int64).reshape(-1, 2)
    cls = CtaClass(graph, coords, ("cx", "cy"), threads=5, regs_per_thread=1,
                   smem_bytes=sum(cb.nbytes for cb in cbs))
    dram = sum(tiles_total * r * tile_bytes(dt) for _, dt, r in inputs) + tiles_total * tile_bytes(out)
    used = (min(gx, cores), -(-cores // gx))
    return KernelGraph(name, (cls,), flops=flops, dram_bytes=dram + extra_read_bytes,
                       attrs={"grid": used, "fidelity": fidelity.label, "template": f"tensix_stream_{name}",
                              "tiles_per_core": per_core, "block": block})
