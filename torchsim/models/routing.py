"""MoE routing counts: how many tokens each expert of each MoE layer receives.

Sits between models and lowering.plan: the grouped GEMM of an MoE layer is sized by `RoutingCounts.layer(i)`
(routing_counts.py). Counts come from a router hook (routing_hook), a JSON/Parquet file (routing_io) or a
synthetic pattern (routing_synthetic); `resolve_routing` picks the source from what a user typed and fits it to
the model.
"""

from __future__ import annotations

from pathlib import Path

from torchsim.models.routing_counts import RoutingCounts, allocate
from torchsim.models.routing_io import load_routing
from torchsim.models.routing_synthetic import PATTERN_NAMES, synthetic_routing

__all__ = ["RoutingCounts", "allocate", "resolve_routing"]


def resolve_routing(spec: str | Path | RoutingCounts, *, num_layers: int, num_experts: int, top_k: int,
                    tokens: int, seed: int = 0) -> RoutingCounts:
    """Routing for a scenario from what a user gave: a pattern name, a .json/.parquet path, or RoutingCounts.

    The result matches the model (layers, experts, top_k; a mismatch raises naming the field) and routes `tokens`
    tokens (recorded or file counts are scaled to it).

    >>> resolve_routing("balanced", num_layers=1, num_experts=4, top_k=2, tokens=6).layer(0)
    (3, 3, 3, 3)
    """
    if isinstance(spec, RoutingCounts):
        counts = spec
    elif isinstance(spec, str) and spec.split(":")[0] in PATTERN_NAMES:
        return synthetic_routing(spec, num_layers=num_layers, num_experts=num_experts, top_k=top_k, tokens=tokens,
                                 seed=seed)
    elif isinstance(spec, (str, Path)) and Path(spec).suffix.lower() in (".json", ".parquet"):
        counts = load_routing(spec)
    else:
        raise ValueError(f"routing {spec!r} is neither a pattern ({', '.join(PATTERN_NAMES)}) nor a .json/.parquet "
                         f"file of tokens per expert per layer")
    counts.check_model(num_layers=num_layers, num_experts=num_experts, top_k=top_k)
    return counts.scaled(tokens)
