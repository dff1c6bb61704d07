"""Mixtral-family MoE decoder of torchsim's own: the shared decoder with the MLP replaced by top-k routed experts.

Sits at the start of the pipeline beside models.llama; both are models.decoder models (same segments head / layers
/ tail, same forward), so lowering.capture handles both, and only the config and the MoE block are Mixtral's own.
On the meta device each MoE block exports as two `aten._grouped_mm` with static shapes; routing lives only in
the values of their `offs`, so lowering.plan sizes them from models.routing. On CPU with real weights it runs,
and the `mlp.gate` router's top-k indices are what models.routing_hook records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from torchsim.models import moe_patterns  # noqa: F401  (registers the router/align/combine fusions with lowering)
from torchsim.models.decoder import DecoderConfig, DecoderForCausalLM
from torchsim.models.presets import MIXTRAL_EXPERTS, MIXTRAL_MODELS, MIXTRAL_TOP_K
from torchsim.models.registry import register_builder, register_family, register_model


@dataclass(frozen=True, slots=True)
class MixtralConfig(DecoderConfig):
    """Mixtral-family hyper-parameters, named as in HF `MixtralConfig`; `intermediate_size` is one expert's FFN.

    >>> cfg = mixtral_config("mixtral-8x7b")
    >>> round(cfg.param_count() / 1e9, 1), round(cfg.active_param_count() / 1e9, 1)
    (46.7, 12.9)
    """

    family: ClassVar[str] = "Mixtral"

    rope_theta: float = 1e6
    name: str = "mixtral"
    num_local_experts: int = MIXTRAL_EXPERTS
    num_experts_per_tok: int = MIXTRAL_TOP_K

    def __post_init__(self) -> None:
        for f in ("num_local_experts", "num_experts_per_tok"):
            self._check_positive(f, 1 << 16)
        if self.num_experts_per_tok > self.num_local_experts:
            raise ValueError(f"model config {self.name!r}: num_experts_per_tok ({self.num_experts_per_tok}) exceeds "
                             f"num_local_experts ({self.num_local_experts})")
        DecoderConfig.__post_init__(self)  # explicit: zero-argument super() fails in a slotted dataclass

    def mlp_param_count(self) -> int:
        """All experts' SwiGLU FFNs plus the router."""
        e, h = self.num_local_experts, self.hidden_size
        return e * 3 * h * self.intermediate_size + e * h

    def active_param_count(self) -> int:
        """Parameters one token touches: top_k experts per layer instead of all of them."""
        expert = 3 * self.hidden_size * self.intermediate_size
        idle = self.num_local_experts - self.num_experts_per_tok
        return self.param_count() - self.num_hidden_layers * idle * expert


MIXTRAL_CONFIGS: dict[str, MixtralConfig] = {  # models.presets: the shapes, as plain data
    name: MixtralConfig(name=name, **fields) for name, fields in MIXTRAL_MODELS.items()}


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


class MixtralForCausalLM(DecoderForCausalLM[MixtralConfig]):
    """A Mixtral decoder: every layer's MLP is a `SparseMoeBlock` (see models.decoder.DecoderForCausalLM).

    >>> with torch.device("meta"):
    ...     m = MixtralForCausalLM(mixtral_config("mixtral-8x7b"))
    >>> sum(p.numel() for p in m.parameters()) == m.config.param_count()
    True
    """

    def make_mlp(self, layer: int) -> nn.Module:
        return SparseMoeBlock(self.config)


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
