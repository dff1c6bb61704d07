"""`torchsim predict MODEL --hw GPU ...`: end-to-end prefill/decode prediction with the kernels that make it up.

The command users come for. Calls torchsim.prediction.pipeline.predict and prints TTFT, TPOT, tokens/s and per-kernel
tables (or one JSON object with `--json`). MODEL is a registered name or a path to an HF `config.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from torchsim.cli import COMMAND_HELP, UsageError, approximated, int_in
from torchsim.cli.options import add_parallel_options, add_precision_options, system_device
from torchsim.cli.outputs import add_output_options
from torchsim.models import DEFAULT_MODEL
from torchsim.prediction.limits import DEFAULT_MAX_TOTAL_EVENTS


def register(sub: Any) -> None:
    p = sub.add_parser("predict", help=COMMAND_HELP["predict"],
                       description="Predict time to first token, time per output token and throughput, with the "
                       "kernels each step launches.")
    p.add_argument("model", nargs="?", default=DEFAULT_MODEL,
                   help=f"model name (see `--list`) or path to an HF config.json (default {DEFAULT_MODEL})")
    p.add_argument("--hw", default="h100-sxm", help="hardware profile (default h100-sxm; `torchsim hw list`)")
    p.add_argument("--grid", default=None,
                   help="Tenstorrent profiles: compute on a COLSxROWS sub-grid of the chip (e.g. 8x8; default the "
                   "chip's compute grid: 8x8 Wormhole, 11x10 blackhole-p150, 13x10 blackhole-p150-13x10)")
    p.add_argument("--prompt", type=int_in(1, 1 << 20), default=2048, help="prompt tokens per sequence (default 2048)")
    p.add_argument("--decode", type=int_in(0, 1 << 20), default=128, help="decode steps (default 128)")
    p.add_argument("--kv", type=int_in(1, 1 << 24), default=None,
                   help="KV length at the first decode step (default: --prompt)")
    p.add_argument("--batch", type=int_in(1, 1 << 16), default=1, help="sequences per step (default 1)")
    p.add_argument("--preset", default="serving", choices=("serving", "eager"),
                   help="kernel fusion: serving (vLLM/TensorRT-LLM-like) or eager (one kernel per ATen op)")
    p.add_argument("--launch", default=None, choices=("cuda-graphs", "eager"),
                   help="launch model (default: cuda-graphs for serving, eager for eager; on Tenstorrent profiles "
                   "cuda-graphs means metal trace for decode and host dispatch for prefill, eager no trace)")
    p.add_argument("--weights", default=None, choices=("performance", "accuracy"),
                   help="Tenstorrent profiles: tt_transformers' weight data formats and math fidelities per role "
                   "(performance: bfp4_b MLP FF1/FF3 at LoFi, bfp8_b elsewhere at HiFi2; accuracy: bfp8_b at "
                   "HiFi2 everywhere; default performance); an error on GPUs")
    add_precision_options(p, kv_help="fp8 halves K/V bytes in decode attention")
    p.add_argument("--routing", default=None, help="MoE routing: balanced, skewed, or a JSON/Parquet file")
    add_parallel_options(p, tp_help="tensor-parallel GPUs (Megatron splits + NCCL collectives on the GPU's 8-GPU "
                                    "system, or on the system --hw names, e.g. dgx-h100; default 1)")
    p.add_argument("--fallback", default=None, choices=("roofline",),
                   help="estimate ops without a lowering by a roofline instead of failing")
    p.add_argument("--tune", action="store_true",
                   help="GPU profiles: give every GEMM the simulated autotuner's configuration (the fastest of up to "
                   "24 valid tile/stage/split-K/cluster choices; slower: each GEMM shape is simulated that often)")
    p.add_argument("--approximate", action="store_true",
                   help="accept config.json fields torchsim cannot model (a sliding window, biases, another "
                   "activation, ...): each approximation is listed with the assumptions and in --json")
    p.add_argument("--decode-samples", type=int_in(1, 1 << 20), default=None,
                   help="decode steps simulated, the others interpolated (default 3)")
    p.add_argument("--workers", type=int_in(1, 256), default=None, help="processes simulating kernels (default: auto)")
    p.add_argument("--policy", default=None, help="GPU profiles: warp issue policy: gto (default), rr, lrr, two-level, "
                   "ccws")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the on-disk kernel and plan caches")
    p.add_argument("--exact", action="store_true",
                   help="simulate every kernel in full (default: large kernels are extrapolated from truncated "
                   "instances of their repeating waves / K / K-V loops, within 2%%; the method column says which)")
    p.add_argument("--max-events", type=int_in(1), default=None,
                   help="refuse a prediction estimated to simulate more node events than this (default "
                        f"{DEFAULT_MAX_TOTAL_EVENTS:,}; the estimate is made before simulating)")
    p.add_argument("--yes", action="store_true", help="simulate however many node events the prediction takes")
    p.add_argument("--top", type=int_in(0), default=12, help="rows of each kernel table (0: all)")
    p.add_argument("--json", action="store_true", help="print one JSON object (ttft_ms, tpot_ms, kernels, ...)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--list", action="store_true", help="list the model names and exit")
    add_output_options(p, detail=True)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from torchsim.prediction.pipeline import predict

    if args.list:
        from torchsim.models.registry import model_names  # imports torch: a plan-cache hit does not

        print("\n".join(model_names()))
        return 0
    from torchsim.sim.policy import default_policy, policy_profile

    device = system_device(args)
    hw = device or _grid_profile(args)
    if args.policy is not None:
        from torchsim.hwmodels import get_profile

        target = get_profile(hw) if isinstance(hw, str) else hw
        if getattr(getattr(target, "arch", None), "name", "") == "TENSIX":
            raise UsageError(f"--policy sets how a GPU's warps issue; {target.name} is a Tenstorrent profile (its "
                             f"cores run tt-metal's programs)")
    with default_policy(args.policy or "gto") as pol:  # every kernel of the prediction runs under this issue policy
        pred = predict(approximated(args), policy_profile(hw, pol), prompt_len=args.prompt, decode_steps=args.decode,
                       kv_len=args.kv, batch=args.batch, preset=args.preset, launch=args.launch, weights=args.weights,
                       dtype=args.dtype, kv_cache=args.kv_cache, quant=args.quant,
                       routing=args.routing, fallback=args.fallback, decode_samples=args.decode_samples or 3,
                       workers=args.workers, cache=not args.no_cache, tune=args.tune, exact=args.exact, tp=args.tp,
                       ep=args.ep, pp=args.pp, micro_batches=args.micro_batches, sp=args.sp,
                       allow_oversubscribe=args.allow_oversubscribe, max_total_events=None if args.yes
                       else args.max_events or DEFAULT_MAX_TOTAL_EVENTS, system=args.hw if device is not None else None,
                       progress=not args.no_progress and not args.json and sys.stderr.isatty())
    from torchsim.cli.compare import export_predictions
    from torchsim.hwmodels import get_profile
    from torchsim.validation.accuracy import notes_for

    device = get_profile(args.hw) if isinstance(hw, str) or args.grid is not None else hw  # a system's GPU
    notes = notes_for(device.name, args.dtype)
    if args.json:
        # to_json's document, encoded once (to_json's indent takes the pure-Python encoder: ~0.4 s for an
        # 80-layer prediction's kernels)
        print(json.dumps({**pred.to_dict(), "accuracy": notes}, default=str))
        for line in export_predictions(args, [pred], [device]):
            print(line, file=sys.stderr)
        return 0
    for w in pred.warnings:
        print(f"warning: {w}", file=sys.stderr)
    print(pred.summary())
    print()
    _print_table(pred.table("prefill", top=args.top), f"prefill ({args.prompt} tokens x {args.batch})")
    if pred.decode_steps:
        step = pred.sampled_steps[0]
        _print_table(pred.table("decode", step=step, top=args.top),
                     f"decode step {step} (KV {pred.kv_len + step + 1})")
    print("assumptions:")
    for a in pred.assumptions:
        print(f"  - {a}")
    print("accuracy (against published measurements; docs/validation.md):")
    for n in notes.values():
        print(f"  - {n}")
    for line in export_predictions(args, [pred], [device]):
        print(line)
    return 0


def _grid_profile(args: argparse.Namespace) -> Any:
    """The profile `--hw` names, on the `--grid` sub-grid for Tenstorrent profiles; --grid on a GPU is an error."""
    if args.grid is None:
        return args.hw
    from torchsim.hwmodels import get_profile
    from torchsim.hwmodels.gpu import Arch

    hw = get_profile(args.hw)
    if hw.arch is not Arch.TENSIX:
        raise UsageError(f"--grid is a Tenstorrent option; {hw.name} is a GPU profile (use a Tensix profile such "
                         "as wormhole-n150 or blackhole-p150)")
    from torchsim.hwmodels.tensix.profiles import tensix_with_grid

    try:
        return tensix_with_grid(hw, args.grid)
    except ValueError as exc:
        raise UsageError(f"--grid: {exc}") from None


def _print_table(rows: list[dict[str, Any]], title: str) -> None:
    print(f"{title}: top kernels, summed over layers")
    print(f"  {'kernel':<42} {'kind':<17} {'n':>3} {'total us':>10} {'share':>6}  {'bound':<24} {'source':<18} shapes")
    for r in rows:
        flag = " *" if r["fallback"] else ""
        print(f"  {r['kernel']:<42} {r['kind']:<17} {r['count']:>3} {r['total_us']:>10.1f} {r['share']:>6.1%}  "
              f"{(r['bound'] + flag)[:24]:<24} {r['source'][:18]:<18} {r['shapes']}")
    if any(r["fallback"] for r in rows):
        print("  * roofline estimate (no template yet, or over the simulation budget)")
    print()
