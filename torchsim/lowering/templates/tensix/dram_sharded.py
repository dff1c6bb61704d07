"""Tensix DRAM-sharded matmul, tt-metal's decode matmul (MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig):
the weights are width-sharded over the DRAM banks and ONE worker core per bank, placed next to it, streams its
bank's shard; the activation is width-sharded in the L1 of `storage` cores, each of which multicasts its K blocks
to the workers in turn. KernelCall -> KernelGraph for Arch.TENSIX.

Structure from tt-metal ttnn/cpp/ttnn/operations/matmul/device/factory/
matmul_multicore_reuse_mcast_dram_sharded_program_factory.cpp (workers = get_optimal_dram_bank_to_logical_worker_
assignment, per_core_N_compute = ceil(N / banks) widened to whole subblocks, in1 CB triple-buffered, in0 double-
buffered, packer L1 accumulation across K blocks) and models/tt_transformers/tt/model_config.py (dram_matmul_config:
in0_block_w = largest divisor <= 8 of K tiles / storage cores). With only one worker per bank (12 on Wormhole, 8 on
Blackhole) the math of the decode matmuls runs on few cores: tt_transformers' attention.py notes they are
"otherwise flop-bound" at HiFi4.
"""

from __future__ import annotations

import numpy as np

from torchsim.graph import CtaClass, DType, GraphBuilder, KernelGraph, Op, Space, TileDesc, Unit, aff
from torchsim.hwmodels.tensix.core import CircularBuffer, CoreCosts, check_l1
from torchsim.hwmodels.tensix.formats import MathFidelity, check_format, default_fidelity, tile_bytes, tiles
from torchsim.hwmodels.tensix.noc import NocId, NocTopology
from torchsim.hwmodels.tensix.profiles import XY, TensixProfile

MAX_STORAGE_CORES = 64  # tt_transformers' find_grid_k_n searches grids up to 8x8
READ_NOC = NocId.NOC0  # in1 (weights) reads: preferred_noc_for_dram_read; data runs +x/+y from the bank
MCAST_NOC = NocId.NOC1  # in0 multicast from the storage cores: preferred_noc_for_dram_write


def bank_workers(hw: TensixProfile, noc: NocId = READ_NOC) -> list[tuple[int, int]]:
    """Logical (x, y) of the reader of each DRAM bank: the free compute core the bank's data reaches in the
    fewest hops on `noc` (tt-metal's optimal DRAM-bank-to-worker assignment places readers next to their bank so
    that no two read routes overlap; Saturating_DRAM_bandwidth.md)."""
    cols = sorted({x for x, _ in hw.worker_xy})
    rows = sorted({y for _, y in hw.worker_xy})
    topo = NocTopology(int(hw.noc_grid_x), int(hw.noc_grid_y))
    free = [(cx, cy) for cy in range(len(rows)) for cx in range(len(cols))]
    out: list[tuple[int, int]] = []
    for bank in hw.dram_bank_xy:
        best = min(free, key=lambda c: (topo.hops(bank, (cols[c[0]], rows[c[1]]), noc), c[1], c[0]))
        free.remove(best)
        out.append(best)
    return out


def storage_cores(kt: int, nt: int, limit: int) -> int:
    """tt_transformers' find_grid_k_n: the most cores (<= limit) dividing both K and N tiles."""
    return max(c for c in range(1, min(limit, MAX_STORAGE_CORES) + 1) if kt % c == 0 and nt % c == 0)


def subblock_w(pm: int, pn: int, fp32_acc: bool) -> tuple[int, int]:
    """(subblock width, per-core N rounded up to whole subblocks), as the program factory widens it."""
    cap = 4 if fp32_acc else 8  # Dst tiles in half-sync mode (core.dst_tiles): 4 fp32 / 8 bf16
    w = max(d for d in range(1, pn + 1) if pn % d == 0 and pm * d <= cap)
    if pm == 1:
        nsub = pn // w
        for cand in range(w + 1, cap + 1):
            if -(-pn // cand) < nsub:
                w, nsub = cand, -(-pn // cand)
    return w, -(-pn // w) * w


def dram_sharded_matmul(m: int, n: int, k: int, in0: DType, hw: TensixProfile, *, in1: DType | None = None,
                        out: DType | None = None, fidelity: MathFidelity | str | None = None,
                        fp32_acc: bool = False, cores: int | None = None, name: str = "matmul") -> KernelGraph:
    """(M x K) @ (K x N) with K x N width-sharded over `hw`'s DRAM banks.

    Example:
        >>> from torchsim.hwmodels.tensix.profiles import wormhole_n150
        >>> kg = dram_sharded_matmul(32, 4096, 4096, DType.BF16, wormhole_n150(), in1=DType.BFP8_B)
        >>> kg.attrs["config"]["workers"], kg.attrs["config"]["per_core_n"]
        (12, 11)
    """
    in1 = in1 or in0
    out = out or in0
    for dt, what in ((in0, "in0 (activations)"), (in1, "in1 (weights)"), (out, "output")):
        check_format(dt, f"matmul {name!r} {what}")
    fid = MathFidelity.parse(fidelity) if fidelity else default_fidelity(in1 if in1 != DType.BF16 else in0)
    mt, nt, kt = tiles(m), tiles(n), tiles(k)
    banks = int(hw.dram_banks)
    ncores = cores or storage_cores(kt, nt, hw.sms)
    if kt % ncores:
        raise ValueError(f"matmul {name!r}: K = {kt} tiles does not split over {ncores} storage cores")
    bw = max(d for d in range(1, 9) if (kt // ncores) % d == 0)
    nblocks = kt // bw
    per_shard = nblocks // ncores
    pn = -(-nt // banks)
    workers = -(-nt // pn)  # banks holding only padding get no worker (the factory pops them)
    sub_w, pn_c = subblock_w(mt, pn, fp32_acc)
    nsub = pn_c // sub_w
    acc = DType.FP32 if fp32_acc else DType.BF16
    cbs = [CircularBuffer("in0", in0, 2 * mt * bw), CircularBuffer("in1", in1, 3 * pn * bw),
           CircularBuffer("out", out, mt * pn_c)]
    if nblocks > 1:
        cbs.append(CircularBuffer("interm", acc, mt * pn_c))
    check_l1(hw, f"matmul {name!r}", cbs)
    cost = CoreCosts(hw, fid)
    gx = hw.grid[0]
    b = GraphBuilder(f"tensix_dram_sharded_{mt}x{pn}x{bw}_{fid.label}", in0)
    reader = b.group("reader", role="NCRISC: in0 receiver (multicast from the storage cores)")
    writer = b.group("writer", role="BRISC: in1 reader from its own DRAM bank, output writer")
    unpack, math, pack = (b.group(g, role=r) for g, r in (("unpack", "TRISC0"), ("math", "TRISC1"),
                                                           ("pack", "TRISC2")))
    routes: list[dict[str, object]] = []
    mm: list[int] = []
    pk = -1
    for blk in range(nblocks):
        s = blk // per_shard
        t0 = TileDesc(Space.GLOBAL, in0, (mt * 32, bw * 32), "A_sharded", (aff(0), aff(blk)))
        r0 = b.node(reader, Op.NOC_READ, Unit.NOC, mt * bw * tile_bytes(in0), t0, f"in0_block{blk}")
        routes.append({"node": r0, "noc": int(MCAST_NOC), "mcast": "all", "src": "l1", "peer": [s % gx, s // gx],
                       "page_bytes": tile_bytes(in0), "pages_w": kt, "block": [mt, bw]})
        t1 = TileDesc(Space.GLOBAL, in1, (bw * 32, pn * 32), "B_dram_sharded", (aff(blk), aff(0, bank=1)))
        r1 = b.node(writer, Op.NOC_READ, Unit.NOC, pn * bw * tile_bytes(in1), t1, f"in1_block{blk}")
        routes.append({"node": r1, "noc": int(READ_NOC), "mcast": "none", "bank_of_cta": True,
                       "page_bytes": tile_bytes(in1), "pages_w": pn, "block": [bw, pn]})
        if blk >= 2:
            b.data(mm[blk - 2], r0)
        if blk >= 3:  # in1 CB holds three blocks
            b.data(mm[blk - 3], r1)
        up = b.node(unpack, Op.UNPACK, Unit.UNPACKER,
                    cost.unpack_work(in0, nsub * mt * bw) + cost.unpack_work(in1, pn_c * bw), name=f"unpack{blk}")
        b.data(r0, up)
        b.data(r1, up)
        flops = 2.0 * mt * pn_c * bw * 32 ** 3
        mm.append(b.node(math, Op.MMA, Unit.FPU, cost.fpu_node_work(flops, nsub * (bw + 2)), name=f"matmul{blk}"))
        b.data(up, mm[-1])
        last = blk == nblocks - 1
        # packer L1 accumulation: every K block packs the partial sums into the intermediate CB, each 16 B after
        # the first block as a read-modify-write accumulate (packer_l1_acc_cycles per write instead of one)
        work = cost.pack_work(acc, mt * pn_c) * (float(hw.packer_l1_acc_cycles) if blk else 1.0)
        if last and nblocks > 1:
            work += cost.pack_work(out, mt * pn_c)  # the final result packed out of the accumulator
        pk = b.node(pack, Op.PACK, Unit.PACKER, work, name=f"pack{blk}")
        b.data(mm[-1], pk)
    tc = TileDesc(Space.GLOBAL, out, (mt * 32, pn * 32), "C_sharded", (aff(0), aff(0, bank=1)))
    wr = b.node(writer, Op.NOC_WRITE, Unit.NOC, mt * pn * tile_bytes(out), tc, "out_reshard")
    b.data(pk, wr)
    routes.append({"node": wr, "noc": 0, "mcast": "none", "src": "l1", "peer": [0, 0],
                   "page_bytes": tile_bytes(out), "pages_w": nt, "block": [mt, pn]})
    b.attrs.update({"noc": routes, "cbs": {cb.name: cb.nbytes for cb in cbs}})
    graph = b.build()
    placed: list[XY] = bank_workers(hw)[:workers]
    params = np.array([(cx, cy, i) for i, (cx, cy) in enumerate(placed)], dtype=np.int64).reshape(-1, 3)
    cls = CtaClass(graph, params, ("cx", "cy", "bank"), threads=5, regs_per_thread=1,
                   smem_bytes=sum(cb.nbytes for cb in cbs))
    dram = k * n * in1.nbytes
    return KernelGraph(name, (cls,), flops=2.0 * m * n * k, dram_bytes=dram,
                       attrs={"grid": hw.grid, "fidelity": fid.label, "template": "tensix_matmul_dram_sharded",
                              "config": {"workers": workers, "per_core_n": pn, "per_core_n_compute": pn_c,
                                         "subblock_w": sub_w, "in0_block_w": bw, "storage_cores": ncores,
                                         "fp32_acc": fp32_acc}})
