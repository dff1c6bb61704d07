"""GEMM predictions beside the published GPU GEMM rows of ../shared/validation/published_dev.csv, MAPE per group.

    python benchmarks/validate_gemm.py [--quick] [--loso] [--tune] [--csv PATH]

Each row is simulated with the default tile heuristic of its architecture (what a tuned library would pick);
the predicted device time goes through the row's timing method (torchsim/validation/timing.py: a kernel
profiler sees the device time, CUDA events around eager calls add the back-to-back launch gap, ...) and is
compared in the row's metric (TFLOPS or time). Rows whose dtype torchsim does not model (nvfp4) are listed as
skipped. `--loso` adds the calibrated in-sample fit and leave-one-source-out figures (by default of the launch
gaps; --loso-params).
`--tune` also predicts each row with the simulated autotuner's configuration (torchsim/lowering/templates/
tune.py: the fastest of up to 24 valid configurations, the default among them) and prints both MAPE tables.
Not a pass/fail test: a report.
"""

from __future__ import annotations

import time

from validation_args import kernel_parser  # benchmarks/validation_args.py

from torchsim.validation.predict_row import Prediction, Skip, predict
from torchsim.validation.published import rows
from torchsim.validation.report import finish, summary


def main() -> None:
    ap = kernel_parser(__doc__)
    ap.add_argument("--tune", action="store_true",
                    help="also predict with the simulated autotuner's configuration; report default and tuned MAPE")
    args = ap.parse_args()
    preds: list[Prediction] = []
    tuned: list[Prediction] = []
    print(f"{'id':<9} {'profile':<9} {'dtype':<9} {'shape':<26} {'metric':<7} {'timing':<16} {'measured':>10} "
          f"{'predicted':>10} {'err%':>7}  bound" + (f"  {'tuned':>10} {'err%':>7}" if args.tune else ""))
    t0 = time.time()
    for r in rows("gemm", args.csv):
        if r.profile is None:
            continue
        p = predict(r, quick=args.quick)
        if isinstance(p, Skip):
            if not p.quiet:
                print(f"{r.id:<9} skipped: {p.reason}")
            continue
        preds.append(p)
        dt, shape = p.device.cols
        tail = ""
        if args.tune:
            q = predict(r, quick=args.quick, tune=True)
            assert not isinstance(q, Skip)
            tuned.append(q)
            tail = f"  {q.predicted:>10.3f} {100 * q.err:>+7.1f}"
        print(f"{r.id:<9} {p.profile:<9} {dt:<9} {shape:<26} {r.metric:<7} {p.method.name:<16} {p.measured:>10.3f} "
              f"{p.predicted:>10.3f} {100 * p.err:>+7.1f}  {p.device.bound}{tail}", flush=True)
    finish(preds, args.loso_params if args.loso else None, time.time() - t0, 22)
    if args.tune:
        print("\nMAPE per group with the simulated autotuner's configuration (--tune):")
        print("\n".join(summary(tuned, 22)))


if __name__ == "__main__":
    main()
