"""Roofline estimate of a kernel call: the stand-in when no template (or no simulation budget) serves a call.

Used by the prediction stage beside the template library: time = max(FLOPs / peak, compulsory DRAM bytes / sustained
bandwidth) + a fixed launch-to-finish latency. Every result built from it is flagged `fallback=True`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from torchsim.graph.kinds import DType
from torchsim.hwmodels.quantity import Quantity, assumed
from torchsim.lowering.kernel_call import KernelCall, KernelKind

# A kernel that moves almost nothing still takes its grid launch, one DRAM round trip and a tail: ~2-3 us on
# A100/H100-class parts for tiny kernels (the usual empty-kernel time measured with nsys is 2-4 us).
FIXED_LATENCY = assumed(2.0e-6, "s", "assumed: floor of a tiny kernel's duration on the device (grid launch, one "
                        "DRAM round trip, tail); typical of empty-kernel timings, not measured here")
FMA_FLOPS_SHARE = assumed(0.5, "1", "assumed: non-tensor (SIMT) kernels reach about half the FP32 FMA peak")


@dataclass(frozen=True, slots=True)
class Roofline:
    """Work of one call and its roofline time on a profile."""

    flops: float
    dram_bytes: float
    time_s: float
    bound: str  # "compute" | "DRAM bandwidth" | "latency"
    latency: Quantity = FIXED_LATENCY


def _attention_pairs(sq: int, skv: int, causal: bool, window: int) -> tuple[float, int]:
    """(unmasked query-key pairs, keys read) of causal (bottom-right aligned) or full attention, under a sliding
    window of `window` keys (0: none; the same count as templates.attention_config.AttnShape)."""
    window = window if 0 < window < skv else 0
    if not causal and not window:
        return float(sq * skv), skv

    def ramp(c: int) -> int:  # sum of max(0, r + c) over the sq query rows
        m = sq + c if c < 0 else 0
        return sq * c + sq * (sq - 1) // 2 if c >= 0 else (m * (m - 1) // 2 if m > 0 else 0)

    off = skv - sq
    pairs = ramp(1 + off) - (ramp(1 + off - window) if window else 0)
    return float(pairs), skv - max(0, off - window + 1) if window else skv


def work(call: KernelCall) -> tuple[float, float, bool]:
    """(FLOPs, compulsory DRAM bytes, runs on tensor cores) of a call, from its kind and params."""
    b = call.dtype.nbytes
    p = call.p
    k = call.kind
    if k is KernelKind.GEMM:
        m, n, kk, batch = p("m"), p("n"), p("k"), p("batch", 1)
        extra = m * n if p("epilogue", "none") == "residual" else 0
        return 2.0 * m * n * kk * batch, (m * kk + kk * n + m * n + extra) * batch * b, True
    if k is KernelKind.GROUPED_GEMM:
        tpe, n, kk = p("tokens_per_expert"), p("n"), p("k")
        rows, active = sum(tpe), sum(1 for t in tpe if t)
        return 2.0 * rows * n * kk, (rows * kk + active * kk * n + rows * n) * b, True
    if k in (KernelKind.ATTENTION_PREFILL, KernelKind.ATTENTION_DECODE):
        bt, hq, hkv, sq, skv, d = (p(x) for x in ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim"))
        causal = k is KernelKind.ATTENTION_PREFILL and p("causal", False)
        # varlen calls (templates.varlen): the sums over their sequences' (q, kv) lengths
        lens = list(p("seqs", ())) or [(sq, kv) for kv in p("kv_lens", ())] or [(sq, skv)] * bt
        flops = nbytes = 0.0
        for q_len, kv_len in lens:
            pairs, keys = _attention_pairs(q_len, kv_len, causal, p("window", 0))
            flops += 4.0 * hq * pairs * d
            nbytes += (2 * hq * q_len * d + 2 * hkv * keys * d) * b
        return flops, nbytes, True
    if k is KernelKind.MLA_DECODE:
        bt, hq, sq, skv, d, dv = (p(x) for x in ("batch", "heads_q", "seq_q", "seq_kv", "head_dim", "head_dim_v"))
        return 2.0 * bt * hq * sq * skv * (d + dv), bt * (hq * sq * (d + dv) + skv * d) * b, True
    if k in (KernelKind.RMSNORM, KernelKind.ADD_RMSNORM):
        rows, h = p("rows"), p("hidden")
        tensors = 4 if k is KernelKind.ADD_RMSNORM else 2
        return 4.0 * rows * h, (tensors * rows * h + h) * b, False
    if k is KernelKind.ROPE:
        t, hq, hkv, d = p("tokens"), p("heads_q"), p("heads_kv"), p("head_dim")
        return 3.0 * t * (hq + hkv) * d, (2 * t * (hq + hkv) * d + t * d) * b, False
    if k is KernelKind.SILU_MUL:
        rows, h = p("rows"), p("hidden")
        return 6.0 * rows * h, 3 * rows * h * b, False
    if k is KernelKind.ELEMENTWISE:
        numel = p("numel")
        return float(numel), numel * (p("inputs", 1) + p("outputs", 1)) * b, False
    if k is KernelKind.SOFTMAX:
        rows, cols = p("rows"), p("cols")
        return 5.0 * rows * cols, 2 * rows * cols * b, False
    if k is KernelKind.EMBEDDING:
        t, h = p("tokens"), p("hidden")
        return 0.0, 2 * t * h * b + t * 8, False
    if k is KernelKind.ROUTER_TOPK:
        t, e = p("tokens"), p("experts")
        return float(t * e * math.log2(max(e, 2))), (t * e + 2 * t * p("top_k")) * b, False
    if k is KernelKind.ARGMAX:
        rows, v = p("rows"), p("vocab")
        return float(rows * v), rows * v * b + rows * 8, False
    if k is KernelKind.REDUCE:
        return float(p("numel_in")), (p("numel_in") + p("numel_out")) * b, False
    if k is KernelKind.COLLECTIVE:  # bytes each rank sends (costed on links by torchsim.sim.collectives)
        return 0.0, float(p("nbytes")), False
    raise ValueError(f"no roofline formula for kernel kind {k.value} ({call.name})")


def roofline(call: KernelCall, hw: Any) -> Roofline:
    """Roofline time of `call` on profile `hw` (GpuProfile float helpers).

    >>> from torchsim.hwmodels import get_profile
    >>> r = roofline(KernelCall.make(KernelKind.GEMM, m=1, n=4096, k=4096), get_profile("h100-sxm"))
    >>> r.bound, round(r.dram_bytes / 2**20)
    ('DRAM bandwidth', 32)
    """
    flops, nbytes, tensor = work(call)
    peak = hw.peak_tensor_flops_per_s(call.dtype if call.dtype != DType.INT64 else DType.FP32) if tensor else \
        float(hw.fma_flop_per_clk_per_sm.value) * hw.sms * hw.clock_hz_value * float(FMA_FLOPS_SHARE.value)
    t_compute = flops / peak if peak > 0 else 0.0
    t_mem = nbytes / hw.dram_bytes_per_s_value
    latency = float(FIXED_LATENCY.value)
    if max(t_compute, t_mem) < latency:
        bound = "latency"
    else:
        bound = "compute" if t_compute >= t_mem else "DRAM bandwidth"
    return Roofline(flops, nbytes, max(t_compute, t_mem) + latency, bound)
