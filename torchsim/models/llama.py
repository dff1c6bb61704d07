"""The Llama-3 family as plain PyTorch modules, built from a config: the models that capture lowers.

Sits at the very start of the pipeline (models -> lowering.capture -> lowering.plan). What is Llama's own is
only its config and the SwiGLU MLP; embedding, RMSNorm, RoPE, GQA attention, the layer and the segments are
models.decoder's (re-exported here). Build it on the meta device: no weights are allocated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from torchsim.models.decoder import (
    Attention,
    DecoderConfig,
    DecoderForCausalLM,
    DecoderLayer,
    Embed,
    RMSNorm,
    RotaryEmbedding,
    Sampler,
    apply_rotary_pos_emb,
    rotate_half,
    weight_bytes,
)

__all__ = ["MLP", "Attention", "DecoderLayer", "Embed", "LlamaConfig", "LlamaForCausalLM", "RMSNorm",
           "RotaryEmbedding", "Sampler", "apply_rotary_pos_emb", "rotate_half", "weight_bytes"]


@dataclass(frozen=True, slots=True)
class LlamaConfig(DecoderConfig):
    """Llama-family hyper-parameters; field names follow HF `LlamaConfig` so a `config.json` maps directly.

    >>> cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    ...                   num_key_value_heads=2, vocab_size=100, max_position_embeddings=256)
    >>> cfg.head_dim_value, cfg.kv_bytes_per_token(2)
    (16, 256)
    """

    family: ClassVar[str] = "Llama"

    name: str = "llama"
    # Mistral's sliding window (HF MistralConfig.sliding_window): each query attends to the last `sliding_window`
    # keys up to its own, in every layer; None (Llama) or a window at least the sequence: full causal attention
    sliding_window: int | None = None

    def __post_init__(self) -> None:
        DecoderConfig.__post_init__(self)
        w = self.sliding_window
        if w is not None and (not isinstance(w, int) or isinstance(w, bool) or w <= 0):
            raise ValueError(f"model config {self.name!r}: field 'sliding_window' must be a positive integer or "
                             f"null (no window), got {w!r}")

    def mlp_param_count(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaForCausalLM(DecoderForCausalLM[LlamaConfig]):
    """A Llama decoder with a KV cache: every layer's MLP is SwiGLU (see models.decoder.DecoderForCausalLM).

    >>> from torchsim.models.registry import get_config
    >>> with torch.device("meta"):
    ...     m = LlamaForCausalLM(get_config("llama-tiny"))
    >>> len(m.layers)
    2
    """

    def make_mlp(self, layer: int) -> nn.Module:
        return MLP(self.config)
