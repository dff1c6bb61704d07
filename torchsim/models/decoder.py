"""The pre-norm RoPE decoder that torchsim's model families share: config base, attention, layer, model, segments.

Sits at the very start of the pipeline (models -> lowering.capture -> lowering.plan). A family (models.llama,
models.mixtral) subclasses `DecoderConfig` with its own fields and `DecoderForCausalLM` with its per-layer hooks
(`make_mlp`, and `make_attention` / `make_layer` where it differs); head, layers, tail and the segment protocol
that capture reads are written once here, the way PyTorch eager and HF `transformers` write them.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, fields, replace
from typing import Any, ClassVar, Generic, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

Segment = tuple[str, nn.Module, tuple[Any, ...]]  # (module path, module, example args)
ConfigT = TypeVar("ConfigT", bound="DecoderConfig")  # a family's own config type (typing.Self needs 3.11)


# Upper bounds on the sizes a config may give: far above any published model (Llama-3.1-405B: 126 layers, hidden
# 16384, vocab 128256, context 131072), low enough that a typo fails at once instead of allocating or simulating
# for hours.
_SIZE_LIMITS = {"hidden_size": 1 << 17, "intermediate_size": 1 << 20, "num_hidden_layers": 4096,
                "num_attention_heads": 4096, "num_key_value_heads": 4096, "vocab_size": 1 << 24,
                "max_position_embeddings": 1 << 24}


@dataclass(frozen=True, slots=True)
class DecoderConfig:
    """Fields every decoder family has, named as in HF configs; a family adds its own and `mlp_param_count`.

    `intermediate_size` is the FFN width of one MLP (of one expert in an MoE family).
    """

    family: ClassVar[str] = "decoder"  # names the family in errors ("a Llama-family config needs ...")

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
    name: str = "decoder"
    approximations: tuple[str, ...] = ()  # fields torchsim does not model, taken with approximate=True (config_fields)
    quant: str = ""  # the format a quantization_config names (lowering.quant; "" none), quant_keep what it leaves out
    quant_keep: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for f, limit in _SIZE_LIMITS.items():
            self._check_positive(f, limit)
        if self.head_dim is not None:
            self._check_positive("head_dim", _SIZE_LIMITS["hidden_size"])
        self._check_real("rope_theta", low=0.0, high=1e12)
        self._check_real("rms_norm_eps", low=0.0, high=1.0)
        if not isinstance(self.tie_word_embeddings, bool):
            raise ValueError(f"model config {self.name!r}: field 'tie_word_embeddings' must be true or false, got "
                             f"{self.tie_word_embeddings!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"model config {self.name!r}: num_attention_heads ({self.num_attention_heads}) must be "
                             f"a multiple of num_key_value_heads ({self.num_key_value_heads})")
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError(f"model config {self.name!r}: hidden_size ({self.hidden_size}) is not divisible by "
                             f"num_attention_heads ({self.num_attention_heads}); give head_dim explicitly")
        if self.head_dim_value % 2:
            raise ValueError(f"model config {self.name!r}: head_dim ({self.head_dim_value}) must be even for RoPE")

    def _check_positive(self, field: str, limit: int) -> None:
        value = getattr(self, field)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"model config {self.name!r}: field {field!r} must be a positive integer, got {value!r}")
        if value > limit:
            raise ValueError(f"model config {self.name!r}: field {field!r} = {value} is above torchsim's limit of "
                             f"{limit} (far above any published model; a typo?)")

    def _check_real(self, field: str, *, low: float, high: float) -> None:
        """A finite number in (low, high); strings, booleans and NaN are named, not passed on to torch."""
        value = getattr(self, field)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or not low < value < high:
            raise ValueError(f"model config {self.name!r}: field {field!r} must be a finite number between {low:g} "
                             f"and {high:g} (exclusive), got {value!r}")

    @property
    def head_dim_value(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_attention_heads

    @property
    def max_context(self) -> int:
        return self.max_position_embeddings

    def mlp_param_count(self) -> int:
        """Parameters of one layer's MLP block; each family says what its block holds."""
        raise NotImplementedError(f"{type(self).__name__} does not say how many parameters its MLP block has")

    def param_count(self) -> int:
        """Parameters of the whole model (embedding, layers, final norm, LM head unless tied)."""
        h, hd = self.hidden_size, self.head_dim_value
        attn = h * hd * (self.num_attention_heads * 2 + self.num_key_value_heads * 2)
        layer = attn + self.mlp_param_count() + 2 * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return self.vocab_size * h + self.num_hidden_layers * layer + h + head

    def kv_bytes_per_token(self, bytes_per_element: int) -> int:
        """KV-cache bytes one token adds across all layers (K and V)."""
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim_value * bytes_per_element

    def with_layers(self: ConfigT, num_hidden_layers: int) -> ConfigT:
        return replace(self, num_hidden_layers=num_hidden_layers)

    @classmethod
    def from_dict(cls: type[ConfigT], data: dict[str, Any], name: str | None = None, *,
                  approximate: bool = False) -> ConfigT:
        """Build from a dict using HF `config.json` keys; missing required keys are named in one error, and so are
        fields that change the computation but torchsim does not model, unless `approximate` (models.config_fields)."""
        from torchsim.models.config_fields import QUANT_FIELDS, quant_of, screen_fields

        name = cls.family.lower() if name is None else name
        own = [f.name for f in fields(cls) if f.name not in ("name", "approximations", *QUANT_FIELDS)]
        required = [f.name for f in fields(cls) if f.default is MISSING]
        optional = sorted(f.name for f in fields(cls) if f.default is not MISSING and f.name in own)
        data = dict(data)
        rope = data.get("rope_parameters")
        if "rope_theta" not in data and isinstance(rope, dict) and "rope_theta" in rope:
            data["rope_theta"] = rope["rope_theta"]  # transformers v5 writes it there
        missing = [k for k in required if k not in data]
        if missing:
            raise ValueError(f"model config {name!r} is missing field(s) {missing}; a {cls.family}-family config "
                             f"needs {required} (optional: {optional})")
        notes = screen_fields(data, set(own), name, approximate=approximate)
        kwargs: dict[str, Any] = {k: data[k] for k in own if k in data} | dict(zip(QUANT_FIELDS, quant_of(data)))
        if kwargs.get("head_dim") is None:
            kwargs.pop("head_dim", None)
        return cls(name=name, approximations=notes, **kwargs)


def weight_bytes(cfg: DecoderConfig, bytes_per_element: float) -> float:
    """Bytes of all weights at the given element size."""
    return float(cfg.param_count()) * bytes_per_element


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

    def __init__(self, cfg: DecoderConfig) -> None:
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

    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = (cfg.num_attention_heads, cfg.num_key_value_heads,
                                                            cfg.head_dim_value)
        h = cfg.hidden_size
        self.q_proj = nn.Linear(h, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(h, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(h, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, h, bias=False)
        # a family's sliding window (LlamaConfig.sliding_window: Mistral); capture records it on the SDPA call
        self.sliding_window: int | None = getattr(cfg, "sliding_window", None)

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


class DecoderLayer(nn.Module):
    """Pre-norm decoder layer: x + attn(norm(x)), then + mlp(norm(.)); the family gives attn and mlp.

    `self_attn` takes (x, cos, sin, k_cache, v_cache) and returns (out, k, v); `mlp` maps x to x.
    """

    def __init__(self, cfg: DecoderConfig, self_attn: nn.Module, mlp: nn.Module) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = self_attn
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = mlp

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a, k, v = self.self_attn(self.input_layernorm(x), cos, sin, k_cache, v_cache)
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x)), k, v


class Embed(nn.Module):
    """Model head: token embedding plus the RoPE tables for this step's positions."""

    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.rotary_emb = RotaryEmbedding(cfg)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = self.embed_tokens(tokens)
        cos, sin = self.rotary_emb(positions, x.dtype)
        return x, cos, sin


class Sampler(nn.Module):
    """Model tail: final norm, LM head on each sequence's last token, greedy sampling (argmax)."""

    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(self.norm(x)[:, -1:, :])
        return logits.float().argmax(dim=-1)


def step_tokens(batch: int, q_len: int, past_len: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids (zeros) and positions [batch, q_len] of `q_len` new tokens after `past_len` cached ones."""
    tokens = torch.zeros(batch, q_len, dtype=torch.long, device=device)
    return tokens, torch.arange(past_len, past_len + q_len, device=device).expand(batch, q_len)


def decoder_segments(head: nn.Module, layers: nn.ModuleList, tail: nn.Module, cfg: DecoderConfig, batch: int,
                     q_len: int, past_len: int, dtype: torch.dtype, device: torch.device,
                     rope_dim: int | None = None) -> list[Segment]:
    """(module path, module, example args) of head, each layer and tail, in execution order.

    Each segment's first output feeds the next segment's first input: head(tokens, positions) -> (x, cos, sin);
    layer(x, cos, sin, k_cache, v_cache) -> (x, k, v); tail(x) -> next token. This is the protocol
    `torchsim.lowering.capture.capture_model` reads; models.hf_segments serves HF models through it too.
    `rope_dim`: the rotated dimensions of a head when a family rotates only part of it (default all).
    """
    d = cfg.head_dim_value
    x = torch.zeros(batch, q_len, cfg.hidden_size, dtype=dtype, device=device)
    cos = torch.zeros(batch, q_len, rope_dim or d, dtype=dtype, device=device)  # partial rotary: fewer dims
    cache = torch.zeros(batch, cfg.num_key_value_heads, past_len, d, dtype=dtype, device=device)
    segments: list[Segment] = [("head", head, step_tokens(batch, q_len, past_len, device))]
    segments += [(f"layers.{i}", layer, (x, cos, cos, cache, cache)) for i, layer in enumerate(layers)]
    segments.append(("tail", tail, (x,)))
    return segments



class DecoderForCausalLM(nn.Module, Generic[ConfigT]):
    """A decoder with a KV cache: `forward(tokens, positions, k_caches, v_caches)` -> (next, k, v).

    Three kinds of segment (head, decoder layers, tail), which is what lets capture trace one layer and reuse
    it (see `torchsim.lowering.capture`). A family picks each layer's parts through hooks called with the
    layer index: `make_mlp(i)` (required), `make_attention(i)` (default: GQA `Attention`) and `make_layer(i)`
    (default: a pre-norm `DecoderLayer` of those two), so per-layer variants need no new model class.

    >>> class Plain(DecoderForCausalLM[DecoderConfig]):
    ...     def make_mlp(self, layer: int) -> nn.Module:
    ...         return nn.Identity()
    >>> with torch.device("meta"):
    ...     m = Plain(DecoderConfig(hidden_size=64, intermediate_size=1, num_hidden_layers=2, num_attention_heads=4,
    ...                             num_key_value_heads=2, vocab_size=100, max_position_embeddings=64))
    >>> [path for path, _, _ in m.capture_segments(1, 8, 0)]
    ['head', 'layers.0', 'layers.1', 'tail']
    """

    def __init__(self, cfg: ConfigT, dtype: torch.dtype = torch.bfloat16) -> None:
        super().__init__()
        self.config = cfg
        self.head = Embed(cfg)
        self.layers = nn.ModuleList(self.make_layer(i) for i in range(cfg.num_hidden_layers))
        self.tail = Sampler(cfg)
        if cfg.tie_word_embeddings:
            self.tail.lm_head.weight = self.head.embed_tokens.weight
        self.to(dtype)

    # ---- per-layer hooks: what a family changes ----------------------------------------------------------------

    def make_mlp(self, layer: int) -> nn.Module:
        """The block after the second norm of layer `layer` (x -> x): SwiGLU, routed experts, ..."""
        raise NotImplementedError(f"{type(self).__name__} must say which MLP its layers run (make_mlp)")

    def make_attention(self, layer: int) -> nn.Module:
        """The attention of layer `layer`: (x, cos, sin, k_cache, v_cache) -> (out, k, v)."""
        return Attention(self.config)

    def make_layer(self, layer: int) -> nn.Module:
        """Decoder layer `layer` with the signature of `DecoderLayer.forward`."""
        return DecoderLayer(self.config, self.make_attention(layer), self.make_mlp(layer))

    # ---- the model and its segments ----------------------------------------------------------------------------

    @property
    def dtype(self) -> torch.dtype:
        return self.head.embed_tokens.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.head.embed_tokens.weight.device

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, k_caches: list[torch.Tensor],
                v_caches: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        x, cos, sin = self.head(tokens, positions)
        new_k, new_v = [], []
        for layer, kc, vc in zip(self.layers, k_caches, v_caches, strict=True):
            x, k, v = layer(x, cos, sin, kc, vc)
            new_k.append(k)
            new_v.append(v)
        return self.tail(x), new_k, new_v

    def capture_segments(self, batch: int, q_len: int, past_len: int) -> list[Segment]:
        """(module path, module, example args) per segment of one step, on the model's device (`decoder_segments`)."""
        return decoder_segments(self.head, self.layers, self.tail, self.config, batch, q_len, past_len,
                                self.dtype, self.device)

    def step_inputs(self, batch: int, q_len: int, past_len: int) -> dict[str, Any]:
        """Inputs of one forward step on the model's device: `q_len` new tokens after `past_len` cached ones."""
        cfg = self.config
        tokens, positions = step_tokens(batch, q_len, past_len, self.device)
        cache = [torch.zeros(batch, cfg.num_key_value_heads, past_len, cfg.head_dim_value, dtype=self.dtype,
                             device=self.device) for _ in range(cfg.num_hidden_layers)]
        return {"tokens": tokens, "positions": positions, "k_caches": cache, "v_caches": list(cache)}

    @torch.no_grad()
    def run_prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        """Eager prefill of real token ids [batch, seq] (CPU weights): next-token ids; used to record routing."""
        inputs = self.step_inputs(tokens.shape[0], tokens.shape[1], 0)
        inputs["tokens"] = tokens.to(inputs["tokens"].device)
        return self(**inputs)[0]
