"""`RoutingCounts`: how many tokens each expert of each MoE layer receives, and `allocate` (fitting counts to a
token total).

The type every routing source produces (routing_hook, routing_io, routing_synthetic) and lowering.plan reads;
it imports no other routing module (routing.py picks among the sources).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np


@dataclass(frozen=True, slots=True)
class RoutingCounts:
    """Tokens per expert per MoE layer: `counts[layer][expert]`; each layer routes `tokens` tokens to `top_k` experts.

    >>> rc = RoutingCounts(((4, 2, 2, 0), (2, 2, 2, 2)), num_experts=4, top_k=2, tokens=4)
    >>> rc.layer(0), rc.num_layers, rc.imbalance(0)
    ((4, 2, 2, 0), 2, 2.0)

    Invariants (checked on construction): every layer lists `num_experts` non-negative integers that sum to
    `tokens * top_k`, and no expert gets more than `tokens` (a token picks distinct experts).
    """

    counts: tuple[tuple[int, ...], ...]
    num_experts: int
    top_k: int
    tokens: int
    source: str = ""  # where the counts came from: "hook:<model>", "file:<path>", "synthetic:skewed"

    def __post_init__(self) -> None:
        where = f" (routing from {self.source})" if self.source else ""
        for name in ("num_experts", "top_k", "tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
                raise ValueError(f"RoutingCounts.{name} must be a positive integer, got {value!r}{where}")
        if self.top_k > self.num_experts:
            raise ValueError(f"RoutingCounts.top_k={self.top_k} exceeds num_experts={self.num_experts}{where}")
        if not self.counts:
            raise ValueError(f"RoutingCounts has no layers{where}; give at least one list of tokens per expert")
        expected = self.tokens * self.top_k
        for i, row in enumerate(self.counts):
            if len(row) != self.num_experts:
                raise ValueError(f"layer {i} lists {len(row)} experts, the model has num_experts={self.num_experts}"
                                 f"{where}")
            for e, c in enumerate(row):
                if isinstance(c, bool) or not isinstance(c, (int, np.integer)):
                    raise ValueError(f"layer {i} expert {e}: count {c!r} is not an integer{where}")
                if c < 0:
                    raise ValueError(f"layer {i} expert {e}: count {c} is negative{where}; counts are tokens >= 0")
                if c > self.tokens:
                    raise ValueError(f"layer {i} expert {e}: count {c} exceeds tokens={self.tokens}{where}; "
                                     f"a token is routed to an expert at most once")
            if sum(row) != expected:
                raise ValueError(f"layer {i} counts sum to {sum(row)}, expected tokens x top_k = "
                                 f"{self.tokens} x {self.top_k} = {expected}{where}")

    @staticmethod
    def from_lists(counts: Any, *, top_k: int, tokens: int, source: str = "") -> RoutingCounts:
        """Build from nested lists or a [layers, experts] array; `num_experts` is the row length."""
        rows = tuple(tuple(int(c) if isinstance(c, np.integer) else c for c in row) for row in counts)
        num_experts = len(rows[0]) if rows else 0
        return RoutingCounts(rows, num_experts=num_experts, top_k=top_k, tokens=tokens, source=source)

    @property
    def num_layers(self) -> int:
        return len(self.counts)

    def layer(self, index: int) -> tuple[int, ...]:
        """Tokens per expert of MoE layer `index` (the `tokens_per_expert` of its grouped GEMM)."""
        if not 0 <= index < self.num_layers:
            raise IndexError(f"MoE layer {index} out of range: routing has {self.num_layers} layers")
        return self.counts[index]

    def imbalance(self, index: int) -> float:
        """Busiest expert over the mean load: 1.0 is perfectly balanced, num_experts/top_k the worst possible."""
        row = self.layer(index)
        return max(row) / (sum(row) / self.num_experts)

    def as_array(self) -> np.ndarray:
        return np.asarray(self.counts, dtype=np.int64)

    def check_model(self, *, num_layers: int, num_experts: int, top_k: int) -> None:
        """Raise a ValueError naming every field where these counts do not fit the model."""
        wrong = [f"{name}: routing has {mine}, model has {theirs}" for name, mine, theirs in (
            ("layers", self.num_layers, num_layers), ("experts", self.num_experts, num_experts),
            ("top_k", self.top_k, top_k)) if mine != theirs]
        if wrong:
            raise ValueError(f"routing from {self.source or 'counts'} does not match the model: " + "; ".join(wrong))

    def scaled(self, tokens: int) -> RoutingCounts:
        """The same routing proportions for `tokens` tokens (e.g. recorded on 256 tokens, used for a 2048 prefill).

        Each expert's share of the tokens x top_k assignments is kept; rounding is by largest remainder, so the sum
        is exact and the result is deterministic. Identity when `tokens` equals `self.tokens`.
        """
        if tokens == self.tokens:
            return self
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0:
            raise ValueError(f"tokens must be a positive integer, got {tokens!r}")
        return _scaled(self, tokens)

    def describe(self) -> str:
        """A table: one line per layer with the counts and the imbalance."""
        head = (f"routing: {self.num_layers} layers x {self.num_experts} experts, top_k={self.top_k}, "
                f"tokens={self.tokens} (source: {self.source or 'unknown'})")
        lines = [head] + [f"  layer {i:3d}: {list(row)}  max/mean={self.imbalance(i):.2f}"
                          for i, row in enumerate(self.counts)]
        return "\n".join(lines)


@lru_cache(maxsize=256)
def _scaled(counts: RoutingCounts, tokens: int) -> RoutingCounts:
    """Memoised body of RoutingCounts.scaled (a plan asks once per grouped GEMM per layer)."""
    rows = tuple(allocate(np.asarray(row, dtype=np.float64), tokens, counts.top_k) for row in counts.counts)
    return RoutingCounts(rows, counts.num_experts, counts.top_k, tokens, f"{counts.source} scaled to {tokens} tokens")


def allocate(weights: np.ndarray, tokens: int, top_k: int) -> tuple[int, ...]:
    """Split tokens x top_k assignments over experts in proportion to `weights`, each expert at most `tokens`.

    Water-filling: experts whose share would exceed `tokens` are capped and the rest is shared among the others;
    then largest-remainder rounding (ties to the lower expert index) makes the total exact.
    """
    if weights.ndim != 1 or weights.size < top_k or np.any(weights < 0) or not np.isfinite(weights).all():
        raise ValueError(f"routing weights must be {top_k} or more finite non-negative numbers, got {weights!r}")
    total = tokens * top_k
    w = weights if weights.sum() > 0 else np.ones_like(weights)
    share = np.zeros_like(w)
    capped = np.zeros(w.size, dtype=bool)
    while True:  # at most num_experts rounds: each round caps one expert or finishes
        free = ~capped & (w > 0)
        rest = total - tokens * capped.sum()
        share[free] = w[free] / w[free].sum() * rest if free.any() else 0.0
        share[capped] = tokens
        over = free & (share > tokens)
        if not over.any():
            break
        capped |= over
    if not (~capped & (w > 0)).any() and tokens * capped.sum() < total:  # too few experts with weight: spread
        share = np.where(capped, tokens, 0.0) + (total - tokens * capped.sum()) * (~capped) / max((~capped).sum(), 1)
    base = np.floor(share + 1e-9).astype(np.int64)
    room = (share - base) * (base < tokens)
    for e in sorted(range(w.size), key=lambda i: (-room[i], i))[: total - int(base.sum())]:
        base[e] += 1
    return tuple(int(c) for c in base)
