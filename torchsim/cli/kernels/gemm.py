"""`torchsim kernel gemm --m M --n N --k K [--variant ...]`; on Tenstorrent profiles `--grid 8x8 --fidelity HiFi2
--in1-dtype bfp8_b [--program dram-sharded]` select the Tensix matmul's configuration."""

from __future__ import annotations

import argparse
from typing import Any

from torchsim.cli import UsageError, add_quant_option, int_in
from torchsim.cli.kernel import MAX_EVENTS, add_common, header_graph, may_extrapolate, positive, run_and_report
from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.gpu import Arch
from torchsim.hwmodels.tensix.formats import MathFidelity
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.templates.gemm import checked_config, gemm, gemm_attrs, gemm_io_bytes
from torchsim.lowering.templates.gemm_config import (
    Epilogue,
    GemmConfig,
    Pipeline,
    default_config,
    mma_k,
    quant_format,
)
from torchsim.lowering.templates.tensix import build_tensix_kernel
from torchsim.lowering.templates.tiling import work_units
from torchsim.lowering.templates.tune import describe


def register(sub: Any) -> None:
    p = sub.add_parser("gemm", help="C = A @ B (+ epilogue) with FP32 accumulation")
    for d in ("m", "n", "k"):
        p.add_argument(f"--{d}", type=int, required=True, help=f"GEMM dimension {d.upper()}")
    p.add_argument("--batch", type=int, default=1, help="batched GEMM count")
    p.add_argument("--variant", default=None, choices=[v.value for v in Pipeline],
                   help="pipeline organisation (default: the architecture's usual one)")
    p.add_argument("--epilogue", default="none", choices=[e.value for e in Epilogue])
    p.add_argument("--tile", default=None, help="BMxBNxBK, e.g. 128x256x64")
    p.add_argument("--stages", type=int_in(1, 32), default=None, help="pipeline stages")
    p.add_argument("--no-persistent", action="store_true", help="one CTA per output tile")
    p.add_argument("--tiles-per-cta", type=int_in(1, 1 << 16), default=None,
                   help="persistent grid with this many tiles per CTA")
    p.add_argument("--tune", action="store_true",
                   help="simulated autotuning: simulate a bounded set of valid configurations (the default among "
                   "them), report each and run the fastest")
    p.add_argument("--tune-budget", type=int_in(1, 256), default=None,
                   help="candidates --tune simulates (default 24)")
    add_quant_option(p, "B (the weights) in a quantised format: w8a16 / w4a16 (dequantised in the main loop; "
                     "--dtype is the MMA dtype, bf16 or fp16), w8a8 (int8 MMA), fp8, fp8-block, nvfp4 / mxfp4 "
                     "(block-scaled FP4, B200); the MMA dtype follows the format")
    t = p.add_argument_group("Tenstorrent profiles (wormhole-*, blackhole-*)")
    t.add_argument("--fidelity", default=None, help="math fidelity: LoFi, HiFi2, HiFi3, HiFi4 (default: the "
                   "weight format's usual one)")
    t.add_argument("--grid", default=None, help="core grid COLSxROWS, e.g. 8x8 (default: the chip's compute grid)")
    t.add_argument("--in1-dtype", default=None, help="weight (in1) data format, e.g. bfp8_b (default: --dtype)")
    t.add_argument("--out-dtype", default=None, help="output data format (default: --dtype)")
    t.add_argument("--program", default=None, choices=("mcast", "dram-sharded"),
                   help="mcast (default): 2D/1D multicast matmul; dram-sharded: tt-metal's decode matmul (one worker "
                   "per DRAM bank)")
    add_common(p)
    p.set_defaults(func=_run)


TENSIX_ONLY = ("fidelity", "grid", "in1_dtype", "out_dtype")


def quant_of(args: argparse.Namespace, hw: Any) -> str:
    """The --quant format ("" for none); a format `hw` cannot run is a usage error naming what it has."""
    name = getattr(args, "quant", None)
    if not name or name == "none":
        return ""
    from torchsim.lowering.quant import check_supported, parse

    try:
        check_supported(parse(name), hw)
    except ValueError as exc:
        raise UsageError(f"--quant {name}: {exc}") from None
    return str(name)


# element types with no GPU tensor-core MMA: Tenstorrent block floats, int4 (dequantised: --quant w4a16), and
# the accumulator/index integers
NOT_GPU_MMA = (DType.BFP8_B, DType.BFP4_B, DType.INT4, DType.INT32, DType.INT64)


def check_gpu_dtype(dtype: DType, hw: Any, flag: str = "--dtype") -> None:
    """A GEMM dtype a GPU's tensor cores cannot take is a usage error naming the ones `hw` runs."""
    if dtype in NOT_GPU_MMA or not hw.supports(dtype):
        names = list(hw.tensor_formats())
        if "tf32" in names:
            names.insert(names.index("tf32") + 1, "fp32")
        if "fp8" in names:
            names.insert(names.index("fp8") + 1, "fp8_e5m2")
        raise UsageError(f"{flag} {dtype.name.lower()} is not a tensor-core type of {hw.name}; valid: "
                         f"{', '.join(names)}"
                         + (" (Tenstorrent block floats run on wormhole-*/blackhole-* profiles)"
                            if dtype in (DType.BFP8_B, DType.BFP4_B) else ""))


def _run(args: argparse.Namespace) -> int:
    for d in ("m", "n", "k", "batch"):
        positive(d, getattr(args, d))
    # before building: ~3 node executions per 128x128 output tile per 64-deep K step plus ~12 per tile (its
    # prologue and epilogue: what dominates a small-K batched GEMM). Measured exact here: 4096^3 200k events
    # (estimate 209k), batch 10^5 of 128^3 1.80M (1.80M; the K term alone said 0.6M), batch 1000 of 128x128x4096
    # 390k (204k: a 128-wide tile config costs ~6 per K step, so this still undercounts those). A graph this large
    # takes minutes to build, not only to simulate.
    tiles = -(-args.m // 128) * -(-args.n // 128) * args.batch
    estimate = tiles * (3 * -(-args.k // 64) + 12)
    limit = args.max_events or MAX_EVENTS
    if estimate > limit:
        raise UsageError(f"a {args.batch}x{args.m}x{args.n}x{args.k} GEMM is about {estimate:,} node executions "
                         f"(limit {limit:,}); pass --max-events {estimate} to simulate it, or use `torchsim predict`, "
                         f"which extrapolates large GEMMs")
    hw = get_profile(args.hw)
    dtype = DType.parse(args.dtype)
    quant = quant_of(args, hw)
    if quant:
        from torchsim.lowering.quant import parse

        dtype = parse(quant).mma_dtype(dtype)
    if hw.arch is Arch.TENSIX:
        return _run_tensix(args, hw, dtype)
    given = [f"--{o.replace('_', '-')}" for o in (*TENSIX_ONLY, "program") if getattr(args, o) is not None]
    if not given:
        check_gpu_dtype(dtype, hw)
    if given:
        raise UsageError(f"{', '.join(given)} applies to Tenstorrent profiles; {hw.name} is a GPU "
                         "(use --tile/--stages/--variant there)")
    if args.no_persistent and args.tiles_per_cta is not None:
        raise UsageError("--tiles-per-cta sets the output tiles of each persistent CTA; --no-persistent runs one CTA "
                         "per tile (drop one of them)")
    if args.tile is not None and not args.tile.strip():
        raise UsageError("--tile is empty; give BMxBNxBK, e.g. 128x256x64, or leave it out")
    if args.tune:
        if quant:
            raise UsageError(f"--tune autotunes unquantised GEMMs; --quant {quant} takes its kernels' own tiles "
                             "(drop one of them)")
        return _run_tuned(args, hw, dtype)
    pipe = Pipeline.parse(args.variant) if args.variant else None
    cfg: GemmConfig = default_config(args.m, args.n, args.k, dtype, hw, args.batch, pipe, quant=quant)
    changes: dict[str, Any] = {}
    if args.tile:
        try:
            bm, bn, bk = (int(x) for x in args.tile.lower().split("x"))
        except ValueError:
            raise ValueError(f"--tile must look like 128x256x64, got {args.tile!r}") from None
        step = mma_k(dtype)
        if bk % step:
            raise UsageError(f"--tile {args.tile}: BK={bk} is not a multiple of {step}, the K of one "
                             f"{dtype.name.lower()} tensor-core MMA (32 bytes of K); valid BK: {step}, {2 * step}, "
                             f"{4 * step}, ...")
        changes.update(bm=bm, bn=bn, bk=bk, split_k=1)
    if args.stages:
        changes["stages"] = positive("stages", args.stages)
    if args.no_persistent:
        changes["persistent"] = False
    if changes:
        from dataclasses import replace
        cfg = replace(cfg, **changes)
    _build_and_report(args, hw, dtype, cfg, quant, {})
    return 0


def _build_and_report(args: argparse.Namespace, hw: Any, dtype: DType, cfg: GemmConfig, quant: str,
                      extra: dict[str, Any]) -> None:
    """Simulate and report the GEMM of `args` with `cfg`. One that will be extrapolated is never built in full
    (a 16384^3 graph takes seconds to write): its repeats family builds the truncated instances, and the report
    names the full kernel (a header graph: the smallest sample, with the full kernel's name, attrs, FLOPs and
    DRAM bytes)."""
    epi = Epilogue.parse(args.epilogue)
    units = len(work_units(args.batch, args.m, args.n, args.k, cfg.bm, cfg.bn, cfg.bk, cfg.split_k, cfg.b_split, 8))
    extra = {"output_tiles": units, **extra}
    if args.tiles_per_cta is None and may_extrapolate(args):
        from torchsim.prediction.repeats import EXACT_EVENTS, gemm_family

        full = checked_config(args.m, args.n, args.k, dtype, hw, cfg, args.batch, quant)
        attrs = gemm_attrs(args.m, args.n, args.k, dtype, full, epi, args.batch, False)
        fam = gemm_family(args.m, args.n, args.k, dtype, hw, full, epi, args.batch, False, attrs)
        limit = args.max_events or MAX_EVENTS
        if fam.dims and fam.events > min(limit, EXACT_EVENTS):
            io = gemm_io_bytes(args.m, args.n, args.k, dtype, args.batch, False, quant_format(full.quant), epi)
            run_and_report(header_graph(fam, io), args, extra, family=fam)
            return
    kg = gemm(args.m, args.n, args.k, dtype, hw, cfg, epi, batch=args.batch, tiles_per_cta=args.tiles_per_cta,
              quant=quant)
    run_and_report(kg, args, extra)


def _run_tuned(args: argparse.Namespace, hw: Any, dtype: DType) -> int:
    """--tune: the candidates' table (stderr under --json), then the winner simulated and reported as usual
    with a "tune" object (candidates, winner, default, margin, wall time)."""
    import sys

    from torchsim.lowering.templates.tune import DEFAULT_BUDGET, tune_gemm

    fixed = [f"--{f.replace('_', '-')}" for f in ("variant", "tile", "stages", "no_persistent", "tiles_per_cta")
             if getattr(args, f)]
    if fixed:
        raise UsageError(f"--tune chooses the configuration itself; drop {', '.join(fixed)}")
    epi = Epilogue.parse(args.epilogue)
    res = tune_gemm(args.m, args.n, args.k, dtype, hw, args.batch, args.tune_budget or DEFAULT_BUDGET, epi)
    out = sys.stderr if args.json else sys.stdout
    for line in tune_table(res):
        print(line, file=out)
    _build_and_report(args, hw, dtype, res.best, "", {"tune": res.as_dict()})
    return 0


def tune_table(res: Any) -> list[str]:
    """The compact table of a TuneResult: config, time, speed vs the default; then winner, margin, wall time."""
    lines = [f"tuning: {len(res.trials)} candidates simulated, {res.pruned} pruned as unable to run "
             f"({', '.join(f'{k} {v}' for k, v in res.pruned_reasons.items()) or 'none'}), "
             f"{res.dropped} valid ones over the budget",
             f"  {'config':<44} {'time us':>10} {'vs default':>10}"]
    for t in res.trials:
        mark = "  (default)" if t.is_default else ("  <- winner" if t.cfg == res.best else "")
        lines.append(f"  {t.label:<44} {t.time_s * 1e6:10.2f} {res.default_time_s / t.time_s:9.3f}x{mark}")
    if res.default_won:
        lines.append(f"winner: the default, {describe(res.best)}, {res.best_time_s * 1e6:.2f} us")
    else:
        lines.append(f"winner: {describe(res.best)}, {res.best_time_s * 1e6:.2f} us vs default "
                     f"{res.default_time_s * 1e6:.2f} us ({100 * res.margin:.1f}% less time, {res.speedup:.3f}x)")
    lines.append(f"tuning wall time {res.wall_s:.1f} s")
    return lines


def _run_tensix(args: argparse.Namespace, hw: Any, dtype: DType) -> int:
    """A Tensix matmul built by the Tensix templates from the same KernelCall lowering produces."""
    for flag in ("variant", "tile", "stages", "tiles_per_cta", "tune", "no_persistent"):
        if getattr(args, flag):
            raise UsageError(f"--{flag.replace('_', '-')} is a GPU GEMM option; {hw.name} takes --grid, --fidelity, "
                             "--in1-dtype, --out-dtype, --program")
    if args.epilogue != "none":
        raise UsageError(f"--epilogue {args.epilogue} is a GPU GEMM option (the Tensix matmul template has no fused "
                         f"epilogue); {hw.name} takes --epilogue none")
    if args.program == "dram-sharded" and args.grid is not None:
        raise UsageError("--grid does not apply to --program dram-sharded, which runs one worker core per DRAM bank; "
                         "drop --grid (or use --program mcast)")
    params: dict[str, Any] = {"m": args.m, "n": args.n, "k": args.k, "batch": args.batch,
                              "program": (args.program or "mcast").replace("-", "_")}
    for opt in TENSIX_ONLY:
        if getattr(args, opt) is not None:
            params[opt] = getattr(args, opt)
    if "fidelity" in params:
        params["fidelity"] = MathFidelity.parse(params["fidelity"]).label
    kg = build_tensix_kernel(KernelCall.make(KernelKind.GEMM, dtype, name="gemm", **params), hw)
    run_and_report(kg, args, {"grid": kg.attrs.get("grid"), "fidelity": kg.attrs.get("fidelity")})
    return 0
