"""The prefill kernels a cold prediction is sure to simulate, named before torch is imported.

A cold `predict` spends its first seconds on one core: importing torch and torch.export, building the model on
the meta device and exporting its layers, before the prefill's kernel calls are known (2.8 s of 6 on the 2-core
machine the project is measured on, for Llama-3-8B). For the Llama-family shapes (torchsim's built-in names, and
HF config.json files of model_type llama, mistral and the families whose GEMMs are Llama's: `_HF_TYPES`, without
biases or a quantisation), the serving preset's
prefill GEMMs are fixed by the shapes alone: QKV fused (N = (heads + 2 KV heads) x head_dim), the output
projection, gate and up fused, down, and the LM head on each sequence's last token; and the causal attention
over the prompt. For Mixtral (built-in names, or a config.json of model_type mixtral): the same attention side,
the router GEMM, and with no routing given the experts' two grouped GEMMs over an even split of the tokens.
`prefill_calls` names them, so that they start simulating on the idle core while the model is captured. Only
calls equal, key for key, to a call of the captured plan are ever used (tests check they are a subset of it); one
that is not is dropped unfinished, and the prediction is the same either way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torchsim.graph.kinds import DType
from torchsim.lowering.kernel_call import KernelCall, KernelKind, even_split

# model_types whose serving-preset prefill GEMMs are Llama's for the same shape fields: torchsim's own (llama,
# mistral: models.llama.LlamaConfig.from_dict) and HF families built by transformers whose extra parts (q/k norms,
# multipliers, GeGLU, fused projections) leave the GEMMs alone (tests/test_speculate.py checks each against its
# capture); qwen2 and stablelm carry a QKV bias, not in any config field: not here
_HF_TYPES = ("llama", "mistral", "qwen3", "granite", "olmo", "olmo2", "phi3", "gemma2", "gemma3_text",
             "mixtral")  # torchsim's own Mixtral (MixtralConfig.from_dict): its attention side is Llama's
_DTYPES = {"bf16": DType.BF16, "bfloat16": DType.BF16, "fp16": DType.FP16, "float16": DType.FP16}
_FP8 = ("fp8", "fp8_e4m3", "e4m3")


def shapes_of(model: Any) -> dict[str, Any] | None:
    """The shape fields of a built-in Llama-family name or of a llama/mistral config.json without biases or a
    quantisation; None for anything else (a module, another family, a file that cannot be read)."""
    from torchsim.models.presets import LLAMA_MODELS, MIXTRAL_MODELS

    if isinstance(model, str) and model.lower() in LLAMA_MODELS:
        return dict(LLAMA_MODELS[model.lower()])
    if isinstance(model, str) and model.lower() in MIXTRAL_MODELS:
        return _mixtral(MIXTRAL_MODELS[model.lower()])
    if not isinstance(model, (str, Path)) or not str(model).endswith(".json"):
        return None
    try:
        data = json.loads(Path(model).read_text())
    except (OSError, ValueError, RecursionError):  # the loader that follows names what is wrong with the file
        return None
    if not isinstance(data, dict) or data.get("model_type") not in _HF_TYPES or data.get("quantization_config") \
            or data.get("attention_bias") or data.get("mlp_bias"):
        return None
    keys = ("hidden_size", "intermediate_size", "num_attention_heads", "vocab_size")
    if not all(isinstance(data.get(k), int) for k in keys):
        return None
    return _mixtral(data) if data["model_type"] == "mixtral" else data


def _mixtral(fields: dict[str, Any]) -> dict[str, Any]:
    """A Mixtral config's fields with MixtralConfig's expert defaults where they are left out."""
    from torchsim.models.presets import MIXTRAL_EXPERTS, MIXTRAL_TOP_K

    return {"num_local_experts": MIXTRAL_EXPERTS, "num_experts_per_tok": MIXTRAL_TOP_K, **fields}


def prefill_calls(model: Any, prof: Any, *, batch: int, prompt_len: int, dtype: str, preset: str, tp: int, ep: int,
                  pp: int, quant: str | None, tune: bool, routing: Any = None) -> list[KernelCall]:
    """The serving preset's prefill GEMMs and causal attention for `model` on one GPU (see the module doc); for a
    Mixtral model its router GEMM and, with no `routing` given (an even split of the tokens, as the lowering
    makes it), its experts' two grouped GEMMs; empty where any argument takes the prediction elsewhere (another
    preset, a mesh of devices, a quantised format, autotuned GEMMs, a Tenstorrent profile, an FP8 MoE)."""
    from torchsim.hwmodels.gpu import GpuProfile

    d = shapes_of(model)
    dt = dtype.strip().lower()
    if d is None or not isinstance(prof, GpuProfile) or preset != "serving" or (tp, ep, pp) != (1, 1, 1) \
            or (quant is not None and quant.strip().lower() not in ("none", "")) or tune \
            or (dt not in _DTYPES and dt not in _FP8):
        return []
    h, inter, hq = int(d["hidden_size"]), int(d["intermediate_size"]), int(d["num_attention_heads"])
    hkv = int(d.get("num_key_value_heads") or hq)
    hd = int(d.get("head_dim") or h // hq)
    model_dt = _DTYPES.get(dt, DType.BF16)
    gemm_dt = DType.FP8_E4M3 if dt in _FP8 else model_dt  # an FP8 checkpoint: the decoder-layer GEMMs
    m = batch * prompt_len

    def gemm(dtype: DType, rows: int, n: int, k: int) -> KernelCall:
        return KernelCall.make(KernelKind.GEMM, dtype, epilogue="none", m=rows, n=n, k=k)

    experts = int(d.get("num_local_experts") or 0)
    if experts and gemm_dt != model_dt:
        return []
    calls = [gemm(gemm_dt, m, (hq + 2 * hkv) * hd, h), gemm(gemm_dt, m, h, hq * hd),
             gemm(model_dt, batch, int(d["vocab_size"]), h)]
    if not experts:
        calls += [gemm(gemm_dt, m, 2 * inter, h), gemm(gemm_dt, m, h, inter)]
    else:  # the router, and each expert's rows: tokens x top_k split evenly, as the lowering splits them
        calls.append(gemm(model_dt, m, experts, h))
        if routing is None:
            tpe = even_split(m * int(d["num_experts_per_tok"]), experts)
            calls += [KernelCall.make(KernelKind.GROUPED_GEMM, model_dt, epilogue="none", k=h, n=2 * inter,
                                      tokens_per_expert=tpe),
                      KernelCall.make(KernelKind.GROUPED_GEMM, model_dt, epilogue="none", k=inter, n=h,
                                      tokens_per_expert=tpe)]
    if not d.get("sliding_window"):
        calls.append(KernelCall.make(KernelKind.ATTENTION_PREFILL, model_dt, batch=batch, causal=True, head_dim=hd,
                                     heads_kv=hkv, heads_q=hq, seq_kv=prompt_len, seq_q=prompt_len))
    return calls
