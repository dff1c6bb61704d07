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
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from torchsim.models.config_fields import (
    LAYER_KINDS,
    check_activation,
    check_ignored,
    conditional_note,
    quant_of,
    refuse_unless,
)
from torchsim.models.decoder import DecoderConfig
from torchsim.models.jsonfile import shown
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
        raise ValueError(f"model_type {shown(model_type)} is not one transformers {transformers.__version__} knows")
    if transformers.CONFIG_MAPPING[model_type] not in transformers.MODEL_FOR_CAUSAL_LM_MAPPING:
        raise ValueError(f"model_type {shown(model_type)} has no causal-LM class in transformers "
                         f"{transformers.__version__}: torchsim predicts decoder-only causal LMs")
    model_class = transformers.MODEL_FOR_CAUSAL_LM_MAPPING[transformers.CONFIG_MAPPING[model_type]]
    if model_type in NOT_YET:
        raise ValueError(f"model_type {shown(model_type)} is not supported yet: {NOT_YET[model_type]}; supported: "
                         f"{SUPPORTED}")
    if getattr(model_class, "base_model_prefix", "") != "model":  # GPT-2 (.transformer.h), Mamba (.backbone), BERT
        raise ValueError(f"model_type {shown(model_type)} is not supported: torchsim captures HF causal LMs laid "
                         f"out as "
                         f"model.layers + lm_head, and {model_class.__name__} keeps its decoder in "
                         f".{getattr(model_class, 'base_model_prefix', '?')}; supported: {SUPPORTED}, and other "
                         "families of that layout")
    check_ignored(data, name)  # RoPE, dtype (transformers getattr()s torch for it: an AttributeError otherwise)
    from transformers.activations import ACT2FN

    check_activation(data, name, set(ACT2FN))
    _check_sizes(data, name)
    hf_cfg = _hf_config(transformers, data, name)
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


# families the tests build from their public config.json (tests/test_hf_families.py, tests/data/hf_configs) or
# from a small one (qwen2_moe: tests/test_robustness_hf.py)
SUPPORTED = ("deepseek_v2, deepseek_v3, gemma2, gemma3_text, gpt_oss, granite, olmo, olmo2, phi3, phimoe, qwen2, "
             "qwen2_moe, qwen3, qwen3_moe, stablelm, starcoder2")
# families of the model.layers layout whose blocks torchsim cannot lower yet (refused before the capture)
NOT_YET: dict[str, str] = {}
# integer sizes every decoder has (null allowed: head_dim); transformers' strict configs check the type only
_SIZES = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
          "vocab_size", "max_position_embeddings", "head_dim")
_EXPERTS = ("num_experts", "num_local_experts", "n_routed_experts")  # the MoE families' expert counts


def _positive_int(data: dict[str, Any], key: str, name: str) -> int | None:
    value = data.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"model config {name!r}: field {key!r} must be an integer >= 1, got "
                         f"{json.dumps(value)[:40]}")
    return value


def _check_sizes(data: dict[str, Any], name: str) -> None:
    """The sizes, layer kinds and expert counts, before transformers sees them: its validators name the field at
    best, and a zero, a top-k over the experts or a short `layer_types` fails later, in the model's forward
    (a division by zero, `topk` out of range inside torch.export)."""
    for key in _SIZES:
        _positive_int(data, key, name)
    layers, kinds = data.get("num_hidden_layers"), data.get("layer_types")
    if kinds is not None and (not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds)
                              or (isinstance(layers, int) and len(kinds) != layers)):
        raise ValueError(f"model config {name!r}: field 'layer_types' must be a list of {layers} layer kinds (one "
                         f"per layer, num_hidden_layers; e.g. \"full_attention\", \"sliding_attention\"), got "
                         f"{json.dumps(kinds)[:60]}")
    for key in _EXPERTS:
        experts = data.get(key)
        if experts is None:
            continue
        if isinstance(experts, bool) or not isinstance(experts, int) or experts < 1:
            raise ValueError(f"model config {name!r}: field {key!r} must be an integer >= 1 (the routed experts of "
                             "each MoE layer; a dense model is its dense family, e.g. qwen2), got "
                             f"{json.dumps(experts)[:40]}")
        top_k = _positive_int(data, "num_experts_per_tok", name)
        if top_k is not None and top_k > experts:
            raise ValueError(f"model config {name!r}: field 'num_experts_per_tok' ({top_k}) must be at most "
                             f"{key} ({experts}): a token is routed to that many distinct experts")
        groups, top_groups = _positive_int(data, "n_group", name), _positive_int(data, "topk_group", name)
        if groups is not None and (experts % groups or (top_groups or 0) > groups):  # DeepSeek-V3's group routing
            raise ValueError(f"model config {name!r}: field 'n_group' ({groups}) must divide {key} ({experts}) and "
                             f"be at least topk_group ({top_groups}): the router picks topk_group of n_group equal "
                             "groups of experts")


def _one_line(exc: BaseException) -> tuple[str | None, str]:
    """The field a transformers / huggingface_hub validation error names (its strict dataclasses: "field
    'hidden_size'"; its validators: "`num_hidden_layers` ..."), and the message on one line."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    found = re.search(r"field '(\w+)'", text) or re.search(r"`(\w+)`", text)
    return (found.group(1) if found else None), text


def _hf_config(transformers: Any, data: dict[str, Any], name: str) -> Any:
    """transformers' config object for `data`; what its constructor or validators raise is the file's fault
    (a field of the wrong type or value), so it becomes a ValueError naming the field where it can be found."""
    fields = {k: v for k, v in data.items() if k not in ("model_type", "architectures", "transformers_version")}
    try:
        hf_cfg = transformers.AutoConfig.for_model(data["model_type"], **fields)
    except Exception as exc:  # TypeError, ValueError, KeyError, AttributeError, huggingface_hub's StrictDataclassError
        if not isinstance(exc, (TypeError, ValueError, KeyError, AttributeError)) and \
                type(exc).__module__.split(".")[0] not in ("transformers", "huggingface_hub"):
            raise
        field, text = _one_line(exc)
        where = f"field {field!r}: " if field else ""
        raise ValueError(f"model config {name!r}: {where}transformers refuses the config: {text}") from None
    _neutralise_padding(hf_cfg)
    return hf_cfg


def _neutralise_padding(hf_cfg: Any) -> None:
    """Drop a pad_token_id outside [0, vocab_size): the family's nn.Embedding asserts on it, but padding is
    never used in a prediction (no padded batches), so such a config is valid here. It happens with a small
    vocabulary and a family default (phi3's pad_token_id 32000 when the file gives none) or a file's own id
    of a tokenizer token past the table."""
    pad, vocab = getattr(hf_cfg, "pad_token_id", None), getattr(hf_cfg, "vocab_size", None)
    if pad is None or not isinstance(vocab, int):
        return
    if isinstance(pad, bool) or not isinstance(pad, int) or not 0 <= pad < vocab:
        hf_cfg.pad_token_id = None


def build_hf_family(cfg: HFDecoderConfig) -> Any:
    """The family's HF `*ForCausalLM` in bf16 on the current device, as torchsim segments: SDPA attention, or
    `torchsim::attention` (lowering.attention_ops) for families transformers runs only with eager attention."""
    import torch

    from torchsim.models.hf import enable_sdpa_gqa, require_transformers
    from torchsim.models.hf_segments import FUSED_ATTENTION, HFSegmented, register_fused_attention

    transformers = require_transformers()
    hf_cfg = _hf_config(transformers, json.loads(cfg.hf_json), cfg.name)
    model_class = transformers.MODEL_FOR_CAUSAL_LM_MAPPING[type(hf_cfg)]
    if getattr(model_class, "_supports_sdpa", True):
        hf_cfg._attn_implementation = "sdpa"
    else:  # eager-only attention (Gemma-2's soft-capping, gpt-oss's sinks): one fused attention op, as served
        register_fused_attention()
        hf_cfg._attn_implementation = FUSED_ATTENTION
    if any(getattr(hf_cfg, k, None) for k in ("num_experts", "num_local_experts", "n_routed_experts")):
        hf_cfg._experts_implementation = "grouped_mm"  # MoE families: one grouped GEMM per expert projection
    enable_sdpa_gqa()
    try:  # the config passed transformers' validators; what its modules' constructors refuse is still the file's
        model = transformers.AutoModelForCausalLM.from_config(hf_cfg).to(torch.bfloat16).eval()
        return HFSegmented(model, config=cfg)
    except (TypeError, ValueError, KeyError, AttributeError, ZeroDivisionError) as exc:
        field, text = _one_line(exc)
        where = f"field {field!r}: " if field else ""
        raise ValueError(f"model config {cfg.name!r} (model_type {shown(cfg.model_type)}): {where}transformers cannot "
                         f"build the model: {text}") from None


register_builder(HFDecoderConfig, build_hf_family)
register_other_families(hf_family_config)
