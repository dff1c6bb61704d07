"""`torchsim microbench`: measure GEMMs, attention, memory bandwidth and launch latency on the local GPU and
write rows in the published_dev.csv schema, for `torchsim calibrate --measurements`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from torchsim.cli import COMMAND_HELP


def register(sub: Any) -> None:
    p = sub.add_parser("microbench", help=COMMAND_HELP["microbench"],
                       description="Measure on the local GPU (needs a CUDA build of PyTorch): bf16 and FP8 GEMMs "
                       "(torch.matmul, torch._scaled_mm), SDPA prefill and decode, read/write/copy bandwidth, and "
                       "kernel launch intervals eager and in a CUDA graph, and the SM clock and board power large "
                       "GEMMs settle at when run for seconds (through NVML). Each value is the median of a few loops "
                       "of back-to-back calls timed with CUDA events after warm-up (L2 not flushed, clocks not "
                       "locked). Writes rows in the published_dev.csv schema, atomically (nothing on failure); "
                       "progress goes to stderr.")
    p.add_argument("--out", required=True, help="CSV to write, e.g. my_gpu.csv")
    p.add_argument("--hw", default=None, help="torchsim profile the rows are for (default: the one the GPU's name "
                   "maps to, e.g. an H100 -> h100-sxm)")
    p.add_argument("--quick", action="store_true", help="fewer shapes and smaller buffers (about a minute)")
    p.add_argument("--no-fp8", action="store_true", help="skip the FP8 GEMMs")
    p.add_argument("--sustained", type=float, default=None, metavar="SECONDS",
                   help="run each sustained case (large bf16/fp8 GEMMs on random and zero data, a GEMV, a copy) "
                   "back to back this long and record the SM clock and board power it settles at, read through "
                   "NVML (the nvidia-ml-py package); 0 skips them (default 3, 1 with --quick)")
    p.add_argument("--only", default=None, metavar="PARTS",
                   help="comma-separated parts to measure: launch, bandwidth, gemm, attention, sustained "
                   "(default: all)")
    p.add_argument("--id-prefix", default="MB", help="row ids are PREFIX-001, ... (default MB)")
    p.add_argument("--force-format", action="store_true", help="write --out even when its extension names another "
                   "format (the rows are CSV)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help=argparse.SUPPRESS)  # testing: tiny
    p.set_defaults(func=_run)


def _check_flags(args: argparse.Namespace, parts: tuple[str, ...]) -> None:
    """Every flag, before the device check: a typo is named even on a machine without a GPU."""
    from torchsim.calibration import microbench as mb

    if args.hw is not None:
        mb.check_hw(args.hw)
    if args.sustained is not None and not 0 <= args.sustained <= 600:  # NaN fails both comparisons
        raise ValueError(f"--sustained must be between 0 and 600 seconds, got {args.sustained}")
    if not parts:
        raise ValueError(f"--only {args.only!r} names no part; valid: {', '.join(mb.PARTS)} (leave --only out to "
                         "measure all)")
    bad = [x for x in parts if x not in mb.PARTS]
    if bad:
        raise ValueError(f"--only: unknown part(s) {', '.join(bad)}; valid: {', '.join(mb.PARTS)}")
    if not args.id_prefix.strip() or any(not ch.isprintable() or ch in ",\"" for ch in args.id_prefix):
        raise ValueError(f"--id-prefix {args.id_prefix!r}: row ids are PREFIX-001, ...; give a non-empty prefix of "
                         "printable characters without commas or quotes (default MB)")


def _run(args: argparse.Namespace) -> int:
    from torchsim.calibration import microbench as mb
    from torchsim.calibration.gpu_state import idle_power

    parts = mb.PARTS if args.only is None else tuple(x.strip() for x in args.only.split(",") if x.strip())
    _check_flags(args, parts)
    mb.check_device(args.device)  # before any measurement: no CUDA is one clear line, exit 2
    idle = idle_power(0, 2.0) if args.device == "cuda" else None  # before this process loads the GPU
    env = mb.environment(args.device)
    if args.device == "cpu" and args.hw is None:
        raise ValueError("--device cpu needs --hw (the CPU maps to no GPU profile)")
    profile, note = mb.profile_for(env.gpu, args.hw)

    def log(s: str) -> None:
        print(f"microbench: {s}", file=sys.stderr, flush=True)

    shapes = mb.TINY if args.device == "cpu" else mb.QUICK if args.quick else mb.FULL
    timing = mb.Timing(2, 3, 3) if args.device == "cpu" else mb.Timing()
    log(f"{env.describe()}; rows for profile {profile}{' (' + note + ')' if note else ''}")
    seconds = args.sustained if args.sustained is not None else (0.05 if args.device == "cpu" else
                                                                  1.0 if args.quick else 3.0)
    ms = mb.run_suite(args.device, shapes, timing, log, fp8=False if args.no_fp8 else None, sustained_s=seconds,
                      parts=parts)
    if idle is not None and idle.power_w is not None:
        ms = [mb.idle_row(idle, 2.0), *ms]
        log(f"idle board power {idle.power_w:.1f} W")
    rows = mb.to_rows(ms, profile, env, timing, args.id_prefix, note)
    mb.write_rows(rows, args.out)
    print(f"wrote {len(rows)} rows to {args.out}; fit with: torchsim calibrate --hw {profile} --measurements "
          f"{args.out}")
    return 0
