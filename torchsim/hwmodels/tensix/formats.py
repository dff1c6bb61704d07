"""Tensix data formats and math fidelity: what a tile of each format weighs and how many FPU phases it costs.

Part of the Tensix hardware model (torchsim.hwmodels.tensix); templates ask these helpers which formats a unit
accepts and how many fidelity phases a matmul runs, and raise the errors a user sees for bad names.
"""

from __future__ import annotations

from enum import Enum

from torchsim.graph.kinds import DType

TILE_ROWS = 32
TILE_COLS = 32
TILE_ELEMENTS = TILE_ROWS * TILE_COLS
FACE_ROWS = 16  # a 32x32 tile is four 16x16 faces (facts.csv Wormhole-B0 formats.tile_shape)

TILE_SOURCE = "facts.csv Wormhole-B0 (n150 / n300) formats.tile_shape / formats.tile_bytes"


class MathFidelity(Enum):
    """Matrix-unit fidelity: each phase multiplies another slice of the mantissas (value = number of phases).

    Source: tt-isa-documentation WormholeB0/TensixTile/TensixCoprocessor/SrcASrcB.md 'Fidelity phases' and the
    cycles per 32x32x32 tile (16/32/48/64) of tt-metal tech_reports/GEMM_FLOPS/GEMM_FLOPS.md 'Utilization'.
    """

    LOFI = 1
    HIFI2 = 2
    HIFI3 = 3
    HIFI4 = 4

    @property
    def phases(self) -> int:
        return int(self.value)

    @property
    def label(self) -> str:
        return {1: "LoFi", 2: "HiFi2", 3: "HiFi3", 4: "HiFi4"}[self.value]

    @classmethod
    def parse(cls, name: str | MathFidelity) -> MathFidelity:
        """`MathFidelity.parse("hifi2")`; an unknown name raises ValueError listing the valid ones."""
        if isinstance(name, MathFidelity):
            return name
        key = str(name).strip().lower().replace("-", "").replace("_", "")
        for f in cls:
            if f.label.lower() == key:
                return f
        valid = ", ".join(f.label for f in cls)
        raise ValueError(f"unknown math fidelity {name!r}; valid: {valid}")


# Formats the unpacker reads from L1 and the packer writes (tt-metal names). FP32 and FP16 are accepted as
# activations/outputs; the block formats are the weight formats of tt-metal's model configurations.
# Source: facts.csv Wormhole-B0 formats.supported_formats (SrcASrcB.md 'Data types', Dst.md).
TENSIX_FORMATS: frozenset[DType] = frozenset(
    {DType.BF16, DType.BFP8_B, DType.BFP4_B, DType.FP32, DType.FP16, DType.TF32})

# Fidelity a format needs for a "reasonable" result (SrcASrcB.md 'Fidelity phases (floating-point)': BFP4/BFP8:
# 1 phase; BF16: 2; TF32/FP16/FP32: 4), which is what tt-metal's benchmarks pair them with (bf16 HiFi2,
# bfp8_b/bfp4_b LoFi, GEMM_FLOPS.md tables).
_DEFAULT_FIDELITY = {
    DType.BFP4_B: MathFidelity.LOFI, DType.BFP8_B: MathFidelity.LOFI, DType.BF16: MathFidelity.HIFI2,
    DType.FP16: MathFidelity.HIFI4, DType.TF32: MathFidelity.HIFI4, DType.FP32: MathFidelity.HIFI4,
}


def check_format(dtype: DType, where: str = "tensor") -> DType:
    """Raise a ValueError naming `where` when the Tensix unpacker/packer cannot hold `dtype`."""
    if dtype not in TENSIX_FORMATS:
        valid = ", ".join(sorted(d.name.lower() for d in TENSIX_FORMATS))
        raise ValueError(f"{where}: data format {dtype.name.lower()} is not supported by the Tensix "
                         f"unpacker/packer; valid: {valid}")
    return dtype


def default_fidelity(dtype: DType) -> MathFidelity:
    return _DEFAULT_FIDELITY[check_format(dtype)]


def tile_bytes(dtype: DType) -> int:
    """Bytes of one 32x32 tile in L1/DRAM: bf16 2048, bfp8_b 1088 (1024 + 64 exponents), bfp4_b 576, fp32 4096."""
    return round(TILE_ELEMENTS * check_format(dtype).nbytes)


def tiles(n: int) -> int:
    """Number of 32-wide tiles that cover `n` elements (a padded dimension)."""
    if n <= 0:
        raise ValueError(f"dimension {n} must be > 0")
    return -(-int(n) // TILE_ROWS)
