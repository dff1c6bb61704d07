"""HuggingFace transformers (v5) models for torchsim: the optional extra `torchsim[hf]`.

Sits beside models.llama / models.mixtral at the start of the pipeline: maps a torchsim config to the HF
config, builds `LlamaForCausalLM` / `MixtralForCausalLM` on the meta device with SDPA GQA (K/V stay at
kv_heads) and grouped_mm experts, and gives the kwargs that torch.export needs. transformers is imported lazily.
"""

from __future__ import annotations

import os
from dataclasses import fields
from types import ModuleType
from typing import Any

import torch

from torchsim import MissingExtraError
from torchsim.models.llama import LlamaConfig
from torchsim.models.mixtral import MixtralConfig

MIN_TRANSFORMERS = (5, 0)
HF_EXTRA_HINT = "pip install 'torchsim[hf]' (transformers>=5 and accelerate)"
# transformers' SDPA integration reads this at call time: 1 -> enable_gqa=True with the causal mask, so K/V are
# not repeated to all query heads (otherwise the CPU/meta path adds repeat_kv = 4x the KV traffic in the graph).
GQA_ENV = "TRANSFORMERS_SDPA_FORCE_GQA"

TorchsimConfig = LlamaConfig | MixtralConfig


def require_transformers() -> ModuleType:
    """Import transformers, or raise ImportError saying how to install the `hf` extra."""
    try:
        import transformers
    except ModuleNotFoundError as exc:
        if exc.name != "transformers":
            raise MissingExtraError(f"transformers is installed but needs {exc.name!r}, which is not: "
                                    f"{HF_EXTRA_HINT}") from None
        raise MissingExtraError(f"HuggingFace models need the optional transformers package: {HF_EXTRA_HINT}") \
            from None
    except ImportError as exc:  # installed but broken (a version conflict among its dependencies)
        raise MissingExtraError(f"transformers is installed but fails to import ({exc}); reinstall it: "
                                f"{HF_EXTRA_HINT}") from None
    version = tuple(int(p) for p in transformers.__version__.split(".")[:2] if p.isdigit())
    if version < MIN_TRANSFORMERS:
        raise MissingExtraError(f"transformers {transformers.__version__} is too old: torchsim captures HF models with "
                          f"torch.export, which needs transformers>=5 ({HF_EXTRA_HINT})")
    return transformers


def enable_sdpa_gqa() -> None:
    """Make HF attention call SDPA with enable_gqa=True (sets TRANSFORMERS_SDPA_FORCE_GQA=1 for this process)."""
    os.environ[GQA_ENV] = "1"


def to_hf_config(cfg: TorchsimConfig) -> Any:
    """The transformers config for a torchsim LlamaConfig or MixtralConfig (SDPA attention, grouped_mm experts)."""
    transformers = require_transformers()
    common: dict[str, Any] = {
        "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers, "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads, "head_dim": cfg.head_dim_value,
        "vocab_size": cfg.vocab_size, "max_position_embeddings": cfg.max_position_embeddings,
        "rope_theta": float(cfg.rope_theta), "rms_norm_eps": cfg.rms_norm_eps,
        "tie_word_embeddings": cfg.tie_word_embeddings, "attn_implementation": "sdpa"}
    if isinstance(cfg, MixtralConfig):
        return transformers.MixtralConfig(num_local_experts=cfg.num_local_experts,
                                          num_experts_per_tok=cfg.num_experts_per_tok, sliding_window=None,
                                          experts_implementation="grouped_mm", **common)
    if isinstance(cfg, LlamaConfig) and cfg.sliding_window is not None:  # Mistral: Llama with a sliding window
        return transformers.MistralConfig(sliding_window=cfg.sliding_window, **common)
    if isinstance(cfg, LlamaConfig):
        return transformers.LlamaConfig(**common)
    raise TypeError(f"no HF mapping for config type {type(cfg).__name__}; known: LlamaConfig, MixtralConfig")


def from_hf_config(hf_cfg: Any, name: str = "", *, approximate: bool = False) -> TorchsimConfig:
    """The torchsim config for an HF config object (v5 `rope_parameters` or v4 `rope_theta` both read). The
    fields every transformers config carries (output flags, label maps, ...) are left out; a model field
    torchsim cannot model is an error unless `approximate` (models.config_fields)."""
    generic = set(require_transformers().PretrainedConfig().to_dict())
    modelled = {f.name for cls in (LlamaConfig, MixtralConfig) for f in fields(cls)}
    full = hf_cfg.to_dict()
    data = {k: v for k, v in full.items() if k in modelled or k not in generic}
    rope = data.get("rope_parameters") or {}
    if "rope_theta" not in data and isinstance(rope, dict) and "rope_theta" in rope:
        data["rope_theta"] = rope["rope_theta"]
    heads = data.get("num_attention_heads")
    if isinstance(heads, int) and heads > 0 and data.get("head_dim") == data.get("hidden_size", 0) // heads:
        data.pop("head_dim")  # HF always writes the default head_dim; torchsim keeps None for "hidden / heads"
    model_type = full.get("model_type", "")
    if model_type == "mixtral":
        return MixtralConfig.from_dict(data, name or "hf-mixtral", approximate=approximate)
    if model_type in ("llama", "mistral"):
        return LlamaConfig.from_dict(data, name or f"hf-{model_type}", approximate=approximate)
    raise ValueError(f"HF model_type {model_type!r} has no torchsim family; supported: llama, mistral, mixtral")


def build_hf_model(cfg: TorchsimConfig | str, *, device: str | torch.device = "meta",
                   dtype: torch.dtype = torch.bfloat16) -> Any:
    """HF `LlamaForCausalLM` / `MixtralForCausalLM` for a torchsim config or name, on `device` (meta: no memory).

    >>> m = build_hf_model("llama-tiny")                                  # doctest: +SKIP
    >>> type(m).__name__, m.model.embed_tokens.weight.device.type         # doctest: +SKIP
    ('LlamaForCausalLM', 'meta')
    """
    from torchsim.models.registry import get_config

    config: TorchsimConfig = get_config(cfg) if isinstance(cfg, str) else cfg
    transformers = require_transformers()
    hf_cfg = to_hf_config(config)
    enable_sdpa_gqa()
    cls = (transformers.MixtralForCausalLM if isinstance(config, MixtralConfig) else transformers.MistralForCausalLM
           if isinstance(hf_cfg, transformers.MistralConfig) else transformers.LlamaForCausalLM)
    with torch.device(device):
        return cls(hf_cfg).to(dtype).eval()


def hf_step_kwargs(model: Any, batch: int, q_len: int, past_len: int = 0) -> dict[str, Any]:
    """torch.export kwargs for one step of an HF causal LM: `q_len` new tokens after a `past_len` KV cache.

    past_len 0: `input_ids` and `use_cache=False` (prefill). Otherwise a DynamicCache of `past_len` entries per
    layer is passed (registered as an export input via transformers' executorch helper). `logits_to_keep=1`:
    the LM head runs on each sequence's last token only, as serving runtimes (and torchsim's own models) do.
    """
    for label, n in (("batch", batch), ("q_len", q_len)):
        if n <= 0:
            raise ValueError(f"{label} must be > 0, got {n}")
    if past_len < 0:
        raise ValueError(f"past_len must be >= 0, got {past_len}")
    transformers = require_transformers()
    cfg = model.config
    weight = model.get_input_embeddings().weight
    ids = torch.zeros(batch, q_len, dtype=torch.long, device=weight.device)
    if past_len == 0:
        return {"input_ids": ids, "use_cache": False, "logits_to_keep": 1}
    from transformers.integrations.executorch import register_dynamic_cache_export_support

    register_dynamic_cache_export_support()
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    cache = transformers.DynamicCache(config=cfg)
    for layer in range(cfg.num_hidden_layers):
        kv = torch.zeros(batch, cfg.num_key_value_heads, past_len, head_dim, dtype=weight.dtype, device=weight.device)
        cache.update(kv, kv.clone(), layer)
    return {"input_ids": ids, "past_key_values": cache, "use_cache": True, "logits_to_keep": 1}


def export_hf(model: Any, batch: int, q_len: int, past_len: int = 0) -> torch.export.ExportedProgram:
    """torch.export an HF causal LM (built by build_hf_model) for one step; GQA stays in SDPA."""
    enable_sdpa_gqa()
    return torch.export.export(model, (), kwargs=hf_step_kwargs(model, batch, q_len, past_len))
