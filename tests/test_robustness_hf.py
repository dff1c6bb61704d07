"""Issue 14 regression corpus (HF configs and quantisation): each damaged config.json is one stderr line naming
the file and the field, exit 2 — not an internal error (exit 70), a traceback, or a silent prediction.

Covers what a hostile probe found: compressed-tensors groups of the wrong JSON type, GPTQ `bits` as 4.0 / "4" /
3, `quantization_config: null` (no quantisation, accepted); HF-family fields transformers refuses in its own
words or not at all (a string size, a short `layer_types`, a string or unknown RoPE scaling, a top-k over the
experts, zero experts, GPT-2 / Mamba / BERT layouts); a 5000-digit number and a repeated key; an unknown
`hidden_act`; a float64 checkpoint; an empty model argument. And a Qwen2-MoE's parameters count its experts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cli_errors import one_line

BASE: dict[str, Any] = {
    "model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 2,
    "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 4096, "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5, "rope_theta": 500000.0}
MOE: dict[str, Any] = {"model_type": "qwen2_moe", "num_experts": 4, "num_experts_per_tok": 2,
                       "moe_intermediate_size": 256, "shared_expert_intermediate_size": 512}


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "probe" / "config.json"
    path.parent.mkdir()
    path.write_text(text)
    return path


def _predict(path: Path) -> list[str]:
    return ["predict", str(path), "--prompt", "16", "--decode", "2"]


def _ct(groups: Any) -> dict[str, Any]:
    return {"quantization_config": {"quant_method": "compressed-tensors", "config_groups": groups}}


INT8 = {"num_bits": 8, "type": "int"}


@pytest.mark.parametrize(("fields", "words"), [
    (_ct("x"), ["quantization_config.config_groups", "must be an object", "'x'"]),
    (_ct([1, 2]), ["quantization_config.config_groups", "must be an object", "a list"]),
    (_ct(5), ["quantization_config.config_groups", "an integer"]),
    (_ct({"g": "x"}), ["quantization_config.config_groups.g", "must be an object"]),
    (_ct({"g": {"weights": "x"}}), ["quantization_config.config_groups.g.weights", "num_bits"]),
    (_ct({"g": {"weights": INT8, "input_activations": "x"}}), ["config_groups.g.input_activations"]),
    (_ct({"g": {"weights": {"num_bits": "8"}}}), ["config_groups.g.weights.num_bits", "integer"]),
    ({"quantization_config": "gptq"}, ["field 'quantization_config'", "object", "or null"]),
    ({"quantization_config": {"quant_method": "gptq", "bits": "4"}}, ["quantization_config.bits", "integer",
                                                                      "4 or 8"]),
    ({"quantization_config": {"quant_method": "gptq", "bits": 3}}, ["bits = 3", "4 and 8"]),
    ({"quantization_config": {"quant_method": "fp8", "modules_to_not_convert": "lm_head"}},
     ["quantization_config.modules_to_not_convert", "list of module names"]),
])
def test_quantisation_config_errors_name_the_field(fields: dict[str, Any], words: list[str], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, json.dumps({**BASE, **fields}))
    line = one_line(capsys, _predict(path))
    assert all(w in line for w in [str(path), *words]), line


@pytest.mark.parametrize(("qc", "quant"), [(None, ""), ({"quant_method": "gptq", "bits": 4.0}, "w4a16")])
def test_null_quantisation_and_integral_float_bits_are_read(qc: Any, quant: str, tmp_path: Path) -> None:
    from torchsim.models.registry import get_config

    assert get_config(_write(tmp_path, json.dumps({**BASE, "quantization_config": qc}))).quant == quant


@pytest.mark.parametrize(("text", "words"), [
    (json.dumps(BASE)[:-1] + ', "bos_token_id": ' + "9" * 5000 + "}", ["field 'bos_token_id'", "number too long"]),
    (json.dumps(BASE)[:-1] + ', "hidden_size": 1024}', ["field 'hidden_size'", "given twice", "512", "1024"]),
    (json.dumps(BASE)[:-1] + ', "rope_scaling": {"rope_type": "linear", "factor": 2.0, "factor": 4.0}}',
     ["field 'factor'", "given twice"]),
    (json.dumps({**BASE, "hidden_act": "nonexistent_act"}), ["field 'hidden_act'", "nonexistent_act", "silu",
                                                             "gelu"]),
    (json.dumps({**BASE, "torch_dtype": "float64"}), ["field 'torch_dtype'", "float64", "bfloat16"]),
    (json.dumps({**BASE, "rope_scaling": {"type": "weird", "factor": 2.0}}), ["field 'rope_scaling'", "weird",
                                                                               "linear", "yarn"]),
])
def test_json_and_field_form_errors_name_the_file(text: str, words: list[str], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, text)
    line = one_line(capsys, _predict(path))
    assert all(w in line for w in [str(path), *words]), line


def test_an_empty_model_argument_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line(capsys, ["predict", "", "--prompt", "16", "--decode", "2"])
    assert "model argument is empty" in line and "config.json' does not exist" not in line, line


QWEN2 = {**BASE, "model_type": "qwen2"}
DSV3 = {**BASE, "model_type": "deepseek_v3", "n_routed_experts": 8, "num_experts_per_tok": 2,
        "moe_intermediate_size": 128, "kv_lora_rank": 64, "q_lora_rank": None, "qk_rope_head_dim": 16,
        "qk_nope_head_dim": 32, "v_head_dim": 32, "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1}


@pytest.mark.parametrize(("fields", "words"), [
    ({**QWEN2, "hidden_size": "64"}, ["field 'hidden_size'", "integer >= 1", '"64"']),
    ({**QWEN2, "layer_types": ["full_attention"]}, ["field 'layer_types'", "2 layer kinds"]),
    ({**QWEN2, "layer_types": "full_attention"}, ["field 'layer_types'", "list"]),
    ({**QWEN2, "rope_scaling": "linear"}, ["field 'rope_scaling'", "must be an object"]),
    ({**QWEN2, "rope_scaling": {"type": "linear", "factor": "x"}}, ["field 'rope_scaling'", "'factor'",
                                                                    "finite number"]),
    ({**QWEN2, "rope_scaling": {"type": "weird", "factor": 2.0}}, ["field 'rope_scaling'", "weird", "yarn"]),
    ({**QWEN2, "rope_parameters": {"full_attention": {"rope_type": "weird"}}}, ["rope_parameters.full_attention"]),
    ({**QWEN2, "hidden_act": "nonexistent_act"}, ["field 'hidden_act'", "silu"]),
    ({**QWEN2, "torch_dtype": "float64"}, ["field 'torch_dtype'", "float64"]),
    ({**QWEN2, "rms_norm_eps": "x"}, ["field 'rms_norm_eps'", "transformers refuses", "expected float"]),
    ({**QWEN2, **MOE, "num_experts_per_tok": 8}, ["field 'num_experts_per_tok'", "(8)", "num_experts (4)"]),
    ({**QWEN2, **MOE, "num_experts": 0}, ["field 'num_experts'", "integer >= 1"]),
    ({**DSV3, "n_routed_experts": 0}, ["field 'n_routed_experts'", "integer >= 1"]),
    ({**DSV3, "n_group": 3, "topk_group": 2}, ["field 'n_group'", "must divide n_routed_experts (8)"]),
    ({**BASE, "model_type": "gpt2"}, ["model_type 'gpt2' is not supported", "model.layers", "qwen2", "llama"]),
    ({**BASE, "model_type": "mamba"}, ["model_type 'mamba' is not supported", "qwen2"]),
    ({**BASE, "model_type": "bert"}, ["model_type 'bert' is not supported", "qwen2"]),
])
def test_hf_family_errors_name_the_file_and_field(fields: dict[str, Any], words: list[str], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    path = _write(tmp_path, json.dumps(fields))
    line = one_line(capsys, _predict(path))
    assert all(w in line for w in [str(path), *words]), line


def test_a_qwen2_moe_counts_its_experts(tmp_path: Path) -> None:
    """Router, routed experts (gate/up/down each), shared expert and its gate on top of a dense Qwen2's
    attention, embeddings and norms: the MoE model's parameters exceed the dense one's by exactly those."""
    pytest.importorskip("transformers")
    from torchsim.models.registry import build_model, get_config

    def params(data: dict[str, Any], name: str) -> int:
        path = tmp_path / name / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps(data))
        return sum(p.numel() for p in build_model(get_config(path)).parameters())

    h, layers, e, mi, si = 512, 2, MOE["num_experts"], MOE["moe_intermediate_size"], 512
    dense, moe = params(QWEN2, "dense"), params({**QWEN2, **MOE}, "moe")
    per_layer = e * h + e * 3 * h * mi + 3 * h * si + h - 3 * h * BASE["intermediate_size"]
    assert moe - dense == layers * per_layer
