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
from collections.abc import Callable
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


# a sweep's columns: (heading, width, how a summary gives the cell)
Column = tuple[str, int, Callable[[dict[str, Any]], str]]


def _stat(metric: str, p: str, digits: int) -> Callable[[dict[str, Any]], str]:
    return lambda d: f"{d[metric][p]:.{digits}f}"


COMMON: list[Column] = [("req/s", 6, lambda d: f"{d['requests_per_s']:.2f}"),
                        ("out tok/s", 9, lambda d: f"{d['output_tokens_per_s']:.0f}"),
                        ("TTFT p50", 9, _stat("ttft_ms", "p50", 1)), ("TTFT p99", 9, _stat("ttft_ms", "p99", 1))]


def _sweep(title: str, key: str, values: list[Any], columns: list[Column],
           run: Callable[[Any], Any]) -> list[dict[str, Any]]:
    """One `serve` per value (`run(value)`), a table row each: the value, `columns`, the wall time."""
    print(f"\n{title}", flush=True)
    heads = [(key, 7)] + [(h, w) for h, w, _ in columns] + [("wall s", 6)]
    print("  " + " ".join(f"{h:>{w}s}" for h, w in heads), flush=True)
    out = []
    for v in values:
        t = time.perf_counter()
        d = run(v).summary_dict()
        d[key] = v
        out.append(d)
        cells = [f"{v:g}"] + [cell(d) for _, _, cell in columns] + [f"{time.perf_counter() - t:.0f}"]
        print("  " + " ".join(f"{c:>{w}s}" for c, (_, w) in zip(cells, heads)), flush=True)
    return out


def rates(args: argparse.Namespace) -> list[dict[str, Any]]:
    columns = COMMON + [("TPOT p50", 9, _stat("tpot_ms", "p50", 2)), ("TPOT p99", 9, _stat("tpot_ms", "p99", 2)),
                        ("queue p50", 9, _stat("queue_ms", "p50", 1)),
                        ("batch", 5, lambda d: f"{d['mean_running']:.0f}"),
                        ("KV peak", 7, lambda d: f"{d['kv_cache']['utilization_max']:.0%}")]
    return _sweep(f"rate sweep: {args.sweep_model} bf16 on h100-sxm, vllm preset, input {args.input_len}, output "
                  f"{args.output_len} tokens, {args.num_requests} requests per rate", "rate",
                  [float(x) for x in args.rate_list.split(",")], columns,
                  lambda rate: serve(args.sweep_model, "h100-sxm", rate=rate, num_requests=args.num_requests,
                                     input_len=args.input_len, output_len=args.output_len, seed=0,
                                     workers=args.workers))


def concurrency(args: argparse.Namespace) -> list[dict[str, Any]]:
    columns = COMMON + [("ITL p50", 8, _stat("itl_ms", "p50", 2)), ("ITL p99", 8, _stat("itl_ms", "p99", 2)),
                        ("TPOT p50", 8, _stat("tpot_ms", "p50", 2))]
    return _sweep(f"closed-loop concurrency: llama3-70b fp8 (FP8 KV) on 2 x h100-sxm (TP 2), vllm preset, input "
                  f"{args.input_len}, output {args.output_len} tokens", "clients",
                  [int(x) for x in args.clients.split(",")], columns,
                  lambda c: serve("llama3-70b", "h100-sxm", concurrency=c, num_requests=max(4 * c, 16),
                                  input_len=args.input_len, output_len=args.output_len, dtype="fp8", kv_cache="fp8",
                                  tp=2, workers=args.workers))


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
