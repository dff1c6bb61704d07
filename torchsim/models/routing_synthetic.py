"""Named synthetic routing patterns: balanced, skewed, zipf, dirichlet (documented in docs/routing.md).

Used by models.routing.resolve_routing when no recorded counts exist. Deterministic: the random patterns take
a seed, and the same (pattern, shape, seed) always gives the same counts.
"""

from __future__ import annotations

from enum import Enum

import numpy as np

from torchsim.models.routing_counts import RoutingCounts, allocate


class RoutingPattern(Enum):
    BALANCED = "balanced"  # every expert gets tokens x top_k / num_experts (remainder to the lowest indices)
    SKEWED = "skewed"  # expert 0 gets `hot_fraction` (default 0.5) of all assignments, the others share the rest
    ZIPF = "zipf"  # per token, top_k distinct experts drawn with P(rank r) ~ r^-s over a seeded expert order
    DIRICHLET = "dirichlet"  # per layer, expert popularity ~ Dirichlet(alpha); tokens drawn from it


PATTERN_NAMES = tuple(p.value for p in RoutingPattern)
_DEFAULT_PARAM = {RoutingPattern.SKEWED: 0.5, RoutingPattern.ZIPF: 1.2, RoutingPattern.DIRICHLET: 0.5}


# the patterns drawn from a seeded generator (the others are computed: a seed changes nothing)
SAMPLED = (RoutingPattern.ZIPF, RoutingPattern.DIRICHLET)


def parse_pattern(spec: str) -> tuple[RoutingPattern, float | None]:
    """'skewed', 'skewed:0.7', 'zipf:1.5', 'dirichlet:0.3' -> (pattern, parameter or None)."""
    name, _, arg = spec.partition(":")
    try:
        pattern = RoutingPattern(name)
    except ValueError:
        raise ValueError(f"routing pattern {name!r} is unknown; known: {', '.join(PATTERN_NAMES)}") from None
    if not arg:
        return pattern, None
    if pattern is RoutingPattern.BALANCED:
        raise ValueError(f"routing pattern 'balanced' takes no parameter, got {spec!r}")
    try:
        return pattern, float(arg)
    except ValueError:
        raise ValueError(f"routing pattern {spec!r}: parameter {arg!r} is not a number") from None


# token-layers the sampled patterns (zipf, dirichlet) draw: ~4.7M a second on one core of the dev machine
# (1M tokens x 32 layers in 6.8 s), so this bound is ~30 s; Mixtral at batch 64 x 2048 tokens is 4.2M
MAX_SAMPLED = 1 << 27


def synthetic_routing(spec: str | RoutingPattern, *, num_layers: int, num_experts: int, top_k: int, tokens: int,
                      seed: int = 0, param: float | None = None) -> RoutingCounts:
    """Counts for every layer from a named pattern; `param` (or 'name:value') is the skew fraction, zipf s or alpha.

    >>> synthetic_routing("skewed", num_layers=1, num_experts=4, top_k=2, tokens=8).layer(0)
    (8, 3, 3, 2)
    """
    if isinstance(spec, RoutingPattern):
        pattern, parsed = spec, None
    else:
        pattern, parsed = parse_pattern(spec)
    value = param if param is not None else parsed if parsed is not None else _DEFAULT_PARAM.get(pattern)
    for name, n in (("num_layers", num_layers), ("num_experts", num_experts), ("top_k", top_k), ("tokens", tokens)):
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise ValueError(f"synthetic routing: {name} must be a positive integer, got {n!r}")
    if top_k > num_experts:
        raise ValueError(f"synthetic routing: top_k={top_k} exceeds num_experts={num_experts}")
    if pattern in (RoutingPattern.ZIPF, RoutingPattern.DIRICHLET) and tokens * num_layers > MAX_SAMPLED:
        raise ValueError(f"synthetic routing: {pattern.value} samples every token's experts; {tokens:,} tokens x "
                         f"{num_layers} layers is above the {MAX_SAMPLED:,} token-layers it samples (~30 s on one "
                         f"core); route fewer tokens, or use 'balanced' or 'skewed' (computed, not sampled)")
    rng = np.random.default_rng(seed)
    rows: list[tuple[int, ...]] = []
    for _ in range(num_layers):
        if pattern is RoutingPattern.BALANCED:
            rows.append(allocate(np.ones(num_experts), tokens, top_k))
        elif pattern is RoutingPattern.SKEWED:
            rows.append(_skewed(num_experts, top_k, tokens, 0.5 if value is None else float(value)))
        elif pattern is RoutingPattern.ZIPF:
            s = _positive(value, "zipf exponent s")
            popularity = np.arange(1, num_experts + 1, dtype=np.float64) ** -s
            rows.append(sample_top_k(popularity[rng.permutation(num_experts)], tokens, top_k, rng))
        else:
            alpha = _positive(value, "dirichlet alpha")
            rows.append(sample_top_k(rng.dirichlet(np.full(num_experts, alpha)), tokens, top_k, rng))
    label = pattern.value if value is None or pattern is RoutingPattern.BALANCED else f"{pattern.value}:{value:g}"
    seeded = f", seed={seed}" if pattern in SAMPLED else ""
    return RoutingCounts(tuple(rows), num_experts, top_k, tokens, f"synthetic:{label}{seeded}")


def _skewed(num_experts: int, top_k: int, tokens: int, hot_fraction: float) -> tuple[int, ...]:
    """Expert 0 takes hot_fraction of the assignments, capped at `tokens` (each token picks it at most once)."""
    if not 0.0 < hot_fraction < 1.0:
        raise ValueError(f"skewed routing: hot fraction must be in (0, 1), got {hot_fraction}")
    if num_experts == 1:
        return (tokens * top_k,)
    total = tokens * top_k
    hot = min(tokens, round(hot_fraction * total))
    others = _spread(total - hot, num_experts - 1, tokens)
    return (hot, *others)


def _spread(assignments: int, experts: int, cap: int) -> tuple[int, ...]:
    """`assignments` over `experts` as evenly as possible (remainder to the lowest indices), each <= cap."""
    base, extra = divmod(assignments, experts)
    row = tuple(base + (1 if e < extra else 0) for e in range(experts))
    if row and row[0] > cap:
        raise ValueError(f"cannot place {assignments} assignments on {experts} experts of at most {cap} tokens each")
    return row


def sample_top_k(popularity: np.ndarray, tokens: int, top_k: int, rng: np.random.Generator) -> tuple[int, ...]:
    """Draw top_k distinct experts per token with probability ~ popularity (Gumbel top-k), return tokens/expert."""
    logits = np.log(np.maximum(popularity, 1e-300))
    counts = np.zeros(popularity.size, dtype=np.int64)
    for start in range(0, tokens, 65536):  # chunks keep memory flat for long prompts x large batches
        n = min(65536, tokens - start)
        keys = logits + rng.gumbel(size=(n, popularity.size))
        chosen = np.argpartition(-keys, top_k - 1, axis=1)[:, :top_k]
        counts += np.bincount(chosen.ravel(), minlength=popularity.size)
    return tuple(int(c) for c in counts)


def _positive(value: float | None, what: str) -> float:
    if value is None or not value > 0:
        raise ValueError(f"synthetic routing: {what} must be > 0, got {value!r}")
    return float(value)
