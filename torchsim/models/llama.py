"""The Llama-3 family as plain PyTorch modules, built from a config: the models that capture lowers.

Sits at the very start of the pipeline (models -> lowering.capture -> lowering.plan). Written the way
PyTorch eager and HF `transformers` write it (RMSNorm in fp32, rotate-half RoPE, GQA through SDPA, SwiGLU,
a KV cache passed in and returned), so the captured ATen graph is what those runtimes execute. Build it on
the meta device: no weights are allocated.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True, slots=True)
class LlamaConfig:
    """Llama-family hyper-parameters; field names follow HF `LlamaConfig` so a `config.json` maps directly.

    >>> cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    ...                   num_key_value_heads=2, vocab_size=100, max_position_embeddings=256)
    >>> cfg.head_dim_value, cfg.kv_bytes_per_token(2)
    (16, 256)
    """

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    max_position_embeddings: int
    rope_theta: float = 500000.0
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False
    head_dim: int | None = None
    name: str = "llama"

    def __post_init__(self) -> None:
        for f in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "vocab_size", "max_position_embeddings"):
            value = getattr(self, f)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"model config {self.name!r}: field {f!r} must be a positive integer, got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"model config {self.name!r}: num_attention_heads ({self.num_attention_heads}) must be "
                             f"a multiple of num_key_value_heads ({self.num_key_value_heads})")
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(f"model config {self.name!r}: hidden_size ({self.hidden_size}) is not divisible by "
                             f"num_attention_heads ({self.num_attention_heads}); give head_dim explicitly")
        if self.head_dim_value % 2:
            raise ValueError(f"model config {self.name!r}: head_dim ({self.head_dim_value}) must be even for RoPE")

    @property
    def head_dim_value(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_attention_heads

    @property
    def max_context(self) -> int:
        return self.max_position_embeddings

    def param_count(self) -> int:
        """Parameters of the whole model (embedding, layers, final norm, LM head unless tied)."""
        h, hd = self.hidden_size, self.head_dim_value
        attn = h * hd * (self.num_attention_heads * 2 + self.num_key_value_heads * 2)
        mlp = 3 * h * self.intermediate_size
        layer = attn + mlp + 2 * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return self.vocab_size * h + self.num_hidden_layers * layer + h + head

    def kv_bytes_per_token(self, bytes_per_element: int) -> int:
        """KV-cache bytes one token adds across all layers (K and V)."""
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim_value * bytes_per_element

    @classmethod
    def from_dict(cls, data: dict[str, Any], name: str = "llama") -> LlamaConfig:
        """Build from a dict using HF `config.json` keys; missing required keys are named in one error."""
        known = {f.name for f in fields(cls)}
        required = [f.name for f in fields(cls) if f.name not in _OPTIONAL]
        missing = [k for k in required if k not in data]
        if missing:
            raise ValueError(f"model config {name!r} is missing field(s) {missing}; a Llama-family config needs "
                             f"{required} (optional: {sorted(_OPTIONAL)})")
        kwargs = {k: data[k] for k in known if k in data and k != "name"}
        if kwargs.get("head_dim") is None:
            kwargs.pop("head_dim", None)
        return cls(name=name, **kwargs)


_OPTIONAL = frozenset({"rope_theta", "rms_norm_eps", "tie_word_embeddings", "head_dim", "name"})


class RMSNorm(nn.Module):
    """x / rms(x) * weight, computed in fp32 and cast back, as Llama and HF write it."""

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.to(torch.float32)
        variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + self.eps)
        return self.weight * h.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                         sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate-half RoPE on q [b, hq, s, d] and k [b, hkv, s, d]; cos/sin are [b, s, d]."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class RotaryEmbedding(nn.Module):
    """cos/sin tables for every position up to the context, gathered per position at run time."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        d = cfg.head_dim_value
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        freqs = torch.outer(torch.arange(cfg.max_position_embeddings, dtype=torch.float32), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    cos_cached: torch.Tensor
    sin_cached: torch.Tensor

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        return self.cos_cached[positions].to(dtype), self.sin_cached[positions].to(dtype)


class Attention(nn.Module):
    """GQA self-attention; the KV cache comes in as tensors and the grown cache goes out."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = (cfg.num_attention_heads, cfg.num_key_value_heads,
                                                            cfg.head_dim_value)
        h = cfg.hidden_size
        self.q_proj = nn.Linear(h, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(h, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(h, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, h, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k = torch.cat([k_cache, k], dim=2)
        v = torch.cat([v_cache, v], dim=2)
        mask = None
        if s > 1 and k.shape[2] > s:  # chunked prefill: causal mask aligned bottom-right
            mask = torch.ones(s, k.shape[2], dtype=torch.bool, device=x.device).tril(k.shape[2] - s)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=s > 1 and mask is None,
                                           enable_gqa=self.num_kv_heads != self.num_heads)
        return self.o_proj(o.transpose(1, 2).reshape(b, s, -1)), k, v


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm decoder layer: x + attn(norm(x)), then + mlp(norm(.))."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a, k, v = self.self_attn(self.input_layernorm(x), cos, sin, k_cache, v_cache)
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x)), k, v


class Embed(nn.Module):
    """Model head: token embedding plus the RoPE tables for this step's positions."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.rotary_emb = RotaryEmbedding(cfg)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = self.embed_tokens(tokens)
        cos, sin = self.rotary_emb(positions, x.dtype)
        return x, cos, sin


class Sampler(nn.Module):
    """Model tail: final norm, LM head on each sequence's last token, greedy sampling (argmax)."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(self.norm(x)[:, -1:, :])
        return logits.float().argmax(dim=-1)


class LlamaForCausalLM(nn.Module):
    """A Llama decoder with a KV cache: `forward(tokens, positions, k_caches, v_caches)` -> (next, k, v).

    The model is three kinds of segment (head, identical decoder layers, tail), which is what lets capture
    trace one layer and reuse it (see `torchsim.lowering.capture.Segment`).

    >>> from torchsim.models.registry import get_config
    >>> with torch.device("meta"):
    ...     m = LlamaForCausalLM(get_config("llama-tiny"))
    >>> len(m.layers)
    2
    """

    def __init__(self, cfg: LlamaConfig, dtype: torch.dtype = torch.bfloat16) -> None:
        super().__init__()
        self.config = cfg
        self.head = Embed(cfg)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.tail = Sampler(cfg)
        if cfg.tie_word_embeddings:
            self.tail.lm_head.weight = self.head.embed_tokens.weight
        self.to(dtype)

    @property
    def dtype(self) -> torch.dtype:
        return self.head.embed_tokens.weight.dtype

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, k_caches: list[torch.Tensor],
                v_caches: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        x, cos, sin = self.head(tokens, positions)
        new_k, new_v = [], []
        for layer, kc, vc in zip(self.layers, k_caches, v_caches, strict=True):
            x, k, v = layer(x, cos, sin, kc, vc)
            new_k.append(k)
            new_v.append(v)
        return self.tail(x), new_k, new_v

    def capture_segments(self, batch: int, q_len: int, past_len: int) -> list[tuple[str, nn.Module, tuple[Any, ...]]]:
        """(module path, module, example args) per segment of one step, in execution order, on the model's device.

        Each segment's first output feeds the next segment's first input; this is the protocol
        `torchsim.lowering.capture.capture_model` reads.
        """
        cfg, dev, dt = self.config, self.head.embed_tokens.weight.device, self.dtype
        d = cfg.head_dim_value
        tokens = torch.zeros(batch, q_len, dtype=torch.long, device=dev)
        positions = torch.arange(past_len, past_len + q_len, device=dev).expand(batch, q_len)
        x = torch.zeros(batch, q_len, cfg.hidden_size, dtype=dt, device=dev)
        cos = torch.zeros(batch, q_len, d, dtype=dt, device=dev)
        cache = torch.zeros(batch, cfg.num_key_value_heads, past_len, d, dtype=dt, device=dev)
        segments: list[tuple[str, nn.Module, tuple[Any, ...]]] = [("head", self.head, (tokens, positions))]
        for i, layer in enumerate(self.layers):
            segments.append((f"layers.{i}", layer, (x, cos, cos, cache, cache)))
        segments.append(("tail", self.tail, (x,)))
        return segments

    def step_inputs(self, batch: int, q_len: int, past_len: int) -> dict[str, Any]:
        """Inputs of one forward step on the model's device: `q_len` new tokens after `past_len` cached ones."""
        cfg, dev = self.config, self.head.embed_tokens.weight.device
        tokens = torch.zeros(batch, q_len, dtype=torch.long, device=dev)
        positions = torch.arange(past_len, past_len + q_len, device=dev).expand(batch, q_len)
        cache = [torch.zeros(batch, cfg.num_key_value_heads, past_len, cfg.head_dim_value, dtype=self.dtype,
                             device=dev) for _ in range(cfg.num_hidden_layers)]
        return {"tokens": tokens, "positions": positions, "k_caches": cache, "v_caches": list(cache)}


def weight_bytes(cfg: LlamaConfig, bytes_per_element: float) -> float:
    """Bytes of all weights at the given element size."""
    return float(cfg.param_count()) * bytes_per_element
