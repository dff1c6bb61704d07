"""HF causal LMs in torchsim's segment protocol, so lowering.capture captures them one layer at a time.

Sits between models.hf (which builds the HF model on meta) and lowering.capture (which calls
`capture_segments`). The segments run HF's own modules and forward code with the inputs torchsim's models
take: head(tokens, positions) -> (x, cos, sin); layer(x, cos, sin, k_cache, v_cache) -> (x, k, v);
tail(x) -> next token (greedy, as `generate` samples). Module paths match torchsim's Llama and Mixtral.
Attention is run as a serving runtime runs it: no materialised mask (causal flag, bottom-right mask only
for chunked prefill), K/V at kv_heads (enable_gqa), one layer's cache appended with a concatenation.
"""

from __future__ import annotations

import types
from typing import Any

import torch
from torch import nn

from torchsim.lowering.attention_ops import attention as fused_attention
from torchsim.lowering.attention_ops import mla_decode
from torchsim.models.config_fields import layer_window
from torchsim.models.decoder import DecoderConfig, Segment, decoder_segments
from torchsim.models.hf import TorchsimConfig, enable_sdpa_gqa, from_hf_config

FUSED_ATTENTION = "torchsim_fused"  # the attention implementation name families without SDPA support run with


def _fused_attention_forward(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                             attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                             softcap: float | None = None, sliding_window: int | None = None,
                             s_aux: torch.Tensor | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """An HF attention function (the `attention_interface` families call) that runs the family's eager math as
    one `torchsim::attention` op: scale, soft-cap (Gemma-2), sinks (gpt-oss), causal, window; the output is laid
    out [batch, seq, heads, head_dim] as HF's attention functions return it."""
    scale = float(scaling) if scaling is not None else query.shape[-1] ** -0.5
    out = fused_attention(query, key, value, s_aux, scale, True, float(softcap or 0.0), int(sliding_window or 0))
    return out.transpose(1, 2).contiguous(), None


def register_fused_attention() -> None:
    """Make `FUSED_ATTENTION` an attention implementation transformers accepts (once)."""
    from transformers import AttentionInterface

    AttentionInterface.register(FUSED_ATTENTION, _fused_attention_forward)


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


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class MlaRotaryEmbedding(nn.Module):
    """cos/sin tables of MLA's decoupled RoPE dims (DeepSeek-V2/V3 rotate `qk_rope_head_dim` of each head, from
    the family rotary module's `inv_freq` and `attention_scaling`); DeepSeek-V2's HF code rotates through complex
    numbers, which costs the same as the rotate-half form used here."""

    def __init__(self, rotary: nn.Module) -> None:
        super().__init__()
        self.inv_freq: torch.Tensor = rotary.inv_freq  # type: ignore[assignment]
        self.scaling = float(getattr(rotary, "attention_scaling", 1.0) or 1.0)

    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.float()
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.scaling).to(x.dtype), (emb.sin() * self.scaling).to(x.dtype)


class HFHead(nn.Module):
    """Token embedding + rotary tables (`embed_tokens`, `rotary_emb` of the HF base model).

    Families with one rotary table per layer type (Gemma-3: `global` and `local` RoPE bases, the rotary module's
    `layer_types`) get the tables stacked on a leading dimension, in `layer_types` order; each HFLayer picks its
    own (`rope_index`)."""

    def __init__(self, base: Any, mla: bool = False) -> None:
        super().__init__()
        self.embed_tokens = base.embed_tokens
        self.rotary_emb = MlaRotaryEmbedding(base.rotary_emb) if mla else base.rotary_emb
        self.layer_types: list[str] = list(getattr(base.rotary_emb, "layer_types", None) or []) if not mla else []

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = self.embed_tokens(tokens)
        if self.layer_types:
            tables = [self.rotary_emb(x, positions, layer_type) for layer_type in self.layer_types]
            return x, torch.stack([c for c, _ in tables]), torch.stack([s for _, s in tables])
        cos, sin = self.rotary_emb(x, position_ids=positions)
        return x, cos, sin


class HFLayer(nn.Module):
    """One HF decoder layer run by its own class's forward, with torchsim's layer signature."""

    gradient_checkpointing = False  # read by HF's GradientCheckpointingLayer forward wrapper

    def __init__(self, layer: nn.Module, sliding_window: int | None = None, rope_index: int | None = None) -> None:
        """`sliding_window`: the layer's window from the config (models.config_fields.layer_window); capture
        records it on the layer's attention call unless the HF attention module declares its own. `rope_index`:
        which stacked rotary table this layer uses (HFHead.layer_types), None for one table."""
        super().__init__()
        _adopt(self, layer)
        self._hf_forward = type(layer).forward
        self._hf_class = type(layer).__name__
        self.sliding_window = sliding_window
        self.rope_index = rope_index
        attn = getattr(layer, "self_attn", None)
        if attn is not None and hasattr(attn, "kv_a_proj_with_mqa"):  # MLA (DeepSeek-V2/V3)
            attn.forward = types.MethodType(_mla_forward, attn)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.rope_index is not None:
            cos, sin = cos[self.rope_index], sin[self.rope_index]
        q_len, past = x.shape[1], k_cache.shape[2]
        mask = None
        if q_len > 1 and past > 0:  # chunked prefill: causal mask aligned bottom-right
            mask = torch.ones(q_len, past + q_len, dtype=torch.bool, device=x.device).tril(past)
        cache = _LayerCache(k_cache, v_cache)
        out = self._hf_forward(self, x, position_embeddings=(cos, sin), attention_mask=mask, cache=cache,
                               use_cache=True)
        return out, cache.k, cache.v


def _mla_forward(self: Any, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                 cache: Any = None, position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
                 **kwargs: Any) -> tuple[torch.Tensor, None]:
    """DeepSeek-V2/V3 multi-head latent attention (on the HF module's own projections and norms) as serving
    runtimes run it (DeepSeek-V2 paper, arXiv:2405.04434 §2.1; vLLM's MLA attention backends):

    - the cache holds the latent row of each token: c_kv (kv_lora_rank, after kv_a_layernorm) and the rotated
      k_pe (qk_rope_head_dim), one head (HF's own forward caches the same two tensors);
    - prefill (more than one query token) decompresses the latent through kv_b_proj and runs multi-head
      attention with q/k head dim nope + rope and v head dim v_head_dim (FlashAttention, dv != dk);
    - decode (one query token) absorbs W_UK into the query and W_UV into the output (per-head batched GEMMs
      over the tokens) and attends over the latent cache: `torchsim::mla_decode`, FlashMLA's kernel.
    """
    assert position_embeddings is not None and cache is not None
    b, s = hidden_states.shape[:2]
    h, dn, dr, dv, r = self.num_heads, self.qk_nope_head_dim, self.qk_rope_head_dim, self.v_head_dim, self.kv_lora_rank
    if self.q_lora_rank is None:
        q = self.q_proj(hidden_states)
    else:
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(hidden_states)))
    q = q.view(b, s, h, dn + dr).transpose(1, 2)
    q_nope, q_pe = torch.split(q, [dn, dr], dim=-1)
    kv_nope, k_pe = torch.split(self.kv_a_proj_with_mqa(hidden_states), [r, dr], dim=-1)
    c_kv = self.kv_a_layernorm(kv_nope).view(b, 1, s, r)
    k_pe = k_pe.view(b, 1, s, dr)
    cos, sin = (t.unsqueeze(1) for t in position_embeddings)
    q_pe = q_pe * cos + _rotate_half(q_pe) * sin
    k_pe = k_pe * cos + _rotate_half(k_pe) * sin
    c_kv, k_pe = cache.update(c_kv, k_pe, self.layer_idx)
    w = self.kv_b_proj.weight.view(h, dn + dv, r)
    if s == 1:  # decode: absorbed weights, attention over the latent cache
        q_lat = torch.bmm(q_nope.reshape(b, h, dn).transpose(0, 1), w[:, :dn, :])  # [h, b, r]
        q_lat = q_lat.transpose(0, 1).reshape(b, h, 1, r)
        out_lat = mla_decode(q_lat, q_pe, c_kv, k_pe, float(self.scaling), True)  # [b, h, 1, r]
        out = torch.bmm(out_lat.reshape(b, h, r).transpose(0, 1), w[:, dn:, :].transpose(1, 2))  # [h, b, dv]
        out = out.transpose(0, 1).reshape(b, 1, h * dv)
    else:  # prefill: decompressed multi-head attention
        kv = self.kv_b_proj(c_kv).view(b, -1, h, dn + dv).transpose(1, 2)
        k_nope, value = torch.split(kv, [dn, dv], dim=-1)
        key = torch.cat((k_nope, k_pe.expand(-1, h, -1, -1)), dim=-1)
        query = torch.cat((q_nope, q_pe), dim=-1)
        out = fused_attention(query, key, value, None, float(self.scaling), True, 0.0, 0)
        out = out.transpose(1, 2).reshape(b, s, h * dv)
    return self.o_proj(out), None


class HFTail(nn.Module):
    """Final norm, LM head on each sequence's last token, the family's final logit soft-cap (Gemma-2:
    `final_logit_softcapping`, as its *ForCausalLM forward applies it), greedy pick."""

    def __init__(self, norm: nn.Module, lm_head: nn.Module, softcap: float | None = None) -> None:
        super().__init__()
        self.norm, self.lm_head = norm, lm_head
        self.softcap = float(softcap) if softcap else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(self.norm(x)[:, -1:, :])
        if self.softcap is not None:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits.float().argmax(dim=-1)


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
        self.mla = any(hasattr(getattr(layer, "self_attn", None), "kv_a_proj_with_mqa") for layer in base.layers)
        self.head = HFHead(base, mla=self.mla)
        kinds = list(getattr(model.config, "layer_types", None) or [])
        index = ({t: i for i, t in enumerate(self.head.layer_types)} if self.head.layer_types else {})
        self.layers = nn.ModuleList(HFLayer(layer, layer_window(model.config, i), index[kinds[i]] if index else None)
                                    for i, layer in enumerate(base.layers))
        self.tail = HFTail(base.norm, model.lm_head, getattr(model.config, "final_logit_softcapping", None))
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
        device = self._embedding().device
        segments = decoder_segments(self.head, self.layers, self.tail, self.config, batch, q_len, past_len,
                                    self.dtype, device)
        with torch.no_grad():  # the rotary tables' shape as the head makes them (partial rotary: StableLM;
            _, cos_meta, _ = self.head(*segments[0][2])  # half-width tables: gpt-oss; one per layer type: Gemma-3
        out: list[Segment] = []
        for path, module, args in segments:
            if isinstance(module, HFLayer):
                x, _, _, k_cache, v_cache = args
                cos = torch.zeros(cos_meta.shape, dtype=self.dtype, device=device)
                if self.mla:  # latent cache: c_kv and k_pe, one head
                    attn: Any = module.self_attn
                    k_cache = torch.zeros(batch, 1, past_len, attn.kv_lora_rank, dtype=self.dtype, device=device)
                    v_cache = torch.zeros(batch, 1, past_len, attn.qk_rope_head_dim, dtype=self.dtype, device=device)
                args = (x, cos, cos, k_cache, v_cache)
            out.append((path, module, args))
        return out
