"""Row-wise normalisation templates: RMSNorm, fused residual add + RMSNorm, softmax.

Built on memory_bound.py (one CTA per row, 128-bit vectorised LDG/STG, CUB-style block reductions); registered
for KernelKind.RMSNORM / ADD_RMSNORM / SOFTMAX in templates/__init__.py through `CALLS`.

Example:
    >>> from torchsim.hwmodels import get_profile
    >>> kg = rmsnorm(1024, 4096, DType.BF16, get_profile("h100-sxm"))
    >>> kg.dram_bytes == (2 * 1024 * 4096 + 4096) * 2
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchsim.graph import DType, KernelGraph, TileGraph, aff
from torchsim.hwmodels.gpu import GpuProfile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.templates.memory_bound import (
    StreamWriter,
    block,
    check_gpu,
    check_positive,
    row_classes,
    row_launch,
)

SOFTMAX_SMEM_ROW_BYTES = 48 * 1024  # PyTorch keeps a softmax row in shared memory up to the default 48 KiB
L1_ROW_BYTES = 32 * 1024  # a row a CTA re-reads right after reading it still sits in L1 up to about this size


def rmsnorm(rows: int, hidden: int, dtype: DType, hw: GpuProfile, *, residual: bool = False, centered: bool = False,
            bias: bool = False) -> KernelGraph:
    """y = x / rms(x) * w over each of `rows` rows of `hidden`; with `residual`, first x += r and r := x. With
    `centered` it is LayerNorm, y = (x - mean(x)) / std(x) * w (+ b with `bias`): one more block reduction (the
    mean) and a subtraction per element before the sum of squares, as PyTorch's and vLLM's LayerNorm kernels do.

    Follows vLLM's `rms_norm_kernel` / `fused_add_rms_norm_kernel` (csrc/layernorm_kernels.cu): one CTA per token
    of min(hidden, 1024) threads (256 from 256 tokens on, for more CTAs per SM), 128-bit vectorised loads, sum of
    squares by warp shuffles then across warps through shared memory (CUB BlockReduce), rsqrt by one thread, and
    a second pass that re-reads the row (an L1/L2 hit) with the weight to scale and store.
    """
    kernel = ("add_" if residual else "") + ("layernorm" if centered else "rmsnorm")
    check_gpu(kernel, hw)
    check_positive(kernel, rows=rows, hidden=hidden)
    eb = dtype.nbytes
    launch = row_launch(rows, hidden * eb, hw, max_threads=1024 if rows < 256 else 256)

    def write(r: int) -> TileGraph:
        w = StreamWriter(f"{kernel}/{r}x{hidden}", dtype, launch.warps)
        shape = (r, hidden)
        x = w.load("X", dtype, shape, block(), "ldg_x")
        src = x
        if residual:
            res = w.load("residual", dtype, shape, block(), "ldg_residual")
            src = w.simt(3.0 * r * hidden, "add", (x, res))  # two converts and an add per element
            w.store("residual", dtype, shape, block(), "stg_residual", (src,))
        if centered:  # the mean first: a sum, a block reduction, then x - mean before the squares
            total = w.simt(1.0 * r * hidden, "sum", (src,))
            mean = w.block_reduce("mean", (total,), lanes_per_row=launch.threads // r)
            src = w.simt(1.0 * r * hidden, "center", (src, mean))
        sq = w.simt(2.0 * r * hidden, "square_sum", (src,))
        red = w.block_reduce("variance", (sq,), lanes_per_row=launch.threads // r)
        rs = w.sfu(r, "rsqrt", (red,))
        again = w.reload("residual" if residual else "X", dtype, shape, block(), "ldg_again",
                         l1_hit=hidden * eb <= L1_ROW_BYTES)
        wt = w.load("weight", dtype, (1, hidden), (aff(), aff()), "ldg_weight")
        operands: tuple[int, ...] = (rs, again, wt)
        if bias:
            operands += (w.load("bias", dtype, (1, hidden), (aff(), aff()), "ldg_bias"),)
        scaled = w.simt((5.0 if bias else 4.0) * r * hidden, "scale", operands)
        w.store("X" if residual else "Y", dtype, shape, block(), "stg_y", (scaled,))
        return w.build()

    tensors = 4 if residual else 2
    return KernelGraph(
        name=f"{kernel}_{rows}x{hidden}", classes=row_classes(rows, launch, write),
        flops=(4.0 + 2.0 * centered + bias) * rows * hidden,
        dram_bytes=(tensors * rows * hidden + hidden * (1 + bias)) * eb,
        attrs={"template": f"{kernel}/vllm-row", "rows": rows, "hidden": hidden, "dtype": dtype.name.lower(),
               "rows_per_cta": launch.rows_per_cta, "threads": launch.threads},
    )


def softmax(rows: int, cols: int, dtype: DType, hw: GpuProfile) -> KernelGraph:
    """Softmax over the last dimension of a [rows, cols] tensor.

    Follows PyTorch's `cunn_SoftMaxForwardSmem` (aten/src/ATen/native/cuda/SoftMax.cu): one CTA per row, 128-bit
    loads, the row staged in shared memory when it fits 48 KiB (else re-read from L2), block reductions for the
    max and for the sum of exponentials, exp recomputed in the output pass. Short rows (<= 1024) pack several rows
    per CTA with a warp per row, as the warp-persistent softmax does.
    """
    check_gpu("softmax", hw)
    check_positive("softmax", rows=rows, cols=cols)
    eb = dtype.nbytes
    launch = row_launch(rows, cols * eb, hw, max_threads=1024)
    on_chip = cols * eb * launch.rows_per_cta <= SOFTMAX_SMEM_ROW_BYTES

    def write(r: int) -> TileGraph:
        w = StreamWriter(f"softmax/{r}x{cols}", dtype, launch.warps)
        shape, n = (r, cols), float(r * cols)
        lanes = launch.threads // r
        x = w.load("X", dtype, shape, block(), "ldg_x")

        def reread(name: str, after: int) -> int:
            if on_chip:  # the row stays in registers / shared memory
                return after
            return w.load("X", dtype, shape, block(), f"ldg_{name}")

        mx = w.simt(2.0 * n, "max", (x,))
        red_max = w.block_reduce("row_max", (mx,), lanes_per_row=lanes)
        x2 = reread("sum_pass", red_max)
        ex = w.sfu(n, "exp", (x2, red_max))
        sm = w.simt(3.0 * n, "sum_exp", (ex,))
        red_sum = w.block_reduce("row_sum", (sm,), lanes_per_row=lanes)
        inv = w.sfu(r, "reciprocal", (red_sum,))
        x3 = reread("out_pass", inv)
        ex2 = w.sfu(n, "exp_out", (x3, inv))
        out = w.simt(3.0 * n, "scale", (ex2,))
        w.store("Y", dtype, shape, block(), "stg_y", (out,))
        return w.build()

    return KernelGraph(
        name=f"softmax_{rows}x{cols}", classes=row_classes(rows, launch, write), flops=5.0 * rows * cols,
        dram_bytes=2.0 * rows * cols * eb,
        attrs={"template": "softmax/pytorch-row", "rows": rows, "cols": cols, "dtype": dtype.name.lower(),
               "rows_per_cta": launch.rows_per_cta, "threads": launch.threads, "row_on_chip": on_chip},
    )


def _rmsnorm_call(call: KernelCall, hw: Any) -> KernelGraph:
    return rmsnorm(call.p("rows"), call.p("hidden"), call.dtype, hw, residual=call.kind is KernelKind.ADD_RMSNORM,
                   centered=bool(call.p("centered", False)), bias=bool(call.p("bias", False)))


def _softmax_call(call: KernelCall, hw: Any) -> KernelGraph:
    return softmax(call.p("rows"), call.p("cols"), call.dtype, hw)


CALLS: dict[KernelKind, Callable[[KernelCall, Any], KernelGraph]] = {
    KernelKind.RMSNORM: _rmsnorm_call, KernelKind.ADD_RMSNORM: _rmsnorm_call, KernelKind.SOFTMAX: _softmax_call,
}
