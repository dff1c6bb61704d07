"""Streaming templates: generic elementwise (residual add, casts, copies), SiLU-and-mul, RoPE, embedding gather.

Built on memory_bound.py (128-bit vectorised LDG/STG, SIMT work on the FMA pipe, MUFU on the SFU); registered
for KernelKind.ELEMENTWISE / SILU_MUL / ROPE / EMBEDDING in templates/__init__.py through `CALLS`.

Example:
    >>> from torchsim.hwmodels import get_profile
    >>> kg = silu_mul(512, 14336, DType.BF16, get_profile("h100-sxm"))
    >>> kg.dram_bytes == 3 * 512 * 14336 * 2
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchsim.graph import DType, KernelGraph, TileGraph, aff
from torchsim.hwmodels.gpu import GpuProfile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.templates.memory_bound import (
    VECTOR_BYTES,
    RowLaunch,
    StreamWriter,
    block,
    check_gpu,
    check_positive,
    fold_rows,
    row_classes,
    row_launch,
)

ELEMENTWISE_THREADS = 128  # PyTorch's vectorized_elementwise_kernel: 128 threads, one 16 B vector per operand
# (SIMT instructions, MUFU ops) per element, besides loads and stores; unknown ops cost like "add"
OP_COST: dict[str, tuple[float, float]] = {
    "add": (3, 0), "sub": (3, 0), "mul": (3, 0), "copy": (2, 0), "neg": (3, 0), "where": (4, 0), "div": (4, 1),
    "silu": (5, 2), "sigmoid": (4, 2), "exp": (3, 1), "log": (3, 1), "sin": (4, 1), "cos": (4, 1), "tanh": (3, 1),
    "gelu": (9, 1), "rsqrt": (3, 1), "sqrt": (3, 1), "pow": (4, 2), "relu": (3, 0),
}


_COPIES = ("cat", "to", "clone", "contiguous", "index", "gather", "stack")


def _op_key(op: str) -> str:
    return op.lower().removeprefix("aten.").split(".")[0].strip("_")


def known_op(op: str) -> bool:
    """Whether `op` has a cost of its own (the command line refuses others; lowering prices them as 'add')."""
    key = _op_key(op)
    return key in OP_COST or "copy" in key or "cache" in key or key in _COPIES


def op_cost(op: str) -> tuple[float, float]:
    """Cost of an ATen-style op name ('add', 'silu', 'aten.mul.Tensor', 'kv_cache_write')."""
    key = _op_key(op)
    if key in OP_COST:
        return OP_COST[key]
    if "copy" in key or "cache" in key or key in _COPIES:
        return OP_COST["copy"]
    return OP_COST["add"]


# PyTorch's three elementwise code paths (aten/src/ATen/native/cuda/CUDALoops.cuh, gpu_kernel_impl): contiguous
# operands of one dtype take vectorized_elementwise_kernel (16 B vectors); contiguous operands that need a dtype
# cast take unrolled_elementwise_kernel (one element per load, THREAD_WORK_SIZE 4, a trivial offset calculator);
# any strided or broadcast operand takes the legacy elementwise_kernel<128, 4> (one element per load, each
# element's operand offsets from an OffsetCalculator).
PATHS = ("vectorized", "cast", "strided")
LEGACY_ELEMENTS_PER_THREAD = 4  # elementwise_kernel<128, 4> / unrolled_elementwise_kernel's thread_work_size
SECTOR_WAVEFRONT_BYTES = 128  # an L1 wavefront serves up to 128 B of a warp's access: a warp of scalar 2-byte
# loads (64 B) still costs one wavefront, so an element-per-load kernel pays 128 / (32 x element size) per byte


def index_ops(dims: int, operands: int, convert: bool = False) -> float:
    """Integer/ALU lane instructions per element of the legacy strided kernel: OffsetCalculator::get runs, per
    dimension, one IntDivider::divmod (__umulhi, add, shift for the quotient, a multiply-subtract for the
    remainder: aten/src/ATen/cuda/detail/IntegerDivider.cuh) and one multiply-add per operand's offset
    (OffsetCalculator.cuh); each operand's address is then a 64-bit base + offset x size (two more); each element
    is bounds-checked and the unrolled loop advances (two more: compare and increment). `convert`: 16-bit
    operands are widened to and narrowed from the FP32 opmath type, one conversion each."""
    return float(dims * (4 + operands) + 2 * operands + 2 + (operands if convert else 0))


def elementwise(numel: int, inputs: int, outputs: int, op: str, dtype: DType, hw: GpuProfile,
                path: str = "vectorized", dims: int = 1, operands: int | None = None) -> KernelGraph:
    """`outputs` tensors of `numel` elements computed from `inputs` tensors of the same size.

    Follows PyTorch's `vectorized_elementwise_kernel` (aten/src/ATen/native/cuda/CUDALoops.cuh): CTAs of 128
    threads, each thread one 16-byte vector per operand; all CTAs stream behind the shared DRAM queue.
    `path` "cast" is its unrolled kernel (contiguous operands of mixed dtypes: one element per load, a convert
    per element) and "strided" its legacy kernel (a strided or broadcast operand: one element per load, the
    integer offset arithmetic of `index_ops` over `dims` dimensions for `operands` tensors (default inputs +
    outputs; a broadcast input counts here but reads no full-size tensor) on the ALU pipe, half the FMA pipe's
    lanes where int32_ops_per_clk_per_sm says so). Measured on an H200 (torchsim/validation/measured/h200-2026-12-04,
    llama_gpu.json, the 64x1024 prefill): a strided bf16 mul moves 1.7 TB/s where the vectorized one moves 4.4.
    """
    if path not in PATHS:
        raise ValueError(f"elementwise: path must be one of {', '.join(PATHS)}, got {path!r}")
    if isinstance(dims, bool) or not isinstance(dims, int) or not 1 <= dims <= 25:
        raise ValueError(f"elementwise: dims must be an integer in 1..25 (PyTorch's MAX_DIMS), got {dims!r}")
    check_gpu("elementwise", hw)
    check_positive("elementwise", numel=numel)
    for name, v in (("inputs", inputs), ("outputs", outputs)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"elementwise: parameter {name} must be an integer >= 0, got {v!r}")
    if inputs + outputs == 0:
        raise ValueError("elementwise: inputs + outputs must be >= 1 (a kernel that reads and writes nothing)")
    eb = dtype.nbytes
    vectorized = path == "vectorized"
    operands = operands or inputs + outputs  # the tensors the strided kernel computes offsets for
    per_thread = max(1, int(VECTOR_BYTES // eb)) if vectorized else LEGACY_ELEMENTS_PER_THREAD
    per_cta = ELEMENTWISE_THREADS * per_thread
    launch = RowLaunch(fold_rows(numel, min(numel, per_cta), ELEMENTWISE_THREADS, eb * max(1, inputs + outputs), hw),
                       ELEMENTWISE_THREADS)
    instr, mufu = op_cost(op)
    port = 1.0 if vectorized else max(1.0, SECTOR_WAVEFRONT_BYTES / (32 * eb))  # LD/ST wavefronts per byte
    if path == "cast":
        instr += 1.0  # the convert (F2F / PRMT) of each element
    alu_slots = 0.0
    if path == "strided":
        fma_lanes = float(hw.fma_flop_per_clk_per_sm.value) / 2.0
        int_lanes = float(hw.int32_ops_per_clk_per_sm.value) or fma_lanes
        alu_slots = index_ops(dims, operands, eb < 4) * fma_lanes / int_lanes

    def write(n: int) -> TileGraph:
        w = StreamWriter(f"elementwise/{op}/{n}", dtype, launch.warps)
        coord = (aff(r=1),)
        index = (w.simt(alu_slots * n, f"{op}.offsets"),) if alu_slots else ()
        deps = tuple(w.load(f"in{i}", dtype, (n,), coord, f"ldg_in{i}", index, port) for i in range(inputs))
        if mufu:
            deps += (w.sfu(mufu * n, f"{op}.mufu", deps),)
        node = w.simt(instr * n, op, deps)
        for o in range(outputs):
            w.store(f"out{o}", dtype, (n,), coord, f"stg_out{o}", (node,), port)
        return w.build()

    return KernelGraph(
        name=f"{op}_{numel}", classes=row_classes(numel, launch, write), flops=float(numel),
        dram_bytes=float(numel * (inputs + outputs) * eb),
        attrs={"template": "elementwise/pytorch-" + {"vectorized": "vectorized", "cast": "unrolled",
                                                     "strided": "strided"}[path],
               "op": op, "numel": numel, "inputs": inputs, "outputs": outputs, "dtype": dtype.name.lower(),
               "elements_per_cta": launch.rows_per_cta, "threads": launch.threads,
               **({"path": path, "dims": dims, "operands": operands} if not vectorized else {})},
    )


def silu_mul(rows: int, hidden: int, dtype: DType, hw: GpuProfile) -> KernelGraph:
    """y[r, :] = silu(x[r, :hidden]) * x[r, hidden:] for x of shape [rows, 2 * hidden].

    Follows vLLM's `act_and_mul_kernel` (csrc/activation_kernels.cu): one CTA per token of min(hidden, 1024)
    threads striding over the row with 128-bit loads; SiLU as x * 1 / (1 + exp(-x)) with MUFU.EX2 and MUFU.RCP.
    """
    check_gpu("silu_mul", hw)
    check_positive("silu_mul", rows=rows, hidden=hidden)
    eb = dtype.nbytes
    launch = row_launch(rows, hidden * eb, hw, max_threads=1024)

    def write(r: int) -> TileGraph:
        w = StreamWriter(f"silu_mul/{r}x{hidden}", dtype, launch.warps)
        n = float(r * hidden)
        gate = w.load("X", dtype, (r, hidden), block(col=0), "ldg_gate")
        up = w.load("X", dtype, (r, hidden), block(col=1), "ldg_up")
        mufu = w.sfu(2.0 * n, "exp_rcp", (gate,))
        out = w.simt(6.0 * n, "silu_mul", (mufu, up))
        w.store("Y", dtype, (r, hidden), block(), "stg_y", (out,))
        return w.build()

    return KernelGraph(
        name=f"silu_mul_{rows}x{hidden}", classes=row_classes(rows, launch, write), flops=6.0 * rows * hidden,
        dram_bytes=3.0 * rows * hidden * eb,
        attrs={"template": "silu_mul/vllm-row", "rows": rows, "hidden": hidden, "dtype": dtype.name.lower(),
               "rows_per_cta": launch.rows_per_cta, "threads": launch.threads},
    )


def rope(tokens: int, heads_q: int, heads_kv: int, head_dim: int, dtype: DType, hw: GpuProfile) -> KernelGraph:
    """Rotary embedding applied in place to Q [tokens, heads_q, head_dim] and K [tokens, heads_kv, head_dim].

    Follows vLLM's `rotary_embedding_kernel` (csrc/pos_encoding_kernels.cu): one CTA per token of
    min(heads * head_dim / 2, 512) threads; each token loads its position, then its cos/sin cache row (a
    dependent load), rotates every (x_i, x_i+d/2) pair of its Q and K heads and stores them back.
    """
    check_gpu("rope", hw)
    check_positive("rope", tokens=tokens, heads_q=heads_q, head_dim=head_dim)
    if isinstance(heads_kv, bool) or not isinstance(heads_kv, int) or heads_kv < 0:
        raise ValueError(f"rope: parameter heads_kv must be an integer >= 0, got {heads_kv!r}")
    if head_dim % 2:
        raise ValueError(f"rope: head_dim must be even (rotation pairs), got {head_dim}")
    eb = dtype.nbytes
    heads = heads_q + heads_kv
    launch = row_launch(tokens, heads * head_dim * eb, hw, max_threads=512)

    def write(r: int) -> TileGraph:
        w = StreamWriter(f"rope/{r}x{heads}x{head_dim}", dtype, launch.warps)
        pos = w.load("positions", DType.INT64, (r, 1), block(), "ldg_positions")
        q = w.load("Q", dtype, (r, heads_q * head_dim), block(), "ldg_q")
        k = w.load("K", dtype, (r, heads_kv * head_dim), block(), "ldg_k") if heads_kv else -1
        cs = w.load("cos_sin_cache", dtype, (r, head_dim), block(), "ldg_cos_sin", (pos,))
        rot = w.simt(3.0 * r * heads * head_dim, "rotate", (q, cs) + ((k,) if k >= 0 else ()))
        w.store("Q", dtype, (r, heads_q * head_dim), block(), "stg_q", (rot,))
        if heads_kv:
            w.store("K", dtype, (r, heads_kv * head_dim), block(), "stg_k", (rot,))
        return w.build()

    return KernelGraph(
        name=f"rope_{tokens}x{heads_q}+{heads_kv}x{head_dim}", classes=row_classes(tokens, launch, write),
        flops=3.0 * tokens * heads * head_dim,
        dram_bytes=(2.0 * tokens * heads * head_dim + tokens * head_dim) * eb + 8.0 * tokens,
        attrs={"template": "rope/vllm-neox", "tokens": tokens, "heads_q": heads_q, "heads_kv": heads_kv,
               "head_dim": head_dim, "dtype": dtype.name.lower(), "rows_per_cta": launch.rows_per_cta,
               "threads": launch.threads},
    )


def embedding(tokens: int, hidden: int, vocab: int, dtype: DType, hw: GpuProfile) -> KernelGraph:
    """out[t, :] = weight[ids[t], :] for a [vocab, hidden] table.

    Follows PyTorch's embedding forward (index_select, `indexSelectLargeIndex`): a row per token, the table row's
    address depends on the loaded id (two dependent DRAM round trips). Rows are taken as distinct (no reuse).
    """
    check_gpu("embedding", hw)
    check_positive("embedding", tokens=tokens, hidden=hidden, vocab=vocab)
    eb = dtype.nbytes
    launch = row_launch(tokens, hidden * eb, hw, max_threads=512)

    def write(r: int) -> TileGraph:
        w = StreamWriter(f"embedding/{r}x{hidden}", dtype, launch.warps)
        ids = w.load("ids", DType.INT64, (r, 1), block(), "ldg_ids")
        row = w.load("embed_weight", dtype, (r, hidden), block(), "ldg_rows", (ids,))
        w.store("Y", dtype, (r, hidden), block(), "stg_y", (row,))
        return w.build()

    return KernelGraph(
        name=f"embedding_{tokens}x{hidden}", classes=row_classes(tokens, launch, write), flops=0.0,
        dram_bytes=2.0 * tokens * hidden * eb + 8.0 * tokens,
        attrs={"template": "embedding/index-select", "tokens": tokens, "hidden": hidden, "vocab": vocab,
               "dtype": dtype.name.lower(), "rows_per_cta": launch.rows_per_cta, "threads": launch.threads},
    )


def _elementwise_call(call: KernelCall, hw: Any) -> KernelGraph:
    if call.p("roofline", False):
        raise NotImplementedError(f"{call.name or 'elementwise'}: {call.p('op', '?')} has no lowering; its call "
                                  "is a roofline stand-in")
    return elementwise(call.p("numel"), call.p("inputs", 1), call.p("outputs", 1), str(call.p("op", "add")),
                       call.dtype, hw, str(call.p("path", "vectorized")), int(call.p("dims", 1)),
                       int(call.p("operands", 0)) or None)


CALLS: dict[KernelKind, Callable[[KernelCall, Any], KernelGraph]] = {
    KernelKind.ELEMENTWISE: _elementwise_call,
    KernelKind.SILU_MUL: lambda call, hw: silu_mul(call.p("rows"), call.p("hidden"), call.dtype, hw),
    KernelKind.ROPE: lambda call, hw: rope(call.p("tokens"), call.p("heads_q"), call.p("heads_kv"),
                                           call.p("head_dim"), call.dtype, hw),
    KernelKind.EMBEDDING: lambda call, hw: embedding(call.p("tokens"), call.p("hidden"), call.p("vocab"),
                                                     call.dtype, hw),
}
