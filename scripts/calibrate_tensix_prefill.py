"""Calibrate the Tensix profiles' prefill_host_s (host time per prefill outside op dispatch) on the published TTFT
rows of tt_transformers' demos, with leave-one-source-out figures (torchsim.calibration.tensix_prefill).

    python scripts/calibrate_tensix_prefill.py      # ~1 min on the 2-core dev machine

Predicts every TTFT row of benchmarks/validate_tensix_e2e.py with the profiles as they are, takes off the
prefill_host_s each prediction was made with, fits the median residual, and prints the value to record in
torchsim/hwmodels/tensix/launch.py. Mixtral's row (E2E-044) is left out of the fit: its demo (models/demos/t3000/
mixtral8x7b) is not tt_transformers' prefill path.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import validate_tensix_e2e as v  # noqa: E402

from torchsim.calibration.tensix_prefill import TtftRow, fit_prefill_host  # noqa: E402
from torchsim.hwmodels import get_profile  # noqa: E402

NOT_TT_TRANSFORMERS = {"E2E-044": "Mixtral's own T3000 demo, not tt_transformers' prefill path"}


def sources() -> dict[str, str]:
    """Row id -> its source document (the text before its commit or table)."""
    out: dict[str, str] = {}
    for path in (v.CSV, v.TT_CSV):
        with path.open() as f:
            for r in csv.DictReader(f):
                out[r["id"]] = r["source"].split(" @")[0].split(",")[0].strip()
    return out


def main() -> None:
    published, src = v.published(), sources()
    rows = []
    for row in v.ROWS:
        if row.metric != "ttft_ms" or row.rid not in published:
            continue
        if row.rid in NOT_TT_TRANSFORMERS:
            print(f"  {row.rid}: left out ({NOT_TT_TRANSFORMERS[row.rid]})")
            continue
        p = v.prediction(row)
        current = float(get_profile(row.hw).prefill_host_s)
        rows.append(TtftRow(row.rid, src[row.rid], published[row.rid] * 1e-3, p.ttft_s - current))
    fit = fit_prefill_host(rows)
    print(f"prefill_host_s = {fit.value_s * 1e3:.2f} ms (median of measured - predicted over {len(rows)} rows)")
    for s, value in fit.loso.items():
        print(f"  without {s}: {value * 1e3:.2f} ms")
    before, after = fit.errors(0.0), fit.errors()
    print(f"{'row':<14} {'source':<44} {'measured':>9} {'pred. w/o':>9} {'err w/o':>8} {'err with':>8}")
    for r in rows:
        print(f"{r.rid:<14} {r.source[:44]:<44} {r.measured_s * 1e3:9.1f} {r.predicted_s * 1e3:9.1f} "
              f"{before[r.rid]:+8.1%} {after[r.rid]:+8.1%}")
    print(f"MAPE without {fit.mape(0.0):.1%}, with the fit {fit.mape():.1%}, "
          f"leave-one-source-out {fit.loso_mape():.1%}")


if __name__ == "__main__":
    main()
