"""`torchsim kernel gemm --m M --n N --k K [--variant ...]`."""

from __future__ import annotations

import argparse
from typing import Any

from torchsim.cli.kernel import add_common, positive, run_and_report
from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.lowering.templates.gemm import gemm
from torchsim.lowering.templates.gemm_config import Epilogue, GemmConfig, Pipeline, default_config
from torchsim.lowering.templates.tiling import work_units


def register(sub: Any) -> None:
    p = sub.add_parser("gemm", help="C = A @ B (+ epilogue) with FP32 accumulation")
    for d in ("m", "n", "k"):
        p.add_argument(f"--{d}", type=int, required=True, help=f"GEMM dimension {d.upper()}")
    p.add_argument("--batch", type=int, default=1, help="batched GEMM count")
    p.add_argument("--variant", default=None, choices=[v.value for v in Pipeline],
                   help="pipeline organisation (default: the architecture's usual one)")
    p.add_argument("--epilogue", default="none", choices=[e.value for e in Epilogue])
    p.add_argument("--tile", default=None, help="BMxBNxBK, e.g. 128x256x64")
    p.add_argument("--stages", type=int, default=None, help="pipeline stages")
    p.add_argument("--no-persistent", action="store_true", help="one CTA per output tile")
    p.add_argument("--tiles-per-cta", type=int, default=None, help="persistent grid with this many tiles per CTA")
    add_common(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    for d in ("m", "n", "k", "batch"):
        positive(d, getattr(args, d))
    hw = get_profile(args.hw)
    dtype = DType.parse(args.dtype)
    pipe = Pipeline.parse(args.variant) if args.variant else None
    cfg: GemmConfig = default_config(args.m, args.n, args.k, dtype, hw, args.batch, pipe)
    changes: dict[str, Any] = {}
    if args.tile:
        try:
            bm, bn, bk = (int(x) for x in args.tile.lower().split("x"))
        except ValueError:
            raise ValueError(f"--tile must look like 128x256x64, got {args.tile!r}") from None
        changes.update(bm=bm, bn=bn, bk=bk, split_k=1)
    if args.stages:
        changes["stages"] = positive("stages", args.stages)
    if args.no_persistent:
        changes["persistent"] = False
    if changes:
        from dataclasses import replace
        cfg = replace(cfg, **changes)
    kg = gemm(args.m, args.n, args.k, dtype, hw, cfg, Epilogue.parse(args.epilogue), batch=args.batch,
              tiles_per_cta=args.tiles_per_cta)
    units = len(work_units(args.batch, args.m, args.n, args.k, cfg.bm, cfg.bn, cfg.bk, cfg.split_k, cfg.b_split, 8))
    run_and_report(kg, args, {"output_tiles": units})
    return 0
