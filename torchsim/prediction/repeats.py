"""Repeats: a kernel's cost bounded by what changes, not by the size of its grid or its main loop.

Kernels repeat themselves: identical CTAs in identical waves (or, in a persistent kernel, identical rounds of
tiles per CTA), identical main-loop iterations over K (GEMM) or over the K/V sequence (attention). A kernel too
large to simulate cheaply is simulated at truncated sizes of each repeating dimension and extrapolated:

- A dimension with `full` repeats is sampled at a, a + s and a + 2s repeats (a = `start`, the size from which
  the template is taken to be past its fill: pipeline stages, the first wave; s = a for main loops, whose cost
  per iteration drifts slowly with their length (L2 reuse), s = 1 wave for grids). The extrapolation to `full` from the
  first two samples and from the last two must agree within `TOLERANCE` of the value (the increments per repeat
  agree: steady state); the result is the last two's. Where they do not agree, the spacing doubles (a cost
  alternating from one repeat to the next), then the window slides one step later (at most `MAX_SLIDES` times),
  then its spacing doubles again from the start (a longer period): each window only while the samples run so far
  and its own (memoised samples are not run again) sum to at most the full dimension (`SAMPLE_BUDGET`), and
  failing that the dimension is simulated at its full size. The first window costs at most `WORTH` of it.
- Dimensions nest (waves outside, K or K/V inside): each sample of the outer dimension is itself extrapolated in
  the inner one, so a kernel costs at most 3 x 3 small simulations however large it is.
- What is extrapolated: cycles, DRAM bytes, per-unit busy work, stall cycles and node events, each linearly in
  the repeats. The L2 hit rate, CTAs per SM and the bound's classification come from the largest sample;
  FLOPs and the CTA count from the full kernel.
- A wave is kept whole at its end: a truncated grid keeps the full kernel's last partial wave (its remainder of
  CTAs, or of tiles per persistent CTA), so only whole waves are dropped.

The stated error bound: an extrapolated kernel's time is within 2% of the full simulation of the same code,
0.5% on average (benchmarks/bench_extrapolation.py measures it over its corpus; tests/test_repeats.py checks
kernels against full simulation). Kernels up to `EXACT_EVENTS` node executions (a CTA counted as `CTA_EVENTS`
of them: `sim_cost`) are simulated in full, and `exact=True` (`--exact`) simulates every kernel in full.
`parallel_samples(n)` runs the samples of each phase on n forked processes, with results identical to one.

The power model composes with this (torchsim.sim.sustained.sustain): a kernel's power at boost comes from its
extrapolated work counts, and its run at the sustained clock is again of the truncated instances only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from torchsim.graph import CtaClass, DType, KernelGraph

TOLERANCE = 0.005  # successive extrapolations to the full size must agree within this fraction
MAX_SLIDES = 3  # times the sample window slides one step later before a dimension is simulated at its full size
EXACT_EVENTS = 60_000  # kernels costing at most this many node executions (`sim_cost`) are simulated in full


@dataclass(frozen=True)
class Dim:
    """One repeating dimension: its repeats in the full kernel, and the smallest sample in steady state."""

    name: str  # "waves" | "k" | "kv" | "seq"
    full: int
    start: int
    step: int = 0  # spacing of the samples (0: = start)
    # 1: the kernel's counters are affine in the repeats past the start (a main loop, waves of a grid); 2: they
    # are quadratic (causal attention, whose work grows with the square of the sequence): least-squares fits
    # over five samples (Extrapolator._extrapolate_quadratic)
    order: int = 1
    target: float = 0.0  # the full size in the fit's units when it is not a whole number of repeats (0: full)
    # a window that disagrees slides later before its spacing doubles: a fill that lasts past the first sample,
    # not a cost alternating between repeats, is what a grid of identical CTAs streaming DRAM shows (its queue
    # fills over the first waves: on H100, add_rmsnorm 131072 x 4096's increments of waves 1-2 .. 4-5 are 0.958,
    # 0.988, 0.996, 0.999 of the steady one, so waves 2, 3, 4 of its 16 disagree by 0.66%, waves 3, 4, 5 agree;
    # with the doubled spacing tried first, its samples used up the budget and it ran 31 waves instead of 14)
    slide_first: bool = False

    def __post_init__(self) -> None:
        if not self.step:
            object.__setattr__(self, "step", self.start)
        if self.order not in (1, 2):
            raise ValueError(f"Dim {self.name}: order must be 1 (affine) or 2 (quadratic), got {self.order}")

    def cost(self, xs: Any) -> float:
        """What samples of sizes `xs` cost, as a share of the full dimension (work grows as size^order)."""
        return sum(float(x) ** self.order for x in xs) / float(self.full) ** self.order


@dataclass
class Family:
    """How to build a kernel with fewer repeats: `build({dim: repeats})` -> KernelGraph (missing dims: full)."""

    kind: str
    dims: tuple[Dim, ...]
    build: Callable[[dict[str, int]], KernelGraph]
    events: int  # node executions of the full kernel
    flops: float
    name: str
    ctas: int
    dtype: DType
    attrs: dict[str, Any] = field(default_factory=dict)  # the full kernel's template attributes
    # the share of the L2 a truncated instance gets. A GEMM's K loop shortened to x of its length touches x of
    # the bytes between two uses of an A or B panel, so an L2 of x the capacity keeps the same tiles (the same
    # hits per iteration). Attention K/V hits come from a head's CTAs reading a block together, independent of
    # the sequence length, and a grid cut to fewer waves repeats the same reuse: both keep the whole L2
    l2_share: Callable[[dict[str, int]], float] = field(default=lambda sizes: 1.0)

    @property
    def full_cost(self) -> int:
        """What simulating the full kernel costs, in `sim_cost`'s node executions."""
        return self.events + CTA_EVENTS * self.ctas


@dataclass
class Outcome:
    """What an extrapolation did: the sample sizes chosen per dimension, the worst disagreement, events run."""

    sizes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    full_dims: set[str] = field(default_factory=set)
    disagreement: float = 0.0
    events: int = 0
    sims: int = 0

    def method(self, dims: tuple[Dim, ...]) -> str:
        used = [d.name for d in dims if d.name in self.sizes and d.name not in self.full_dims]
        return "extrapolated-" + "+".join(used) if used else "exact"

    def describe(self, dims: tuple[Dim, ...]) -> str:
        parts = []
        for d in dims:
            if d.name in self.full_dims or d.name not in self.sizes:
                parts.append(f"{d.name} {d.full} (full)")
            else:
                parts.append(f"{d.name} {d.full} from {','.join(str(x) for x in self.sizes[d.name])}")
        return (f"{'; '.join(parts)}: {self.sims} truncated runs, {self.events:,} node events, successive "
                f"extrapolations agree within {100 * self.disagreement:.2f}%")


def _vector(r: Any) -> dict[str, float]:
    v = {"cycles": float(r.cycles), "dram": float(r.dram_bytes), "events": float(r.node_events)}
    for u, b in r.unit_busy.items():
        v["busy:" + u] = float(b) * float(r.cycles)
    for s, c in r.stalls.items():
        v["stall:" + s] = float(c)
    return v


def _line(v1: dict[str, float], v2: dict[str, float], x1: int, x2: int, x: int) -> dict[str, float]:
    keys = set(v1) | set(v2)
    return {k: max(0.0, v2.get(k, 0.0) + (v2.get(k, 0.0) - v1.get(k, 0.0)) * (x - x2) / (x2 - x1)) for k in keys}


QUAD_SAMPLES = 5  # samples of a quadratic dimension
QUAD_WORTH = 0.35  # a quadratic dimension's samples cost at most this share of the full kernel


def _lsq_quad(vs: list[dict[str, float]], xs: tuple[int, ...], x: float) -> dict[str, float]:
    """Each counter's least-squares parabola over the samples, evaluated at `x` (clamped at 0)."""
    import numpy as np

    keys = sorted(set().union(*vs))
    ys = np.array([[v.get(k, 0.0) for k in keys] for v in vs])
    basis = np.vander(np.asarray(xs, dtype=float), 3)
    coef = np.linalg.lstsq(basis, ys, rcond=None)[0]
    at = np.vander(np.array([float(x)]), 3) @ coef
    return {k: max(0.0, float(val)) for k, val in zip(keys, at[0])}


def _windows(d: Dim) -> list[tuple[int, int]]:
    """(first sample, spacing) of the windows tried in turn: the window at the dimension's start; the same start at
    twice the spacing (a cost alternating between two values from one repeat to the next: a persistent GEMM whose
    raster groups of tiles straddle waves, measured as +-1.5% per wave on a 4096x28672x4096 FP8 GEMM on H100, and
    68.4k / 70.1k cycles per wave on an 8192^3 FP8 one on H200); the window slid one step later at a time
    (`MAX_SLIDES`: a fill not yet over, e.g. the first 12 K steps of a 4096x14336x4096 A100 GEMM, whose L2 has not
    yet settled), before the doubled spacing where the dimension says so (`Dim.slide_first`); then from the start
    at four, eight, ... times the spacing (a longer period). Every sample of a window is shorter than the full
    dimension; what they may cost together is `Extrapolator._extrapolate`'s budget."""
    a, st = d.start, d.step
    if d.order == 2:  # five samples a, 2a, .. 5a, the spacing doubling while they cost under QUAD_WORTH of the
        out = []  # full size (a causal kernel whose samples disagree then costs at most ~1.5x its full simulation)
        while d.cost(a * j for j in range(1, QUAD_SAMPLES + 1)) <= QUAD_WORTH:
            out.append((a, a))
            a *= 2
        return out
    slides = [(a + i * st, st) for i in range(1, MAX_SLIDES + 1)]
    tries = [(a, st), *slides, (a, 2 * st)] if d.slide_first else [(a, st), (a, 2 * st), *slides]
    wide = 4 * st
    while a + 2 * wide < d.full:
        tries.append((a, wide))
        wide *= 2
    return [(x, s) for x, s in tries if x + 2 * s < d.full]


SAMPLE_BUDGET = 1.0  # the samples of one dimension sum to at most this share of its full size


def _affordable(xs: tuple[int, ...], used: set[int], full: int) -> bool:
    """Whether a window's samples may run: the first window (nothing `used` yet) is a truncation worth making
    (`WORTH`); a later one, with the samples run so far, stays within the full dimension (`SAMPLE_BUDGET`)."""
    return sum(used | set(xs)) <= (SAMPLE_BUDGET if used else WORTH) * full


def _tried(d: Dim) -> list[tuple[int, ...]]:
    """The sample windows an extrapolation along `d` tries in turn until one is steady: a quadratic dimension's
    every window (five samples each), a linear one's those affordable (`_affordable`) with the samples of the
    windows before them; empty when none is (the dimension is then simulated in full)."""
    if d.order == 2:
        return [tuple(a * j for j in range(1, QUAD_SAMPLES + 1)) for a, _ in _windows(d)]
    tried: list[tuple[int, ...]] = []
    used: set[int] = set()
    for a, st in _windows(d):
        window = (a, a + st, a + 2 * st)
        if _affordable(window, used, d.full):
            used |= set(window)
            tried.append(window)
    return tried


_PROCESSES = [1]  # processes the samples of one phase of an extrapolation run on (`parallel_samples`)


@contextmanager
def parallel_samples(processes: int) -> Iterator[None]:
    """Inside the block, the truncated instances an extrapolation is certain to run next (the first window of
    every dimension, nested; at a later clock, the samples of the windows the first clock accepted) run on up
    to `processes` forked processes at once, this one included. Each sample is the same simulation either way and
    the extrapolation reads them in the same order, so results are identical to a run on one process. Meant for
    a command simulating one large kernel on an otherwise idle machine (`torchsim kernel`); a process that is
    itself one of several workers keeps 1."""
    before = _PROCESSES[0]
    _PROCESSES[0] = max(1, int(processes))
    try:
        yield
    finally:
        _PROCESSES[0] = before


def _balanced(jobs: list[tuple[float, Any]], n: int) -> list[list[Any]]:
    """`jobs` (cost, item) split into `n` groups of about equal cost, largest first onto the lightest group."""
    groups: list[list[Any]] = [[] for _ in range(n)]
    load = [0.0] * n
    for cost, item in sorted(jobs, key=lambda j: -j[0]):
        i = load.index(min(load))
        groups[i].append(item)
        load[i] += cost
    return groups


def _fork_join(work: Callable[[Any], Any], groups: list[list[Any]]) -> list[list[Any] | None]:
    """`[work(x) for x in group]` for each group, the first in this process and the others each in a forked
    child, whose results come back pickled through a pipe. A child that fails or dies gives None (its items are
    then simulated again here, where an error surfaces as it would have); any exception here (Ctrl-C) kills the
    children first."""
    import os
    import pickle
    import signal

    from torchsim.prediction.workers import _die_with_parent

    parent = os.getpid()
    children: list[tuple[int, int]] = []
    try:
        for group in groups[1:]:
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: compute, write, and leave without running the parent's exit handlers
                os.close(r)
                code = 0
                try:
                    _die_with_parent(parent)
                    data = pickle.dumps([work(x) for x in group], protocol=pickle.HIGHEST_PROTOCOL)
                    with os.fdopen(w, "wb") as f:
                        f.write(data)
                except BaseException:  # noqa: BLE001 - the parent runs these samples itself and sees the error
                    code = 1
                os._exit(code)
            os.close(w)
            children.append((pid, r))
        out: list[list[Any] | None] = [[work(x) for x in groups[0]]]
        for pid, r in children:
            with os.fdopen(r, "rb") as f:
                data = f.read()
            _, status = os.waitpid(pid, 0)
            ok = os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and data
            out.append(pickle.loads(data) if ok else None)
        children.clear()
        return out
    finally:
        for pid, r in children:  # left by an exception: stop the children still running
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except OSError:
                pass
            try:
                os.close(r)
            except OSError:
                pass



class Extrapolator:
    """Runs a family's truncated instances with `run(kernel_graph, l2_share) -> KernelResult` and extrapolates them.

    The steady-state check is made once, at the first clock (`__call__`)."""

    def __init__(self, family: Family) -> None:
        self.family = family
        self.outcome = Outcome()
        self.first: Any = None  # the extrapolation at the first clock
        # (dimension, outer sizes) -> the window the first call accepted: (kind, xs, fit, largest sample's vector)
        self.rules: dict[tuple[str, tuple[tuple[str, int], ...]], tuple[Any, ...]] = {}
        self.memo: dict[tuple[Any, ...], tuple[dict[str, float], Any]] = {}
        # the samples run at each clock: (clock, sizes -> (vector, result))
        self.clocks: list[tuple[float, dict[tuple[tuple[str, int], ...], tuple[dict[str, float], Any]]]] = []
        self._clock: float | None = None
        self._ran: dict[tuple[tuple[str, int], ...], tuple[dict[str, float], Any]] = {}
        self._stash: dict[tuple[tuple[str, int], ...], Any] = {}  # samples run ahead (`_prefetch`), by sizes
        self._later: list[dict[str, int]] = []  # the enclosing window's samples still to be measured (`_ahead`)
        self._graphs: dict[tuple[tuple[str, int], ...], KernelGraph] = {}  # truncated instances built, by sizes

    def __call__(self, run: Callable[[KernelGraph, float], Any], clock_hz: float | None = None) -> Any:
        """The full kernel extrapolated from truncated instances run by `run` (simulating at `clock_hz`, when
        given). A later call (the same kernel at another clock) repeats the extrapolation the first call settled
        on, without its search: the two samples of each linear dimension's accepted window (a clock changes what
        each repeat costs differently at 3 and at 16 waves of a power-limited GEMM: a repeat bound by DRAM gets
        cheaper in cycles at a lower clock, one bound by the tensor pipe does not, and their mix moves along the
        dimension), and the largest sample of a quadratic dimension, whose five-point fit is scaled by that
        sample's change. A clock between two clocks whose samples ran (the power model's refinements) interpolates
        each sample in 1/f between those runs instead of running it again. The truncated main
        loops see the same L2 hits per iteration (Family.l2_share)."""
        if self.first is None:
            self._prefetch(run, self._first_leaves(self.family.dims, {}))
            vec, largest = self._measure(run, self.family.dims, {})
            self.first = self._result(vec, largest)
            self.clocks.append((float(largest.clock_hz), {k[1]: v for k, v in self.memo.items() if k[0] == 0}))
            self.memo.clear()
            return self.first
        before = self.outcome.sims
        memo: dict[tuple[Any, ...], tuple[dict[str, float], Any]] = {}
        self._clock, self._ran = clock_hz, {}
        self._prefetch(run, [x for x in self._rule_leaves(self.family.dims, {})
                             if self._sample_at(tuple(sorted(x.items()))) is None])
        vec, r = self._remeasure(run, self.family.dims, {}, memo)
        if self._ran:
            self.clocks.append((float(r.clock_hz), self._ran))
        res = self._result(vec, r)
        ran = self.outcome.sims - before
        how = f"re-extrapolated from {ran} samples" if ran else "its samples interpolated between two clocks run"
        attrs = {**res.attrs, "extrapolation": res.attrs["extrapolation"] + f"; at {r.clock_hz / 1e9:.3f} GHz: {how}"}
        return replace(res, attrs=attrs)

    def _sample_at(self, sizes: tuple[tuple[str, int], ...]) -> tuple[dict[str, float], Any] | None:
        """The sample at `sizes` at this call's clock, interpolated in 1/f between its runs at the two clocks around
        it (its cycle counts as times: t = t1 + (t2 - t1)(1/f - 1/f1)/(1/f2 - 1/f1)); None when no two runs
        bracket the clock and it has to be run."""
        f = self._clock
        runs = sorted((c for c in self.clocks if sizes in c[1]), key=lambda c: c[0])
        pair = next(((lo, hi) for lo, hi in zip(runs, runs[1:]) if f is not None and lo[0] <= f <= hi[0]), None)
        if pair is None or f is None:  # no two runs around f: interpolating past them misses a knee, so run it
            return None
        (f1, at1), (f2, at2) = pair
        (v1, _), (v2, r2) = at1[sizes], at2[sizes]
        w = (1.0 / f - 1.0 / f1) / (1.0 / f2 - 1.0 / f1)
        vec = dict(v2)
        for k in set(v1) | set(v2):
            if k == "cycles" or k.startswith(("busy:", "stall:")):
                t1, t2 = v1.get(k, 0.0) / f1, v2.get(k, 0.0) / f2
                vec[k] = max(0.0, (t1 + (t2 - t1) * w) * f)
        return vec, replace(r2, cycles=max(1, int(round(vec["cycles"]))), clock_hz=f)

    def _remeasure(self, run: Callable[[KernelGraph, float], Any], dims: tuple[Dim, ...], sizes: dict[str, int],
                   memo: dict[tuple[Any, ...], tuple[dict[str, float], Any]]) -> tuple[dict[str, float], Any]:
        """(vector, largest sample's result) of the kernel at `sizes`, full in `dims`, by the rules the first
        call accepted (`self.rules`), each sample run again by `run` or interpolated (`_sample_at`)."""
        key = (len(dims), tuple(sorted(sizes.items())))
        if key in memo:
            return memo[key]
        if not dims:
            got = self._sample_at(key[1])
            if got is None:
                got = self._ran[key[1]] = self._run(run, sizes)
            out: tuple[dict[str, float], Any] = got
        else:
            d, rest = dims[0], dims[1:]
            rule = self.rules.get((d.name, key[1]))
            if rule is None:  # the dimension was simulated in full
                out = self._remeasure(run, rest, {**sizes, d.name: d.full}, memo)
            elif rule[0] == "line" and not sizes:  # the outermost dimension: its line through two samples again
                xs = rule[1]
                (v2, _), (v3, r3) = (self._remeasure(run, rest, {**sizes, d.name: x}, memo) for x in xs[1:])
                out = (_line(v2, v3, xs[1], xs[2], d.full), r3)
            else:  # an inner linear dimension, or a quadratic one: the first fit, scaled by its largest sample's
                # change (along an inner dimension the clock's effect moves little: an 8-expert grouped GEMM's
                # cycles change x0.8546 at K 48 and x0.8493 at K 128 of 4 waves, where 3 -> 16 waves spans 5%)
                xs, est, last = rule[1], rule[2], rule[3]
                v, r = self._remeasure(run, rest, {**sizes, d.name: xs[-1]}, memo)
                # each counter by its own change: a unit's busy cycles keep their count at a lower clock where
                # DRAM-bound cycles shrink, so one factor for all would misstate the utilisation (and the power)
                out = ({k: (x * v.get(k, 0.0) / last[k] if last.get(k, 0.0) > 0 else x + v.get(k, 0.0))
                        if k == "cycles" or k.startswith(("busy:", "stall:")) else x
                        for k, x in est.items()}, r)
        memo[key] = out
        return out

    def _run(self, run: Callable[[KernelGraph, float], Any], sizes: dict[str, int]) -> tuple[dict[str, float], Any]:
        """One truncated instance at `sizes`, simulated by `run` (or run ahead by `_prefetch`) and counted: (its
        vector, its result)."""
        r = self._stash.pop(tuple(sorted(sizes.items())), None)
        if r is None:
            r = run(self._graph(sizes), self.family.l2_share(sizes))
        self.outcome.events += int(r.node_events)
        self.outcome.sims += 1
        return _vector(r), r

    def _graph(self, sizes: dict[str, int]) -> KernelGraph:
        """The truncated instance at `sizes`, built once: a later clock runs the same graph objects again, whose
        prepared classes the engine then reuses (torchsim.sim.prepare.prepared)."""
        key = tuple(sorted(sizes.items()))
        kg = self._graphs.get(key)
        if kg is None:
            kg = self._graphs[key] = self.family.build(sizes)
        return kg

    def _first_leaves(self, dims: tuple[Dim, ...], sizes: dict[str, int]) -> list[dict[str, int]]:
        """The truncated instances the first clock's extrapolation runs whatever their results: every dimension's
        first window (the first one worth making, as `_extrapolate` picks it), nested; a dimension with none at
        its full size."""
        if not dims:
            return [sizes]
        d, rest = dims[0], dims[1:]
        tried = _tried(d)
        xs = tried[0] if tried else (d.full,)
        return [leaf for x in xs for leaf in self._first_leaves(rest, {**sizes, d.name: x})]

    def _rule_leaves(self, dims: tuple[Dim, ...], sizes: dict[str, int]) -> list[dict[str, int]]:
        """The truncated instances a later clock's extrapolation (`_remeasure`) runs or interpolates."""
        if not dims:
            return [sizes]
        d, rest = dims[0], dims[1:]
        rule = self.rules.get((d.name, tuple(sorted(sizes.items()))))
        xs = (d.full,) if rule is None else rule[1][1:] if rule[0] == "line" and not sizes else (rule[1][-1],)
        return [leaf for x in xs for leaf in self._rule_leaves(rest, {**sizes, d.name: x})]

    def _prefetch(self, run: Callable[[KernelGraph, float], Any], leaves: list[dict[str, int]]) -> None:
        """Run `leaves` ahead on `parallel_samples` processes (nothing when that is 1); `_run` takes them from the
        stash in its own order."""
        n = min(_PROCESSES[0], len(leaves))
        if n <= 1:
            return
        dims = {d.name: d for d in self.family.dims}

        def cost(leaf: dict[str, int]) -> float:
            return math.prod(dims[name].cost((x,)) for name, x in leaf.items())

        def work(leaf: dict[str, int]) -> Any:
            return run(self._graph(leaf), self.family.l2_share(leaf))

        groups = _balanced([(cost(leaf), leaf) for leaf in leaves], n)
        for group, results in zip(groups, _fork_join(work, groups)):
            if results is not None:
                for leaf, r in zip(group, results):
                    self._stash[tuple(sorted(leaf.items()))] = r

    def _measure(self, run: Callable[[KernelGraph, float], Any], dims: tuple[Dim, ...], sizes: dict[str, int]
                 ) -> tuple[dict[str, float], Any]:
        """(extrapolated vector, largest sample's result) of the kernel at `sizes` in the dimensions before `dims`,
        full in `dims`. Samples are memoised, so a window that slides reruns nothing."""
        key = (len(dims), tuple(sorted(sizes.items())))
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        out = self._run(run, sizes) if not dims else self._extrapolate(run, dims, sizes)
        self.memo[key] = out
        return out

    def _extrapolate(self, run: Callable[[KernelGraph, float], Any], dims: tuple[Dim, ...], sizes: dict[str, int]
                     ) -> tuple[dict[str, float], Any]:
        d, rest = dims[0], dims[1:]
        if d.order == 2:
            return self._extrapolate_quadratic(run, d, rest, sizes)
        tried = _tried(d)
        for i, xs in enumerate(tried):
            if i:  # a later window: its new samples (and the next window's) run ahead together
                self._ahead(run, d, rest, sizes, tried, i)
            (v1, _), (v2, _), (v3, r3) = self._measure_all(run, d, rest, sizes, xs)
            e12 = _line(v1, v2, xs[0], xs[1], d.full)
            e23 = _line(v2, v3, xs[1], xs[2], d.full)
            dis = abs(e23["cycles"] - e12["cycles"]) / max(e23["cycles"], 1.0)
            if dis <= TOLERANCE and e23["cycles"] >= v3["cycles"]:
                self.rules[(d.name, tuple(sorted(sizes.items())))] = ("line", xs, e23, v3)
                self.outcome.sizes[d.name] = max(self.outcome.sizes.get(d.name) or xs, xs)
                self.outcome.disagreement = max(self.outcome.disagreement, dis)
                return e23, r3
        self.outcome.full_dims.add(d.name)
        self._ahead(run, d, rest, sizes, [*tried, (d.full,)], len(tried))
        return self._measure(run, rest, {**sizes, d.name: d.full})

    def _extrapolate_quadratic(self, run: Callable[[KernelGraph, float], Any], d: Dim, rest: tuple[Dim, ...],
                               sizes: dict[str, int]) -> tuple[dict[str, float], Any]:
        """A quadratic dimension: samples at a, 2a, .. 5a; the least-squares parabolas through the first four
        and through the last four, evaluated at the full size, must agree within TOLERANCE (and not fall below
        the largest sample), and the one through all five is the answer. A single sample's makespan carries the
        tail of its last, partial wave (measured: +-4% in the second differences of a causal FA3 kernel at 16-64
        query blocks), which three-point parabolas amplify and five-point fits average out. Otherwise the spacing
        doubles, and past the last affordable one the dimension is simulated in full."""
        x_full = d.target or float(d.full)
        tried = _tried(d)
        for i, xs in enumerate(tried):
            if i:
                self._ahead(run, d, rest, sizes, tried, i)
            got = self._measure_all(run, d, rest, sizes, xs)
            vs = [g[0] for g in got]
            first, last = _lsq_quad(vs[:-1], xs[:-1], x_full), _lsq_quad(vs[1:], xs[1:], x_full)
            dis = abs(last["cycles"] - first["cycles"]) / max(last["cycles"], 1.0)
            est = _lsq_quad(vs, xs, x_full)
            if dis <= TOLERANCE and est["cycles"] >= vs[-1]["cycles"]:
                self.rules[(d.name, tuple(sorted(sizes.items())))] = ("quad", xs, est, vs[-1])
                self.outcome.sizes[d.name] = max(self.outcome.sizes.get(d.name) or xs, xs)
                self.outcome.disagreement = max(self.outcome.disagreement, dis)
                return est, got[-1][1]
        self.outcome.full_dims.add(d.name)
        self._ahead(run, d, rest, sizes, [*tried, (d.full,)], len(tried))
        return self._measure(run, rest, {**sizes, d.name: d.full})

    def _measure_all(self, run: Callable[[KernelGraph, float], Any], d: Dim, rest: tuple[Dim, ...],
                     sizes: dict[str, int], xs: tuple[int, ...]) -> list[tuple[dict[str, float], Any]]:
        """`_measure` at each of a window's sizes in turn; while one is measured, the window's later sizes are
        what `_ahead` may run ahead along an inner dimension."""
        got = []
        outer = self._later
        try:
            for i, x in enumerate(xs):
                self._later = [{**sizes, d.name: y} for y in xs[i + 1:]]
                got.append(self._measure(run, rest, {**sizes, d.name: x}))
        finally:
            self._later = outer
        return got

    def _ahead(self, run: Callable[[KernelGraph, float], Any], d: Dim, rest: tuple[Dim, ...],
               sizes: dict[str, int], tried: list[tuple[int, ...]], i: int) -> None:
        """Run ahead, on `parallel_samples` processes, the truncated instances window `tried[i]`, which replaces a
        rejected one, is certain to run (its new sizes' first windows, nested) with those of the window after it
        (needed if this one is rejected too: one sample each along a K loop, which would otherwise run one after
        the other) and, along the innermost dimension, the sizes window i adds at the enclosing window's later
        samples (needed if their own first window is rejected too: a K loop not steady at 2 waves is seldom
        steady at 3). Results are those `_run` would get (each run is the same simulation), so nothing changes
        but the wall time; a guess not needed is never read."""
        if _PROCESSES[0] <= 1:
            return
        seen = set().union(*tried[:i])
        new = sorted(set(tried[i]) - seen)
        after = sorted(set(tried[i + 1]) - seen - set(tried[i])) if i + 1 < len(tried) else []
        leaves = [leaf for x in [*new, *after] for leaf in self._first_leaves(rest, {**sizes, d.name: x})]
        if not rest:
            full = len(self.family.dims)
            leaves += [{**s, d.name: x} for s in self._later for x in new if len(s) + 1 == full]
        keys = {tuple(sorted(leaf.items())) for leaf in leaves}
        todo = [dict(k) for k in sorted(keys) if (0, k) not in self.memo and k not in self._stash]
        self._prefetch(run, todo)

    def _result(self, vec: dict[str, float], r: Any) -> Any:
        from torchsim.sim.summary import _bound

        cycles = max(1, int(round(vec["cycles"])))
        busy = {k[5:]: min(1.0, vec[k] / cycles) for k in vec if k.startswith("busy:")}
        stalls = {k[6:]: vec[k] for k in vec if k.startswith("stall:")}
        slots = max(1, int(r.ctas_per_sm)) * max(1, int(r.attrs.get("sms", 1) or 1))
        attrs = {**r.attrs, "extrapolation": self.outcome.describe(self.family.dims),
                 "method": self.outcome.method(self.family.dims), "sim_events": self.outcome.events}
        return replace(r, name=self.family.name, cycles=cycles, flops=self.family.flops, dram_bytes=vec["dram"],
                       unit_busy=busy, stalls=stalls, bound=_bound(busy) if busy else r.bound,
                       ctas=self.family.ctas, waves=self.family.ctas / slots, node_events=int(round(vec["events"])),
                       attrs=attrs, records=None, cta_sm=None)


# -- families ------------------------------------------------------------------------------------------------------

def cta_slots(cls: CtaClass, hw: Any) -> int:
    """CTAs of `cls` resident at once on the chip (the engine's occupancy limits x SMs)."""
    return slots_for(cls.threads, cls.regs_per_thread, cls.smem, hw)


def slots_for(threads: int, regs_per_thread: int, smem: int, hw: Any) -> int:
    """CTAs of this launch shape resident at once on the chip (torchsim.sim.engine's occupancy x SMs)."""
    regs = regs_per_thread * threads
    occ = min(int(hw.max_ctas_per_sm.value), int(hw.max_threads_per_sm.value) // threads,
              int(hw.registers_per_sm.value) // max(1, regs),
              int(hw.smem_per_sm_bytes.value) // smem if smem else 1 << 30)
    return max(1, occ) * int(hw.sms)


def keep_whole_waves(total: int, slots: int, waves: int) -> int:
    """Units (CTAs, or tiles of a persistent grid of `slots` CTAs) kept by a grid truncated to `waves` waves: the
    full grid's last, partial wave stays as it is and only whole waves before it are dropped."""
    full = -(-total // slots)
    rem = total - (full - 1) * slots
    return min(total, (waves - 1) * slots + rem)


def _prefix(kg: KernelGraph, ctas: int) -> KernelGraph:
    """The first `ctas` CTAs of a single-class kernel, in launch order."""
    c = kg.classes[0]
    return replace(kg, classes=(replace(c, params=c.params[:ctas]),))


WORTH = 0.7  # a dimension is truncated only where its samples (a + 2a + 3a repeats) cost under this share of it


def _worth(d: Dim | None) -> bool:
    return d is not None and 3 * (d.start + d.step) <= WORTH * d.full


def _waves_dim(total: int, slots: int) -> Dim:
    """Waves sampled at 2, 3 and 4 (the first wave also fills the pipelines; later waves repeat)."""
    return Dim("waves", -(-total // slots), 2, 1)


def grid_family(kg: KernelGraph, hw: Any, kind: str) -> Family | None:
    """Identical CTAs in waves (one CTA class): the grid truncated to whole waves. Not RoPE: on A100 its cost per
    wave creeps from 42.2k to 43.5k cycles over the 51 waves of 131072 tokens (its L2 hit rate falls from 0.42 at
    2 waves to 0.13 at 32, where H100's settles at 0.26 and its waves stay at 43.1k cycles), while waves 2, 3, 4
    agree within 0.1%: extrapolated, it came out 2.3% short."""
    if len(kg.classes) != 1 or kind == "rope":
        return None
    c = kg.classes[0]
    slots = cta_slots(c, hw)
    dim = replace(_waves_dim(c.count, slots), slide_first=True)
    if not _worth(dim):
        return None

    def build(sizes: dict[str, int]) -> KernelGraph:
        return _prefix(kg, keep_whole_waves(c.count, slots, sizes.get("waves", dim.full)))

    return Family(kind, (dim,), build, graph_events(kg), float(kg.flops), kg.name, c.count, c.graph.dtype,
                  dict(kg.attrs))


def tiled_family(kind: str, name: str, units_of: Callable[[int], list[Any]], k: int, dtype: DType, hw: Any, cfg: Any,
                 epilogue: Any, grid: int | None, flops: float, attrs: dict[str, Any]) -> Family:
    """A tiled GEMM (dense or grouped): waves (tiles per CTA for a persistent grid of `grid` CTAs, CTAs otherwise)
    x K steps of bk x split_k. `units_of(k)` lists the work units at depth k in launch order."""
    from importlib import import_module

    from torchsim.lowering.templates.tiling import cta_classes

    gemm_mod = import_module("torchsim.lowering.templates.gemm")  # the module (the package exports the function)
    out_dtype = gemm_mod.gemm_out_dtype(dtype)
    step = cfg.bk * cfg.split_k
    k_steps = -(-k // step)
    listed: dict[int, list[Any]] = {}  # the unit lists of the last two depths (a batch of 10^6 tiles: seconds each)

    def units_at(kk: int) -> list[Any]:
        if kk not in listed:
            while len(listed) >= 2:
                listed.pop(next(iter(listed)))
            listed[kk] = units_of(kk)
        return listed[kk]

    tiles = len(units_at(min(k, step)))
    threads, regs, smem = cfg.threads(), gemm_mod._regs(cfg), cfg.smem_bytes(dtype)
    slots = grid or slots_for(threads, regs, smem, hw)
    # K: past the pipeline fill and long enough that a tile's main loop outlasts its epilogue (measured: 6 steps
    # of a 3-stage 128x256 Hopper GEMM are not yet linear, 12 are)
    dims = [d for d in (_waves_dim(tiles, slots), Dim("k", k_steps, max(8, 4 * cfg.stages))) if _worth(d)]

    def build(sizes: dict[str, int]) -> KernelGraph:
        kk = min(k, sizes.get("k", k_steps) * step)
        units = units_at(kk)
        if "waves" in sizes:
            units = units[:keep_whole_waves(len(units), slots, sizes["waves"])]
        classes = [CtaClass(gemm_mod._write_cta(plan, cfg, dtype, out_dtype, epilogue, hw), plan.params, plan.names,
                            threads=threads, regs_per_thread=regs, smem_bytes=smem)
                   for plan in cta_classes(units, grid)]
        return KernelGraph(name=name, classes=tuple(classes), flops=flops * kk / k, dram_bytes=0.0, attrs=dict(attrs))

    waves = -(-tiles // slots)
    if grid and waves > 2:  # a persistent template holds every tile of its CTA: count two waves, not all
        ev1, ev2 = (graph_events(build({"waves": w})) for w in (1, 2))
        events = ev1 + (waves - 1) * (ev2 - ev1)
    else:
        events = graph_events(build({}))
    return Family(kind, tuple(dims), build, int(events), flops, name, min(tiles, grid) if grid else tiles, dtype,
                  dict(attrs), lambda sizes: min(k, sizes.get("k", k_steps) * step) / k)


def gemm_family(m: int, n: int, k: int, dtype: DType, hw: Any, cfg: Any, epilogue: Any, batch: int,
                shared_b: bool, attrs: dict[str, Any]) -> Family:
    """A GPU GEMM built as torchsim.lowering.templates.gemm builds it, truncatable in waves and K."""
    from torchsim.lowering.templates.tiling import work_units

    def units_of(kk: int) -> list[Any]:
        return work_units(batch, m, n, kk, cfg.bm, cfg.bn, cfg.bk, cfg.split_k, cfg.b_split, cfg.raster_group,
                          shared_b)

    return tiled_family("gemm", f"gemm_{m}x{n}x{k}", units_of, k, dtype, hw, cfg, epilogue,
                        int(hw.sms) if cfg.persistent else None, 2.0 * batch * m * n * k, attrs)


def grouped_family(kg: KernelGraph, hw: Any) -> Family | None:
    """A MoE grouped GEMM (torchsim.lowering.templates.grouped_gemm): its tile list, expert by expert, walked by a
    persistent grid, truncated in waves and K like a dense GEMM."""
    from dataclasses import replace as dc_replace

    from torchsim.lowering.templates.gemm_config import Epilogue, Pipeline
    from torchsim.lowering.templates.grouped_gemm import grouped_config, grouped_plan

    a = kg.attrs
    counts = tuple(int(c) for c in a["tokens_per_expert"])
    dtype = kg.classes[0].graph.dtype
    pipe = Pipeline.parse(str(a["template"]).split("/", 1)[1])
    quant = str(a.get("quant", ""))
    cfg = grouped_config(counts, int(a["n"]), int(a["k"]), dtype, hw, pipe, quant)
    if (cfg.bm, cfg.bn, cfg.bk, cfg.stages) != (a["bm"], a["bn"], a["bk"], a["stages"]):
        cfg = dc_replace(cfg, bm=int(a["bm"]), bn=int(a["bn"]), bk=int(a["bk"]), stages=int(a["stages"]))
    plan = grouped_plan(counts, int(a["n"]), int(a["k"]), dtype, hw, cfg, Epilogue.parse(str(a["epilogue"])),
                        quant=quant)
    fam = grouped_plan_family(dc_replace(plan, name=kg.name, flops=float(kg.flops), attrs=dict(a)), hw)
    return fam if fam.ctas == sum(c.count for c in kg.classes) else None


def grouped_plan_family(plan: Any, hw: Any) -> Family:
    """The family of a grouped GEMM's plan (torchsim.lowering.templates.grouped_gemm.GroupedPlan), its full kernel
    never written unless a dimension has to be simulated at its full size."""
    from torchsim.lowering.templates.grouped_gemm import grouped_units

    def units_of(kk: int) -> list[Any]:
        return plan.units if kk == plan.k else grouped_units(plan.counts, plan.n, kk, plan.cfg)[0]

    return tiled_family("grouped_gemm", plan.name, units_of, plan.k, plan.dtype, hw, plan.cfg, plan.epilogue,
                        plan.grid, plan.flops, dict(plan.attrs))


def grouped_call_family(call: Any, hw: Any) -> Family | None:
    """The family of a GPU grouped-GEMM call, without writing its full kernel."""
    from torchsim.lowering.kernel_call import KernelKind

    if call.kind is not KernelKind.GROUPED_GEMM or _is_tensix(hw):
        return None
    from torchsim.lowering.templates.grouped_gemm import call_plan

    return grouped_plan_family(call_plan(call, hw), hw)


def gemm_call_config(call: Any, hw: Any) -> Any:
    """The GemmConfig the template library builds a GEMM call with (torchsim.lowering.templates._gemm_call)."""
    from torchsim.lowering.templates.gemm_config import Epilogue, Pipeline, default_config, fit_config

    m, n, k, batch = call.p("m"), call.p("n"), call.p("k"), call.p("batch", 1)
    if call.p("tune", False):
        from torchsim.lowering.templates.tune import tune_gemm
        cfg = tune_gemm(m, n, k, call.dtype, hw, batch, epilogue=Epilogue.parse(call.p("epilogue", "none")),
                        shared_b=bool(call.p("shared_b", True))).best
    else:
        variant = call.p("variant", "")
        cfg = default_config(m, n, k, call.dtype, hw, batch, Pipeline.parse(variant) if variant else None,
                             quant=str(call.p("quant", "")))
    if cfg.smem_bytes(call.dtype) > hw.smem_per_cta_bytes.value:
        cfg = fit_config(cfg, m, n, k, call.dtype, hw, batch)
    return cfg


def gemm_family_from_graph(kg: KernelGraph, hw: Any) -> Family | None:
    """The family of a GPU GEMM graph built by torchsim.lowering.templates.gemm, from its attrs (its config)."""
    from dataclasses import replace as dc_replace

    from torchsim.lowering.templates.gemm_config import Epilogue, Pipeline, default_config

    a = kg.attrs
    batch = int(a.get("batch", 1))
    if not str(a.get("template", "")).startswith("gemm/") or (batch != 1 and "shared_b" not in a):
        return None
    try:
        dtype = DType.parse(str(a["dtype"]))
        pipe = Pipeline.parse(str(a["template"]).split("/", 1)[1])
        cfg = default_config(int(a["m"]), int(a["n"]), int(a["k"]), dtype, hw, batch, pipe,
                             quant=str(a.get("quant", "")))
        cfg = dc_replace(cfg, bm=int(a["bm"]), bn=int(a["bn"]), bk=int(a["bk"]), stages=int(a["stages"]),
                         persistent=bool(a["persistent"]), b_split=int(a["b_split"]), split_k=int(a["split_k"]))
        fam = gemm_family(int(a["m"]), int(a["n"]), int(a["k"]), dtype, hw, cfg, Epilogue.parse(str(a["epilogue"])),
                          batch, bool(a.get("shared_b", False)), dict(a))
    except (KeyError, ValueError):
        return None
    return fam if fam.ctas == sum(c.count for c in kg.classes) else None  # e.g. --tiles-per-cta: another grid


def _attn_shape(a: dict[str, Any], causal: bool) -> Any:
    """The attention shape a kernel's attrs describe; the truncated instances keep its soft-capping, sinks and,
    causal, its sliding window."""
    from torchsim.lowering.templates.attention_config import AttnShape

    return AttnShape(int(a["batch"]), int(a["heads_q"]), int(a["heads_kv"]), int(a["seq_q"]), int(a["seq_kv"]),
                     int(a["head_dim"]), causal, DType.parse(str(a["dtype"])), int(a.get("head_dim_v", 0) or 0),
                     window=int(a.get("window", 0) or 0) if causal else 0,
                     softcap=float(a.get("softcap", 0.0) or 0.0), sinks=bool(a.get("sinks", False)))


def attention_family(kg: KernelGraph, hw: Any, cfg: Any = None) -> Family | None:
    """Non-causal FlashAttention prefill: waves of identical CTAs x K/V blocks of each CTA's main loop."""
    from dataclasses import replace as dc_replace

    from torchsim.lowering.templates.attention import attention
    from torchsim.lowering.templates.attention_config import AttnVariant, default_config

    a = kg.attrs
    if str(a.get("template", "")).startswith("attention/") and a.get("causal") and not a.get("varlen"):
        return causal_attention_family(kg, hw, cfg)
    if not str(a.get("template", "")).startswith("attention/") or a.get("causal") or len(kg.classes) != 1 \
            or a.get("varlen"):  # a varlen kernel's sequences are not the uniform shape its attrs would rebuild
        return None
    shape = _attn_shape(a, causal=False)
    if cfg is None:
        cfg = dc_replace(default_config(shape, hw, AttnVariant.parse(str(a["variant"]))), bm=int(a["bm"]),
                         bn=int(a["bn"]), stages=int(a["stages"]))
    c = kg.classes[0]
    slots = cta_slots(c, hw)
    kv_blocks = -(-shape.seq_kv // cfg.bn)
    dims = [d for d in (_waves_dim(c.count, slots), Dim("kv", kv_blocks, 4)) if _worth(d)]
    cache: dict[int, KernelGraph] = {}

    def build(sizes: dict[str, int]) -> KernelGraph:
        n = sizes.get("kv", kv_blocks)
        g = cache.get(n)
        if g is None:
            g = kg if n == kv_blocks else attention(dc_replace(shape, seq_kv=min(shape.seq_kv, n * cfg.bn)), hw, cfg)
            cache.clear()
            cache[n] = g
        if "waves" in sizes:
            g = _prefix(g, keep_whole_waves(c.count, slots, sizes["waves"]))
        return g

    return Family("attention", tuple(dims), build, c.count * c.graph.num_nodes, float(kg.flops), kg.name, c.count,
                  c.graph.dtype, dict(kg.attrs))  # K/V hits come from a head's CTAs reading a block together: whole L2


CAUSAL_WAVES = 4  # the smallest causal sample holds this many waves of CTAs: at 2 (1024 tokens of 32 heads on
# H100) the samples of a 32k FA3 kernel agreed within 0.02% yet were 0.86% low, their partial last waves bending
# the fit alike; at 4 (2048 tokens) 0.05%


def causal_attention_family(kg: KernelGraph, hw: Any, cfg: Any = None, start: int | None = None) -> Family | None:
    """Causal self-attention prefill (seq_q = seq_kv = S, sliding window or not): instances at S' = j x bm for a
    few j, the counters fitted as quadratics in j (the work of a causal kernel is a sum over query blocks of
    KV spans growing with the block index: a quadratic in S in steady state, affine under a binding window) and
    evaluated at S / bm. Samples at 1, 2, .. 5 x `start` query blocks (default: enough for CAUSAL_WAVES waves of
    CTAs), then twice as far apart, until the fits agree."""
    from dataclasses import replace as dc_replace

    from torchsim.lowering.templates.attention_config import AttnVariant, default_config

    a = kg.attrs
    if int(a["seq_q"]) != int(a["seq_kv"]):  # a causal chunk against a longer cache: not this family
        return None
    shape = _attn_shape(a, causal=True)
    if cfg is None:
        cfg = dc_replace(default_config(shape, hw, AttnVariant.parse(str(a["variant"]))), bm=int(a["bm"]),
                         bn=int(a["bn"]), stages=int(a["stages"]))
    return _causal_family(shape, cfg, hw, lambda: kg, start, graph_events(kg))


def causal_call_family(call: Any, hw: Any, start: int | None = None) -> Family | None:
    """The causal family of a prefill attention call, without building its full kernel (at a 128k prompt its
    CTA classes alone take about a minute to write): built only if the samples do not agree."""
    from torchsim.lowering.kernel_call import KernelKind
    from torchsim.lowering.templates.attention_calls import _variant, shape_of
    from torchsim.lowering.templates.attention_config import default_config
    from torchsim.lowering.templates.varlen import is_varlen

    if call.kind is not KernelKind.ATTENTION_PREFILL or _is_tensix(hw) or not call.p("causal", False) \
            or is_varlen(call) or call.p("seq_q") != call.p("seq_kv"):
        return None
    shape = shape_of(call)
    return _causal_family(shape, default_config(shape, hw, _variant(call)), hw, None, start, None)


def causal_shape_family(shape: Any, cfg: Any, hw: Any) -> Family | None:
    """The causal family of `attention(shape, hw, cfg)`, the full kernel built only if the samples disagree."""
    from torchsim.lowering.templates.attention import attention

    if not shape.causal or shape.seq_q != shape.seq_kv:
        return None
    return _causal_family(shape, cfg, hw, lambda: attention(shape, hw, cfg), None, None)


def _causal_family(shape: Any, cfg: Any, hw: Any, full: Callable[[], KernelGraph] | None, start: int | None,
                   events: int | None) -> Family | None:
    from dataclasses import replace as dc_replace

    from torchsim.lowering.templates.attention import attention, attention_header

    blocks = -(-shape.seq_q // cfg.bm)
    memo: dict[int, KernelGraph] = {}

    def build(sizes: dict[str, int]) -> KernelGraph:
        j = sizes.get("seq", blocks)
        if j not in memo:
            memo.clear()
            memo[j] = full() if j == blocks and full is not None else \
                attention(dc_replace(shape, seq_q=min(shape.seq_q, j * cfg.bm), seq_kv=min(shape.seq_q, j * cfg.bm)),
                          hw, cfg)
        return memo[j]

    probe = build({"seq": min(blocks, 4)})
    slots = cta_slots(probe.classes[0], hw)
    if start is None:  # CAUSAL_WAVES waves of CTAs in the smallest sample: j query blocks of batch x heads rows
        start = max(4, -(-CAUSAL_WAVES * slots // (shape.batch * shape.heads_q)))
    dim = Dim("seq", blocks, start, start, order=2, target=shape.seq_q / cfg.bm)
    if not _windows(dim):  # too few query blocks to sample: the sequences of a batch repeat instead
        return _batch_family(shape, cfg, hw, full, slots)
    if events is None:  # the full kernel's node executions from three samples' (quadratic in the query blocks)
        xs = (start, 2 * start, 3 * start)
        fit = _lsq_quad([{"events": float(graph_events(build({"seq": j})))} for j in xs], xs, dim.target)
        events = int(fit["events"])
    name, flops, _, attrs = attention_header(shape, cfg, hw)
    ctas = shape.batch * shape.heads_q * blocks

    # The L2 of a sample: the K/V tiles in flight (every resident CTA's stages, shared by a GQA group's heads) do
    # not shrink with the sequence; the rest, which holds K/V between the query blocks that reuse it, shrinks as
    # the sample's K/V does. A whole L2 let a 32k GQA kernel's samples keep K/V the full kernel re-reads from DRAM
    # (DRAM bytes 84% low, the power and clock off); a plainly scaled one thrashed an MHA kernel's in-flight tiles
    # (samples 4.7% apart); this one: 32k FA3 on H100, MHA cycles +0.08% / DRAM +0.1%, GQA +0.10% / +3.5%
    l2 = float(getattr(getattr(hw, "l2_bytes", None), "value", 0.0) or 0.0)
    tile = cfg.bn * (shape.head_dim + (shape.head_dim_v or shape.head_dim)) * shape.dtype.nbytes
    inflight = min(l2, slots * cfg.stages * tile / max(1, shape.heads_q // shape.heads_kv))

    def l2_share(sizes: dict[str, int]) -> float:
        if l2 <= 0:
            return 1.0
        return min(1.0, (inflight + (l2 - inflight) * sizes.get("seq", blocks) / dim.target) / l2)

    return Family("attention", (dim,), build, events, flops, name, ctas, probe.classes[0].graph.dtype, attrs,
                  l2_share)


BATCH_WAVES = (16, 8)  # the smallest batch sample of a causal prefill holds the first of these many waves of CTAs
# whose samples are worth taking (at 2, single sequences' increments alternate by ~1% on H100: 113.1k, 114.2k,
# 112.6k cycles each; the windows never agreed. Batch 64 x 2048 tokens FA3 on H100, 3.9 waves a sequence, drifts
# from 114k to 112k cycles a sequence over the first ten: sequences 3, 6, 9 disagree by 1.1%, 5, 10, 15 agree
# within 0.35% and land 0.15% from the full simulation, where 3, 9, 15 then 6, 9, 12 cost 66 sequences of samples)


def _batch_family(shape: Any, cfg: Any, hw: Any, full: Callable[[], KernelGraph] | None, slots: int
                  ) -> Family | None:
    """A causal prefill too short to sample along its query blocks (a 2048-token prompt: 16 blocks of 128) but
    of many sequences: the batch repeats, every sequence the same mix of CTAs (batch x heads x query blocks), so
    the kernel's counters are affine in the sequences past a few waves, sampled at a, 2a, 3a sequences (a: enough
    for BATCH_WAVES waves of CTAs, the most that is worth sampling) and checked for a steady state like any linear
    dimension."""
    from dataclasses import replace as dc_replace

    from torchsim.lowering.templates.attention import attention, attention_header

    blocks = -(-shape.seq_q // cfg.bm)
    per_seq = shape.heads_q * blocks
    dims = [Dim("batch", shape.batch, max(1, -(-w * slots // per_seq))) for w in BATCH_WAVES]
    dim = next((d for d in dims if _windows(d) and _worth(d)), None)
    if dim is None:
        return None
    start = dim.start
    memo: dict[int, KernelGraph] = {}

    def build(sizes: dict[str, int]) -> KernelGraph:
        b = sizes.get("batch", shape.batch)
        if b not in memo:
            memo.clear()
            memo[b] = full() if b == shape.batch and full is not None else \
                attention(dc_replace(shape, batch=b), hw, cfg)
        return memo[b]

    events = graph_events(build({"batch": start})) * shape.batch // start  # CTAs (and nodes) scale with batch
    name, flops, _, attrs = attention_header(shape, cfg, hw)
    return Family("attention", (dim,), build, events, flops, name, shape.batch * per_seq,
                  build({"batch": start}).classes[0].graph.dtype, attrs)


def sample_events(fam: Family) -> float:
    """Node executions the truncated instances take (per dimension 3 samples a, a + s, a + 2s; a quadratic one's
    5 samples a .. 5a), roughly."""
    frac = 1.0
    for d in fam.dims:
        if d.order == 2:
            frac *= min(1.0, d.cost(d.start * j for j in range(1, QUAD_SAMPLES + 1)))
            continue
        frac *= min(1.0, 3 * (d.start + d.step) / d.full)
    return fam.events * frac if fam.dims else float(fam.events)


def graph_events(kg: KernelGraph) -> int:
    return int(sum(c.count * c.graph.num_nodes for c in kg.classes))


CTA_EVENTS = 8  # what launching and retiring a CTA costs the engine, in node executions (its state, its memory
# keys: an embedding of 16384 CTAs x 3 nodes takes ~0.6 s on this 2-core machine, a GEMM's 150k node executions
# ~0.5 s)


def sim_cost(kg: KernelGraph) -> int:
    """What simulating the kernel in full costs, in node executions: its nodes plus CTA_EVENTS per CTA (what
    `EXACT_EVENTS` and `max_events` bound)."""
    return graph_events(kg) + CTA_EVENTS * sum(c.count for c in kg.classes)


def simulate_kernel(kernel: KernelGraph | Family, hw: Any, *, exact: bool = False, exact_events: int = EXACT_EVENTS,
                    run: Callable[[KernelGraph, Any], Any] | None = None,
                    sustained: Callable[[Callable[[Any], Any], Any, DType], Any] | None = None) -> Any:
    """Simulate `kernel` on `hw` in full, or extrapolated from truncated instances when it is larger than
    `exact_events` node executions and its template has a known repeating structure (a kernel graph's family is
    found by `family_of`). `run(graph, profile)` simulates one graph (default torchsim.sim.simulate);
    `sustained(run_at, hw, dtype)` wraps it in the power model (default torchsim.sim.sustained.sustain). The
    result's attrs["method"] is "exact" or "extrapolated-<dims>" and attrs["extrapolation"] says from what.

    >>> from torchsim.hwmodels import get_profile
    >>> from torchsim.lowering.templates import gemm
    >>> hw = get_profile("h100-sxm")
    >>> r = simulate_kernel(gemm(4096, 4096, 16384, DType.BF16, hw), hw, exact_events=50_000)
    >>> r.attrs["method"]
    'extrapolated-k'
    """
    from torchsim.sim import simulate
    from torchsim.sim.sustained import sustain

    sim = run or (lambda g, h: simulate(g, h))
    sus = sustained or (lambda run_at, h, dt: sustain(run_at, h, dt))
    fam = kernel if isinstance(kernel, Family) else None
    if fam is None and not exact and sim_cost(kernel) > exact_events:  # type: ignore[arg-type]
        fam = family_of(kernel, hw)  # type: ignore[arg-type]
    if fam is not None and (exact or fam.full_cost <= exact_events or not fam.dims):
        fam_kg = kernel if isinstance(kernel, KernelGraph) else fam.build({})
        fam, kernel = None, fam_kg
    if fam is None:
        assert isinstance(kernel, KernelGraph)
        kg = kernel
        res = sus(lambda h: sim(kg, h), hw, kg.classes[0].graph.dtype)
        return replace(res, attrs={**res.attrs, "method": "exact", "extrapolation": ""})
    ex = Extrapolator(fam)
    return sus(lambda h: ex(lambda g, share: sim(g, l2_scaled(h, share)), float(h.clock_hz_value)), hw, fam.dtype)


def l2_scaled(hw: Any, share: float) -> Any:
    """`hw` with `share` of its L2 capacity (a truncated instance's: see Family.l2_share)."""
    q = getattr(hw, "l2_bytes", None)
    if share >= 1.0 or q is None or not float(q.value):
        return hw
    from torchsim.hwmodels.quantity import Quantity

    return replace(hw, l2_bytes=Quantity(float(q.value) * share, q.unit, "derived",
                                         f"{share:.4f} of the profile's L2 for a truncated main loop"))


def gemm_call_family(call: Any, hw: Any) -> Family | None:
    """The family of a GPU GEMM call, without building its (possibly very large) full graph."""
    from torchsim.lowering.kernel_call import KernelKind
    from torchsim.lowering.templates.gemm_config import Epilogue

    if call.kind is not KernelKind.GEMM or _is_tensix(hw):
        return None
    m, n, k, batch = call.p("m"), call.p("n"), call.p("k"), call.p("batch", 1)
    from torchsim.lowering.templates.gemm import gemm_attrs

    cfg = gemm_call_config(call, hw)
    epi = Epilogue.parse(call.p("epilogue", "none"))
    shared_b = bool(call.p("shared_b", True))
    return gemm_family(m, n, k, call.dtype, hw, cfg, epi, batch, shared_b,
                       gemm_attrs(m, n, k, call.dtype, cfg, epi, batch, shared_b))


def unbuilt_family(call: Any, hw: Any) -> Family | None:
    """The family of a call whose full kernel is costly to build and need not be: a GPU GEMM or grouped GEMM (any
    size) or a causal self-attention prefill."""
    return gemm_call_family(call, hw) or grouped_call_family(call, hw) or causal_call_family(call, hw)


def _is_tensix(hw: Any) -> bool:
    return getattr(getattr(hw, "arch", None), "value", "") == "tensix"


def call_family(call: Any, hw: Any, index: int, kg: KernelGraph) -> Family | None:
    """The family of launch `index` of `call` (built as `kg`): a graph family (GEMM, attention, identical CTAs in
    waves), a grouped GEMM's, or a K/V (decode) or K (Tensix matmul) loop rebuilt from the call with that one
    parameter shortened, when the shorter builds keep the full kernel's configuration."""
    from torchsim.lowering.kernel_call import KernelKind

    if kg.attrs.get("varlen"):  # per-sequence K/V lengths: no one parameter to shorten, simulated in full
        return None
    if call.kind in (KernelKind.ATTENTION_DECODE, KernelKind.MLA_DECODE) and index == 0 and not _is_tensix(hw):
        splits = int(kg.attrs.get("splits", 1) or 1)
        bn = int(kg.attrs.get("bn", 0) or kg.attrs.get("page_size", 0) or 0)  # FlashMLA walks K/V by page
        if bn:
            return _param_family(call, hw, index, kg, "seq_kv", "kv", splits * bn, {"num_splits": splits},
                                 ("seq_kv", "blocks_per_split"))
    if call.kind is KernelKind.GEMM and _is_tensix(hw):
        cfg = kg.attrs.get("config") or {}
        blk = int(cfg.get("in0_block_w", 0) or 0)
        if blk and "program_config" in kg.attrs:  # the full size's program config, pinned: ttnn's selection
            pinned = {"program_config": kg.attrs["program_config"]}  # would pick another for a shorter K
            return _param_family(call, hw, index, kg, "k", "k", 32 * blk, pinned, ("k", "config", "program_config"),
                                 start=4)
    return None if _is_tensix(hw) else family_of(kg, hw)


def _param_family(call: Any, hw: Any, index: int, kg: KernelGraph, param: str, dim: str, unit: int,
                  fixed: dict[str, Any], ignore: tuple[str, ...], start: int = 8) -> Family | None:
    from torchsim.lowering.kernel_call import KernelCall
    from torchsim.lowering.templates import build_kernels

    full_val = int(call.p(param))
    n_full = -(-full_val // unit)
    d = Dim(dim, n_full, start)
    if not _worth(d):
        return None

    def build(sizes: dict[str, int]) -> KernelGraph:
        n = sizes.get(dim, n_full)
        if n == n_full:
            return kg
        val = full_val - (n_full - n) * unit  # every split (or the K loop) loses n_full - n blocks
        c2 = KernelCall.make(call.kind, call.dtype, name=call.name, **{**dict(call.params), param: val, **fixed})
        return build_kernels(c2, hw)[index]

    def same(a: dict[str, Any]) -> dict[str, Any]:
        return {key: v for key, v in a.items() if key not in ignore}

    try:
        if same(build({dim: d.start}).attrs) != same(kg.attrs):
            return None
    except ValueError:
        return None
    return Family(dim, (d,), build, graph_events(kg), float(kg.flops), kg.name, sum(c.count for c in kg.classes),
                  kg.classes[0].graph.dtype, dict(kg.attrs))


def family_of(kg: KernelGraph, hw: Any) -> Family | None:
    """The repeating structure of a kernel graph, when torchsim knows one for its template."""
    if _is_tensix(hw):
        return None
    template = str(kg.attrs.get("template", ""))
    if template.startswith("gemm/"):
        return gemm_family_from_graph(kg, hw)
    if template.startswith("attention/"):
        return attention_family(kg, hw)
    if template.startswith("grouped_gemm/"):
        return grouped_family(kg, hw)
    return grid_family(kg, hw, template.split("/", 1)[0] or "kernel")
