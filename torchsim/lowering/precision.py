"""Precision of a KernelPlan: FP8 checkpoints run their decoder-layer GEMMs as FP8 GEMMs, quantised checkpoints
(lowering.quant: w8a16, w4a16, w8a8, fp8-block, nvfp4, mxfp4) run them in their format; an FP8 KV cache is read
by the decode attention in FP8.

Applied by torchsim.prediction.pipeline after planning (capture and plan stay in the model's bf16). An FP8 checkpoint
(TensorRT Model Optimizer / llm-compressor per-tensor FP8) stores every decoder-layer projection in FP8 E4M3
and keeps the embedding, the LM head and the norms in bf16; activations are quantised in the kernel that
produces them (RMSNorm, SiLU-and-mul, attention output), so no extra launches; GEMM outputs are bf16. An FP8
KV cache (TensorRT-LLM/vLLM `kv_cache_dtype fp8`) halves what decode attention reads; prefill attention works on
the step's fresh bf16 K/V, and the small per-step cache write is left in the model's dtype.
"""

from __future__ import annotations

from dataclasses import replace
from enum import Enum
from fnmatch import fnmatch
from typing import Any

from torchsim.graph.kinds import DType
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.plan import KernelPlan
from torchsim.lowering.quant import QuantFormat

_WEIGHT_GEMMS = (KernelKind.GEMM, KernelKind.GROUPED_GEMM)
_CACHE_READERS = (KernelKind.ATTENTION_DECODE, KernelKind.MLA_DECODE)
KV_DTYPES = {"fp8": DType.FP8_E4M3, "fp8_e4m3": DType.FP8_E4M3}
MODEL_KV = ("bf16", "bfloat16", "fp16", "float16", "auto")  # the model's dtype (16-bit): the default cache


class WeightPrecision(Enum):
    """What the decoder-layer projections are stored and multiplied in."""

    MODEL = "model"  # the model's dtype (bf16/fp16)
    FP8 = "fp8"  # FP8 E4M3 weights and activations, bf16 out

    @classmethod
    def of_dtype(cls, dtype: str) -> WeightPrecision:
        """`predict(dtype=...)`: "fp8"/"fp8_e4m3" -> FP8, bf16/fp16 -> MODEL.

        >>> WeightPrecision.of_dtype("fp8_e4m3").value
        'fp8'
        """
        return cls.FP8 if dtype.strip().lower() in ("fp8", "fp8_e4m3", "e4m3") else cls.MODEL


def is_weight_gemm(call: KernelCall) -> bool:
    """A decoder layer's projection: a GEMM of one weight matrix (not a batched activation product) or an MoE
    grouped GEMM, inside a layer (the LM head, outside the layers, stays in the model's dtype)."""
    if call.kind not in _WEIGHT_GEMMS or call.layer is None:
        return False
    return call.kind is KernelKind.GROUPED_GEMM or int(call.p("batch", 1)) == 1


def kv_cache_dtype(name: str | None) -> DType | None:
    """`predict(kv_cache=...)`: None (the model's dtype; also "bf16"/"fp16"/"auto") or "fp8"; anything else raises
    naming the valid values."""
    if name is None or name.strip().lower() in MODEL_KV:
        return None
    dt = KV_DTYPES.get(name.strip().lower())
    if dt is None:
        raise ValueError(f"kv_cache {name!r} is not supported; valid: None (the model's dtype), bf16, fp16, fp8")
    return dt


def with_precision(plan: KernelPlan, precision: WeightPrecision, kv_cache: DType | None = None,
                   quant: QuantFormat | None = None, keep: tuple[str, ...] = ()) -> KernelPlan:
    """The plan with its decoder-layer projections in `precision` and, with `kv_cache`, its decode attention reading
    the cache in that dtype (the plan itself for MODEL and no kv_cache). With `quant` (a format other than per-tensor
    FP8, which is `precision` FP8) the projections run in that format: the format's MMA dtype and a `quant` parameter
    the GEMM templates read; projections whose module path matches a `keep` pattern (fnmatch, a checkpoint's
    modules_to_not_convert) stay in the model's dtype.

    >>> from torchsim.lowering.plan import Preset
    >>> c = KernelCall.make(KernelKind.GEMM, m=8, n=64, k=64, layer=0)
    >>> p = KernelPlan((c,), Preset.SERVING, "decode", 1, 1, 8)
    >>> with_precision(p, WeightPrecision.FP8).calls[0].dtype.name
    'FP8_E4M3'
    """
    if precision is WeightPrecision.MODEL and kv_cache is None and quant is None:
        return plan
    fp8 = precision is WeightPrecision.FP8

    def convert(c: KernelCall) -> KernelCall:
        if is_weight_gemm(c) and not _kept(c, keep):
            if quant is not None:
                params = tuple(sorted({**dict(c.params), "quant": quant.name}.items()))
                return replace(c, dtype=quant.mma_dtype(c.dtype), params=params)
            if fp8:
                return replace(c, dtype=DType.FP8_E4M3)
        if kv_cache is not None and c.kind in _CACHE_READERS:
            return replace(c, dtype=kv_cache)
        return c

    return replace(plan, calls=tuple(convert(c) for c in plan.calls))


def _kept(call: KernelCall, keep: tuple[str, ...]) -> bool:
    path = call.module_path or call.name
    return any(fnmatch(path, pat) or fnmatch(path, pat + ".*") for pat in keep)


def weight_bytes(module: Any, precision: WeightPrecision, quant: QuantFormat | None = None,
                 keep: tuple[str, ...] = ()) -> float:
    """Bytes of the model's weights in `precision`: with FP8, matrices inside the decoder layers take one byte
    per element; with `quant`, those matrices take the format's bytes (elements + scales; lowering.quant, K the
    last dimension of each [..., out, in] weight) unless a `keep` pattern matches their name; embeddings, LM head
    and norm vectors keep the model's dtype."""
    total = 0.0
    for name, p in module.named_parameters():
        layer_matrix = ".layers." in f".{name}" and p.dim() >= 2
        if quant is not None and layer_matrix and not any(fnmatch(name, pat + "*") for pat in keep):
            k = int(p.shape[-1])
            total += quant.weight_bytes(k, p.numel() // k)
            continue
        per = p.element_size()
        if precision is WeightPrecision.FP8 and layer_matrix:
            per = 1
        total += p.numel() * per
    return total
