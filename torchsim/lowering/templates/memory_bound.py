"""Shared machinery of the memory-bound GPU templates (norms.py, elementwise.py, reductions.py): launch shapes,
128-bit vectorised LDG/STG on the LD/ST unit, SIMT work on the FMA pipe, warp-shuffle + shared-memory reductions.

Sits in lowering/templates beside the GEMM family: a builder turns (params, dtype, profile) into a KernelGraph whose
CTA classes hold a few nodes per CTA; DRAM traffic comes from the global tiles' coordinates (one row block per CTA).

Example (a 4096-wide bf16 row: 512 threads with one 16-byte vector each; 256-byte rows: four rows per CTA):
    >>> from torchsim.hwmodels import get_profile
    >>> hw = get_profile("h100-sxm")
    >>> row_launch(16, 4096 * 2, hw), row_launch(16, 256, hw).rows_per_cta
    (RowLaunch(rows_per_cta=1, threads=512, regs_per_thread=32), 4)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from torchsim.graph import Affine, CtaClass, DType, GraphBuilder, Op, Space, TileDesc, TileGraph, Unit
from torchsim.hwmodels.gpu import Arch, GpuProfile

VECTOR_BYTES = 16  # one 128-bit LDG.128 / STG.128 per thread per vector
MAX_WAVES = 4  # simulation budget: a launch of more CTA waves folds consecutive rows into one CTA ...
FOLD_BYTES = 64 * 1024  # ... as long as the folded rows stay this small (big rows keep one CTA per row)
GPU_ARCHS = (Arch.SM80, Arch.SM90, Arch.SM100)


def check_positive(kernel: str, **params: Any) -> None:
    """Raise naming the parameter when a size is not a positive integer."""
    for name, v in params.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
            raise ValueError(f"{kernel}: parameter {name} must be a positive integer, got {v!r}")


def check_gpu(kernel: str, hw: GpuProfile) -> None:
    if getattr(hw, "arch", None) not in GPU_ARCHS:
        valid = ", ".join(a.value for a in GPU_ARCHS)
        raise ValueError(f"{kernel}: this is a GPU template; {hw.name} is {hw.arch.value} (valid: {valid}); "
                         "Tensix kernels come from lowering.templates.tensix")


def simt_work(instructions: float) -> float:
    """FMA-pipe work of `instructions` warp-lane instructions (add, mul, cvt, compare): the pipe counts an FMA as
    2 FLOP per lane per cycle, so a non-FMA instruction occupies one lane-cycle = 2 FLOP of its capacity."""
    return 2.0 * instructions


def resident_ctas(hw: GpuProfile, threads: int, regs_per_thread: int, smem_bytes: int = 0) -> int:
    """CTAs of this shape one SM holds at once (the same limits the engine applies)."""
    limits = [int(hw.max_ctas_per_sm.value), int(hw.max_threads_per_sm.value) // threads,
              int(hw.registers_per_sm.value) // max(1, regs_per_thread * threads)]
    if smem_bytes:
        limits.append(int(hw.smem_per_sm_bytes.value) // smem_bytes)
    return max(1, min(limits))


@dataclass(frozen=True, slots=True)
class RowLaunch:
    """How rows map to CTAs: `rows_per_cta` consecutive rows per CTA of `threads` threads."""

    rows_per_cta: int
    threads: int
    regs_per_thread: int = 32

    @property
    def warps(self) -> int:
        return self.threads // 32


def row_launch(rows: int, row_bytes: float, hw: GpuProfile, *, max_threads: int = 1024,
               regs_per_thread: int = 32) -> RowLaunch:
    """One CTA per row with one 128-bit vector per thread (threads = the row's vectors, rounded to warps, at
    most `max_threads`; longer rows loop, i.e. several vectors per thread). Rows shorter than four warps' worth
    share a CTA of four warps, one or more warps per row. Launches of more than MAX_WAVES full waves fold
    consecutive rows into one CTA up to FOLD_BYTES per CTA (same bytes, fewer CTAs to simulate; the real kernel's
    per-row CTAs would stream the same way behind the shared DRAM queue)."""
    if max_threads % 32 or max_threads < 128:
        raise ValueError(f"row_launch: max_threads must be a multiple of 32 and >= 128, got {max_threads}")
    vectors = max(1, math.ceil(row_bytes / VECTOR_BYTES))
    if vectors >= 128:
        rows_per_cta, threads = 1, min(max_threads, 32 * math.ceil(vectors / 32))
    else:
        warps_per_row = math.ceil(vectors / 32)
        rows_per_cta, threads = max(1, 4 // warps_per_row), 128 if warps_per_row <= 4 else 32 * warps_per_row
    return RowLaunch(fold_rows(rows, min(rows_per_cta, rows), threads, row_bytes, hw, regs_per_thread), threads,
                     regs_per_thread)


def fold_rows(rows: int, rows_per_cta: int, threads: int, row_bytes: float, hw: GpuProfile,
              regs_per_thread: int = 32) -> int:
    """Rows per CTA after folding: launches of more than MAX_WAVES full waves put consecutive rows into one CTA,
    up to FOLD_BYTES per CTA."""
    cap = hw.sms * resident_ctas(hw, threads, regs_per_thread) * MAX_WAVES
    ctas = math.ceil(rows / rows_per_cta)
    if ctas <= cap:
        return rows_per_cta
    fold = min(math.ceil(ctas / cap), max(1, int(FOLD_BYTES // (rows_per_cta * row_bytes))))
    return min(rows, rows_per_cta * fold)


def row_classes(rows: int, launch: RowLaunch, write: Callable[[int], TileGraph]) -> tuple[CtaClass, ...]:
    """CTA classes over `rows`: full blocks of `rows_per_cta` rows, then one CTA for the remainder.

    `write(block_rows)` builds the CTA template; its tiles take the block index from CTA parameter `r` (in blocks
    of the class's own rows: the remainder CTA's block starts at or just past row full x rows_per_cta, on lines
    no other CTA reads, as the real last rows are)."""
    per = launch.rows_per_cta
    full, rest = divmod(rows, per)
    out = []
    if full:
        out.append(CtaClass(write(per), np.arange(full, dtype=np.int64).reshape(-1, 1), ("r",), launch.threads,
                            launch.regs_per_thread))
    if rest:  # its tile's row block: the first of `rest` rows past the full blocks (block `full` of `rest` rows
        # would read rows of the earlier CTAs again, hitting their lines in L1 and L2)
        out.append(CtaClass(write(rest), np.array([[-(-full * per // rest)]], dtype=np.int64), ("r",),
                            launch.threads, launch.regs_per_thread))
    return tuple(out)


def block(r: str = "r", col: int = 0) -> tuple[Affine, Affine]:
    """Coordinates of a (rows, cols) tile: row block from CTA parameter `r`, column block `col`."""
    return (Affine(0, ((r, 1),)), Affine(col, ()))


class StreamWriter:
    """Writes one CTA of a memory-bound kernel: all warps in one execution group, nodes in program order.

    Loads and stores are bulk LDG/STG of a global tile on the LD/ST unit (128-bit vectors; the tile's bytes are the
    node's work); arithmetic is SIMT work on the FMA pipe or MUFU work on the SFU. `after` adds DATA edges.
    """

    def __init__(self, name: str, dtype: DType, warps: int, role: str = "load+compute+store") -> None:
        self.b = GraphBuilder(name, dtype)
        self.warps = warps
        self.g = self.b.group("warps", 0, warps, role=role)

    def _after(self, node: int, after: tuple[int, ...]) -> int:
        for a in after:
            self.b.data(a, node)
        return node

    def load(self, tensor: str, dtype: DType, shape: tuple[int, ...], coord: tuple[Affine, ...], name: str,
             after: tuple[int, ...] = (), port: float = 1.0) -> int:
        """`port`: LD/ST port work per byte (1 for 128-bit vectors; more for narrower accesses, each of which costs
        a whole L1 wavefront however few bytes it carries): the excess occupies the port just before the access,
        the memory traffic stays the tile's bytes."""
        tile = TileDesc(Space.GLOBAL, dtype, shape, tensor, coord)
        after = self._wavefronts(tile.nbytes * (port - 1.0), name, after)
        return self._after(self.b.node(self.g, Op.LDG, Unit.LDST, work=tile.nbytes, tile=tile, name=name), after)

    def _wavefronts(self, extra_bytes: float, name: str, after: tuple[int, ...]) -> tuple[int, ...]:
        """The LD/ST port time narrow accesses take beyond their bytes: port work (no memory traffic) that the
        access then waits for; returns the access's new dependencies."""
        if extra_bytes <= 0:
            return after
        tile = TileDesc(Space.SHARED, DType.BF16, (max(1, int(extra_bytes // 2)),), f"{name}_wavefronts")
        return (self._after(self.b.node(self.g, Op.LDS, Unit.LDST, work=extra_bytes, tile=tile,
                                        name=f"{name}.wavefronts"), after),)

    def reload(self, tensor: str, dtype: DType, shape: tuple[int, ...], coord: tuple[Affine, ...], name: str,
               after: tuple[int, ...] = (), l1_hit: bool = True) -> int:
        """Read again a tile this CTA loaded before: an L1 hit on the LD/ST unit, or (too big for L1) a global
        load that L2 may still hold."""
        if not l1_hit:
            return self.load(tensor, dtype, shape, coord, name, after)
        tile = TileDesc(Space.L1, dtype, shape, tensor)
        return self._after(self.b.node(self.g, Op.LDG, Unit.LDST, work=tile.nbytes, tile=tile, name=name), after)

    def store(self, tensor: str, dtype: DType, shape: tuple[int, ...], coord: tuple[Affine, ...], name: str,
              after: tuple[int, ...] = (), port: float = 1.0) -> int:
        tile = TileDesc(Space.GLOBAL, dtype, shape, tensor, coord)
        after = self._wavefronts(tile.nbytes * (port - 1.0), name, after)
        return self._after(self.b.node(self.g, Op.STG, Unit.LDST, work=tile.nbytes, tile=tile, name=name), after)

    def simt(self, instructions: float, name: str, after: tuple[int, ...] = (), op: Op = Op.ELEMENTWISE) -> int:
        return self._after(self.b.node(self.g, op, Unit.FMA, work=simt_work(max(1.0, instructions)), name=name),
                           after)

    def sfu(self, ops: float, name: str, after: tuple[int, ...] = ()) -> int:
        return self._after(self.b.node(self.g, Op.EXP, Unit.SFU, work=max(1.0, ops), name=name), after)

    def block_reduce(self, name: str, after: tuple[int, ...] = (), values: int = 1, lanes_per_row: int = 32) -> int:
        """Warp shuffles (log2 of the lanes per row), then, with more than one warp per row, partials through
        shared memory: STS, barrier, LDS, a last shuffle round (CUB BlockReduce)."""
        steps = max(1, math.ceil(math.log2(max(2, min(lanes_per_row, 32)))))
        node = self.simt(2.0 * steps * values * 32 * self.warps, f"{name}.shfl", after, Op.REDUCE)
        if lanes_per_row > 32:
            smem = TileDesc(Space.SHARED, DType.FP32, (self.warps, values), f"{name}_smem")
            sts = self._after(self.b.node(self.g, Op.STS, Unit.LDST, work=smem.nbytes, tile=smem,
                                          name=f"{name}.sts"), (node,))
            lds = self._after(self.b.node(self.g, Op.LDS, Unit.LDST, work=smem.nbytes, tile=smem,
                                          name=f"{name}.lds"), (sts,))
            node = self.simt(2.0 * steps * values * 32, f"{name}.final", (lds,), Op.REDUCE)
        return node

    def build(self) -> TileGraph:
        return self.b.build()

