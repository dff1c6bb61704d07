"""Attention predictions beside the published GPU attention rows of ../shared/validation/published_dev.csv.

    python benchmarks/validate_attention.py [--quick] [--loso] [--csv PATH]

Each row runs the template of the kernel it names: FlashAttention-3 rows the fa3 template, FlashAttention-4
rows fa4, FlashAttention-2 rows (also the sm80 code path on Blackwell, where its mma.sync runs at the
profile's warp-MMA rate) fa2; Triton's tutorial kernel runs the triton template (its sm90 lowering: wgmma in
every warp group, cp.async loads, no warp specialisation). FlashMLA rows are peaks
"over a sweep": they are compared with the best of a small sweep of FlashMLA decoding shapes (an envelope,
reported in its own group, not calibrated). Rows we do not model (sparse MLA, Tensix, peaks over unstated sweeps)
are listed as skipped. The predicted device time goes through the row's timing method (torchsim/validation/
timing.py). `--quick` skips rows above 2e12 FLOPs; `--loso` adds the calibrated in-sample fit and
leave-one-source-out figures. Not a pass/fail test: a report of MAPE per group.
"""

from __future__ import annotations

import time

from validation_args import kernel_parser  # benchmarks/validation_args.py

from torchsim.validation.predict_row import Device, Prediction, Skip, predict
from torchsim.validation.published import rows
from torchsim.validation.report import finish


def main() -> None:
    ap = kernel_parser(__doc__)
    args = ap.parse_args()
    preds: list[Prediction] = []
    print(f"{'id':<9} {'profile':<9} {'kernel':<19} {'shape (b,h,s,d)':<20} {'metric':<9} {'timing':<21} "
          f"{'measured':>9} {'predicted':>9} {'err%':>7}  bound")
    t0 = time.time()
    envelopes: dict[str, Device] = {}
    for r in rows("attention", args.csv):
        if r.profile is None:
            print(f"{r.id:<9} skipped: {r.hardware} is not a GPU profile here")
            continue
        p = predict(r, quick=args.quick, cache=envelopes)
        if isinstance(p, Skip):
            if not p.quiet:
                print(f"{r.id:<9} skipped: {p.reason}")
            continue
        preds.append(p)
        kernel, dims = p.device.cols
        digits = 1 if p.device.envelope else 3
        print(f"{r.id:<9} {p.profile:<9} {kernel:<19} {dims:<20} {r.metric:<9} {p.method.name:<21} "
              f"{p.measured:>9.{digits}f} {p.predicted:>9.{digits}f} {100 * p.err:>+7.1f}  {p.device.bound}")
    finish(preds, args.loso_params if args.loso else None, time.time() - t0, 34)


if __name__ == "__main__":
    main()
