"""One Tensix core as the engine sees it: its units (unpacker, matrix FPU, SFPU, packer, NoC front end), the
per-tile costs templates charge them, the Dst register capacity and the L1 budget of circular buffers.

Part of torchsim.hwmodels.tensix. Templates (torchsim.lowering.templates.tensix) size their nodes with these
helpers; the engine builds one pipeline per unit per core from `unit_specs`. Work units: FPU nodes carry
FLOPs (matmul) or FLOP-equivalents, unpacker/packer/NoC nodes bytes, SFPU nodes lane-instructions.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchsim.graph.kinds import DType, Unit
from torchsim.hwmodels.quantity import Quantity, assumed, derived
from torchsim.hwmodels.tensix.formats import TILE_ELEMENTS, MathFidelity, check_format, tile_bytes
from torchsim.hwmodels.tensix.spec import TensixSpec

# SFPU instructions per 32-datum vector for tt-metal's SFPU functions (assumed: the LLK sources were not read;
# counts are the order of their polynomial/Newton implementations). Each op also loads and stores Dst.
SFPU_OPS: dict[str, Quantity] = {
    "copy": assumed(0, "instr/vector", "assumed: no arithmetic beyond SFPLOAD/SFPSTORE"),
    "add": assumed(1, "instr/vector", "assumed: one SFPADD"),
    "mul": assumed(1, "instr/vector", "assumed: one SFPMUL"),
    "exp": assumed(12, "instr/vector", "assumed: range reduction + polynomial"),
    "recip": assumed(10, "instr/vector", "assumed: Newton-Raphson reciprocal"),
    "rsqrt": assumed(12, "instr/vector", "assumed: Newton-Raphson inverse square root"),
    "silu": assumed(26, "instr/vector", "assumed: exp + reciprocal + multiply"),
    "gelu": assumed(20, "instr/vector", "assumed: polynomial/tanh approximation"),
    "max": assumed(3, "instr/vector", "assumed: compare, conditional move of value and index (running argmax)"),
    "topk": assumed(64, "instr/vector", "assumed: ttnn.topk's bitonic network over a 64-wide row of gate logits, "
                    "log2(64) x (log2(64) + 1) / 2 = 21 compare-exchange stages of ~3 SFPU instructions (load, "
                    "SFPSWAP, store) per 32-datum vector (the LLK sources were not read)"),
    "tanh": derived(1, "instr/vector", "tenstorrent/tt-metal tt_metal/hw/ckernels/wormhole_b0/metal/llk_api/llk_sfpu/"
                    "llk_math_eltwise_unary_sfpu_tanh.h (fast_and_approx = true by default) -> tt-llk "
                    "ckernel_sfpu_tanh.h `_calculate_tanh_`: one lut() (SFPLUT, three piecewise-linear segments "
                    "loaded by `_init_tanh_`) per 32-datum vector between its load and store"),
}
SFPU_LOAD_STORE = 2  # SFPLOAD + SFPSTORE per vector (facts.csv Wormhole-B0 sfpu.sfpload_granularity)
VECTORS_PER_TILE = TILE_ELEMENTS // 32  # 32 datums per SFPLOAD (facts.csv sfpu.sfpload_granularity)


def unit_specs(hw: TensixSpec, fidelity: MathFidelity) -> dict[int, tuple[str, float, int, bool]]:
    """Per-core pipelines: unit -> (name, work per cycle, latency cycles, queued)."""
    return {
        # one pipeline for both unpackers: they share L1's read bandwidth (unpack_l1_bytes_per_clk)
        Unit.UNPACKER: ("unpacker", float(hw.unpack_l1_bytes_per_clk), int(hw.unpack_setup_cycles), False),
        Unit.FPU: ("fpu", float(hw.fpu_flop_per_clk_per_phase) / fidelity.phases, int(hw.fpu_latency_cycles), False),
        Unit.SFPU: ("sfpu", float(hw.sfpu_lanes), int(hw.sfpu_latency_cycles), False),
        Unit.PACKER: ("packer", float(hw.packers) * float(hw.packer_bytes_per_clk), 2, False),
        Unit.NOC: ("noc", 2 * float(hw.noc_niu_bytes_per_clk), 0, True),  # NIU front end; links in NocModel
    }


@dataclass(frozen=True, slots=True)
class CoreCosts:
    """Per-tile costs on one core of `hw` at `fidelity` (cycles), as templates charge them."""

    hw: TensixSpec
    fidelity: MathFidelity

    @property
    def fpu_flop_per_clk(self) -> float:
        return float(self.hw.fpu_flop_per_clk_per_phase) / self.fidelity.phases

    def matmul_tile_cycles(self) -> float:
        """32x32x32 tile matmul: 16 MVMULs x fidelity phases (16/32/48/64 cycles)."""
        return 2 * TILE_ELEMENTS * 32 / self.fpu_flop_per_clk

    def unpack_work(self, dtype: DType, ntiles: float) -> float:
        """Unpacker node work: the tiles' bytes, fetched at the unpackers' shared L1 rate. The 2-cycle address
        setup of each UNPACR overlaps the previous UNPACR's fetch ('once these cycles are complete, execution
        proceeds in a pipelined fashion', UNPACR_Regular.md §Performance), so back-to-back unpacks pay it once
        (the pipeline's latency, `unit_specs`), not per face."""
        return ntiles * tile_bytes(check_format(dtype, "unpacker input"))

    def matmul_unpack_work(self, in0: DType, in1: DType, sub_h: int, sub_w: int, kt: float) -> float:
        """Unpacker work of one sub_h x sub_w output subblock over `kt` inner tiles.

        SrcA and SrcB each hold one 32x32 tile per bank (64 rows x 16 datums, tt-isa-documentation
        WormholeB0/TensixTile/TensixCoprocessor/SrcASrcB.md), and a 32x32x32 tile multiply reads one tile of
        each. So per inner tile the operand along the subblock's shorter side is unpacked once per tile of that
        side and the other operand once per tile multiply: min(h,w) + h*w tiles, not h + w."""
        h, w = int(sub_h), int(sub_w)
        if h <= w:  # in0 (SrcB) held, in1 (SrcA) re-unpacked for every tile multiply
            return kt * (self.unpack_work(in0, h) + self.unpack_work(in1, h * w))
        return kt * (self.unpack_work(in1, w) + self.unpack_work(in0, h * w))

    def pack_work(self, dtype: DType, ntiles: float) -> float:
        return ntiles * tile_bytes(check_format(dtype, "packer output"))

    def sfpu_work(self, op: str, ntiles: float) -> float:
        """SFPU lane-instructions for `op` over `ntiles` tiles (32 lanes per cycle)."""
        if op not in SFPU_OPS:
            raise ValueError(f"SFPU op {op!r} is not modelled; known: {', '.join(sorted(SFPU_OPS))}")
        per_vector = float(SFPU_OPS[op]) + SFPU_LOAD_STORE
        return ntiles * VECTORS_PER_TILE * per_vector * float(self.hw.sfpu_lanes)

    def trisc_cycles(self, llk_calls: float) -> float:
        """RISC-V time of the TRISC driving `llk_calls` LLK API calls (pushing their Tensix instructions)."""
        return llk_calls * float(self.hw.llk_call_cycles)

    def fpu_node_work(self, flops: float, llk_calls: float) -> float:
        """FPU node work: the FLOPs, or the TRISC issue time in FLOP-equivalents when the thread is slower."""
        return max(flops, self.trisc_cycles(llk_calls) * self.fpu_flop_per_clk)


def dst_tiles(hw: TensixSpec, accum: DType = DType.BF16, half_sync: bool = True) -> int:
    """Output tiles one math pass can hold in Dst (32 KiB): 16 bf16 / 8 fp32, halved when double-buffered."""
    per_tile = TILE_ELEMENTS * (4 if accum is DType.FP32 else 2)
    n = int(float(hw.dst_bytes) // per_tile)
    return n // 2 if half_sync else n


@dataclass(frozen=True, slots=True)
class CircularBuffer:
    """An L1 circular buffer of a Tensix kernel: `pages` tiles of `dtype`."""

    name: str
    dtype: DType
    pages: int

    @property
    def nbytes(self) -> int:
        return self.pages * tile_bytes(check_format(self.dtype, f"circular buffer {self.name!r}"))


def check_l1(hw: TensixSpec, kernel: str, buffers: list[CircularBuffer]) -> int:
    """Total L1 of `buffers`; raises ValueError naming the buffer that overflows L1 and the bytes."""
    budget = int(hw.l1_bytes_per_core) - int(hw.l1_reserved_bytes)
    used = 0
    for cb in buffers:
        if used + cb.nbytes > budget:
            listing = ", ".join(f"{b.name}={b.nbytes} B" for b in buffers)
            raise ValueError(f"{kernel}: L1 overflow on {hw.name}: circular buffer {cb.name!r} "
                             f"({cb.pages} tiles of {cb.dtype.name.lower()} = {cb.nbytes} B) brings the core "
                             f"to {used + cb.nbytes} B, over the {budget} B of L1 available to kernels "
                             f"({int(hw.l1_bytes_per_core)} B - {int(hw.l1_reserved_bytes)} B reserved); "
                             f"buffers: {listing}")
        used += cb.nbytes
    return used
