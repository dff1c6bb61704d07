"""Mixtral-family MoE decoder of torchsim's own: the Llama blocks with the MLP replaced by top-k routed experts.

Sits at the start of the pipeline beside models.llama (same segments head / layers / tail, same forward), so
lowering.capture handles both. On the meta device each MoE block exports as two `aten._grouped_mm` with static
shapes; routing lives only in the values of their `offs`, so lowering.plan sizes them from models.routing.
On CPU with real weights it runs, and the `mlp.gate` router's top-k indices are what models.routing_hook records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from torchsim.models.llama import Attention, Embed, LlamaConfig, LlamaForCausalLM, RMSNorm, Sampler
from torchsim.models.registry import register_builder, register_family, register_model


@dataclass(frozen=True, slots=True)
class MixtralConfig:
    """Mixtral-family hyper-parameters, named as in HF `MixtralConfig`; `intermediate_size` is one expert's FFN.

    >>> cfg = mixtral_config("mixtral-8x7b")
    >>> round(cfg.param_count() / 1e9, 1), round(cfg.active_param_count() / 1e9, 1)
    (46.7, 12.9)
    """

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    max_position_embeddings: int
    num_local_experts: int = 8
    num_experts_per_tok: int = 2
    rope_theta: float = 1e6
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False
    head_dim: int | None = None
    name: str = "mixtral"

    def __post_init__(self) -> None:
        for f in ("num_local_experts", "num_experts_per_tok"):
            value = getattr(self, f)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"model config {self.name!r}: field {f!r} must be a positive integer, got {value!r}")
        if self.num_experts_per_tok > self.num_local_experts:
            raise ValueError(f"model config {self.name!r}: num_experts_per_tok ({self.num_experts_per_tok}) exceeds "
                             f"num_local_experts ({self.num_local_experts})")
        self.dense()  # the attention/embedding fields are checked as a Llama config would check them

    def dense(self) -> LlamaConfig:
        """The non-MoE part as a LlamaConfig (attention, norms, embedding; intermediate_size = one expert)."""
        moe = ("num_local_experts", "num_experts_per_tok")
        return LlamaConfig(**{k: v for k, v in asdict(self).items() if k not in moe})

    @property
    def head_dim_value(self) -> int:
        return self.dense().head_dim_value

    @property
    def max_context(self) -> int:
        return self.max_position_embeddings

    def kv_bytes_per_token(self, bytes_per_element: int) -> int:
        return self.dense().kv_bytes_per_token(bytes_per_element)

    def param_count(self) -> int:
        """All parameters: the dense model plus (experts - 1) more expert FFNs and the routers."""
        h, e = self.hidden_size, self.num_local_experts
        expert = 3 * h * self.intermediate_size
        return self.dense().param_count() + self.num_hidden_layers * ((e - 1) * expert + e * h)

    def active_param_count(self) -> int:
        """Parameters one token touches: top_k experts per layer instead of all of them."""
        expert = 3 * self.hidden_size * self.intermediate_size
        idle = self.num_local_experts - self.num_experts_per_tok
        return self.param_count() - self.num_hidden_layers * idle * expert

    def with_layers(self, num_hidden_layers: int) -> MixtralConfig:
        return replace(self, num_hidden_layers=num_hidden_layers)

    @classmethod
    def from_dict(cls, data: dict[str, Any], name: str = "mixtral") -> MixtralConfig:
        """Build from HF `config.json` keys; missing required keys are named in one error."""
        optional = {"num_local_experts", "num_experts_per_tok", "rope_theta", "rms_norm_eps", "tie_word_embeddings",
                    "head_dim", "name"}
        required = [f.name for f in fields(cls) if f.name not in optional]
        missing = [k for k in required if k not in data]
        if missing:
            raise ValueError(f"model config {name!r} is missing field(s) {missing}; a Mixtral-family config needs "
                             f"{required} (optional: {sorted(optional - {'name'})})")
        kwargs = {f.name: data[f.name] for f in fields(cls) if f.name in data and f.name != "name"}
        if kwargs.get("head_dim") is None:
            kwargs.pop("head_dim", None)
        return cls(name=name, **kwargs)


MIXTRAL_CONFIGS: dict[str, MixtralConfig] = {c.name: c for c in (
    # mistralai/Mixtral-8x7B-v0.1 config.json (sliding_window null): 46.7 B parameters, 12.9 B active.
    MixtralConfig(name="mixtral-8x7b", hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=8, vocab_size=32000, max_position_embeddings=32768),
    # mistralai/Mixtral-8x22B-v0.1 config.json: 141 B parameters.
    MixtralConfig(name="mixtral-8x22b", hidden_size=6144, intermediate_size=16384, num_hidden_layers=56,
                  num_attention_heads=48, num_key_value_heads=8, vocab_size=32768, max_position_embeddings=65536),
    # CPU-sized: tests, and recording routing with real random-init weights on real token inputs.
    MixtralConfig(name="mixtral-tiny", hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                  num_attention_heads=8, num_key_value_heads=2, vocab_size=1000, max_position_embeddings=4096),
    MixtralConfig(name="mixtral-micro", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=256, max_position_embeddings=512,
                  num_local_experts=4),
)}


def mixtral_config(name: str) -> MixtralConfig:
    """A named Mixtral config; an unknown name raises KeyError listing the known ones."""
    if name not in MIXTRAL_CONFIGS:
        raise KeyError(f"unknown Mixtral config {name!r}; known: {', '.join(MIXTRAL_CONFIGS)}")
    return MIXTRAL_CONFIGS[name]


# F.grouped_mm is public from torch 2.10; torch._grouped_mm before. Both trace to aten._grouped_mm.
_grouped_mm = getattr(F, "grouped_mm", None) or torch._grouped_mm


class TopKRouter(nn.Module):
    """Softmax router: (weights [tokens, top_k] renormalised to sum 1, indices [tokens, top_k] int64).

    A forward hook sees the indices as `output[1]` (models.routing_hook.RoutingRecorder finds them).
    """

    def __init__(self, hidden_size: int, num_experts: int, top_k: int) -> None:
        super().__init__()
        self.num_experts, self.top_k = num_experts, top_k
        self.weight = nn.Parameter(torch.empty(num_experts, hidden_size))
        nn.init.normal_(self.weight, std=hidden_size ** -0.5)

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probs = F.linear(h, self.weight).float().softmax(dim=-1)
        weights, indices = probs.topk(self.top_k, dim=-1)
        return weights / weights.sum(dim=-1, keepdim=True), indices


class GroupedExperts(nn.Module):
    """E SwiGLU experts as 3-D weights, run as two grouped GEMMs over the token copies sorted by expert.

    gate_up_proj [E, 2*ffn, hidden] and down_proj [E, hidden, ffn]: the layout of HF Mixtral in transformers v5.
    Every shape is static (tokens*top_k rows); the routing only sets the values of `offsets`.
    """

    def __init__(self, hidden_size: int, ffn: int, num_experts: int) -> None:
        super().__init__()
        self.num_experts = num_experts
        self.gate_up_proj = nn.Parameter(torch.empty(num_experts, 2 * ffn, hidden_size))
        self.down_proj = nn.Parameter(torch.empty(num_experts, hidden_size, ffn))
        nn.init.normal_(self.gate_up_proj, std=hidden_size ** -0.5)
        nn.init.normal_(self.down_proj, std=ffn ** -0.5)

    def forward(self, h: torch.Tensor, weights: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
        tokens, top_k = indices.shape
        expert_of, order = indices.reshape(-1).sort()  # token copies grouped by expert
        x = h[order // top_k]
        per_expert = torch.histc(expert_of.float(), bins=self.num_experts, min=0, max=self.num_experts - 1)
        offsets = per_expert.cumsum(0, dtype=torch.int32)
        gate, up = _grouped_mm(x, self.gate_up_proj.transpose(-2, -1), offs=offsets).chunk(2, dim=-1)
        y = _grouped_mm(F.silu(gate) * up, self.down_proj.transpose(-2, -1), offs=offsets)
        y = y * weights.reshape(-1)[order].unsqueeze(-1).to(y.dtype)
        unsorted = torch.zeros_like(y).index_put((order,), y)  # back to (token, k) order, then sum the k copies
        return unsorted.view(tokens, top_k, -1).sum(dim=1)


class SparseMoeBlock(nn.Module):
    """Router (`gate`) + experts, in the module layout of HF `MixtralSparseMoeBlock`."""

    def __init__(self, cfg: MixtralConfig) -> None:
        super().__init__()
        self.gate = TopKRouter(cfg.hidden_size, cfg.num_local_experts, cfg.num_experts_per_tok)
        self.experts = GroupedExperts(cfg.hidden_size, cfg.intermediate_size, cfg.num_local_experts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.reshape(-1, x.shape[-1])
        weights, indices = self.gate(h)
        return self.experts(h, weights, indices).view(x.shape)


class MixtralDecoderLayer(nn.Module):
    """Pre-norm: x + attn(norm(x)), then + moe(norm(.)); returns (x, k_cache, v_cache) like llama.DecoderLayer."""

    def __init__(self, cfg: MixtralConfig) -> None:
        super().__init__()
        dense = cfg.dense()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(dense)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SparseMoeBlock(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a, k, v = self.self_attn(self.input_layernorm(x), cos, sin, k_cache, v_cache)
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x)), k, v


class MixtralForCausalLM(nn.Module):
    """Segments head / layers / tail as in llama.LlamaForCausalLM, whose forward, step_inputs and
    capture_segments it runs (they only touch head, layers, tail and the config's dense fields).

    >>> with torch.device("meta"):
    ...     m = MixtralForCausalLM(mixtral_config("mixtral-8x7b"))
    >>> sum(p.numel() for p in m.parameters()) == m.config.param_count()
    True
    """

    def __init__(self, cfg: MixtralConfig, dtype: torch.dtype = torch.bfloat16) -> None:
        super().__init__()
        self.config = cfg
        self.head = Embed(cfg.dense())
        self.layers = nn.ModuleList(MixtralDecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.tail = Sampler(cfg.dense())
        if cfg.tie_word_embeddings:
            self.tail.lm_head.weight = self.head.embed_tokens.weight
        self.to(dtype)

    # The segment protocol is Llama's, reused as is: these read only head, layers, tail and the dense config fields.
    @property
    def dtype(self) -> torch.dtype:
        return self.head.embed_tokens.weight.dtype

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, k_caches: list[torch.Tensor],
                v_caches: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
        return LlamaForCausalLM.forward(self, tokens, positions, k_caches, v_caches)  # type: ignore[arg-type]

    def step_inputs(self, batch: int, q_len: int, past_len: int) -> dict[str, Any]:
        """Inputs of one forward step: `q_len` new tokens after `past_len` cached ones."""
        return LlamaForCausalLM.step_inputs(self, batch, q_len, past_len)  # type: ignore[arg-type]

    def capture_segments(self, batch: int, q_len: int, past_len: int) -> list[tuple[str, nn.Module, tuple[Any, ...]]]:
        """(path, module, example args) of head, each layer and tail: the protocol lowering.capture reads."""
        return LlamaForCausalLM.capture_segments(self, batch, q_len, past_len)  # type: ignore[arg-type]

    @torch.no_grad()
    def run_prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        """Eager prefill of real token ids [batch, seq] (CPU weights): next-token ids; used to record routing."""
        inputs = self.step_inputs(tokens.shape[0], tokens.shape[1], 0)
        inputs["tokens"] = tokens.to(inputs["tokens"].device)
        return self(**inputs)[0]


def build_mixtral(cfg: MixtralConfig | str, *, device: str | torch.device = "meta",
                  dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> MixtralForCausalLM:
    """A model on `device`: meta (no memory, for capture) or cpu (random-init weights drawn from `seed`)."""
    cfg = mixtral_config(cfg) if isinstance(cfg, str) else cfg
    if torch.device(device).type != "meta":
        torch.manual_seed(seed)
    with torch.device(device):
        return MixtralForCausalLM(cfg, dtype).eval()


def _named(cfg: MixtralConfig) -> Callable[[], MixtralConfig]:
    return lambda: cfg


for _cfg in MIXTRAL_CONFIGS.values():
    register_model(_cfg.name, _named(_cfg))
register_family("mixtral", MixtralConfig.from_dict)
register_builder(MixtralConfig, MixtralForCausalLM)
