"""Export speed and size: a ~100k-slice end-to-end trace, its Parquet kernels table, and a kernel detail trace.

Run: `python benchmarks/bench_exports.py [--decode-steps N] [--out DIR]`. Prints figures; asserts nothing.
The inputs are synthetic records shaped like Llama-3-8B prefill + decode (torchsim.exports.synthetic), so the
figures measure the exporters alone, not the simulator.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from torchsim.exports.check import check_trace
from torchsim.exports.parquet import write_kernels
from torchsim.exports.perfetto import write_trace
from torchsim.exports.synthetic import SyntheticProfile, synthetic_detail, synthetic_prediction


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--decode-steps", type=int, default=340, help="340 steps x 289 kernels ~ 100k slices")
    ap.add_argument("--out", default=None, help="directory for the files (default: a temporary one)")
    ap.add_argument("--predict", action="store_true",
                    help="also time a real Llama-3-8B prefill 2048 + 128 decode prediction on H100 and its exports")
    args = ap.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="torchsim-bench-")
    os.makedirs(out, exist_ok=True)

    t = time.perf_counter()
    pred = synthetic_prediction("h100-sxm", layers=32, prompt=2048, decode_steps=args.decode_steps)
    print(f"records: {len(pred.kernels):,} kernels built in {time.perf_counter() - t:.2f} s")

    trace = write_trace(os.path.join(out, "e2e.perfetto-trace"), [pred])
    print(f"end-to-end trace: {trace.stats.slices:,} slices, {trace.size_bytes / 1e6:.2f} MB, "
          f"written in {trace.write_s:.2f} s ({trace.stats.slices / trace.write_s:,.0f} slices/s)")
    t = time.perf_counter()
    check_trace(trace.path)
    print(f"structural check of it: {time.perf_counter() - t:.2f} s")

    t = time.perf_counter()
    rows = write_kernels(os.path.join(out, "kernels.parquet"), [pred], [SyntheticProfile("h100-sxm")])
    dt = time.perf_counter() - t
    size = os.path.getsize(os.path.join(out, "kernels.parquet"))
    print(f"kernels.parquet: {rows:,} rows, {size / 1e6:.2f} MB (zstd), written in {dt:.2f} s")

    detail = synthetic_detail(num_sms=132, ctas=528, k_steps=64)
    trace = write_trace(os.path.join(out, "detail.perfetto-trace"), details=[detail])
    print(f"detail trace: {len(detail.events):,} node events, {trace.stats.slices:,} slices, "
          f"{trace.stats.flows:,} flows, {trace.stats.counters:,} counter values, {trace.size_bytes / 1e6:.2f} MB, "
          f"written in {trace.write_s:.2f} s")
    if args.predict:
        bench_prediction(out)
    print(f"files in {out}")


def bench_prediction(out: str) -> None:
    """The issue's acceptance case: the trace costs <= 20% of the prediction's time and stays <= 50 MB."""
    from torchsim.exports.from_prediction import prediction_records
    from torchsim.hwmodels import get_profile
    from torchsim.prediction.pipeline import predict

    pred = predict("llama3-8b", "h100-sxm", prompt_len=2048, decode_steps=128)
    t = time.perf_counter()
    recs = prediction_records(pred)
    convert_s = time.perf_counter() - t
    trace = write_trace(os.path.join(out, "llama3-8b-h100.perfetto-trace"), [recs])
    total = convert_s + trace.write_s
    print(f"llama3-8b on h100-sxm, prompt 2048 + 128 decode: prediction {pred.timings_s['total']:.2f} s "
          f"(simulate {pred.timings_s['simulate']:.2f} s); {len(recs.kernels):,} launches")
    print(f"  end-to-end trace: records {convert_s:.2f} s + write {trace.write_s:.2f} s = {total:.2f} s "
          f"= {100 * total / pred.timings_s['total']:.1f}% of the prediction; {trace.size_bytes / 1e6:.1f} MB, "
          f"{trace.stats.slices:,} slices")
    t = time.perf_counter()
    write_kernels(os.path.join(out, "llama3-8b-h100.parquet"), [recs], [get_profile("h100-sxm")])
    print(f"  kernels.parquet: {time.perf_counter() - t:.2f} s")


if __name__ == "__main__":
    main()
