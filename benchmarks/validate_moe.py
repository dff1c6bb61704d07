"""Grouped-GEMM predictions beside the published moe_grouped_gemm rows of ../shared/validation/published_dev.csv.

    python benchmarks/validate_moe.py [--quick] [--loso] [--csv PATH]

Each row (DeepGEMM FP8 grouped GEMMs on H800, run on the h100-sxm profile) becomes `groups` experts of
`M_per_group` rows each: the contiguous layout is exactly that; the masked (decode) layout computes each group's
valid rows only, which the published shapes fill. DeepGEMM's per-128-channel FP8 scale promotion on the CUDA cores
is not modelled. The predicted device time goes through the row's timing method (torchsim/validation/timing.py).
MAPE is printed per group (hardware, dtype, layout); `--loso` adds the calibrated in-sample fit and
leave-one-source-out figures. Not a pass/fail test: a report.
"""

from __future__ import annotations

import time

from validation_args import kernel_parser  # benchmarks/validation_args.py

from torchsim.validation.predict_row import Prediction, Skip, predict
from torchsim.validation.published import rows
from torchsim.validation.report import finish


def main() -> None:
    ap = kernel_parser(__doc__)
    args = ap.parse_args()
    preds: list[Prediction] = []
    print(f"{'id':<9} {'profile':<9} {'dtype':<9} {'layout':<10} {'groups x M x N x K':<24} {'metric':<7} "
          f"{'timing':<16} {'measured':>9} {'predicted':>9} {'err%':>7}  {'bound':<16} tail idle")
    t0 = time.time()
    for r in rows("moe_grouped_gemm", args.csv):
        p = predict(r, quick=args.quick) if r.profile is not None else Skip(f"hardware {r.hardware!r} not modelled")
        if isinstance(p, Skip):
            if not p.quiet:
                print(f"{r.id:<9} skipped: {p.reason}")
            continue
        preds.append(p)
        dt, layout, shape = p.device.cols
        print(f"{r.id:<9} {p.profile:<9} {dt:<9} {layout:<10} {shape:<24} {r.metric:<7} {p.method.name:<16} "
              f"{p.measured:>9.1f} {p.predicted:>9.1f} {100 * p.err:>+7.1f}  {p.device.bound:<16} {p.device.extra}")
    finish(preds, args.loso_params if args.loso else None, time.time() - t0, 34)


if __name__ == "__main__":
    main()
