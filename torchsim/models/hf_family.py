"""Any HF causal LM that transformers builds from its config.json: the model itself, not a torchsim look-alike.

Beside models.llama / models.mixtral (torchsim's own definitions of those families), a `config.json` whose
`model_type` torchsim has no family for (qwen2, qwen3, olmo2, granite, phi3, ...) is read here when the `hf`
extra is installed: transformers builds its `*ForCausalLM` on the meta device (no weights), models.hf_segments
serves it to capture one layer at a time, and the existing lowerings price its ATen ops — whatever the
family's forward code does (QKV biases, q/k norms, extra norms, scalar multipliers) is what is captured.

What capture replaces is named (models.config_fields): torchsim runs attention as a serving runtime does,
causal without a materialised mask, with each layer's sliding window taken from the config
(models.config_fields.layer_window, recorded on the attention call by capture); layer kinds other than full
and sliding-window attention are approximations, and so are quantised weights in a format torchsim does not
model (a format it models, torchsim.lowering.quant, runs as such).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from torchsim.models.config_fields import LAYER_KINDS, check_dtype_fields, conditional_note, quant_of, refuse_unless
from torchsim.models.decoder import DecoderConfig
from torchsim.models.registry import register_builder, register_other_families

# what capture does not take from the family's forward code (models.config_fields.CONDITIONAL holds the checks)
# (sliding windows are modelled: sliding_window, use_sliding_window, max_window_layers, layer_types' two kinds)
_REPLACED = ("quantization_config",)


def _layer_types(value: Any, data: dict[str, Any]) -> str | None:
    if not isinstance(value, list) or all(v in LAYER_KINDS for v in value):
        return None
    kinds = sorted({str(v) for v in value} - LAYER_KINDS)
    return (f"= {kinds}: layers of these kinds are simulated with full causal attention (torchsim models "
            f"{', '.join(sorted(LAYER_KINDS))})")


@dataclass(frozen=True, slots=True)
class HFDecoderConfig(DecoderConfig):
    """Sizes torchsim reads (KV-cache shapes, context) of an HF config, and the config itself (`hf_json`), from
    which the model is built."""

    family: ClassVar[str] = "HF"

    name: str = "hf"
    model_type: str = ""
    hf_json: str = "{}"  # the config.json object as canonical JSON (hashable, so predictions memoise on it)
    latent_kv_width: int = 0  # MLA (DeepSeek-V2/V3): the cache holds one latent row (kv_lora_rank + rope dims)

    def kv_bytes_per_token(self, bytes_per_element: int) -> int:
        """KV-cache bytes one token adds across all layers: K and V per KV head, or MLA's one latent row."""
        if self.latent_kv_width:
            return self.num_hidden_layers * self.latent_kv_width * bytes_per_element
        return DecoderConfig.kv_bytes_per_token(self, bytes_per_element)  # (slots: no zero-argument super)

    def mlp_param_count(self) -> int:
        raise NotImplementedError("an HF family's parameters are counted on its built module "
                                  "(lowering.precision.weight_bytes)")


def hf_family_config(data: dict[str, Any], name: str, *, approximate: bool = False) -> HFDecoderConfig:
    """The config of an HF causal LM torchsim has no own family for; ValueError when transformers has no causal
    LM for its model_type, ImportError naming the `hf` extra without transformers."""
    from torchsim.models.hf import require_transformers

    transformers = require_transformers()
    model_type = str(data.get("model_type", ""))
    if model_type not in transformers.CONFIG_MAPPING:
        raise ValueError(f"model_type {model_type!r} is not one transformers {transformers.__version__} knows")
    if transformers.CONFIG_MAPPING[model_type] not in transformers.MODEL_FOR_CAUSAL_LM_MAPPING:
        raise ValueError(f"model_type {model_type!r} has no causal-LM class in transformers "
                         f"{transformers.__version__}: torchsim predicts decoder-only causal LMs")
    check_dtype_fields(data, name)  # transformers getattr()s torch for it: an AttributeError otherwise
    hf_cfg = _hf_config(transformers, data)
    notes = [n for k in _REPLACED if k in data and (n := conditional_note(k, data)) is not None]
    if "layer_types" in data and (why := _layer_types(data["layer_types"], data)):
        notes.append(f"layer_types {why}")
    approximations = refuse_unless(notes, name, approximate=approximate)
    quant, keep = quant_of(data)  # a modelled quantization_config: the format the GEMMs run in
    heads = hf_cfg.num_attention_heads
    head_dim = getattr(hf_cfg, "head_dim", None) or hf_cfg.hidden_size // heads
    rope = getattr(hf_cfg, "rope_parameters", None) or {}
    theta = getattr(hf_cfg, "rope_theta", None) or (rope.get("rope_theta") if isinstance(rope, dict) else None)
    return HFDecoderConfig(
        hidden_size=hf_cfg.hidden_size, intermediate_size=hf_cfg.intermediate_size,
        num_hidden_layers=hf_cfg.num_hidden_layers, num_attention_heads=heads,
        num_key_value_heads=getattr(hf_cfg, "num_key_value_heads", None) or heads, vocab_size=hf_cfg.vocab_size,
        max_position_embeddings=hf_cfg.max_position_embeddings, rope_theta=float(theta or 10000.0),
        rms_norm_eps=float(getattr(hf_cfg, "rms_norm_eps", None) or 1e-6),
        tie_word_embeddings=bool(getattr(hf_cfg, "tie_word_embeddings", False)),
        head_dim=head_dim if head_dim * heads != hf_cfg.hidden_size else None, name=name,
        approximations=approximations, quant=quant, quant_keep=keep, model_type=model_type,
        hf_json=json.dumps(data, sort_keys=True),
        latent_kv_width=(int(hf_cfg.kv_lora_rank) + int(hf_cfg.qk_rope_head_dim)
                         if getattr(hf_cfg, "kv_lora_rank", None) else 0))


def _hf_config(transformers: Any, data: dict[str, Any]) -> Any:
    fields = {k: v for k, v in data.items() if k not in ("model_type", "architectures", "transformers_version")}
    try:
        return transformers.AutoConfig.for_model(data["model_type"], **fields)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"transformers refuses the config: {exc}") from None


def build_hf_family(cfg: HFDecoderConfig) -> Any:
    """The family's HF `*ForCausalLM` in bf16 on the current device, as torchsim segments: SDPA attention, or
    `torchsim::attention` (lowering.attention_ops) for families transformers runs only with eager attention."""
    import torch

    from torchsim.models.hf import enable_sdpa_gqa, require_transformers
    from torchsim.models.hf_segments import FUSED_ATTENTION, HFSegmented, register_fused_attention

    transformers = require_transformers()
    hf_cfg = _hf_config(transformers, json.loads(cfg.hf_json))
    model_class = transformers.MODEL_FOR_CAUSAL_LM_MAPPING[type(hf_cfg)]
    if getattr(model_class, "_supports_sdpa", True):
        hf_cfg._attn_implementation = "sdpa"
    else:  # eager-only attention (Gemma-2's soft-capping, gpt-oss's sinks): one fused attention op, as served
        register_fused_attention()
        hf_cfg._attn_implementation = FUSED_ATTENTION
    if any(getattr(hf_cfg, k, None) for k in ("num_experts", "num_local_experts", "n_routed_experts")):
        hf_cfg._experts_implementation = "grouped_mm"  # MoE families: one grouped GEMM per expert projection
    enable_sdpa_gqa()
    model = transformers.AutoModelForCausalLM.from_config(hf_cfg).to(torch.bfloat16).eval()
    return HFSegmented(model, config=cfg)


register_builder(HFDecoderConfig, build_hf_family)
register_other_families(hf_family_config)
