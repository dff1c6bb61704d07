"""Enumerations of the tile-graph IR: operation kinds, hardware units, storage spaces, edge kinds, dtypes.

The IR sits between lowering (which builds graphs) and the engine (which runs them); these enums are the
vocabulary both sides share. Integer values are stored in numpy arrays, so they are stable and dense.
"""

from __future__ import annotations

from enum import IntEnum


class Op(IntEnum):
    """What a node does. Grouped by the unit family that usually serves it."""

    # tensor-core matrix multiply-accumulate (mma.sync, wgmma, tcgen05, Tensix MVMUL)
    MMA = 0
    # SIMT arithmetic on CUDA cores / SFPU
    ELEMENTWISE = 1
    REDUCE = 2
    EXP = 3  # transcendental, SFU (MUFU.EX2)
    # data movement: global <-> shared / register
    TMA_LOAD = 10
    TMA_STORE = 11
    CP_ASYNC = 12  # sm80 LDGSTS: global -> shared, bypassing registers
    LDG = 13
    STG = 14
    LDS = 15
    STS = 16
    TMEM_LOAD = 17  # tcgen05.ld: TMEM -> registers
    TMEM_STORE = 18
    # synchronisation
    BARRIER_ARRIVE = 30
    BARRIER_WAIT = 31
    # Tensix
    NOC_READ = 40
    NOC_WRITE = 41
    UNPACK = 42
    PACK = 43


class Unit(IntEnum):
    """The per-SM (per-core) hardware unit that serves a node."""

    NONE = 0  # issue-only: barriers, zero-cost bookkeeping
    TENSOR = 1
    FMA = 2  # CUDA cores (FP32 pipe)
    SFU = 3  # special function unit (MUFU)
    LDST = 4  # load/store unit: L1 and shared memory path
    TMA = 5
    TMEM = 6
    # Tensix units
    FPU = 10
    SFPU = 11
    UNPACKER = 12
    PACKER = 13
    NOC = 14


class Space(IntEnum):
    """Where a tile lives."""

    GLOBAL = 0
    SHARED = 1
    REGISTER = 2
    TMEM = 3
    DSMEM = 4
    L1 = 5
    DST = 6


class Edge(IntEnum):
    """DATA edges release when the producer completes; ORDER edges when the source issues."""

    DATA = 0
    ORDER = 1


class DType(IntEnum):
    FP32 = 0
    TF32 = 1
    BF16 = 2
    FP16 = 3
    FP8_E4M3 = 4
    FP8_E5M2 = 5
    INT8 = 6
    INT32 = 7
    INT64 = 8
    BFP8_B = 9
    BFP4_B = 10
    # 4-bit element types of the quantised weight/activation formats (lowering/quant.py): packed two per byte,
    # their scales are separate tensors (a format's scale bytes are counted where the format is)
    INT4 = 11
    FP4_E2M1 = 12

    @property
    def bits(self) -> float:
        return _BITS[self]

    @property
    def nbytes(self) -> float:
        return _BITS[self] / 8.0

    @property
    def is_fp8(self) -> bool:
        return self in (DType.FP8_E4M3, DType.FP8_E5M2)

    @classmethod
    def parse(cls, name: str) -> DType:
        key = name.strip().lower().replace("-", "_")
        if key in _ALIASES:
            return _ALIASES[key]
        valid = ", ".join(sorted(_ALIASES))
        raise ValueError(f"unknown dtype {name!r}; valid: {valid}")


# Block floating point: bfp8_b = 8 bits/datum + one 8-bit exponent per 16 datums (tile 1088 B / 1024 datums).
_BITS = {
    DType.FP32: 32.0, DType.TF32: 32.0, DType.BF16: 16.0, DType.FP16: 16.0, DType.FP8_E4M3: 8.0,
    DType.FP8_E5M2: 8.0, DType.INT8: 8.0, DType.INT32: 32.0, DType.INT64: 64.0,
    DType.BFP8_B: 1088 * 8 / 1024, DType.BFP4_B: 576 * 8 / 1024, DType.INT4: 4.0, DType.FP4_E2M1: 4.0,
}

_ALIASES = {
    "fp32": DType.FP32, "float32": DType.FP32, "tf32": DType.TF32, "bf16": DType.BF16,
    "bfloat16": DType.BF16, "fp16": DType.FP16, "float16": DType.FP16, "half": DType.FP16,
    "fp8": DType.FP8_E4M3, "fp8_e4m3": DType.FP8_E4M3, "e4m3": DType.FP8_E4M3,
    "fp8_e5m2": DType.FP8_E5M2, "e5m2": DType.FP8_E5M2, "int8": DType.INT8, "int32": DType.INT32,
    "int64": DType.INT64, "bfp8_b": DType.BFP8_B, "bfp4_b": DType.BFP4_B, "int4": DType.INT4,
    "fp4": DType.FP4_E2M1, "fp4_e2m1": DType.FP4_E2M1, "e2m1": DType.FP4_E2M1,
}

MEMORY_OPS = frozenset({
    Op.TMA_LOAD, Op.TMA_STORE, Op.CP_ASYNC, Op.LDG, Op.STG, Op.LDS, Op.STS, Op.TMEM_LOAD,
    Op.TMEM_STORE, Op.NOC_READ, Op.NOC_WRITE,
})
GLOBAL_READS = frozenset({Op.TMA_LOAD, Op.CP_ASYNC, Op.LDG})
GLOBAL_WRITES = frozenset({Op.TMA_STORE, Op.STG})
