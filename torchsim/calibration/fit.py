"""Fit a named, small set of profile parameters to measured kernel rows; leave-one-source-out cross-validation.

The loss is the mean |log(predicted / measured)| over the rows (symmetric in over- and under-prediction, and
in TFLOPS versus time). The search is a bounded coordinate search: each parameter in turn is tried on a grid
over its physical bounds (params.py), the profile's own value always among the trials, and the best kept; a
parameter the timer alone reads (a launch gap) is then refined by golden-section search (free: the device times
are re-used); a simulated one only when `refine_sim` asks (each step costs a simulation per row). Every (row,
values of the simulated parameters) pair is simulated once (memoised), so the
leave-one-source-out folds, which search the same grid, mostly re-use the fit's simulations.

A parameter that moves fewer than `min_rows` rows (by more than 1% between its bounds) is not fitted: the
profile's value is kept and the result says why.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from torchsim.calibration.params import CalibrationError, Param
from torchsim.hwmodels.whatif import derive_profile
from torchsim.validation.predict_row import Device, Prediction, Skip, compare, device_estimate
from torchsim.validation.published import Row, mape

SENSITIVE = 0.01  # a row "sees" a parameter when its prediction moves by more than 1% between the bounds


@dataclass
class ParamFit:
    field: str
    unit: str
    source_value: float
    value: float
    status: str  # "fitted", or why the source value was kept
    sensitive_rows: tuple[str, ...] = ()

    @property
    def fitted(self) -> bool:
        return self.status == "fitted"


@dataclass
class FitResult:
    values: dict[str, float]
    params: list[ParamFit]
    loss_before: float
    loss_after: float
    rows: tuple[str, ...]


@dataclass
class Evaluator:
    """Predictions of rows on `base` with some fields overridden; simulations memoised by the simulated
    parameters' values."""

    base: Any
    params: Sequence[Param]
    quick: bool = False
    log: Callable[[str], None] | None = None
    simulations: int = 0
    _memo: dict[tuple[str, tuple[tuple[str, float], ...]], Device | Skip] = field(default_factory=dict)
    _hw: dict[tuple[tuple[str, float], ...], Any] = field(default_factory=dict)

    def profile(self, values: dict[str, float]) -> Any:
        key = tuple(sorted(values.items()))
        hw = self._hw.get(key)
        if hw is None:
            changed = {f: v for f, v in values.items() if v != float(getattr(self.base, f).value)}
            hw = derive_profile(self.base, changed, where="calibration trial", name=self.base.name) if changed \
                else self.base
            self._hw[key] = hw
        return hw

    def _key(self, r: Row, values: dict[str, float]) -> tuple[str, tuple[tuple[str, float], ...]]:
        return r.id, tuple(sorted((p.field, values[p.field]) for p in self.params if p.sim and p.field in values))

    def seed(self, r: Row, values: dict[str, float], dev: Device) -> None:
        """Record a device estimate made elsewhere (on the profile with `values`)."""
        self._memo[self._key(r, values)] = dev

    def device(self, r: Row, values: dict[str, float]) -> Device | Skip:
        key = self._key(r, values)
        simkey = key[1]
        dev = self._memo.get(key)
        if dev is None:
            hw = self.profile(dict(simkey))
            dev = device_estimate(r, hw, quick=self.quick)
            self._memo[key] = dev
            if not isinstance(dev, Skip):
                self.simulations += 1
        return dev

    def predictions(self, rows: Sequence[Row], values: dict[str, float]) -> dict[str, Prediction]:
        hw = self.profile(values)
        out = {}
        for r in rows:
            dev = self.device(r, values)
            if not isinstance(dev, Skip):
                out[r.id] = compare(r, dev, hw)
        return out

    def loss(self, rows: Sequence[Row], values: dict[str, float]) -> float:
        preds = self.predictions(rows, values)
        if not preds:
            return float("inf")
        return sum(abs(math.log(p.predicted / p.measured)) for p in preds.values()) / len(preds)


def _grid(p: Param, lo: float, hi: float, n: int, source: float) -> list[float]:
    if n < 2 or hi <= lo:
        pts = [lo]
    elif p.scale == "log":
        pts = [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]
    else:
        pts = [lo + (hi - lo) * i / (n - 1) for i in range(n)]
    if lo <= source <= hi:
        pts.append(source)
    return sorted({float(f"{x:.6g}") for x in pts})


def _golden(f: Callable[[float], float], a: float, b: float, iters: int) -> tuple[float, float]:
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (c, fc) if fc <= fd else (d, fd)


def fit(ev: Evaluator, rows: Sequence[Row], *, grid: int = 5, sweeps: int = 1, min_rows: int = 3,
        refine: int = 12, refine_sim: int = 0) -> FitResult:
    """Fit `ev.params` to `rows` (already filtered to the profile). Deterministic."""
    base = ev.base
    values = {p.field: float(getattr(base, p.field).value) for p in ev.params}
    fits = {p.field: ParamFit(p.field, getattr(base, p.field).unit, values[p.field], values[p.field], "fitted")
            for p in ev.params}
    before = ev.loss(rows, values)
    for sweep in range(sweeps):
        for p in ev.params:
            pf = fits[p.field]
            if not pf.fitted:
                continue
            lo, hi = p.bounds(base)
            pts = _grid(p, lo, hi, grid if p.sim else 4 * grid + 1, pf.source_value)
            if sweep == 0:
                a = ev.predictions(rows, {**values, p.field: pts[0]})
                b = ev.predictions(rows, {**values, p.field: pts[-1]})
                moved = tuple(sorted(i for i in a if i in b and
                                     abs(math.log(a[i].predicted / b[i].predicted)) > SENSITIVE))
                pf.sensitive_rows = moved
                if len(moved) < min_rows:
                    pf.status = (f"kept the profile's value: {len(moved)} row(s) move by more than "
                                 f"{SENSITIVE:.0%} across its bounds, {min_rows} needed")
                    continue
            scored = [(ev.loss(rows, {**values, p.field: x}), abs(math.log(x / pf.source_value))
                       if x > 0 and pf.source_value > 0 else abs(x - pf.source_value), x) for x in pts]
            best_loss, _, best = min(scored)
            iters = refine_sim if p.sim else refine
            if iters:
                i = pts.index(best)
                a_, b_ = pts[max(0, i - 1)], pts[min(len(pts) - 1, i + 1)]
                if b_ > a_:
                    def trial(v: float, f: str = p.field) -> float:
                        return ev.loss(rows, {**values, f: v})
                    x, fx = _golden(trial, a_, b_, iters)
                    if fx < best_loss:
                        best, best_loss = float(f"{x:.4g}"), fx
            values[p.field] = best
    for p in ev.params:
        fits[p.field].value = values[p.field]
    return FitResult(values, [fits[p.field] for p in ev.params], before, ev.loss(rows, values),
                     tuple(r.id for r in rows))


@dataclass
class Loso:
    held_out: dict[str, Prediction]  # row id -> prediction by the parameters fitted without its source
    folds: dict[str, dict[str, float]]  # source -> the values fitted without it


def leave_one_source_out(ev: Evaluator, rows: Sequence[Row], **kw: Any) -> Loso:
    by_source: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_source[r.source_key].append(r)
    held: dict[str, Prediction] = {}
    folds: dict[str, dict[str, float]] = {}
    for src in sorted(by_source):
        train = [r for r in rows if r.source_key != src]
        if train:
            values = fit(ev, train, **kw).values
        else:  # the only source: nothing to fit it from, the profile's own values predict it
            values = {p.field: float(getattr(ev.base, p.field).value) for p in ev.params}
        folds[src] = values
        held.update(ev.predictions(by_source[src], values))
    return Loso(held, folds)


def group_mape(preds: Sequence[Prediction]) -> dict[str, tuple[int, float]]:
    groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for p in preds:
        groups[p.group].append((p.predicted, p.measured))
        groups["all"].append((p.predicted, p.measured))
    return {g: (len(v), mape(v)) for g, v in sorted(groups.items())}


def select_rows(rows: Sequence[Row], profile: str) -> list[Row]:
    """The kernel rows of `rows` that run on `profile`; an error naming the hardware seen when there are none."""
    out = [r for r in rows if r.profile is not None and r.profile[0] == profile]
    if not out:
        seen = sorted({r.hardware for r in rows})[:8]
        raise CalibrationError(f"no row of the measurement file maps to profile {profile!r} (hardware seen: "
                               f"{', '.join(seen) or 'none'})")
    return out
