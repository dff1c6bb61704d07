"""Which fields of an HF `config.json` torchsim models, which it may ignore, and which it cannot model.

A field that changes the computation or the memory a model needs is either modelled (a field of the family's
config class) or named: a config holding one is refused with the field, its value and what torchsim would do
instead, unless the caller accepts approximations (`approximate=True`, `--approximate` on the command line);
then each one is kept on the config (`DecoderConfig.approximations`) and listed with the prediction's
assumptions. Nothing is dropped without a word.

>>> screen_fields({"hidden_size": 64, "use_cache": True}, {"hidden_size"}, "m", approximate=False)
()
>>> screen_fields({"attention_bias": True}, set(), "m", approximate=True)
('attention_bias = true: the q/k/v/o projection biases are not simulated (one bias add per projection)',)
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from torchsim.lowering.quant import FORMATS, format_of_config

# Fields that do not change inference work or memory: metadata, tokenizer ids, training-only settings.
IGNORED = frozenset({
    "architectures", "model_type", "transformers_version", "_name_or_path", "auto_map", "torch_dtype", "dtype",
    "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "use_cache", "attention_dropout",
    "pretraining_tp",  # splits the projections during pre-training only (HF LlamaConfig docs)
    "output_router_logits", "router_aux_loss_coef", "router_jitter_noise",  # training losses and noise (Mixtral)
    # RoPE scaling (llama3, linear, dynamic, yarn) changes the rotation frequencies, not the work per token;
    # transformers v5 writes rope_theta inside rope_parameters
    "rope_scaling", "rope_parameters",
})


def _window(value: Any, data: dict[str, Any]) -> str | None:
    context = data.get("max_position_embeddings")
    if value is None or (isinstance(context, int) and isinstance(value, int) and value >= context):
        return None  # no window, or one that never binds
    return (f"sliding_window = {json.dumps(value)}: this family's torchsim definition simulates full causal "
            "attention (a window shortens the KV each query reads once the sequence is longer than the window; "
            "the Llama/Mistral definition and the HF path model it)")


# The layer kinds of HF `layer_types` torchsim models: full causal and sliding-window attention.
LAYER_KINDS = frozenset({"full_attention", "sliding_attention"})


def layer_window(config: Any, layer: int) -> int | None:
    """The sliding window of decoder layer `layer` of an HF config object, None for full attention.

    Per-layer families list each layer's kind in `layer_types` (Gemma-2/3, gpt-oss; Qwen2/Qwen3 derive it from
    use_sliding_window and max_window_layers); the others apply `sliding_window` in every layer (Mistral,
    Phi-3, Starcoder2).

    >>> from types import SimpleNamespace as C
    >>> [layer_window(C(sliding_window=8, layer_types=["sliding_attention", "full_attention"]), i) for i in (0, 1)]
    [8, None]
    >>> layer_window(C(sliding_window=4096), 5), layer_window(C(sliding_window=None), 0)
    (4096, None)
    """
    window = getattr(config, "sliding_window", None)
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        return None
    if getattr(config, "use_sliding_window", True) is False:
        return None
    types = getattr(config, "layer_types", None)
    if isinstance(types, (list, tuple)) and 0 <= layer < len(types):
        return window if types[layer] == "sliding_attention" else None
    return window


def _flag(meaning: str) -> Callable[[Any, dict[str, Any]], str | None]:
    def check(value: Any, data: dict[str, Any]) -> str | None:
        return None if value is False or value is None else f"= {json.dumps(value)}: {meaning}"
    return check


def _act(value: Any, data: dict[str, Any]) -> str | None:
    if value == "silu":
        return None
    return f"= {json.dumps(value)}: the MLP is simulated as SwiGLU (silu), the activation torchsim models"


# Fields torchsim does not model that are harmless at one value (no bias, no window, silu) and not otherwise.
CONDITIONAL: dict[str, Callable[[Any, dict[str, Any]], str | None]] = {
    "sliding_window": _window,
    "use_sliding_window": _flag("sliding-window attention is not simulated (full causal attention is)"),
    "max_window_layers": lambda v, d: None if not d.get("use_sliding_window") else
    f"= {json.dumps(v)}: per-layer sliding windows are not simulated",
    "attention_bias": _flag("the q/k/v/o projection biases are not simulated (one bias add per projection)"),
    "mlp_bias": _flag("the MLP projection biases are not simulated (one bias add per projection)"),
    "hidden_act": _act,
    "quantization_config": lambda v, d: None if v is None or format_of_config(v)[0] else
    f"= {json.dumps(v)[:80]}: the weights are simulated in the --dtype format, not in this quantisation "
    f"({format_of_config(v)[1]} is not modelled; torchsim models {', '.join(FORMATS)}: --quant)",
}


QUANT_FIELDS = ("quant", "quant_keep")  # the DecoderConfig fields quant_of's two values fill


def quant_of(data: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    """The weight format a config's quantization_config names (torchsim.lowering.quant) and the module patterns
    it leaves unquantised (its modules_to_not_convert, HF parameter-name patterns); ("", ()) when it names none
    torchsim models (then the field is an approximation, CONDITIONAL).

    >>> quant_of({"quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["lm_head"]}})
    ('mxfp4', ('lm_head',))
    """
    qc = data.get("quantization_config")
    name = format_of_config(qc)[0] if isinstance(qc, dict) else None
    if not name or not isinstance(qc, dict):
        return "", ()
    key = "modules_to_not_convert" if qc.get("modules_to_not_convert") else "ignore"
    keep = qc.get(key) or []
    if not isinstance(keep, list) or not all(isinstance(k, str) for k in keep):
        raise ValueError(f"field 'quantization_config.{key}' must be a list of module names (e.g. [\"lm_head\"]) "
                         f"or null, got {json.dumps(keep)[:60]}")
    # HF names start at the model ("model.layers.*.self_attn"); torchsim's module paths at the layers
    return name, tuple(k.removeprefix("model.") for k in keep)


def conditional_note(key: str, data: dict[str, Any]) -> str | None:
    """The approximation a CONDITIONAL field's value needs, as one line starting with the field; None if none."""
    why = CONDITIONAL[key](data[key], data)
    return None if why is None else why if why.startswith(key) else f"{key} {why}"


def _finite_numbers(value: Any) -> bool:
    """Every number in `value` (nested lists/objects, as phi-3's longrope factor lists) is finite; no booleans."""
    if isinstance(value, bool):
        return True
    if isinstance(value, (int, float)):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite_numbers(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite_numbers(v) for v in value)
    return True


# RoPE types transformers v5 builds (modeling_rope_utils: ROPE_INIT_FUNCTIONS and the families' own: Qwen2-VL's
# mrope, Hunyuan's ntk_alpha / xdrope, the axial default, Phi-3's legacy "su" for longrope)
ROPE_TYPES = frozenset({"default", "linear", "dynamic", "yarn", "longrope", "llama3", "proportional", "axial",
                        "mrope", "ntk_alpha", "xdrope", "su"})

# The activation names transformers' ACT2FN maps (transformers.activations, v5); hidden_act must be one of them
ACTIVATIONS = frozenset({
    "gelu", "gelu_10", "gelu_accurate", "gelu_fast", "gelu_new", "gelu_python", "gelu_python_tanh",
    "gelu_pytorch_tanh", "hardswish", "laplace", "leaky_relu", "linear", "mish", "prelu", "quick_gelu", "relu",
    "relu2", "relu6", "sigmoid", "silu", "sqrtsoftplus", "swish", "tanh", "xielu",
})


def _check_rope(key: str, value: Any, name: str) -> None:
    """One RoPE object: a known type (`rope_type`, or v4's `type`) and a finite positive factor. RoPE scaling
    changes no work, but a type transformers has no function for fails when the model is built."""
    if not isinstance(value, dict):
        raise ValueError(f"model config {name!r}: field {key!r} must be an object (e.g. {{\"rope_type\": "
                         f"\"linear\", \"factor\": 2.0}}) or null, got {json.dumps(value)[:60]}")
    if value and all(isinstance(v, dict) or v is None for v in value.values()):  # v5: one per layer type
        for kind, sub in value.items():
            if sub is not None:
                _check_rope(f"{key}.{kind}", sub, name)
        return
    kind = value.get("rope_type", value.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise ValueError(f"model config {name!r}: field {key!r}: rope type {json.dumps(kind)[:40]} is not one "
                         f"transformers builds; valid: {', '.join(sorted(ROPE_TYPES))}")
    factor = value.get("factor")
    if factor is not None and (isinstance(factor, bool) or not isinstance(factor, (int, float))
                               or not math.isfinite(factor) or factor <= 0):
        raise ValueError(f"model config {name!r}: field {key!r}: 'factor' must be a finite number > 0, got "
                         f"{factor!r}")
    if not _finite_numbers(value):
        raise ValueError(f"model config {name!r}: field {key!r} holds a NaN or infinite number: "
                         f"{json.dumps(value)[:80]}")


def check_activation(data: dict[str, Any], name: str, valid: frozenset[str] | set[str] = ACTIVATIONS) -> None:
    """`hidden_act` (Gemma: `hidden_activation`) names an activation transformers has (`valid`, by default
    ACTIVATIONS): an unknown name is a damaged file, not an activation to approximate."""
    for key in ("hidden_act", "hidden_activation"):
        value = data.get(key)
        if value is not None and (not isinstance(value, str) or value not in valid):
            raise ValueError(f"model config {name!r}: field {key!r}: {json.dumps(value)[:40]} is not an "
                             f"activation transformers has; valid: {', '.join(sorted(valid))}")


def check_ignored(data: dict[str, Any], name: str) -> None:
    """The IGNORED fields whose form is known are still checked: they do not change the prediction, but a config
    with `rope_scaling = "yarn"`, a NaN or negative scaling factor, a RoPE type transformers lacks, an unknown
    `hidden_act` or `torch_dtype = 5` is a damaged file, and is refused naming the field rather than predicted
    as if it were sound."""
    for key in ("rope_scaling", "rope_parameters"):
        if data.get(key) is not None:
            _check_rope(key, data[key], name)
    check_activation(data, name)
    check_dtype_fields(data, name)


def check_dtype_fields(data: dict[str, Any], name: str) -> None:
    """A config's `torch_dtype` / `dtype` is null or a torch dtype name (transformers looks it up on torch).

    It is the checkpoint's storage dtype: the model is simulated in --dtype (a float32 checkpoint is served in
    bf16), so it changes no prediction, except float64, which no serving runtime casts down unasked and torchsim
    cannot simulate (no fp64 GEMM or attention kernels): refused rather than counted at 2 bytes."""
    for key in ("torch_dtype", "dtype"):
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise ValueError(f"model config {name!r}: field {key!r} must be a dtype name such as \"bfloat16\" or "
                             f"null, got {value!r}")
        if isinstance(value, str) and value.removeprefix("torch.") not in CONFIG_DTYPES:
            raise ValueError(f"model config {name!r}: field {key!r}: {value[:40]!r} is not a torch dtype "
                             f"transformers reads; valid: {', '.join(sorted(CONFIG_DTYPES))}")
        if isinstance(value, str) and value.removeprefix("torch.") in NOT_CHECKPOINT_DTYPES:
            raise ValueError(f"model config {name!r}: field {key!r}: {value!r} is not a checkpoint dtype (a decoder's "
                             "weights are floating point; quantised int weights are described by "
                             "quantization_config); valid: bfloat16, float16, float32, float8_e4m3fn, float8_e5m2, "
                             "auto or null")
        if isinstance(value, str) and value.removeprefix("torch.") in ("float64", "double"):
            raise ValueError(f"model config {name!r}: field {key!r}: {value!r} weights are not simulated (torchsim "
                             "runs the model in --dtype bf16, fp16 or fp8 and has no float64 kernels); a checkpoint "
                             "served in those has torch_dtype bfloat16, float16 or float32")


# integer and boolean torch dtypes: names torch has, but never a decoder checkpoint's storage dtype
NOT_CHECKPOINT_DTYPES = frozenset({"int8", "uint8", "int16", "int32", "int64", "bool"})
# the dtype names a config's `torch_dtype` / `dtype` may hold: torch's floating and integer dtypes by name (the
# attribute transformers looks up with getattr(torch, name)) and "auto"
CONFIG_DTYPES = frozenset({
    "auto", "float16", "half", "bfloat16", "float32", "float", "float64", "double", "float8_e4m3fn", "float8_e5m2",
    "float8_e4m3fnuz", "float8_e5m2fnuz", "int8", "uint8", "int16", "int32", "int64", "bool",
})


def screen_fields(data: dict[str, Any], modelled: set[str], name: str, *, approximate: bool) -> tuple[str, ...]:
    """The approximations a config's fields need, each as one line; a ValueError naming them all unless
    `approximate`. `modelled`: the field names the family's config class reads. The ignored fields with a known
    form are checked first (`check_ignored`)."""
    check_ignored(data, name)
    notes: list[str] = []
    for key in sorted(data):
        if key in modelled or key in IGNORED:
            continue
        if key in CONDITIONAL:
            if (why := conditional_note(key, data)) is not None:
                notes.append(why)
        else:
            notes.append(f"{key} = {json.dumps(data[key])[:60]}: a field torchsim does not know; it is ignored "
                         "(it may change the computation)")
    return refuse_unless(notes, name, approximate=approximate)


def refuse_unless(notes: list[str], name: str, *, approximate: bool) -> tuple[str, ...]:
    """`notes` as the config's approximations, or a ValueError naming them all unless `approximate`."""
    if notes and not approximate:
        raise ValueError(f"model config {name!r} has field(s) torchsim cannot model: " + "; ".join(notes)
                         + ". Pass --approximate (approximate=True) to predict anyway, with each approximation "
                         "listed in the output")
    return tuple(notes)
