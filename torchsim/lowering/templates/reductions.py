"""Reduction templates: argmax over the vocabulary (greedy sampling), MoE router softmax + top-k, generic reduce.

Built on memory_bound.py; registered for KernelKind.ARGMAX / ROUTER_TOPK / REDUCE in templates/__init__.py
through `CALLS`. Rows too few to fill the GPU are split across CTAs like PyTorch's reduce kernel does.

Example:
    >>> from torchsim.hwmodels import get_profile
    >>> kg = argmax(1, 128256, DType.FP32, get_profile("h100-sxm"))
    >>> kg.attrs["segments"] > 1  # one row is split over many CTAs
    True
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from torchsim.graph import CtaClass, DType, KernelGraph, TileGraph, aff
from torchsim.hwmodels.gpu import GpuProfile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.templates.elementwise import elementwise
from torchsim.lowering.templates.memory_bound import (
    RowLaunch,
    StreamWriter,
    block,
    check_gpu,
    check_positive,
    fold_rows,
    row_classes,
    row_launch,
)

REDUCE_THREADS = 512  # PyTorch's reduce kernel: up to 512 threads (32 x 16) per CTA
SEGMENT_BYTES = 16 * 1024  # split a row across CTAs only into segments at least this big ...
SPLIT_TARGET_WAVES = 2  # ... and only until the grid fills this many CTAs per SM


def row_reduce(kernel: str, rows: int, cols: int, dtype: DType, hw: GpuProfile, *, instr_per_elem: float,
               out_dtype: DType, flops: float) -> KernelGraph:
    """Reduce each of `rows` rows of `cols` elements to one `out_dtype` value.

    Follows PyTorch's `reduce_kernel` (aten/src/ATen/native/cuda/Reduce.cuh): vectorised loads, warp shuffles and
    a shared-memory step per CTA; when the rows cannot fill the GPU each row is split into segments, one CTA each,
    that write partials to a staging buffer and bump a semaphore; the last CTA of a row combines the partials.
    """
    eb = dtype.nbytes
    segs = 1
    if rows < hw.sms * SPLIT_TARGET_WAVES:
        segs = max(1, min(math.ceil(cols * eb / SEGMENT_BYTES), math.ceil(hw.sms * SPLIT_TARGET_WAVES / rows)))
    seg_cols = math.ceil(cols / segs)
    segs = math.ceil(cols / seg_cols)
    compulsory = float(rows * cols * eb + rows * out_dtype.nbytes)
    attrs: dict[str, Any] = {"template": f"{kernel}/pytorch-reduce", "rows": rows, "cols": cols,
                             "dtype": dtype.name.lower(), "segments": segs}
    if segs == 1:
        launch = row_launch(rows, cols * eb, hw, max_threads=REDUCE_THREADS)

        def write(r: int) -> TileGraph:
            w = StreamWriter(f"{kernel}/{r}x{cols}", dtype, launch.warps)
            x = w.load("X", dtype, (r, cols), block(), "ldg_x")
            part = w.simt(instr_per_elem * r * cols, "reduce", (x,))
            red = w.block_reduce("block_reduce", (part,), values=2, lanes_per_row=launch.threads // r)
            w.store("Y", out_dtype, (r, 1), block(), "stg_y", (red,))
            return w.build()

        attrs.update(rows_per_cta=launch.rows_per_cta, threads=launch.threads)
        return KernelGraph(f"{kernel}_{rows}x{cols}", row_classes(rows, launch, write), flops, compulsory, attrs)

    threads = min(REDUCE_THREADS, 32 * math.ceil(seg_cols * eb / 16 / 32))
    w = StreamWriter(f"{kernel}/split/{seg_cols}", dtype, max(1, threads // 32))
    x = w.load("X", dtype, (1, seg_cols), (aff(r=1), aff(s=1)), "ldg_x")
    part = w.simt(instr_per_elem * seg_cols, "reduce", (x,))
    red = w.block_reduce("block_reduce", (part,), values=2, lanes_per_row=threads)
    staged = (aff(r=1), aff(s=1))  # the staging-buffer slot this CTA writes (re-read below: an L2 hit)
    st = w.store("partials", DType.INT64, (1, 1), staged, "stg_partial", (red,))
    sem = w.store("semaphore", DType.INT32, (1, 1), (aff(r=1), aff()), "atomic_semaphore", (st,))
    parts = w.load("partials", DType.INT64, (1, segs), staged, "ldg_partials", (sem,))
    fin = w.simt(2.0 * instr_per_elem * segs, "combine", (parts,))
    w.store("Y", out_dtype, (1, 1), (aff(r=1), aff()), "stg_y", (fin,))
    params = np.array([(r, s) for r in range(rows) for s in range(segs)], dtype=np.int64).reshape(-1, 2)
    attrs.update(rows_per_cta=1, threads=threads, segment_cols=seg_cols)
    return KernelGraph(f"{kernel}_{rows}x{cols}", (CtaClass(w.build(), params, ("r", "s"), threads, 32),), flops,
                       compulsory, attrs)


def argmax(rows: int, vocab: int, dtype: DType, hw: GpuProfile) -> KernelGraph:
    """Index of the largest logit in each of `rows` rows of `vocab` (greedy sampling): int64 out per row."""
    check_gpu("argmax", hw)
    check_positive("argmax", rows=rows, vocab=vocab)
    return row_reduce("argmax", rows, vocab, dtype, hw, instr_per_elem=3.0, out_dtype=DType.INT64,
                      flops=float(rows * vocab))


# the longest reduced row: the L1 model numbers a row's 128-byte lines in 16 bits (torchsim.sim.l1.tile_line_ids),
# and the row's last tile may reach past its end (tiles are of equal width), hence half of that
MAX_ROW_BYTES = (1 << 16) * 128 // 2


def reduce(numel_in: int, numel_out: int, dtype: DType, hw: GpuProfile) -> KernelGraph:
    """Sum-like reduction of `numel_in` elements into `numel_out` (e.g. the MoE combine over top-k copies).

    A short reduced dimension (< 32 elements per output, strided) is vectorised along the kept dimension like an
    elementwise kernel reading every copy; longer ones are row reductions. Ops lowered here that keep or grow the
    element count (cumsum, sort with its indices) stream their input once and write their outputs."""
    check_gpu("reduce", hw)
    check_positive("reduce", numel_in=numel_in, numel_out=numel_out)
    if numel_out >= numel_in:
        kg = elementwise(numel_in, 1, math.ceil(numel_out / numel_in), "copy", dtype, hw)
        return _relabel(kg, "reduce/streaming", numel_in, numel_out)
    cols = math.ceil(numel_in / numel_out)
    if cols * dtype.nbytes > MAX_ROW_BYTES:
        raise ValueError(f"reduce: {numel_in:,} elements into {numel_out:,} is a reduced row of {cols:,} elements "
                         f"({cols * dtype.nbytes / 2**20:.0f} MiB), above the {MAX_ROW_BYTES >> 20} MiB rows the L1 "
                         f"model addresses; give numel_in / numel_out <= {MAX_ROW_BYTES // dtype.nbytes:,.0f}")
    if cols < 32:
        return _relabel(elementwise(numel_out, cols, 1, "add", dtype, hw), "reduce/strided-vectorized", numel_in,
                        numel_out)
    return row_reduce("reduce", numel_out, cols, dtype, hw, instr_per_elem=2.0, out_dtype=dtype,
                      flops=float(numel_in))


def _relabel(kg: KernelGraph, template: str, numel_in: int, numel_out: int) -> KernelGraph:
    attrs = {**kg.attrs, "template": template, "numel_in": numel_in, "numel_out": numel_out}
    return KernelGraph(f"reduce_{numel_in}_to_{numel_out}", kg.classes, float(numel_in),
                       float((numel_in + numel_out) * kg.classes[0].graph.dtype.nbytes), attrs)


def router_topk(tokens: int, experts: int, top_k: int, dtype: DType, hw: GpuProfile) -> KernelGraph:
    """Softmax over each token's router logits, then its top_k experts: fp32 weights and int32 expert ids.

    Follows vLLM's `topkGatingSoftmax` (csrc/moe/topk_softmax_kernels.cu): four warps per CTA, each token's
    logits spread over `threads_per_row` lanes with one 16-byte load each (one lane for 8 bf16 experts, so a
    warp handles 32 tokens); max, exp-sum and scale by shuffles inside the lane group; top_k rounds of argmax.
    """
    check_gpu("router_topk", hw)
    check_positive("router_topk", tokens=tokens, experts=experts, top_k=top_k)
    if top_k > experts:
        raise ValueError(f"router_topk: top_k={top_k} exceeds experts={experts}; valid: 1..{experts}")
    eb = dtype.nbytes
    lanes = min(32, max(1, math.ceil(experts * eb / 16)))
    lanes = 1 << (lanes - 1).bit_length()  # lane groups are powers of two
    launch = RowLaunch(fold_rows(tokens, min(tokens, 128 // lanes), 128, experts * eb, hw), 128)

    def write(r: int) -> TileGraph:
        w = StreamWriter(f"router_topk/{r}x{experts}", dtype, launch.warps)
        n = float(r * experts)
        x = w.load("logits", dtype, (r, experts), block(), "ldg_logits")
        mx = w.simt(2.0 * n, "max", (x,))
        mx = w.block_reduce("row_max", (mx,), lanes_per_row=lanes)
        ex = w.sfu(n, "exp", (mx,))
        sm = w.simt(2.0 * n, "sum", (ex,))
        sm = w.block_reduce("row_sum", (sm,), lanes_per_row=lanes)
        node = w.simt(n, "scale", (sm,))
        for i in range(top_k):
            node = w.simt(2.0 * n, f"argmax{i}", (node,))
            node = w.block_reduce(f"top{i}", (node,), lanes_per_row=lanes)
        for name, dt in (("topk_weights", DType.FP32), ("topk_ids", DType.INT32), ("token_expert", DType.INT32)):
            w.store(name, dt, (r, top_k), block(), f"stg_{name}", (node,))
        return w.build()

    return KernelGraph(
        f"router_topk_{tokens}x{experts}_top{top_k}", row_classes(tokens, launch, write),
        float(tokens * experts * math.log2(max(experts, 2))), float(tokens * experts * eb + tokens * top_k * 12),
        {"template": "router_topk/vllm-topk-softmax", "tokens": tokens, "experts": experts, "top_k": top_k,
         "dtype": dtype.name.lower(), "rows_per_cta": launch.rows_per_cta, "threads": launch.threads,
         "lanes_per_token": lanes},
    )


CALLS: dict[KernelKind, Callable[[KernelCall, Any], KernelGraph]] = {
    KernelKind.ARGMAX: lambda call, hw: argmax(call.p("rows"), call.p("vocab"), call.dtype, hw),
    KernelKind.REDUCE: lambda call, hw: reduce(call.p("numel_in"), call.p("numel_out"), call.dtype, hw),
    KernelKind.ROUTER_TOPK: lambda call, hw: router_topk(call.p("tokens"), call.p("experts"), call.p("top_k"),
                                                         call.dtype, hw),
}
