"""The printed summary the benchmarks/validate_*.py reports share: MAPE per group, optionally beside the
in-sample calibrated fit and the leave-one-source-out figures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from torchsim.validation.predict_row import Prediction
from torchsim.validation.published import grouped_mape


def summary(preds: Sequence[Prediction], width: int = 34, fitted: Mapping[str, Prediction] | None = None,
            held_out: Mapping[str, Prediction] | None = None) -> list[str]:
    base = grouped_mape([(p.group, p.predicted, p.measured) for p in preds])
    fit = grouped_mape([(p.group, p.predicted, p.measured) for p in (fitted or {}).values()])
    loso = grouped_mape([(p.group, p.predicted, p.measured) for p in (held_out or {}).values()])
    out = []
    for g, (count, err) in sorted(base.items()):
        line = f"  {g:<{width}} n={count:<3} MAPE {err:6.1f}%"
        if held_out is not None:
            f = f"{fit[g][1]:6.1f}%" if g in fit else "   n/a"
            lo = f"{loso[g][1]:6.1f}%" if g in loso else "   n/a"
            line += f"   fitted {f}   LOSO {lo}"
            if g in fit and fit[g][0] != count:
                line += f"  (fitted/LOSO over n={fit[g][0]}: sweep peaks are not fitted)"
        out.append(line)
    return out


def methods_legend(preds: Sequence[Prediction]) -> list[str]:
    """One line per timing method used: the rows' sources and the reason."""
    seen: dict[tuple[str, str], list[str]] = {}
    for p in preds:
        seen.setdefault((p.method.name, p.method_reason), []).append(p.row.id)
    return [f"  {m:<17} {len(ids):>3} row(s): {reason}" for (m, reason), ids in sorted(seen.items())]


def finish(preds: Sequence[Prediction], loso_params: str | None, elapsed_s: float, width: int) -> None:
    """The end of a validate_* report: the timing methods used, the calibration of `loso_params` (comma-separated
    profile fields) with its in-sample and leave-one-source-out figures when given, and MAPE per group."""
    print("\ntiming methods:\n" + "\n".join(methods_legend(preds)))
    fitted = held = None
    if loso_params:
        from torchsim.calibration.run import loso_for

        names = [x.strip() for x in loso_params.split(",") if x.strip()]
        print(f"\ncalibration of {', '.join(names)} per profile:")
        fitted, held = loso_for(preds, names, log=print)
    print(f"\nMAPE per group ({elapsed_s:.0f} s):")
    print("\n".join(summary(preds, width, fitted, held)))
