"""`torchsim calibrate` without the argument parsing: read, fit, cross-validate, report, write the what-if TOML."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchsim.calibration.fit import (
    Evaluator,
    FitResult,
    Loso,
    fit,
    group_mape,
    leave_one_source_out,
    select_rows,
)
from torchsim.calibration.measurements import read_measurements
from torchsim.calibration.params import FULL_PARAMS, QUICK_PARAMS, CalibrationError, resolve
from torchsim.exports.atomic import write_bytes_atomic
from torchsim.hwmodels import get_profile
from torchsim.validation.predict_row import KERNEL_CATEGORIES, Prediction, shape_of
from torchsim.validation.published import Row

QUICK_MAX_FLOPS = 1e11  # quick mode fits the rows of known work up to this many FLOPs (the rest take most of the time)


@dataclass
class Calibration:
    profile: str
    measurements: str
    quick: bool
    fit: FitResult
    before: list[Prediction]
    after: list[Prediction]
    loso: Loso
    notes: list[str]
    simulations: int

    @property
    def fitted(self) -> list[Any]:
        return [p for p in self.fit.params if p.fitted and p.value != p.source_value]


def _flops(r: Row) -> float:
    p = r.params
    if r.category == "gemm":
        return 2.0 * p.get("batch", 1) * (p.get("M") or 0) * (p.get("N") or 0) * (p.get("K") or 0)
    if r.category == "moe_grouped_gemm":
        return 2.0 * (p.get("groups") or 0) * (p.get("M_per_group") or 0) * (p.get("N") or 0) * (p.get("K") or 0)
    if r.category == "attention":
        shape = shape_of(r)
        return shape.flops() if shape is not None else 0.0
    return 0.0


def calibrate(hw_name: str, measurements: str | Path, params: Sequence[str] | None = None, *, quick: bool = True,
              min_rows: int = 3, log: Callable[[str], None] | None = None) -> Calibration:
    say = log or (lambda s: None)
    try:
        base = get_profile(hw_name)
    except KeyError as exc:
        raise CalibrationError(f"--hw: {exc.args[0] if exc.args else hw_name}") from None
    if not hasattr(base, "dram_bytes_per_s") or getattr(base, "arch", None) is None:
        raise CalibrationError(f"profile {hw_name!r} is not a GPU profile")
    if isinstance(min_rows, bool) or not isinstance(min_rows, int) or min_rows < 1:
        raise CalibrationError(f"--min-rows must be a whole number >= 1 (rows a parameter must move), got {min_rows!r}")
    if params and len(set(params)) != len(params):
        twice = sorted({n for n in params if list(params).count(n) > 1})
        raise CalibrationError(f"--params names {', '.join(twice)} more than once; give each parameter once")
    all_rows = read_measurements(measurements, base.name)
    rows = select_rows(all_rows, base.name)
    notes: list[str] = []
    kernel = [r for r in rows if r.category in KERNEL_CATEGORIES]
    other = len(rows) - len(kernel)
    if other:
        notes.append(f"{other} row(s) of other categories (end-to-end, microbenchmark) are not fitted here")
    if quick:
        small = [r for r in kernel if 0 < _flops(r) <= QUICK_MAX_FLOPS]
        if len(small) < len(kernel):
            notes.append(f"quick: {len(kernel) - len(small)} row(s) above {QUICK_MAX_FLOPS:.0e} FLOPs or without a "
                         f"stated shape (sweep peaks) left out: {', '.join(r.id for r in kernel if r not in small)} "
                         f"(--full fits every row)")
        kernel = small
    names = list(params) if params else list(QUICK_PARAMS if quick else FULL_PARAMS)
    plist, skipped = resolve(names, base, explicit=bool(params))
    notes.extend(skipped)
    ev = Evaluator(base, plist, quick=quick)
    say(f"calibrate {base.name}: {len(kernel)} kernel row(s) of {measurements}; parameters "
        f"{', '.join(p.field for p in plist) or 'none'}")
    source_values = {p.field: float(getattr(base, p.field).value) for p in plist}
    preds0 = ev.predictions(kernel, source_values)
    for r in kernel:
        if r.id not in preds0:
            dev = ev.device(r, source_values)
            notes.append(f"{r.id}: not predicted ({getattr(dev, 'reason', '')})")
    fit_rows = [r for r in kernel if r.id in preds0 and preds0[r.id].fit]
    if len(fit_rows) < len([r for r in kernel if r.id in preds0]):
        notes.append("rows that are peaks over a sweep (envelopes) are reported, not fitted")
    if not fit_rows:
        raise CalibrationError(f"{measurements}: no kernel row on {base.name} can be predicted, nothing to fit")
    grid, sweeps, refine_sim = (5, 1, 0) if quick else (7, 2, 3)
    res = fit(ev, fit_rows, grid=grid, sweeps=sweeps, min_rows=min_rows, refine_sim=refine_sim)
    say(f"fit: mean |log err| {res.loss_before:.3f} -> {res.loss_after:.3f} ({ev.simulations} simulations)")
    loso = leave_one_source_out(ev, fit_rows, grid=grid, sweeps=sweeps, min_rows=min_rows, refine_sim=refine_sim)
    after = ev.predictions(fit_rows, res.values)
    return Calibration(base.name, str(measurements), quick, res, [preds0[r.id] for r in fit_rows],
                       [after[r.id] for r in fit_rows], loso, notes, ev.simulations)


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def report_text(c: Calibration) -> str:
    out = [f"torchsim calibrate {c.profile} on {c.measurements} ({'quick' if c.quick else 'full'}; "
           f"{len(c.fit.rows)} rows, {c.simulations} simulations)", "", "parameters:"]
    for p in c.fit.params:
        out.append(f"  {p.field:<26} {_fmt(p.source_value):>10} -> {_fmt(p.value):>10} {p.unit:<7} "
                   f"{p.status}; {len(p.sensitive_rows)} row(s) sensitive")
    out.append(f"\nmean |log(pred/meas)|: {c.fit.loss_before:.3f} before, {c.fit.loss_after:.3f} fitted")
    b, a = group_mape(c.before), group_mape(c.after)
    held = list(c.loso.held_out.values())
    lo = group_mape(held)
    out.append(f"\n{'group':<34} {'n':>3} {'MAPE before':>11} {'fitted':>8} {'LOSO':>8}")
    for g in b:
        lo_s = f"{lo[g][1]:7.1f}%" if g in lo else "     n/a"
        out.append(f"  {g:<32} {b[g][0]:>3} {b[g][1]:10.1f}% {a[g][1]:7.1f}% {lo_s}")
    out.append("\nleave-one-source-out (each source predicted by parameters fitted without it):")
    by_src: dict[str, list[Prediction]] = {}
    for hp in held:
        by_src.setdefault(hp.row.source_key, []).append(hp)
    for src, vals in c.loso.folds.items():
        ps = by_src.get(src, [])
        m = 100 * sum(abs(p.err) for p in ps) / len(ps) if ps else math.nan
        fitted = ", ".join(f"{k}={_fmt(v)}" for k, v in vals.items())
        out.append(f"  {src[:60]:<60} n={len(ps):<3} MAPE {m:6.1f}%  [{fitted}]")
    if c.notes:
        out.append("\nnotes:\n  " + "\n  ".join(c.notes))
    return "\n".join(out)


def report_json(c: Calibration) -> dict[str, Any]:
    def preds(ps: Sequence[Prediction]) -> list[dict[str, Any]]:
        return [{"id": p.row.id, "group": p.group, "method": p.method.name, "measured": p.measured,
                 "predicted": p.predicted} for p in ps]
    return {"profile": c.profile, "measurements": c.measurements, "quick": c.quick, "rows": list(c.fit.rows),
            "simulations": c.simulations, "loss_before": c.fit.loss_before, "loss_after": c.fit.loss_after,
            "params": [{"field": p.field, "unit": p.unit, "source_value": p.source_value, "value": p.value,
                        "status": p.status, "sensitive_rows": list(p.sensitive_rows)} for p in c.fit.params],
            "mape_before": group_mape(c.before), "mape_fitted": group_mape(c.after),
            "mape_loso": group_mape(list(c.loso.held_out.values())),
            "loso_folds": c.loso.folds, "before": preds(c.before), "fitted": preds(c.after),
            "loso": preds(list(c.loso.held_out.values())), "notes": c.notes}


def _q(s: str) -> str:
    return json.dumps(s)  # a TOML basic string is a JSON string for these characters


def whatif_toml(c: Calibration) -> str:
    """A what-if file: `base` + the fitted numbers, each with `calibrated` provenance citing the rows."""
    lines = [f"# torchsim calibrate --hw {c.profile} --measurements {c.measurements}"
             f"{' (quick)' if c.quick else ''}",
             f"# mean |log(pred/meas)| {c.fit.loss_before:.3f} -> {c.fit.loss_after:.3f} over "
             f"{len(c.fit.rows)} rows",
             f"base = {_q(c.profile)}", f"name = {_q(c.profile + '-calibrated')}",
             f"description = {_q('calibrated against ' + Path(c.measurements).name)}"]
    fitted = c.fitted
    for p in fitted:
        lines.append(f"{p.field} = {_q(f'{p.value:.6g} {p.unit}')}")
    for p in fitted:
        src = (f"torchsim calibrate: fitted to {Path(c.measurements).name} rows {', '.join(p.sensitive_rows)} "
               f"(of {len(c.fit.rows)} fitted; was {p.source_value:.6g} {p.unit})")
        lines += ["", f"[provenance.{p.field}]", 'kind = "calibrated"', f"source = {_q(src)}"]
    kept = [p for p in c.fit.params if not p.fitted]
    if kept:
        lines.append("")
        lines += [f"# {p.field}: {p.status}" for p in kept]
    return "\n".join(lines) + "\n"


def write_whatif(c: Calibration, out: str | Path) -> bool:
    """Write the what-if TOML atomically; False (and nothing written) when no parameter moved."""
    if not c.fitted:
        return False
    write_bytes_atomic(out, whatif_toml(c).encode())
    return True


def loso_for(preds: Sequence[Prediction], params: Sequence[str] = QUICK_PARAMS, *, min_rows: int = 3,
             log: Callable[[str], None] | None = None) -> tuple[dict[str, Prediction], dict[str, Prediction]]:
    """(fitted, held_out) predictions for a validation report: per profile, the `params` fitted to its rows (the
    in-sample fit) and each source's rows predicted by parameters fitted without that source (LOSO). Envelope
    rows are left out. The device estimates already in `preds` are re-used."""
    by_profile: dict[str, list[Prediction]] = {}
    for p in preds:
        if p.fit:
            by_profile.setdefault(p.profile, []).append(p)
    fitted: dict[str, Prediction] = {}
    held: dict[str, Prediction] = {}
    for prof, ps in sorted(by_profile.items()):
        base = get_profile(prof)
        plist, _ = resolve(list(params), base, explicit=False)
        ev = Evaluator(base, plist)
        source = {p.field: float(getattr(base, p.field).value) for p in plist}
        for p in ps:
            ev.seed(p.row, source, p.device)
        rows = [p.row for p in ps]
        res = fit(ev, rows, min_rows=min_rows)
        fitted.update(ev.predictions(rows, res.values))
        held.update(leave_one_source_out(ev, rows, min_rows=min_rows).held_out)
        if log:
            log(f"  {prof}: " + ", ".join(f"{f.field} {_fmt(f.source_value)} -> {_fmt(f.value)} {f.unit}"
                                           + ("" if f.fitted else " (kept: too few rows)") for f in res.params)
                + f" ({ev.simulations} extra simulations)")
    return fitted, held
