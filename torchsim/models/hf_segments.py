"""HF causal LMs in torchsim's segment protocol, so lowering.capture captures them one layer at a time.

Sits between models.hf (which builds the HF model on meta) and lowering.capture (which calls
`capture_segments`). The segments run HF's own modules and forward code with the inputs torchsim's models
take: head(tokens, positions) -> (x, cos, sin); layer(x, cos, sin, k_cache, v_cache) -> (x, k, v);
tail(x) -> next token (greedy, as `generate` samples). Module paths match torchsim's Llama and Mixtral.
Attention is run as a serving runtime runs it: no materialised mask (causal flag, bottom-right mask only
for chunked prefill), K/V at kv_heads (enable_gqa), one layer's cache appended with a concatenation.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from torchsim.models.config_fields import layer_window
from torchsim.models.decoder import DecoderConfig, Segment, decoder_segments
from torchsim.models.hf import TorchsimConfig, enable_sdpa_gqa, from_hf_config


class _LayerCache:
    """Stands in for an HF `Cache` inside one layer's forward: `update` appends the new keys and values."""

    def __init__(self, k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
        self.k, self.v = k_cache, v_cache

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        self.k = torch.cat([self.k, key], dim=2)
        self.v = torch.cat([self.v, value], dim=2)
        return self.k, self.v


def _adopt(target: nn.Module, source: nn.Module) -> None:
    """Give `target` the children and plain attributes of `source`, so HF forward code runs on it unchanged."""
    for name, child in source.named_children():
        target.add_module(name, child)
    for key, value in vars(source).items():
        if not key.startswith("_") and key != "training" and isinstance(value, (int, float, bool, str, type(None))):
            setattr(target, key, value)


class HFHead(nn.Module):
    """Token embedding + rotary tables (`embed_tokens`, `rotary_emb` of the HF base model)."""

    def __init__(self, base: Any) -> None:
        super().__init__()
        self.embed_tokens = base.embed_tokens
        self.rotary_emb = base.rotary_emb

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = self.embed_tokens(tokens)
        cos, sin = self.rotary_emb(x, position_ids=positions)
        return x, cos, sin


class HFLayer(nn.Module):
    """One HF decoder layer run by its own class's forward, with torchsim's layer signature."""

    gradient_checkpointing = False  # read by HF's GradientCheckpointingLayer forward wrapper

    def __init__(self, layer: nn.Module, sliding_window: int | None = None) -> None:
        """`sliding_window`: the layer's window from the config (models.config_fields.layer_window); capture
        records it on the layer's attention call unless the HF attention module declares its own."""
        super().__init__()
        _adopt(self, layer)
        self._hf_forward = type(layer).forward
        self._hf_class = type(layer).__name__
        self.sliding_window = sliding_window

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q_len, past = x.shape[1], k_cache.shape[2]
        mask = None
        if q_len > 1 and past > 0:  # chunked prefill: causal mask aligned bottom-right
            mask = torch.ones(q_len, past + q_len, dtype=torch.bool, device=x.device).tril(past)
        cache = _LayerCache(k_cache, v_cache)
        out = self._hf_forward(self, x, position_embeddings=(cos, sin), attention_mask=mask, cache=cache,
                               use_cache=True)
        return out, cache.k, cache.v


class HFTail(nn.Module):
    """Final norm, LM head on each sequence's last token, greedy pick."""

    def __init__(self, norm: nn.Module, lm_head: nn.Module) -> None:
        super().__init__()
        self.norm, self.lm_head = norm, lm_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(x)[:, -1:, :]).float().argmax(dim=-1)


class HFSegmented(nn.Module):
    """An HF `*ForCausalLM` as torchsim segments: `capture_segments(batch, q_len, past_len)` like LlamaForCausalLM.

    >>> from torchsim.models.hf import build_hf_model                      # doctest: +SKIP
    >>> seg = HFSegmented(build_hf_model("llama-tiny"))                     # doctest: +SKIP
    >>> [p for p, _, _ in seg.capture_segments(1, 8, 0)]                    # doctest: +SKIP
    ['head', 'layers.0', 'layers.1', 'tail']
    """

    def __init__(self, model: Any, config: DecoderConfig | None = None) -> None:
        """`config`: the torchsim config the model was built from (models.hf_family); by default read from the
        model's own HF config (Llama and Mixtral)."""
        super().__init__()
        base = getattr(model, "model", None)
        if base is None or not hasattr(base, "layers") or not hasattr(model, "lm_head"):
            raise TypeError(f"{type(model).__name__} is not an HF *ForCausalLM with .model.layers and .lm_head")
        self.config: TorchsimConfig | DecoderConfig = config or from_hf_config(
            model.config, getattr(model.config, "name_or_path", "") or "", approximate=True)  # listed as assumptions
        self.head = HFHead(base)
        self.layers = nn.ModuleList(HFLayer(layer, layer_window(model.config, i))
                                    for i, layer in enumerate(base.layers))
        self.tail = HFTail(base.norm, model.lm_head)
        enable_sdpa_gqa()

    def _embedding(self) -> torch.Tensor:
        weight = self.head.embed_tokens.weight
        assert isinstance(weight, torch.Tensor)
        return weight

    @property
    def dtype(self) -> torch.dtype:
        return self._embedding().dtype

    def capture_segments(self, batch: int, q_len: int, past_len: int) -> list[Segment]:
        """(path, module, example args) of head, each layer and tail, on the model's device and dtype."""
        inv_freq = getattr(self.head.rotary_emb, "inv_freq", None)  # partial rotary (StableLM): fewer dims
        rope_dim = 2 * inv_freq.numel() if isinstance(inv_freq, torch.Tensor) else None
        return decoder_segments(self.head, self.layers, self.tail, self.config, batch, q_len, past_len, self.dtype,
                                self._embedding().device, rope_dim)
