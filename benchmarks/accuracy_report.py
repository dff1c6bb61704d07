"""Write torchsim/validation/accuracy.json: MAPE per kernel kind x profile x dtype over the published rows, the
figures `predict`, `kernel` and `compare` print beside their numbers.

    python benchmarks/accuracy_report.py [--quick] [--csv PATH] [--e2e FILE]

Runs the predictors of benchmarks/validate_gemm.py, validate_attention.py, validate_moe.py (each row through
its timing method) and validate_tensix.py (device time of the published Tensix GEMM rows) and, with `--e2e`,
reads the per-row errors a `validate_e2e.py` run printed (without it, the existing file's e2e entries are kept and
`generated.e2e_commit` names the commit they were measured at). Re-run it after any change that moves predictions
and commit the file with the change.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import importlib.util
import json
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from torchsim.exports.atomic import write_bytes_atomic
from torchsim.validation.accuracy import PATH, base_profile, key
from torchsim.validation.predict_row import Prediction, Skip, predict
from torchsim.validation.published import dtype_of, rows


def kernel_groups(csv: Path | None, quick: bool) -> dict[str, list[tuple[str, float]]]:
    out: dict[str, list[tuple[str, float]]] = defaultdict(list)
    cache: dict = {}
    for category in ("gemm", "attention", "moe_grouped_gemm"):
        for r in rows(category, csv):
            if r.profile is None:
                continue
            p = predict(r, quick=quick, cache=cache)
            if isinstance(p, Skip) or not isinstance(p, Prediction):
                continue
            dt = dtype_of(r.dtype)
            dtype = dt.name.lower() if dt is not None else r.dtype
            out[key(category, p.profile, dtype)].append((r.id, abs(p.err)))
            print(f"{r.id:<9} {p.profile:<10} {dtype:<9} {100 * p.err:+7.1f}%", flush=True)
    return out


def tensix_groups(quick: bool) -> dict[str, list[tuple[str, float]]]:
    """Tensix GEMM rows of published_dev.csv through benchmarks/validate_tensix.py's predictor: the error of the
    device time (what `torchsim kernel` prints) per profile and dtype."""
    spec = importlib.util.spec_from_file_location("validate_tensix", Path(__file__).parent / "validate_tensix.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    with Path(mod.CSV).open() as f:
        published = list(csv.DictReader(f))
    out: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for r in mod.gemm_rows(published, quick, held_out=False):
        hw = mod._profile(r.case.hardware, r.case.grid)
        err = r.dev_pred_s / r.dev_meas_s - 1
        out[key("tensix_gemm", base_profile(hw.name), mod.DTYPES[r.case.dtype].name.lower())].append(
            (r.case.rid, abs(err)))
        print(f"{r.case.rid:<9} {hw.name:<14} {r.case.dtype:<9} {100 * err:+7.1f}%", flush=True)
    return out


def e2e_groups(text: str) -> dict[str, list[tuple[str, float]]]:
    """Rows of a validate_e2e.py report: 'E2E-052  h100-sxm llama3.1-8b fp8 ... +3.8 ...' (id, profile, model,
    dtype, ..., the first signed percentage is the error)."""
    out: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for line in text.splitlines():
        tok = line.split()
        if len(tok) < 6 or not re.fullmatch(r"E2E-\d+", tok[0]):
            continue
        err = next((t for t in tok[4:] if re.fullmatch(r"[+-]\d+\.\d+", t)), None)
        if err is not None:
            out[key("e2e_inference", tok[1], tok[3])].append((tok[0], abs(float(err)) / 100))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", type=Path, default=None)
    ap.add_argument("--quick", action="store_true", help="skip rows above 2e12 FLOPs (the file says so)")
    ap.add_argument("--e2e", type=Path, default=None, help="a saved validate_e2e.py report to include")
    ap.add_argument("--keep-kernels", action="store_true",
                    help="keep the kernel entries of the existing file (only add --e2e), no simulation")
    args = ap.parse_args()
    t0 = time.time()
    if args.keep_kernels:
        old = json.loads(PATH.read_text()).get("entries", {})
        groups = {k: list(zip(e["row_ids"], [e["mape_pct"] / 100] * e["rows"], strict=True))
                  for k, e in old.items() if not k.startswith("e2e_inference/")}
    else:
        groups = kernel_groups(args.csv, args.quick)
        groups.update(tensix_groups(args.quick))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    e2e_commit = commit
    if args.e2e:
        groups.update(e2e_groups(args.e2e.read_text()))
    elif PATH.exists():  # no new e2e report: the existing file's e2e entries stay, with the commit they came from
        prev = json.loads(PATH.read_text())
        kept = {k: e for k, e in prev.get("entries", {}).items() if k.startswith("e2e_inference/")}
        groups.update({k: list(zip(e["row_ids"], [e["mape_pct"] / 100] * e["rows"], strict=True))
                       for k, e in kept.items()})
        gen = prev.get("generated", {})
        e2e_commit = str(gen.get("e2e_commit", gen.get("commit", "unknown"))) if kept else commit
    entries = {k: {"mape_pct": round(100 * sum(e for _, e in v) / len(v), 2), "rows": len(v),
                   "row_ids": [i for i, _ in v]} for k, v in sorted(groups.items())}
    doc = {"generated": {"date": datetime.date.today().isoformat(), "commit": commit, "quick": args.quick,
                         "by": "benchmarks/accuracy_report.py", "csv": str(args.csv or "published_dev.csv"),
                         "e2e_commit": e2e_commit},
           "entries": entries}
    write_bytes_atomic(PATH, (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode())
    print(f"wrote {PATH}: {len(entries)} groups in {time.time() - t0:.0f} s")
    for k, e in entries.items():
        print(f"  {k:<40} n={e['rows']:<3} MAPE {e['mape_pct']:6.1f}%")


if __name__ == "__main__":
    main()
