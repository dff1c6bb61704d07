"""A prediction's simulation work, estimated before anything is simulated, against a limit (`--max-events`).

`predict` simulates each distinct kernel call once; what that costs is the node executions (node events) of
what is really simulated: a kernel up to `max_sim_events` node executions in full, a larger one, where
torchsim.prediction.repeats knows its repeating structure, only its truncated samples (`repeats.sample_events`:
3 samples per repeating dimension, nested). `call_events` counts that without simulating and without building a
large GEMM's full graph (its family counts it); other kernels' graphs are built once (one graph per CTA class,
so their size does not grow with the grid). Collectives and rooflines cost no events.

The estimate is an upper bound in one respect and a lower one in two: calls that the reuse plan
(torchsim.prediction.reuse) interpolates are counted as if simulated; an extrapolation whose window slides, and
the power model's rerun of a power-limited kernel at its sustained clock, simulate more than the samples counted.
tests/test_predict_limits.py checks it against the events really simulated (within a factor of 3 there).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the CLI imports this module for its default: no numpy/torch at startup
    from torchsim.lowering.kernel_call import KernelCall

# Node events a prediction may simulate without --max-events / --yes. The engine runs ~200,000 node events a
# second on one core (torchsim/cli/kernel.py MAX_EVENTS; about 55,000 measured on the loaded 2-core dev machine),
# so this is 17 minutes to an hour of one core: 50 times the largest real scenario measured (E2E-077's prefill,
# 4.0M; Llama-3-8B batch 64 prompt 2048, 5.7M; docs/predict.md "Simulation limit").
DEFAULT_MAX_TOTAL_EVENTS = 200_000_000
EVENTS_PER_S = 55_000  # for the error's time estimate (Llama-3-8B batch 64 here: 7.8M events in 143 s)


class SimulationLimitError(ValueError):
    """A prediction whose estimated simulation work exceeds the limit (names the estimate, the limit, the largest
    kernels and how to lift it)."""


# 128x128 output tiles of one GEMM torchsim will lay out: its family (and any simulation) lists every tile's work
# unit in Python (measured here: 1M tiles in 9.6 s under tracemalloc, 160 B each), so 2^24 is minutes and ~2.7 GB
# before anything is simulated. Far above real scenarios (Llama-3-8B batch 64 prompt 2048 is 131,072 tokens: under
# 1.1M tiles even for logits of every token); --batch 65536 --prompt 8000 is 197M tiles in the fused QKV GEMM, a
# typo rather than a scenario, and hung.
MAX_GEMM_TILES = 1 << 24


def _check_gemm_tiles(call: KernelCall) -> None:
    """A GEMM too large to lay out is refused (not lifted by --yes: the work list itself would exhaust the run)."""
    m, n, batch = call.p("m", 0), call.p("n", 0), call.p("batch", 1)
    if not all(isinstance(v, int) for v in (m, n, batch)):
        return
    tiles = -(-m // 128) * -(-n // 128) * batch
    if tiles > MAX_GEMM_TILES:
        raise SimulationLimitError(f"{call.name or 'a GEMM'} ({shapes(call)}) has {tiles:,} 128x128 output tiles, "
                                   f"above torchsim's limit of {MAX_GEMM_TILES:,} for one GEMM (listing its work "
                                   f"alone would take minutes and GBs); predict a smaller scenario (--batch, "
                                   f"--prompt)")


def call_events(call: KernelCall, hw: Any, max_events: int) -> int:
    """Node executions simulating `call` on `hw` will take with the per-kernel extrapolation threshold
    `max_events` (torchsim.prediction.kernel_sim._simulate's choices), without simulating it."""
    from torchsim.lowering.kernel_call import KernelKind
    from torchsim.prediction import repeats
    from torchsim.prediction.kernel_sim import EXACT, graph_events

    if call.p("roofline", False) or call.kind is KernelKind.COLLECTIVE:
        return 0
    try:
        from torchsim.lowering.templates import build_kernels
    except ImportError:
        return 0
    tuned = call.kind is KernelKind.GEMM and bool(call.p("tune", False))
    if tuned:  # the autotuner simulates up to its budget of candidates; count each as the default configuration
        from dataclasses import replace

        from torchsim.lowering.templates.tune import DEFAULT_BUDGET

        call = replace(call, params=tuple((k, v) for k, v in call.params if k != "tune"))
    if call.kind is KernelKind.GEMM:
        _check_gemm_tiles(call)
    try:
        fam = repeats.unbuilt_family(call, hw)  # a GPU GEMM or causal prefill: counted from its family
        if fam is not None:
            n = repeats.sample_events(fam) if max_events < EXACT and fam.events > max_events and fam.dims \
                else fam.events
        else:
            n = 0
            for i, kg in enumerate(build_kernels(call, hw)):
                e = graph_events(kg)
                if max_events < EXACT and e > max_events:
                    f = repeats.call_family(call, hw, i, kg)
                    e = int(repeats.sample_events(f)) if f is not None and f.dims else e
                n += e
    except (NotImplementedError, ValueError):  # simulated as a roofline
        return 0
    return int(n) * (DEFAULT_BUDGET if tuned else 1)


def estimate(call: KernelCall, hw: Any, max_events: int) -> int | None:
    """`call_events`, or None where it refuses the call (a GEMM too large to lay out): what a worker counts for a
    speculated call (torchsim.prediction.kernel_sim.Background); the capturing process then counts, and refuses,
    the call itself."""
    try:
        return call_events(call, hw, max_events)
    except SimulationLimitError:
        return None


def shapes(call: KernelCall, width: int = 72) -> str:
    s = ",".join(f"{k}={v}" for k, v in call.params if k not in ("op", "roofline"))
    return s if len(s) <= width else s[:width - 3] + "..."


class EventBudget:
    """The estimated node events of the distinct calls added so far, checked against `limit` (None: no limit)."""

    def __init__(self, name: str, hw: Any, max_events: int, limit: int | None) -> None:
        self.name, self.hw, self.max_events, self.limit = name, hw, max_events, limit
        self.events: dict[tuple[Any, ...], tuple[KernelCall, int]] = {}
        self._seen: dict[tuple[Any, ...], int] = {}  # estimated, not yet added

    @property
    def total(self) -> int:
        return sum(e for _, e in self.events.values())

    def estimate(self, call: KernelCall) -> int:
        """`call_events` of one call, remembered (what a pool simulating calls sorts them by, longest first); not
        counted towards the limit until `add`."""
        key = call.key()
        if key not in self.events and key not in self._seen:
            self._seen[key] = call_events(call, self.hw, self.max_events)
        return self.events[key][1] if key in self.events else self._seen[key]

    def known(self) -> dict[tuple[Any, ...], int]:
        """Every estimate made so far, by call key (kept with a captured plan: `seed`)."""
        return {**self._seen, **{k: e for k, (_c, e) in self.events.items()}}

    def seed(self, estimates: dict[tuple[Any, ...], int]) -> None:
        """Take estimates made elsewhere for the same profile and threshold (an earlier run's plan-cache entry, the
        workers that simulated speculated calls: the same numbers `call_events` gives here), not counted until `add`."""
        self._seen.update((k, int(e)) for k, e in estimates.items() if k not in self.events)

    def add(self, calls: Iterable[KernelCall]) -> int:
        """Estimate the calls not yet counted, and raise SimulationLimitError when the total exceeds the limit."""
        for c in calls:
            key = c.key()
            if key not in self.events:
                seen = self._seen.pop(key, None)
                self.events[key] = (c, call_events(c, self.hw, self.max_events) if seen is None else seen)
        total = self.total
        if self.limit is not None and total > self.limit:
            raise SimulationLimitError(self.message(total))
        return total

    def largest(self, n: int = 3) -> list[tuple[KernelCall, int]]:
        return sorted(self.events.values(), key=lambda ce: (-ce[1], ce[0].name))[:n]

    def message(self, total: int) -> str:
        top = "; ".join(f"{c.name} ({c.kind.value} {shapes(c)}): {e:,}" for c, e in self.largest())
        return (f"{self.name} on {getattr(self.hw, 'name', self.hw)}: this prediction would simulate about {total:,} "
                f"node events (estimated before simulating; about {total / EVENTS_PER_S / 60:,.0f} min at "
                f"{EVENTS_PER_S:,} a second), "
                f"over the limit of {self.limit:,}; the largest kernels: {top}. Pass --max-events {total} "
                f"(predict(max_total_events={total})) or --yes (max_total_events=None) to run it, or predict a "
                "smaller scenario (--batch, --prompt, --decode-samples; without --exact)")
