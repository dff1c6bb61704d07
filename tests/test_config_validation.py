"""Every config field that reaches capture is range- and type-checked first: a bad config.json is one error
naming the field, never a traceback from torch, a NaN in a kernel or an hour of simulation."""

from __future__ import annotations

from typing import Any

import pytest

from torchsim.models.llama import LlamaConfig
from torchsim.models.mixtral import MixtralConfig

BASE = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 1024, "max_position_embeddings": 2048}


@pytest.mark.parametrize(("field", "value", "words"), [
    ("head_dim", 0, "positive integer"), ("head_dim", -64, "positive integer"), ("head_dim", "64", "positive"),
    ("rope_theta", "1e4", "finite number"), ("rope_theta", -5.0, "finite number"), ("rope_theta", True, "finite"),
    ("rms_norm_eps", float("nan"), "finite number"), ("rms_norm_eps", 0.0, "between"),
    ("num_hidden_layers", 100_000, "limit of 4096"), ("num_hidden_layers", 10**9, "limit"),
    ("hidden_size", True, "positive integer"), ("vocab_size", 2.5, "positive integer"),
    ("tie_word_embeddings", "yes", "true or false"),
])
def test_bad_fields_are_named(field: str, value: Any, words: str) -> None:
    with pytest.raises(ValueError, match=field) as err:
        LlamaConfig.from_dict({**BASE, field: value}, "cfg")
    assert words in str(err.value) and "'cfg'" in str(err.value)


def test_moe_fields_are_checked_too() -> None:
    with pytest.raises(ValueError, match="num_local_experts.*limit"):
        MixtralConfig.from_dict({**BASE, "num_local_experts": 10**6, "num_experts_per_tok": 2}, "moe")
    with pytest.raises(ValueError, match="rms_norm_eps"):
        MixtralConfig.from_dict({**BASE, "rms_norm_eps": float("inf")}, "moe")


def test_real_configs_pass() -> None:
    cfg = LlamaConfig.from_dict({**BASE, "rope_theta": 500000, "rms_norm_eps": 1e-5, "head_dim": 64}, "ok")
    assert cfg.head_dim_value == 64 and cfg.rope_theta == 500000
