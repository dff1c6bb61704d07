"""`torchsim kernel attention --batch B --heads-q H --heads-kv HKV --seq-q SQ --seq-kv SKV --head-dim D ...`, or the
varlen kernel over chunks of different lengths: `--seqs 128:128,512:1024` (q_len:kv_len per sequence)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from torchsim.cli import UsageError, int_in
from torchsim.cli.kernel import add_common, header_graph, may_extrapolate, positive, run_and_report
from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.lowering.templates.attention import attention
from torchsim.lowering.templates.attention_config import AttnShape, AttnVariant, default_config
from torchsim.lowering.templates.varlen import check_kv_lens, check_seqs

# variants whose --stages (K/V buffers in shared memory) changes the kernel; fa2's loop does not read it
STAGED = (AttnVariant.FA3, AttnVariant.FA4, AttnVariant.TRITON)


def add_shape(p: argparse.ArgumentParser, seq_q_default: int | None = None, varlen: str = "") -> None:
    """The shape options; with `varlen` (the option that lists per-sequence lengths) --batch is not required."""
    p.add_argument("--batch", type=int, required=not varlen, default=None,
                   help="batch size" + (f" (not with {varlen}: one per sequence)" if varlen else ""))
    p.add_argument("--heads-q", type=int, required=True, help="query heads")
    p.add_argument("--heads-kv", type=int, default=None, help="K/V heads (GQA/MQA; default: --heads-q)")
    p.add_argument("--seq-q", type=int, default=seq_q_default, required=seq_q_default is None and not varlen,
                   help="query length" + (f" (default {seq_q_default})" if seq_q_default else ""))
    p.add_argument("--head-dim", type=int, required=True, help="head dimension of Q and K")
    p.add_argument("--head-dim-v", type=int, default=None, help="head dimension of V (default: --head-dim)")


def shape_from(args: argparse.Namespace, causal: bool = False) -> AttnShape:
    for name in ("batch", "heads_q", "seq_q", "seq_kv", "head_dim"):
        positive(name.replace("_", "-"), getattr(args, name))
    heads_kv = positive("heads-kv", args.heads_kv) if args.heads_kv is not None else args.heads_q
    dv = positive("head-dim-v", args.head_dim_v) if args.head_dim_v is not None else 0
    if causal and args.seq_q > args.seq_kv:
        raise UsageError(f"--causal with --seq-q {args.seq_q} > --seq-kv {args.seq_kv}: the bottom-right aligned mask "
                         f"would leave the first {args.seq_q - args.seq_kv} query rows no key; valid: --seq-q <= "
                         f"--seq-kv (as --seqs q_len:kv_len requires)")
    return AttnShape(args.batch, args.heads_q, heads_kv, args.seq_q, args.seq_kv, args.head_dim, causal,
                     DType.parse(args.dtype), dv)


def _items(text: str) -> list[str]:
    return [x.strip() for x in text.split(",")] if text.strip() else []


def _num(text: str) -> int | str:
    try:
        return int(text)
    except ValueError:
        return text  # the check names it: not a whole number


def parse_seqs(text: str) -> tuple[tuple[int, int], ...]:
    """`--seqs 128:128,512:1024` -> ((128, 128), (512, 1024)); UsageError naming the bad item."""
    items = _items(text)
    pairs = [tuple(_num(x) for x in item.split(":")) if item.count(":") == 1 else item for item in items]
    try:
        return check_seqs(pairs, "--seqs", [repr(x) for x in items])
    except ValueError as exc:
        raise UsageError(f"{exc}; --seqs takes q_len:kv_len per sequence, e.g. 128:128,512:1024") from None


def parse_kv_lens(text: str) -> tuple[int, ...]:
    """`--kv-lens 100,2000` -> (100, 2000); UsageError naming the bad item."""
    items = _items(text)
    try:
        return check_kv_lens([_num(x) for x in items], "--kv-lens", [repr(x) for x in items])
    except ValueError as exc:
        raise UsageError(f"{exc}; --kv-lens takes one K/V length per sequence, e.g. 100,2000,512") from None


def varlen_args(args: argparse.Namespace, option: str, lens: dict[str, int]) -> None:
    """Fill batch / seq-q / seq-kv from per-sequence lengths; giving them as well is an error."""
    for name, value in lens.items():
        given = getattr(args, name)
        if given is not None and not (name == "seq_q" and option == "--kv-lens"):
            raise UsageError(f"{option} sets --{name.replace('_', '-')} (= {value}); drop --{name.replace('_', '-')}")
        setattr(args, name, value if given is None else given)


def register(sub: Any) -> None:
    p = sub.add_parser("attention", help="attention prefill (FlashAttention-2/-3/-4; varlen with --seqs)")
    add_shape(p, varlen="--seqs")
    p.add_argument("--seq-kv", type=int, default=None, help="K/V length (default: --seq-q)")
    p.add_argument("--seqs", default=None,
                   help="varlen prefill: q_len:kv_len of each sequence (kv_len >= q_len; causal masks bottom-right "
                        "aligned per sequence), e.g. 128:128,512:1024; sets --batch, --seq-q, --seq-kv")
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
    seqs = parse_seqs(args.seqs) if args.seqs is not None else None
    if seqs is not None:
        varlen_args(args, "--seqs", {"batch": len(seqs), "seq_q": max(q for q, _ in seqs),
                                     "seq_kv": max(kv for _, kv in seqs)})
    elif args.batch is None or args.seq_q is None:
        raise UsageError("give --batch and --seq-q (or --seqs q_len:kv_len,... for the varlen kernel)")
    if args.seq_kv is None:
        args.seq_kv = args.seq_q
    shape = shape_from(args, args.causal)
    hw = get_profile(args.hw)
    cfg = default_config(shape, hw, AttnVariant.parse(args.variant) if args.variant else None)
    if args.stages is not None and cfg.variant not in STAGED:
        raise UsageError(f"--stages sets the K/V ring depth of {', '.join(v.value for v in STAGED)}; "
                         f"the {cfg.variant.value} template loads each K/V block once per iteration and takes no "
                         "--stages (drop it)")
    if args.block_n is not None:
        step = max(1, int(32 // shape.dtype.nbytes))
        if args.block_n <= 0 or args.block_n % step:
            raise UsageError(f"--block-n {args.block_n}: keys per K/V block must be a positive multiple of {step} "
                             f"(the K of one {shape.dtype.name.lower()} MMA of P @ V, itself a multiple of the "
                             f"MMA's N of 8); e.g. {step}, 64, 128")
    cfg = replace(cfg, bm=positive("block-m", args.block_m) if args.block_m is not None else cfg.bm,
                  bn=positive("block-n", args.block_n) if args.block_n is not None else cfg.bn,
                  stages=positive("stages", args.stages) if args.stages is not None else cfg.stages)
    if seqs is None and shape.causal and may_extrapolate(args):  # a long causal prompt: its CTA classes take a
        from torchsim.lowering.templates.attention_config import kv_span  # minute to write at 128k, not needed
        from torchsim.prediction.repeats import EXACT_EVENTS, causal_shape_family

        fam = causal_shape_family(shape, cfg, hw)
        if fam is not None and fam.events > EXACT_EVENTS:
            header = header_graph(fam, shape.io_bytes())
            classes = len({kv_span(shape, cfg.bm, cfg.bn, m)[:2] for m in range(fam.dims[0].full)})
            run_and_report(header, args, {"cta_classes": classes, "query_blocks": fam.attrs["query_blocks"]},
                           family=fam)
            return 0
    kg = attention(shape, hw, cfg, seqs=seqs)
    run_and_report(kg, args, {"cta_classes": len(kg.classes), "query_blocks": kg.attrs["query_blocks"]})
    return 0
