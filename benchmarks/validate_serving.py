"""Serving under load (torchsim.serving): published offline throughput, a rate sweep, closed-loop concurrency.

    python benchmarks/validate_serving.py --offline      TensorRT-LLM offline max-throughput rows vs `serve` and
                                                         vs `predict` at the matching static batch, MAPE per GPU
    python benchmarks/validate_serving.py --rates        Llama-3-8B on H100 under Poisson loads of rising rate
    python benchmarks/validate_serving.py --concurrency  Llama-3-70B FP8 on 2 x H100 (TP 2), 1/5/25/50 clients
    python benchmarks/validate_serving.py                all three

--offline: the Llama-3.1-8B FP8 rows of ../shared/validation/published_dev.csv measured with `trtllm-bench
throughput` (every request queued at t = 0, in-flight batching, CUDA graphs with padding). `serve` runs them under
the `trtllm` scheduler preset (reserve-whole KV admission in 0.95 of the memory the weights leave, 8192 tokens per
iteration, prompts not chunked) with `--requests-per-row` x the requests its KV cache holds at full length (whole
waves: no last wave of a few requests decoding alone). Beside it the static-batch model of benchmarks/validate_e2e.py
(torchsim.validation.e2e: the whole concurrency decoding as one batch, prefill and decode not overlapped) shows
what continuous batching changes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from torchsim.serving import serve  # noqa: E402

OFFLINE_MODEL = "Llama-3.1-8B"


def offline(args: argparse.Namespace) -> list[dict[str, Any]]:
    from torchsim.validation.e2e import predict_serving, serving_for
    from torchsim.validation.published import grouped_mape, rows

    out: list[dict[str, Any]] = []
    print("offline max-throughput (trtllm-bench rows): output tokens/s", flush=True)
    print(f"  {'row':8s} {'GPU':9s} {'ISL/OSL':>9s} {'published':>9s} {'serve':>8s} {'err':>7s} {'static':>8s} "
          f"{'err':>7s}  {'batch':>5s} {'KV use':>6s} {'wall s':>6s}", flush=True)
    for r in rows("e2e_inference"):
        if r.params.get("model") != OFFLINE_MODEL or "offline" not in r.workload or int(r.params.get("tp", 1)) != 1:
            continue
        if args.only and r.id not in args.only.split(","):
            continue
        s = serving_for(r)
        if isinstance(s, str):
            print(f"  {r.id}: skipped ({s})")
            continue
        t = time.perf_counter()
        common = {"scheduler": "trtllm", "dtype": s.dtype, "kv_cache": "fp8" if s.kv_cache == "fp8" else None,
                  "quant": s.quant or None, "workers": args.workers}
        # whole waves: a multiple of the requests the KV cache holds at full length (reserve-whole admission), so
        # no last wave of a few requests decodes alone
        kv = serve(s.model, s.profile, offline=True, num_requests=1, input_len=s.isl, output_len=1,
                   **common).summary_dict()["kv_cache"]
        fits = kv["blocks"] // -(-(s.isl + s.osl) // kv["block_size"])
        n = args.requests_per_row * fits
        res = serve(s.model, s.profile, offline=True, num_requests=n, input_len=s.isl, output_len=s.osl, **common)
        d = res.summary_dict()
        wall = time.perf_counter() - t
        static, _ = predict_serving(s, args.workers, 5 * 60_000)
        got = d["output_tokens_per_s"]
        row = {"id": r.id, "gpu": s.profile, "isl": s.isl, "osl": s.osl, "published": r.value, "serve": got,
               "serve_error": got / r.value - 1, "static": static, "static_error": static / r.value - 1,
               "requests": n, "mean_batch": d["mean_running"], "kv_peak": d["kv_cache"]["utilization_max"],
               "preemptions": d.get("preemptions", 0), "wall_s": wall, "static_concurrency": s.concurrency}
        out.append(row)
        print(f"  {r.id:8s} {s.profile:9s} {s.isl:>4d}/{s.osl:<4d} {r.value:9.0f} {got:8.0f} "
              f"{100 * row['serve_error']:+6.1f}% {static:8.0f} {100 * row['static_error']:+6.1f}%  "
              f"{row['mean_batch']:5.0f} {row['kv_peak']:6.0%} {wall:6.0f}", flush=True)
    for key in ("serve", "static"):
        g = grouped_mape([(x["gpu"], x[key], x["published"]) for x in out])
        print(f"  MAPE {key:6s}: " + ", ".join(f"{k} {v[1]:.1f}% ({v[0]} rows)" for k, v in sorted(g.items())))
    return out


def rates(args: argparse.Namespace) -> list[dict[str, Any]]:
    out = []
    print(f"\nrate sweep: {args.sweep_model} bf16 on h100-sxm, vllm preset, input {args.input_len}, output "
          f"{args.output_len} tokens, {args.num_requests} requests per rate", flush=True)
    print(f"  {'rate':>5s} {'req/s':>6s} {'out tok/s':>9s} {'TTFT p50':>9s} {'TTFT p99':>9s} {'TPOT p50':>9s} "
          f"{'TPOT p99':>9s} {'queue p50':>9s} {'batch':>5s} {'KV peak':>7s} {'wall s':>6s}", flush=True)
    for rate in (float(x) for x in args.rate_list.split(",")):
        t = time.perf_counter()
        res = serve(args.sweep_model, "h100-sxm", rate=rate, num_requests=args.num_requests,
                    input_len=args.input_len, output_len=args.output_len, seed=0, workers=args.workers)
        d = res.summary_dict()
        d["rate"] = rate
        out.append(d)
        print(f"  {rate:5g} {d['requests_per_s']:6.2f} {d['output_tokens_per_s']:9.0f} {d['ttft_ms']['p50']:9.1f} "
              f"{d['ttft_ms']['p99']:9.1f} {d['tpot_ms']['p50']:9.2f} {d['tpot_ms']['p99']:9.2f} "
              f"{d['queue_ms']['p50']:9.1f} {d['mean_running']:5.0f} {d['kv_cache']['utilization_max']:7.0%} "
              f"{time.perf_counter() - t:6.0f}", flush=True)
    return out


def concurrency(args: argparse.Namespace) -> list[dict[str, Any]]:
    out = []
    print(f"\nclosed-loop concurrency: llama3-70b fp8 (FP8 KV) on 2 x h100-sxm (TP 2), vllm preset, input "
          f"{args.input_len}, output {args.output_len} tokens", flush=True)
    print(f"  {'clients':>7s} {'req/s':>6s} {'out tok/s':>9s} {'TTFT p50':>9s} {'TTFT p99':>9s} {'ITL p50':>8s} "
          f"{'ITL p99':>8s} {'TPOT p50':>8s} {'wall s':>6s}", flush=True)
    for c in (int(x) for x in args.clients.split(",")):
        t = time.perf_counter()
        res = serve("llama3-70b", "h100-sxm", concurrency=c, num_requests=max(4 * c, 16), input_len=args.input_len,
                    output_len=args.output_len, dtype="fp8", kv_cache="fp8", tp=2, workers=args.workers)
        d = res.summary_dict()
        d["clients"] = c
        out.append(d)
        print(f"  {c:7d} {d['requests_per_s']:6.2f} {d['output_tokens_per_s']:9.0f} {d['ttft_ms']['p50']:9.1f} "
              f"{d['ttft_ms']['p99']:9.1f} {d['itl_ms']['p50']:8.2f} {d['itl_ms']['p99']:8.2f} "
              f"{d['tpot_ms']['p50']:8.2f} {time.perf_counter() - t:6.0f}", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--offline", action="store_true")
    ap.add_argument("--rates", action="store_true")
    ap.add_argument("--concurrency", action="store_true")
    ap.add_argument("--only", default="", help="offline: comma-separated row ids")
    ap.add_argument("--requests-per-row", type=int, default=2,
                    help="offline: requests per row, as a multiple of the requests its KV cache holds at full length")
    ap.add_argument("--sweep-model", default="llama3-8b")
    ap.add_argument("--rate-list", default="2,5,10,15,20,25,30,40")
    ap.add_argument("--num-requests", type=int, default=1000)
    ap.add_argument("--input-len", default="1024")
    ap.add_argument("--output-len", default="256")
    ap.add_argument("--clients", default="1,5,25,50")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--json", default=None, help="write every section's rows here")
    args = ap.parse_args()
    every = not (args.offline or args.rates or args.concurrency)
    t0 = time.perf_counter()
    doc: dict[str, Any] = {}
    if every or args.offline:
        doc["offline"] = offline(args)
    if every or args.rates:
        doc["rates"] = rates(args)
    if every or args.concurrency:
        doc["concurrency"] = concurrency(args)
    print(f"\n{time.perf_counter() - t0:.0f} s on this machine")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1, default=str))


if __name__ == "__main__":
    main()
