"""Nothing in a config.json is dropped without a word: a field that changes the computation and that torchsim
does not model is an error naming it, or, with --approximate, an approximation listed with the prediction."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from torchsim.cli import main
from torchsim.models.llama import LlamaConfig
from torchsim.models.mixtral import MixtralConfig
from torchsim.models.registry import get_config

BASE = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 1024, "max_position_embeddings": 2048}
# what a Llama-3.1 config.json holds besides the sizes: all modelled or harmless
HARMLESS = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "initializer_range": 0.02,
            "mlp_bias": False, "model_type": "llama", "pretraining_tp": 1, "rms_norm_eps": 1e-5,
            "rope_scaling": {"factor": 8.0, "rope_type": "llama3"}, "rope_theta": 500000.0,
            "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.43.0.dev0",
            "use_cache": True, "sliding_window": None}


def test_a_llama31_config_needs_no_approximation() -> None:
    cfg = LlamaConfig.from_dict({**BASE, **HARMLESS}, "l31")
    assert cfg.approximations == ()


@pytest.mark.parametrize(("field", "value", "words"), [
    ("attention_bias", True, "projection biases"),
    ("mlp_bias", True, "MLP projection biases"),
    ("hidden_act", "gelu_pytorch_tanh", "SwiGLU"),
    ("quantization_config", {"quant_method": "bitsandbytes", "load_in_4bit": True}, "quantisation"),
    ("attn_logit_softcapping", 50.0, "does not know"),
])
def test_an_unmodelled_field_is_named_or_listed(field: str, value: Any, words: str) -> None:
    data = {**BASE, field: value}
    with pytest.raises(ValueError, match=field) as err:
        LlamaConfig.from_dict(data, "cfg")
    assert "--approximate" in str(err.value) and words in str(err.value)
    cfg = LlamaConfig.from_dict(data, "cfg", approximate=True)
    assert len(cfg.approximations) == 1 and cfg.approximations[0].startswith(field) and words in cfg.approximations[0]


def test_the_llama_family_models_the_window_mixtral_names_it() -> None:
    cfg = LlamaConfig.from_dict({**BASE, "sliding_window": 1024}, "mistral")
    assert cfg.sliding_window == 1024 and cfg.approximations == ()
    data = {**BASE, "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 1024}
    with pytest.raises(ValueError, match="sliding_window = 1024") as err:
        MixtralConfig.from_dict(data, "mixtral")
    assert "full causal attention" in str(err.value) and "--approximate" in str(err.value)


def test_a_window_that_never_binds_is_no_approximation() -> None:
    assert LlamaConfig.from_dict({**BASE, "sliding_window": 4096}, "w").approximations == ()  # context 2048
    assert MixtralConfig.from_dict({**BASE, "sliding_window": None}, "m").approximations == ()


def test_v5_rope_parameters_give_rope_theta() -> None:
    cfg = LlamaConfig.from_dict({**BASE, "rope_parameters": {"rope_theta": 1e6, "rope_type": "default"}}, "v5")
    assert cfg.rope_theta == 1e6


def test_cli_refuses_then_lists_the_approximation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "mistral" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({**BASE, "model_type": "mistral", "mlp_bias": True}))
    assert main(["predict", str(path), "--prompt", "16", "--decode", "1", "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert "mlp_bias = true" in err and "--approximate" in err and len(err.strip().splitlines()) == 1
    rc = main(["predict", str(path), "--prompt", "16", "--decode", "1", "--workers", "1", "--approximate", "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert [a for a in doc["assumptions"] if a.startswith("approximated: mlp_bias = true")]
    assert get_config(path, approximate=True).approximations  # the library path gives the same
