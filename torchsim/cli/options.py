"""Command-line options more than one command shares (the only place besides the commands that declares them)."""

from __future__ import annotations

import argparse
from typing import Any

from torchsim.cli import UsageError, int_in


def add_precision_options(p: argparse.ArgumentParser, *, kv_help: str) -> None:
    """--dtype, --kv-cache and --quant (predict, serve)."""
    from torchsim.cli import add_quant_option

    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp8"),
                   help="checkpoint precision: fp8 runs the decoder-layer GEMMs in FP8 E4M3 (default bf16)")
    p.add_argument("--kv-cache", default=None, choices=("bf16", "fp16", "fp8"),
                   help=f"KV-cache dtype (default: the model dtype; {kv_help})")
    add_quant_option(p)


def add_parallel_options(p: argparse.ArgumentParser, *, tp_help: str) -> None:
    """--tp, --sp, --ep, --pp, --micro-batches and --allow-oversubscribe (predict, compare)."""
    p.add_argument("--tp", type=int_in(1, 64), default=1, help=tp_help)
    p.add_argument("--sp", action="store_true",
                   help="sequence parallelism with --tp: reduce-scatter + all-gather around the norms instead of "
                        "all-reduce (Megatron-LM)")
    p.add_argument("--ep", type=int_in(1, 64), default=1,
                   help="expert-parallel GPUs: MoE experts split whole, over the --tp ranks (ep = tp) or with "
                        "data-parallel attention (no --tp; default 1: each expert's columns split)")
    p.add_argument("--pp", type=int_in(1, 64), default=1,
                   help="pipeline stages (contiguous layers, each on --tp GPUs; default 1)")
    p.add_argument("--micro-batches", type=int_in(1, 1 << 16), default=None,
                   help="micro-batches per step through the pipeline stages (default min(pp, batch))")
    p.add_argument("--allow-oversubscribe", action="store_true",
                   help="predict a scenario whose weights + KV cache + activations exceed one GPU's memory (a warning "
                        "instead of an error)")


def system_device(args: argparse.Namespace) -> Any:
    """`--hw` naming a multi-GPU system (dgx-h100, ...): one of its GPUs, for a run over `--tp` of them (predict,
    serve); None when --hw names one device."""
    from torchsim.hwmodels.systems import get_system, is_system

    if not is_system(args.hw):
        return None
    system = get_system(args.hw.strip())  # a built-in system or a what-if file based on one
    others = [v for v in (getattr(args, "pp", 1), getattr(args, "ep", 1)) if isinstance(v, int)]  # serve: no pp/ep
    if args.tp == 1 and all(v == 1 for v in others):
        tensix = type(system).__name__ == "TensixSystem"  # meshes model tensor parallelism (and a 2D mesh's EP)
        most = getattr(system, "ccl_ranks", system.devices)
        extra = (" (with --ep for an MoE model's experts over its rows)" if getattr(system, "two_d", False) else
                 "" if tensix else " (or --pp / --ep)")
        raise UsageError(f"--hw {args.hw} is a system of {system.devices} {'chips' if tensix else 'GPUs'}: pass --tp N "
                         f"(2..{most}){extra} to split the model over N of them, or --hw {system.device.name} for "
                         "one")
    if getattr(args, "grid", None) is not None:
        raise UsageError("--grid is a Tenstorrent option; --hw names a GPU system")
    return system.device

