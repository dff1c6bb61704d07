"""`torchsim serve MODEL --hw GPU --rate QPS ...`: a model served under a request load, continuous batching over
simulated iterations.

    torchsim serve llama3-8b --hw h100-sxm --rate 1,2,4,8 --input-len lognormal:1000:0.6 --output-len 200 \\
        --plot curve.png
    torchsim serve llama3-70b --hw dgx-h100 --tp 4 --requests trace.jsonl --scheduler trtllm --parquet run.parquet

Checks the flags, calls torchsim.serving.serve once per load (several for a --rate or --concurrency sweep) and
prints the summary and the assumptions, or one JSON object with `--json`; writes the tables, the timeline and
the chart (torchsim.serving.result, torchsim.serving.plots).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

from torchsim.cli import COMMAND_HELP, UsageError, int_in
from torchsim.cli.options import add_precision_options, system_device
from torchsim.cli.paths import iterations_path
from torchsim.models import DEFAULT_MODEL

SCHEDULERS = ("vllm", "trtllm", "sarathi")  # torchsim.serving.engine.PRESETS (not imported: --help stays light)
MAX_REQUESTS = 1 << 24  # a resource limit: the engine steps every request in Python
MAX_CLIENTS = 1 << 20


def register(sub: Any) -> None:
    p = sub.add_parser("serve", help=COMMAND_HELP["serve"],
                       usage="torchsim serve [MODEL] (--requests FILE | --rate QPS[,...] | --concurrency N[,...] | "
                       "--offline) [options]",
                       description="Serve a model on a GPU (or a tensor-parallel group) under a request load: a "
                       "continuous-batching scheduler over a paged KV cache, each iteration's time simulated from "
                       "the model's kernels. Prints throughput and TTFT/TPOT/ITL/E2E percentiles. A comma list "
                       "after --rate or --concurrency is a sweep: one run per value, a table row each and with "
                       "--plot a latency-throughput curve.")
    p.add_argument("model", nargs="?", default=DEFAULT_MODEL,
                   help=f"model name (`torchsim predict --list`) or path to an HF config.json (default "
                   f"{DEFAULT_MODEL})")
    p.add_argument("--hw", default="h100-sxm",
                   help="hardware profile (default h100-sxm; `torchsim hw list`), or a multi-GPU system (dgx-h100, "
                   "...) with --tp")
    add_precision_options(p, kv_help="fp8 halves the bytes a token takes")
    p.add_argument("--tp", type=int_in(1, 64), default=1, metavar="N",
                   help="tensor-parallel GPUs (Megatron splits + NCCL collectives on the GPU's 8-GPU system, or on "
                   "the system --hw names; default 1); expert and pipeline parallelism are not served yet")
    for flag in ("--ep", "--pp", "--sp"):  # predict's other parallelism flags: refused by name, not "unrecognized"
        p.add_argument(flag, nargs="?", const="", default=None, help=argparse.SUPPRESS)

    g = p.add_argument_group("load (exactly one of --requests, --rate, --concurrency, --offline)")
    one = g.add_mutually_exclusive_group(required=True)
    one.add_argument("--requests", metavar="FILE", default=None,
                     help="requests from a file: JSONL, CSV or Parquet with arrival_s, input_len, output_len")
    one.add_argument("--rate", metavar="QPS[,QPS...]", type=_rates, default=None,
                     help="Poisson arrivals at QPS requests/s; a comma list (1,2,4,8) is a sweep, one run per rate")
    one.add_argument("--concurrency", metavar="N[,N...]", type=_clients, default=None,
                     help="N closed-loop clients, each sending its next request when the last one finishes; a "
                     "comma list is a sweep")
    one.add_argument("--offline", action="store_true", help="every request at t = 0 (offline batch throughput)")
    g.add_argument("--num-requests", type=int_in(1, MAX_REQUESTS), default=None, metavar="N",
                   help="synthetic loads: requests drawn (default 1000)")
    g.add_argument("--input-len", type=_length("--input-len"), default=None, metavar="N|DIST",
                   help="synthetic loads: prompt tokens, a number or a distribution: uniform:LO:HI, normal:MEAN:STD, "
                   "lognormal:MEDIAN:SIGMA, exponential:MEAN (default 1024)")
    g.add_argument("--output-len", type=_length("--output-len"), default=None, metavar="N|DIST",
                   help="synthetic loads: output tokens, as --input-len (default 128)")
    g.add_argument("--seed", type=int_in(0), default=None, metavar="N",
                   help="synthetic loads: the seed of the lengths and arrivals (default 0)")

    s = p.add_argument_group("scheduler (an engine's defaults, then these overrides)")
    s.add_argument("--scheduler", default="vllm", choices=SCHEDULERS,
                   help="vllm (V1: chunked prefill, 8192-token budget), trtllm (in-flight batching, KV reserved at "
                   "admission), sarathi (512-token chunks); default vllm")
    s.add_argument("--max-num-seqs", type=int_in(1, 1 << 20), default=None, metavar="N",
                   help="requests in the batch at most")
    s.add_argument("--max-num-batched-tokens", type=int_in(1, 1 << 24), default=None, metavar="N",
                   help="tokens one iteration processes at most")
    s.add_argument("--chunked-prefill", choices=("on", "off"), default=None, help="split prompts over iterations")
    s.add_argument("--priority", choices=("decode-first", "prefill-first"), default=None,
                   help="decode-first: running requests, then new prompts in the same batch; prefill-first: new "
                   "prompts alone when there are any")
    s.add_argument("--block-size", type=int_in(1, 1 << 16), default=None, metavar="TOKENS",
                   help="tokens per KV-cache block")
    s.add_argument("--memory-fraction", type=_fraction, default=None, metavar="F",
                   help="the share of memory the engine may use, in (0, 1] (vllm, sarathi: 0.9 of the device's, "
                   "weights included; trtllm: 0.95 of what the weights leave)")

    r = p.add_argument_group("run")
    r.add_argument("--exact", action="store_true",
                   help="simulate every iteration's own kernels (varlen attention over the real lengths) instead of "
                   "costing them from buckets of simulated kernels (slow)")
    r.add_argument("--no-cache", action="store_true", help="do not read or write the on-disk kernel and plan caches")
    r.add_argument("--workers", type=int_in(1, 256), default=None, metavar="N",
                   help="processes simulating kernels (default: auto)")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--json", action="store_true",
                   help="print one JSON object: the run's summary (requests_per_s, output_tokens_per_s, ttft_ms, "
                   "tpot_ms, itl_ms, e2e_ms as {mean, p50, p90, p99}, kv_cache, assumptions, ...); for a sweep "
                   '{"sweep": "rate"|"concurrency", "points": [one such object per value, with its rate or '
                   "concurrency]}")

    o = p.add_argument_group("outputs (written atomically)")
    o.add_argument("--parquet", metavar="PATH", default=None,
                   help="per-request table at PATH and per-iteration table at its .iterations.parquet sibling "
                   "(run.parquet -> run.iterations.parquet); a sweep writes one table of each with a leading rate "
                   "or concurrency column, every point's rows one after the other")
    o.add_argument("--perfetto", metavar="PATH", default=None,
                   help="one run's timeline: iterations, KV use, a track per request (ui.perfetto.dev); not with a "
                   "sweep")
    o.add_argument("--plot", metavar="PATH", default=None,
                   help="PNG (needs matplotlib: the plot extra): a sweep's TTFT and TPOT p50/p99 against output "
                   "tokens/s, one point per load; one run's KV-cache use and running/waiting requests over time")
    o.add_argument("--force-format", action="store_true",
                   help="write the formats above even when a path's extension names another format")
    p.set_defaults(func=run)


def _rates(text: str) -> tuple[float, ...]:
    def one(item: str) -> float:
        try:
            v = float(item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r} is not a number of requests per second") from None
        from torchsim.serving.load import MIN_RATE

        if not math.isfinite(v) or v < MIN_RATE:
            raise argparse.ArgumentTypeError(f"a rate must be a finite number of requests per second >= {MIN_RATE:g}, "
                                             f"got {item!r}")
        return v

    return _listed(text, one)


def _clients(text: str) -> tuple[int, ...]:
    parse = int_in(1, MAX_CLIENTS, "closed-loop clients")
    return _listed(text, parse)


def _listed(text: str, one: Any) -> Any:
    items = [t.strip() for t in text.split(",")]
    if any(not t for t in items):
        raise argparse.ArgumentTypeError(f"{text!r} has an empty item; give values separated by commas, e.g. 1,2,4")
    values = tuple(one(t) for t in items)
    dup = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if dup is not None:
        raise argparse.ArgumentTypeError(f"{text!r} lists {dup:g} twice")
    return values


def _length(flag: str) -> Any:
    def parse(text: str) -> str:
        from torchsim.serving.load import LengthDist  # numpy, not torch

        try:
            LengthDist.parse(text, flag)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{flag} ")) from None
        return text

    parse.__name__ = "length"
    return parse


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(v) and 0 < v <= 1):
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text!r}")
    return v


def run(args: argparse.Namespace) -> int:
    """Check what argparse cannot (flags that do not go together), serve each load, print, write the files."""
    for flag in ("ep", "pp", "sp"):
        if getattr(args, flag) is not None:
            raise UsageError(f"--{flag}: torchsim serve splits a model by tensor parallelism only (--tp); expert, "
                             f"pipeline and sequence parallelism are not served yet (`torchsim predict --{flag}` "
                             "prices one step with them)")
    synthetic = {"--num-requests": args.num_requests, "--input-len": args.input_len, "--output-len": args.output_len,
                 "--seed": args.seed}
    if args.requests is not None:
        given = [f for f, v in synthetic.items() if v is not None]
        if given:
            raise UsageError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for synthetic loads; "
                             f"--requests {args.requests} gives each request's arrival and lengths")
    key, values = ("rate", args.rate) if args.rate is not None else \
        ("concurrency", args.concurrency) if args.concurrency is not None else ("", (None,))
    sweep = len(values) > 1
    if sweep and args.perfetto:
        raise UsageError(f"--perfetto writes one run's timeline; the --{key} sweep has {len(values)} runs (give one "
                         f"{key} for a timeline)")
    device = system_device(args)
    flags = {"max_num_seqs": args.max_num_seqs, "max_num_batched_tokens": args.max_num_batched_tokens,
             "chunked_prefill": None if args.chunked_prefill is None else args.chunked_prefill == "on",
             "priority": args.priority, "block_size": args.block_size, "memory_fraction": args.memory_fraction}
    common: dict[str, Any] = {
        "requests": args.requests, "offline": args.offline,
        "num_requests": 1000 if args.num_requests is None else args.num_requests,
        "input_len": args.input_len or "1024", "output_len": args.output_len or "128",
        "seed": args.seed or 0, "scheduler": args.scheduler, "dtype": args.dtype, "kv_cache": args.kv_cache,
        "quant": args.quant, "tp": args.tp, "system": args.hw if device is not None else None,
        "exact": args.exact, "cache": not args.no_cache, "workers": args.workers,
        "progress": not args.no_progress and not args.json and sys.stderr.isatty(),
        **{k: v for k, v in flags.items() if v is not None},
    }
    from torchsim.serving.run import serve

    points = []
    for v in values:
        load: dict[str, Any] = {key: v} if key else {}
        points.append((key, v, serve(args.model, device if device is not None else args.hw, **common, **load)))
    from torchsim.validation.accuracy import notes_for

    notes = notes_for(points[0][2].hw, args.dtype)
    if args.json:
        docs = [_doc(k, v, res) for k, v, res in points]
        out = {"sweep": key, "points": docs, "accuracy": notes} if sweep else {**docs[0], "accuracy": notes}
        print(json.dumps(out))
    else:
        _print_human(points, sweep, notes)
    for line in _write_outputs(args, points, sweep):
        print(line, file=sys.stderr if args.json else sys.stdout)
    return 0


def _doc(key: str, value: Any, res: Any) -> dict[str, Any]:
    doc = json.loads(res.to_json())
    return {key: value, **doc} if key else doc


def _print_human(points: list[tuple[str, Any, Any]], sweep: bool, notes: dict[str, str]) -> None:
    from torchsim.exports.report import format_table
    from torchsim.serving.plots import load_label

    if sweep:
        key, d0 = points[0][0], points[0][2].summary_dict()
        print(f"{d0['model']} on {d0['hw']}" + (f" x{d0['tp']} (tensor parallel)" if d0["tp"] > 1 else "")
              + f", scheduler {d0['scheduler']}: {len(points)} loads, {d0['requests']} requests each (simulated)")
        rows = []
        for _, v, res in points:
            d = res.summary_dict()
            rows.append([f"{v:g}", f"{d['requests_per_s']:.2f}", f"{d['output_tokens_per_s']:,.0f}",
                         *(f"{d[m][p]:.2f}" for m in ("ttft_ms", "tpot_ms") for p in ("p50", "p99")),
                         str(d["preemptions"])])
        heads = ["rate (req/s)" if key == "rate" else "clients", "req/s", "output tok/s", "TTFT p50 ms", "TTFT p99 ms",
                 "TPOT p50 ms", "TPOT p99 ms", "preemptions"]
        print(format_table(heads, rows))
    else:
        print(points[0][2].summary())
    print()
    print("assumptions:")
    shared = [a for a in points[0][2].assumptions if all(a in res.assumptions for _, _, res in points)]
    for a in shared:
        print(f"  - {a}")
    for k, v, res in points if sweep else ():
        for a in res.assumptions:
            if a not in shared:
                print(f"  - at {load_label(k, v)}: {a}")
    print("accuracy (against published measurements; docs/validation.md):")
    for n in notes.values():
        print(f"  - {n}")


def _write_outputs(args: argparse.Namespace, points: list[tuple[str, Any, Any]], sweep: bool) -> list[str]:
    """--parquet, --perfetto and --plot; one line per file written."""
    import time

    from torchsim.cli.outputs import file_line
    from torchsim.serving.result import write_sweep_parquet

    def line(what: str, path: str, t0: float, extra: str = "") -> str:
        return file_line(what, path, time.perf_counter() - t0, extra)

    lines = []
    res = points[0][2]
    if args.parquet:
        t0 = time.perf_counter()
        its = iterations_path(args.parquet)
        n_req, n_it = write_sweep_parquet(points, args.parquet, its) if sweep else res.write_parquet(args.parquet,
                                                                                                     its)
        lines.append(line("requests table", args.parquet, t0, f"{n_req:,} rows"))
        lines.append(line("iterations table", its, t0, f"{n_it:,} rows"))
    if args.perfetto:
        t0 = time.perf_counter()
        slices = res.write_perfetto(args.perfetto)
        lines.append(line("serving timeline", args.perfetto, t0, f"{slices:,} slices"))
    if args.plot:
        from torchsim.serving.plots import plot_sweep, plot_timeline

        t0 = time.perf_counter()
        if sweep:
            plot_sweep(args.plot, points)
        else:
            plot_timeline(args.plot, res)
        lines.append(line("latency-throughput chart" if sweep else "KV-cache and batch chart", args.plot, t0))
    return lines
