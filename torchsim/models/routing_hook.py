"""Record real routing counts: forward hooks on an MoE model's routers while it runs on real hidden states.

Feeds models.routing: works on torchsim's own MixtralModel (CPU weights) and on HF transformers MoE models
(`MixtralForCausalLM.from_pretrained(local_path)`), whose router modules return the top-k indices among their
outputs. The counts are those the model's own router chose, token by token.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import torch
from torch import nn

from torchsim.models.routing_counts import RoutingCounts


@dataclass(frozen=True, slots=True)
class RouterSite:
    """One router module of a model: its module path, the module, and its expert count and top-k."""

    name: str
    module: nn.Module
    num_experts: int
    top_k: int


def find_routers(model: nn.Module) -> list[RouterSite]:
    """Router modules in model order: those with integer `num_experts` and `top_k` and a [experts, hidden] weight.

    Matches torchsim's TopKRouter and HF v5 routers (`model.layers.N.mlp.gate`, MixtralTopKRouter).
    """
    found = []
    for name, mod in model.named_modules():
        experts, top_k = getattr(mod, "num_experts", None), getattr(mod, "top_k", None)
        weight = getattr(mod, "weight", None)
        if (isinstance(experts, int) and isinstance(top_k, int) and isinstance(weight, torch.Tensor)
                and weight.dim() == 2 and weight.shape[0] == experts):
            found.append(RouterSite(name, mod, experts, top_k))
    return found


def _indices_of(output: Any, top_k: int, where: str) -> torch.Tensor:
    """The integer [tokens, top_k] tensor among a router's outputs (torchsim: out[1]; HF v5: out[2])."""
    outs = output if isinstance(output, (tuple, list)) else (output,)
    for t in outs:
        if isinstance(t, torch.Tensor) and not t.is_floating_point() and t.dim() >= 1 and t.shape[-1] == top_k:
            return t.reshape(-1, top_k)
    raise ValueError(f"router {where!r} returned no integer [tokens, top_k={top_k}] tensor of expert indices; "
                     f"got {[type(t).__name__ for t in outs]}")


class RoutingRecorder:
    """Context manager: hooks every router, accumulates tokens per expert over every forward run inside it.

    >>> from torchsim.models.mixtral import build_mixtral
    >>> model = build_mixtral("mixtral-micro", device="cpu", dtype=torch.float32)
    >>> with RoutingRecorder(model) as rec:
    ...     _ = model.run_prefill(torch.randint(0, 256, (2, 16)))
    >>> counts = rec.counts()
    >>> counts.tokens, counts.num_layers, [sum(r) for r in counts.counts]
    (32, 2, [64, 64])
    """

    def __init__(self, model: nn.Module, *, source: str = "") -> None:
        self.routers = find_routers(model)
        if not self.routers:
            raise ValueError(f"{type(model).__name__} has no MoE router modules (modules with num_experts, top_k and "
                             f"an [experts, hidden] weight); routing can only be recorded on an MoE model")
        self.source = source or f"hook:{type(model).__name__}"
        self._totals = [torch.zeros(r.num_experts, dtype=torch.int64) for r in self.routers]
        self._tokens = [0] * len(self.routers)
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def _hook(self, index: int) -> Callable[[nn.Module, Any, Any], None]:
        site = self.routers[index]

        def record(_: nn.Module, __: Any, output: Any) -> None:
            idx = _indices_of(output, site.top_k, site.name).detach().to("cpu", torch.int64)
            self._totals[index] += torch.bincount(idx.flatten(), minlength=site.num_experts)
            self._tokens[index] += idx.shape[0]
        return record

    def __enter__(self) -> RoutingRecorder:
        self._handles = [r.module.register_forward_hook(self._hook(i)) for i, r in enumerate(self.routers)]
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def counts(self) -> RoutingCounts:
        """What the routers chose so far, one row per router in model order."""
        if not any(self._tokens):
            raise ValueError("no tokens were routed: run the model inside `with RoutingRecorder(model):`")
        if len(set(self._tokens)) != 1:
            seen = {r.name: n for r, n in zip(self.routers, self._tokens, strict=True)}
            raise ValueError(f"routers saw different token counts {seen}; run whole forward passes only")
        experts = {r.num_experts for r in self.routers}
        top_k = {r.top_k for r in self.routers}
        if len(top_k) != 1 or len(experts) != 1:
            raise ValueError(f"routers differ in top_k {sorted(top_k)} or num_experts {sorted(experts)}")
        rows = tuple(tuple(int(c) for c in t.tolist()) for t in self._totals)
        return RoutingCounts(rows, experts.pop(), top_k.pop(), self._tokens[0], self.source)




def record_routing(model: nn.Module, batches: list[torch.Tensor], *, source: str = "") -> RoutingCounts:
    """Run `model` on each batch of token ids [batch, seq] (no grad) and return the routers' counts.

    Calls `model.run_prefill(ids)` when the model has it (torchsim models), else `model(input_ids=ids)` (HF).
    """
    run = getattr(model, "run_prefill", None)
    with RoutingRecorder(model, source=source) as rec, torch.no_grad():
        for ids in batches:
            if run is not None:
                run(ids)
            else:
                model(input_ids=ids, use_cache=False)
    return rec.counts()


def record_routing_from_checkpoint(path: str | Path, token_ids: torch.Tensor, *, batch_tokens: int = 4096,
                                   dtype: torch.dtype = torch.bfloat16) -> RoutingCounts:
    """Load a local HF MoE checkpoint (`from_pretrained(path)`, no download) and record its routing on token_ids.

    token_ids: [batch, seq] int64. Runs in chunks of about `batch_tokens` tokens on CPU.
    """
    from torchsim.models.hf import require_transformers

    transformers = require_transformers()
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} has no config.json; give a local HF model directory")
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, dtype=dtype)
    model.eval()
    if token_ids.dim() != 2:
        raise ValueError(f"token_ids must be [batch, seq], got shape {tuple(token_ids.shape)}")
    rows_per_chunk = max(1, batch_tokens // token_ids.shape[1])
    chunks = list(token_ids.split(rows_per_chunk))
    return record_routing(model, chunks, source=f"hook:{path.name}")
