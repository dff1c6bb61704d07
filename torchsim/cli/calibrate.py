"""`torchsim calibrate`: fit named physical parameters of a profile to a measurement file; write a what-if TOML."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from torchsim.calibration.params import PARAMS
from torchsim.cli import COMMAND_HELP, int_in


def register(sub: Any) -> None:
    p = sub.add_parser("calibrate", help=COMMAND_HELP["calibrate"],
                       description="Fit a small, named set of physical parameters of a GPU profile (e.g. "
                       "dram_bytes_per_s, launch_overhead_s) to the kernel rows of a measurement file in the "
                       "published_dev.csv schema, report the fit per group and leave-one-source-out, and write a "
                       "what-if TOML whose numbers carry `calibrated` provenance citing the rows.")
    p.add_argument("--hw", required=True, help="profile to calibrate, e.g. h100-sxm")
    p.add_argument("--measurements", required=True, help="CSV in the published_dev.csv schema")
    p.add_argument("--params", default=None, help=f"comma-separated fields to fit (known: {', '.join(PARAMS)}); "
                   "default: a quick set (dram_bytes_per_s and the launch gaps), or a larger one with --full")
    p.add_argument("--out", default=None, help="what-if TOML to write (atomically; nothing on failure)")
    p.add_argument("--full", action="store_true", help="every row and a finer search (slow); default quick: rows "
                   "up to 1e11 FLOPs, a 5-point grid, one sweep")
    p.add_argument("--min-rows", type=int_in(1, 1 << 20), default=None,
                   help="rows a parameter must move to be fitted (default 3)")
    p.add_argument("--power", action="store_true", help="fit the power model instead (static power, the active-SM "
                   "and DRAM energies, the bf16/FP8 tensor energies) to the file's sustained rows and idle reading "
                   "(torchsim microbench --sustained); --params does not apply")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--force-format", action="store_true", help="write --out even when its extension names another "
                   "format (a what-if profile is TOML)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from torchsim.calibration.params import CalibrationError

    if args.power:
        unused = [flag for flag, value in (("--params", args.params), ("--full", args.full or None),
                                           ("--min-rows", args.min_rows)) if value is not None]
        if unused:
            raise CalibrationError(f"{', '.join(unused)} {'does' if len(unused) == 1 else 'do'} not apply with --power "
                                   "(the power fit's fields and rows are fixed: the file's sustained rows and idle "
                                   "reading); leave it out, or drop --power")
        return _run_power(args)
    from torchsim.calibration.run import calibrate, report_json, report_text, write_whatif

    params = None
    if args.params is not None:
        params = [x.strip() for x in args.params.split(",") if x.strip()]
        if not params:
            raise CalibrationError(f"--params {args.params!r} names no field; give comma-separated fields (known: "
                                   f"{', '.join(PARAMS)}), or leave --params out for the default set")
    min_rows = 3 if args.min_rows is None else args.min_rows
    c = calibrate(args.hw, args.measurements, params, quick=not args.full, min_rows=min_rows,
                  log=None if args.json else (lambda s: print(s, file=sys.stderr, flush=True)))
    wrote = write_whatif(c, args.out) if args.out else False
    if args.json:
        doc = report_json(c)
        doc["out"] = args.out if wrote else None
        print(json.dumps(doc, indent=2))
    else:
        print(report_text(c))
        if args.out:
            print(f"\nwrote {args.out}" if wrote else f"\nno parameter moved from the profile's value: {args.out} "
                  "not written")
    return 0


def _run_power(args: argparse.Namespace) -> int:
    from pathlib import Path

    from torchsim.calibration.fit import select_rows
    from torchsim.calibration.measurements import read_measurements
    from torchsim.calibration.params import CalibrationError
    from torchsim.calibration.power_fit import fit_power, report, whatif
    from torchsim.exports.atomic import write_bytes_atomic
    from torchsim.hwmodels import get_profile

    try:
        hw = get_profile(args.hw)
    except KeyError as exc:
        raise CalibrationError(f"--hw: {exc.args[0] if exc.args else args.hw}") from None
    rows = select_rows(read_measurements(args.measurements, hw.name), hw.name)
    fit = fit_power(hw, rows)
    if not fit.values:  # nothing to write or report as a fit: the file lacks the rows the power fit needs
        raise CalibrationError(f"--measurements {args.measurements}: no power-model field could be fitted to its "
                               f"{len(rows)} {hw.name} rows ({'; '.join(fit.skipped) or 'no sustained rows'}); "
                               "the power fit needs the rows of `torchsim microbench --sustained` (sustained GEMMs and "
                               "adds with board power, and the idle reading)"
                               + (f"; {args.out} not written" if args.out else ""))
    wrote = bool(args.out and fit.values)
    if wrote:
        write_bytes_atomic(args.out, whatif(fit, Path(args.measurements).name).encode())
    if args.json:
        print(json.dumps({"profile": fit.profile, "fitted": {k: {"value": v, "unit": u, "rows": r}
                                                             for k, (v, u, r) in fit.values.items()},
                          "held_out": [{"row": i, "measured_tflops": m, "predicted_tflops": p}
                                       for i, m, p in fit.held_out],
                          "skipped": fit.skipped, "out": args.out if wrote else None}, indent=2))
    else:
        print(report(fit))
        if args.out:
            print(f"\nwrote {args.out}" if wrote else f"\nnothing fitted: {args.out} not written")
    return 0
