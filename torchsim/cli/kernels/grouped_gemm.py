"""`torchsim kernel grouped-gemm --tokens-per-expert 96,40,45,... --n N --k K` (or --routing PATTERN --tokens T).

Front end of lowering.templates.grouped_gemm; the routing counts come from the command line or a synthetic
pattern (models.routing_synthetic). Prints the common report plus the tile schedule and the load across SMs.
"""

from __future__ import annotations

import argparse
from typing import Any

from torchsim.cli import UsageError, add_quant_option, int_in
from torchsim.cli.kernel import add_common, emit_outputs, header_graph, may_extrapolate, positive, report, simulate_for
from torchsim.cli.kernels.gemm import check_gpu_dtype, quant_of
from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.lowering.templates.gemm_config import Epilogue, Pipeline
from torchsim.lowering.templates.grouped_gemm import grouped_config, grouped_plan, load_balance, plan_kernel
from torchsim.prediction.repeats import EXACT_EVENTS, grouped_plan_family

# experts of one grouped GEMM: published MoE layers have up to a few hundred (DeepSeek-V3 256); each expert is a
# GEMM problem of the launch, so a typo (--experts 10000000) would build for minutes before the size check
MAX_EXPERTS = 1 << 12


def register(sub: Any) -> None:
    p = sub.add_parser("grouped-gemm", help="MoE grouped GEMM: every expert's GEMM in one launch")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--tokens-per-expert", default=None, help="comma-separated rows of each expert, e.g. 96,40,45")
    src.add_argument("--routing", default=None, help="synthetic routing: balanced, skewed[:hot share], zipf[:s], "
                     "dirichlet[:alpha] (needs --tokens, --experts, --top-k)")
    p.add_argument("--tokens", type=int, default=None, help="tokens routed (checked: counts sum to tokens x top-k)")
    p.add_argument("--experts", type=int_in(1, MAX_EXPERTS), default=None,
                   help="experts of a --routing pattern (default 8)")
    p.add_argument("--top-k", type=int, default=None, help="experts per token (default 2 with --routing)")
    p.add_argument("--n", type=int, required=True, help="output columns of each expert's GEMM")
    p.add_argument("--k", type=int, required=True, help="reduction dimension (hidden size for the up projection)")
    p.add_argument("--variant", default=None, choices=[v.value for v in Pipeline],
                   help="pipeline organisation (default: the architecture's usual one)")
    p.add_argument("--epilogue", default="none", choices=[e.value for e in Epilogue])
    p.add_argument("--seed", type=int_in(0, (1 << 63) - 1), default=None,
                   help="seed of the sampled routing patterns, zipf and dirichlet (default 0)")
    add_quant_option(p, "the experts' weights in a quantised format (as `kernel gemm --quant`; the MMA dtype follows "
                     "the format)")
    add_common(p)
    p.set_defaults(func=_run)


def parse_counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(x) for x in text.replace(" ", "").split(",") if x != "")
    except ValueError:
        raise UsageError(f"--tokens-per-expert must be comma-separated integers like 96,40,45, got {text!r}") from None
    if not counts:
        raise UsageError("--tokens-per-expert is empty; give one token count per expert, e.g. 96,40,45")
    if len(counts) > MAX_EXPERTS:
        raise UsageError(f"--tokens-per-expert lists {len(counts):,} experts, above torchsim's limit of {MAX_EXPERTS} "
                         f"for one grouped GEMM")
    return counts


def _run(args: argparse.Namespace) -> int:
    positive("n", args.n)
    positive("k", args.k)
    if args.seed is not None:
        from torchsim.models.routing_synthetic import SAMPLED, RoutingPattern, parse_pattern

        pattern: RoutingPattern | None = None
        if args.routing is not None:
            try:
                pattern = parse_pattern(args.routing)[0]
            except ValueError as exc:
                raise UsageError(f"--routing {args.routing!r}: {exc}") from None
        if pattern not in SAMPLED:
            given = f"--routing {pattern.value} is computed, not sampled" if pattern is not None else \
                "--tokens-per-expert lists the counts"
            raise UsageError(f"--seed seeds the sampled routing patterns ({', '.join(p.value for p in SAMPLED)}); "
                             f"{given}, so --seed would change nothing (drop it)")
    if args.routing is not None:
        from torchsim.models.routing_synthetic import synthetic_routing

        top_k = 2 if args.top_k is None else args.top_k
        tokens = positive("tokens", args.tokens)
        experts = 8 if args.experts is None else args.experts
        counts = synthetic_routing(args.routing, num_layers=1, num_experts=experts, top_k=positive("top-k", top_k),
                                   tokens=tokens, seed=args.seed or 0).layer(0)
    else:
        counts, tokens, top_k = parse_counts(args.tokens_per_expert), args.tokens, args.top_k
        if args.experts is not None:
            raise UsageError(f"--experts sizes a --routing pattern; --tokens-per-expert already lists {len(counts)} "
                             f"experts (drop --experts)")
        if tokens is not None:
            positive("tokens", tokens)
        if top_k is not None:
            positive("top-k", top_k)
        if (tokens is None) != (top_k is None):
            raise UsageError("give --tokens and --top-k together (they check that the counts sum to tokens x top-k)")
    hw = get_profile(args.hw)
    dtype = DType.parse(args.dtype)
    quant = quant_of(args, hw)
    if quant:
        from torchsim.lowering.quant import parse

        dtype = parse(quant).mma_dtype(dtype)
    check_gpu_dtype(dtype, hw)
    cfg = grouped_config(counts, args.n, args.k, dtype, hw, Pipeline.parse(args.variant), quant) \
        if args.variant else None
    plan = grouped_plan(counts, args.n, args.k, dtype, hw, cfg, Epilogue.parse(args.epilogue), tokens=tokens,
                        top_k=top_k, quant=quant)
    # one that will be extrapolated is never written in full (65,536 tokens: seconds of graph); the report names
    # the full kernel (a header graph: the smallest sample, with the full kernel's name, attrs, FLOPs, bytes)
    fam = grouped_plan_family(plan, hw) if may_extrapolate(args) else None
    fam = fam if fam is not None and fam.dims and fam.events > EXACT_EVENTS else None
    kg = header_graph(fam, plan.dram_bytes) if fam is not None else plan_kernel(plan, hw)
    res = simulate_for(kg, args, fam)
    balance = load_balance(res)
    report(res, kg, args, {"tokens_per_expert": counts, "load_balance": balance}, header=fam is not None)
    if not args.json:
        a = kg.attrs
        print(f"  schedule    {a['tiles']} tiles ({'+'.join(str(t) for t in a['m_tiles'])} M tiles of {a['bm']} rows "
              f"x {-(-args.n // a['bn'])} N tiles) on {a['grid']} persistent CTAs, {a['tiles_per_cta'][0]}-"
              f"{a['tiles_per_cta'][1]} tiles each; {100 * a['tile_efficiency']:.0f}% of computed rows are tokens")
        if balance:
            busy = balance.get("tensor_busy_max_over_mean")
            idle = int(balance["idle_sms"])
            print(f"  SM load     tail idle {100 * balance['tail_idle_share']:.1f}% of SM-cycles"
                  + (f" ({idle} SMs got no tile)" if idle else "")
                  + f"; working SMs finish between {balance['sm_end_min_cycles']:.0f} and "
                  f"{balance['sm_end_max_cycles']:.0f} cycles"
                  + (f"; busiest SM's tensor pipe {busy:.2f}x the mean" if busy else ""))
    emit_outputs(args, [(kg, res)])
    return 0
