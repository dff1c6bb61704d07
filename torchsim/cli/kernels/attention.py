"""`torchsim kernel attention --batch B --heads-q H --heads-kv HKV --seq-q SQ --seq-kv SKV --head-dim D ...`."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from torchsim.cli import int_in
from torchsim.cli.kernel import add_common, positive, run_and_report
from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.lowering.templates.attention import attention
from torchsim.lowering.templates.attention_config import AttnShape, AttnVariant, default_config


def add_shape(p: argparse.ArgumentParser, seq_q_default: int | None = None) -> None:
    p.add_argument("--batch", type=int, required=True, help="batch size")
    p.add_argument("--heads-q", type=int, required=True, help="query heads")
    p.add_argument("--heads-kv", type=int, default=None, help="K/V heads (GQA/MQA; default: --heads-q)")
    p.add_argument("--seq-q", type=int, default=seq_q_default, required=seq_q_default is None,
                   help="query length" + (f" (default {seq_q_default})" if seq_q_default else ""))
    p.add_argument("--head-dim", type=int, required=True, help="head dimension of Q and K")
    p.add_argument("--head-dim-v", type=int, default=None, help="head dimension of V (default: --head-dim)")


def shape_from(args: argparse.Namespace, causal: bool = False) -> AttnShape:
    for name in ("batch", "heads_q", "seq_q", "seq_kv", "head_dim"):
        positive(name.replace("_", "-"), getattr(args, name))
    heads_kv = positive("heads-kv", args.heads_kv) if args.heads_kv is not None else args.heads_q
    dv = positive("head-dim-v", args.head_dim_v) if args.head_dim_v is not None else 0
    return AttnShape(args.batch, args.heads_q, heads_kv, args.seq_q, args.seq_kv, args.head_dim, causal,
                     DType.parse(args.dtype), dv)


def register(sub: Any) -> None:
    p = sub.add_parser("attention", help="attention prefill (FlashAttention-2/-3/-4)")
    add_shape(p)
    p.add_argument("--seq-kv", type=int, default=None, help="K/V length (default: --seq-q)")
    p.add_argument("--causal", action="store_true", help="bottom-right aligned causal mask")
    p.add_argument("--variant", default=None, choices=[v.value for v in AttnVariant],
                   help="FlashAttention generation (default: the architecture's own: a100 fa2, h100/h200 fa3, "
                        "b200 fa4)")
    p.add_argument("--block-m", type=int, default=None, help="query rows per CTA")
    p.add_argument("--block-n", type=int, default=None, help="keys per K/V block")
    p.add_argument("--stages", type=int_in(1, 32), default=None, help="K/V buffers in shared memory")
    add_common(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    if args.seq_kv is None:
        args.seq_kv = args.seq_q
    shape = shape_from(args, args.causal)
    hw = get_profile(args.hw)
    cfg = default_config(shape, hw, AttnVariant.parse(args.variant) if args.variant else None)
    cfg = replace(cfg, bm=positive("block-m", args.block_m) if args.block_m is not None else cfg.bm,
                  bn=positive("block-n", args.block_n) if args.block_n is not None else cfg.bn,
                  stages=positive("stages", args.stages) if args.stages is not None else cfg.stages)
    kg = attention(shape, hw, cfg)
    run_and_report(kg, args, {"cta_classes": len(kg.classes), "query_blocks": kg.attrs["query_blocks"]})
    return 0
