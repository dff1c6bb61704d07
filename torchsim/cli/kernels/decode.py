"""`torchsim kernel decode ...` (Flash-Decoding: split-KV kernel + combine) and `torchsim kernel mla ...`."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from typing import Any

from torchsim.cli import UsageError, int_in
from torchsim.cli.kernel import add_common, emit_outputs, positive, run_and_report
from torchsim.cli.kernels.attention import add_shape, parse_kv_lens, shape_from, varlen_args
from torchsim.graph import DType, KernelGraph
from torchsim.hwmodels import get_profile
from torchsim.lowering.templates.attention_config import AttnVariant
from torchsim.lowering.templates.decode import MAX_SPLITS, flash_decode, flash_mla
from torchsim.sim import KernelResult


def register(sub: Any) -> None:
    p = sub.add_parser("decode", help="decoding attention: Flash-Decoding split-KV kernel + combine kernel")
    add_shape(p, seq_q_default=1, varlen="--kv-lens")
    p.add_argument("--seq-kv", type=int, default=None, help="K/V cache length (required unless --kv-lens)")
    p.add_argument("--kv-lens", default=None,
                   help="varlen decode: the K/V length of each sequence, e.g. 100,2000,512 (FlashAttention's "
                        "seqused_k over a paged cache); sets --batch and --seq-kv")
    p.add_argument("--causal", action="store_true", help="causal mask among the new query tokens")
    p.add_argument("--page-size", type=int_in(0, 1 << 16), default=0,
                   help="paged K/V: tokens per page (0, the default: contiguous)")
    p.add_argument("--splits", type=int, default=None, help="K/V splits (default: FlashAttention's heuristic)")
    p.add_argument("--variant", default=None, choices=[AttnVariant.FA2.value, AttnVariant.FA3.value],
                   help="split kernel structure (default: fa2 on sm80, fa3 on sm90+)")
    add_common(p)
    p.set_defaults(func=_run_decode)
    m = sub.add_parser("mla", help="FlashMLA decoding (latent K/V, head dims 576/512) + combine kernel")
    m.add_argument("--batch", type=int, required=True, help="batch size")
    m.add_argument("--heads-q", type=int, default=128, help="query heads (default 128)")
    m.add_argument("--seq-q", type=int, default=1, help="query tokens per sequence (default 1)")
    m.add_argument("--seq-kv", type=int, required=True, help="K/V cache length")
    m.add_argument("--head-dim", type=int, default=576, help="Q/K head dim (576 = 512 latent + 64 RoPE)")
    m.add_argument("--head-dim-v", type=int, default=512, help="V head dim (512)")
    m.add_argument("--page-size", type=int_in(1, 1 << 16), default=64, help="tokens per K/V page (default 64)")
    m.add_argument("--splits", type=int, default=None, help="K/V splits (default: heuristic)")
    add_common(m)
    m.set_defaults(func=_run_mla)


def _run_decode(args: argparse.Namespace) -> int:
    kv_lens = parse_kv_lens(args.kv_lens) if args.kv_lens is not None else None
    if kv_lens is not None:
        varlen_args(args, "--kv-lens", {"batch": len(kv_lens), "seq_kv": max(kv_lens)})
    elif args.batch is None or args.seq_kv is None:
        raise UsageError("give --batch and --seq-kv (or --kv-lens 100,2000,... for sequences of different lengths)")
    shape = shape_from(args, args.causal)
    splits = _splits(args)
    kernels = flash_decode(shape, get_profile(args.hw), splits, args.page_size,
                           AttnVariant.parse(args.variant) if args.variant else None, kv_lens=kv_lens)
    _report_launches(kernels, args)
    return 0


def _run_mla(args: argparse.Namespace) -> int:
    for name in ("batch", "heads_q", "seq_q", "seq_kv"):
        positive(name.replace("_", "-"), getattr(args, name))
    splits = _splits(args)
    kernels = flash_mla(args.batch, args.heads_q, args.seq_q, args.seq_kv, get_profile(args.hw), args.head_dim,
                        args.head_dim_v, DType.parse(args.dtype), splits, args.page_size)
    _report_launches(kernels, args)
    return 0


def _splits(args: argparse.Namespace) -> int | None:
    """--splits as FlashAttention's num_splits takes it: 1..128. A count the K/V blocks cannot fill (24 blocks
    over 16 splits are chunks of 2, so 12 splits get work) runs as FlashAttention runs it: the splits without a
    block exit at once, which the report says (`splits` is the count with work)."""
    if args.splits is None:
        return None
    if not 1 <= args.splits <= MAX_SPLITS:
        raise UsageError(f"--splits must be between 1 and {MAX_SPLITS} (FlashAttention's num_splits), got "
                         f"{args.splits}")
    return int(args.splits)


def _report_launches(kernels: list[KernelGraph], args: argparse.Namespace) -> None:
    """One report per launch and the total; with --json, one object: the first launch's report with the
    others under `launches` and `total_time_us` (kernel times only, no launch gaps). --parquet/--perfetto/
    --plot cover the launches run back to back."""
    done: list[tuple[KernelGraph, KernelResult]] = []
    reports = []
    for kg in kernels:
        extra = {"splits": kg.attrs.get("splits"), "splits_requested": args.splits}
        ran = kg.attrs.get("splits")
        if kg is kernels[0] and args.splits is not None and isinstance(ran, int) and ran != args.splits:
            print(f"note: --splits {args.splits}: the K/V blocks fill {ran} splits; the other {args.splits - ran} "
                  f"have no block and exit at once (as the library's empty splits do)",
                  file=sys.stderr if args.json else sys.stdout)
        if args.json:
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                res = run_and_report(kg, args, extra, export=False)
            reports.append(json.loads(buf.getvalue()))
        else:
            res = run_and_report(kg, args, extra, export=False)
        done.append((kg, res))
    if args.json:
        print(json.dumps({**reports[0], "launches": reports, "total_time_us": sum(r["time_us"] for r in reports)},
                         default=str))
    elif len(done) > 1:
        total = sum(res.time_us for _, res in done)
        print(f"total         {total:10.2f} us over {len(done)} launches (kernel time only)")
    emit_outputs(args, done)
