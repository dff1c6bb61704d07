"""models.decoder: the shared decoder base and its per-layer hooks (what a new model family plugs into)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchsim.models.decoder import Attention, DecoderConfig, DecoderForCausalLM, DecoderLayer
from torchsim.models.llama import MLP, LlamaForCausalLM
from torchsim.models.mixtral import MixtralForCausalLM, SparseMoeBlock, mixtral_config
from torchsim.models.registry import get_config

TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=100, max_position_embeddings=64)


class _Alternating(DecoderForCausalLM[DecoderConfig]):
    """SwiGLU on even layers, no MLP on odd ones: a per-layer choice through the hook's layer index."""

    def make_mlp(self, layer: int) -> nn.Module:
        return MLP(self.config) if layer % 2 == 0 else nn.Identity()


def test_make_mlp_is_called_per_layer_with_its_index() -> None:
    with torch.device("meta"):
        m = _Alternating(DecoderConfig(**TINY))
    assert [type(layer.mlp).__name__ for layer in m.layers] == ["MLP", "Identity", "MLP"]
    assert all(isinstance(layer, DecoderLayer) and isinstance(layer.self_attn, Attention) for layer in m.layers)
    assert [p for p, _, _ in m.capture_segments(1, 4, 0)] == ["head", "layers.0", "layers.1", "layers.2", "tail"]


def test_a_model_without_make_mlp_names_itself() -> None:
    class NoMlp(DecoderForCausalLM[DecoderConfig]):
        pass

    with torch.device("meta"), pytest.raises(NotImplementedError, match="NoMlp must say which MLP"):
        NoMlp(DecoderConfig(**TINY))
    with pytest.raises(NotImplementedError, match="DecoderConfig does not say"):
        DecoderConfig(**TINY).param_count()


@pytest.mark.parametrize(("cls", "cfg", "block"), [
    (LlamaForCausalLM, get_config("llama-tiny"), MLP),
    (MixtralForCausalLM, mixtral_config("mixtral-micro"), SparseMoeBlock),
])
def test_families_differ_only_in_the_mlp_and_count_their_parameters(cls: type, cfg: DecoderConfig,
                                                                    block: type) -> None:
    with torch.device("meta"):
        m = cls(cfg)
    assert all(type(layer) is DecoderLayer and isinstance(layer.mlp, block) for layer in m.layers)
    assert sum(p.numel() for p in m.parameters()) == cfg.param_count()
