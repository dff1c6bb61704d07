"""`torchsim sweep MODEL|kernel KIND --vary FIELD=... --out sweep.parquet`: a design-space sweep over profile knobs.

    torchsim sweep llama3-8b --hw h100-sxm --vary dram_bytes_per_s=2e12:6e12:9 --vary sm_count=66,132 \\
        --phase decode --kv 4096 --out sweep.parquet --plot sweep.png
    torchsim sweep kernel gemm --m 4096 --n 4096 --k 4096 --hw a100-sxm --vary tensor_latency_cycles=32:128:4 ...

Parses the knobs (torchsim.sweeps.space), prints the size estimate, runs the points (torchsim.sweeps.execute) and writes
the rows (torchsim.sweeps.outputs).
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from torchsim.cli import COMMAND_HELP, UsageError, add_quant_option, int_in
from torchsim.lowering.templates.gemm_config import Epilogue, Pipeline


def register(sub: Any) -> None:
    p = sub.add_parser("sweep", help=COMMAND_HELP["sweep"],
                       description="Evaluate the cartesian product of --vary knobs (profile fields, in their "
                       "units) and write one Parquet row per point.")
    p.add_argument("target", help="model name (see `torchsim predict --list`), or `kernel`")
    p.add_argument("kind", nargs="?", default=None, help="with `kernel`: the kernel kind (gemm, rmsnorm, ...)")
    p.add_argument("--hw", default="h100-sxm", help="base hardware profile or what-if .toml (default h100-sxm)")
    p.add_argument("--vary", action="append", default=[], metavar="FIELD=A:B:N|V1,V2",
                   help="a profile field and its values: N points from A to B, or a list (repeatable)")
    # the model-only and kernel-only options default to None, so that one given to the other target is refused
    p.add_argument("--phase", default=None, choices=("decode", "prefill"), help="model step (default decode)")
    p.add_argument("--kv", type=int_in(1, 1 << 24), default=None,
                   help="decode: KV length before the step (default 4096)")
    p.add_argument("--prompt", type=int_in(1, 1 << 20), default=None, help="prefill: prompt tokens (default 2048)")
    p.add_argument("--batch", type=int_in(1, 1 << 16), default=None,
                   help="sequences (model) or GEMM batch (kernel gemm); default 1")
    p.add_argument("--preset", default=None, choices=("serving", "eager"), help="model: fusion preset (default "
                   "serving)")
    p.add_argument("--m", type=int_in(1, MAX_DIM), default=None, help="kernel gemm: M")
    p.add_argument("--n", type=int_in(1, MAX_DIM), default=None, help="kernel gemm: N")
    p.add_argument("--k", type=int_in(1, MAX_DIM), default=None, help="kernel gemm: K")
    p.add_argument("--epilogue", default=None, choices=[e.value for e in Epilogue],
                   help="kernel gemm: epilogue (default none)")
    p.add_argument("--variant", default="", choices=["", *(v.value for v in Pipeline)],
                   help="kernel gemm: pipeline variant (default: the architecture's usual one)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="kernel: a KernelCall parameter (e.g. --param rows=1 --param hidden=4096)")
    p.add_argument("--dtype", default=None, help="kernel: bf16 (default), fp16, fp8, ...")
    add_quant_option(p, "model: the decoder-layer GEMMs in a quantised format (as `predict --quant`); kernel gemm / "
                     "grouped_gemm: B in that format (the MMA dtype follows it)")
    p.add_argument("--out", required=True, help="Parquet file to write (one row per point)")
    p.add_argument("--plot", default=None, help="also write a PNG of the total against the knobs")
    p.add_argument("--force-format", action="store_true", help="write even when a path's extension names another "
                   "format")
    p.add_argument("--jobs", type=int_in(0, 256), default=0, help="worker processes; 0 (the default): one per core")
    p.add_argument("--executor", default="local", choices=("local", "ray"), help="local process pool, or Ray tasks")
    p.add_argument("--ray-address", default=None, help="Ray cluster HOST:PORT (default: start a local Ray)")
    p.add_argument("--yes", action="store_true", help="run even when the estimate exceeds an hour")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


# the same bounds as `torchsim predict` / `torchsim kernel` (cli.kernel.MAX_DIM: a dimension above it is a typo, and
# building its tile graph would exhaust memory or run for hours before the sweep's estimate could refuse it)
MAX_DIM = 1 << 24
# output tiles of a swept GEMM: building a graph runs at roughly 3 s per 10^5 tiles here (batch 10^5 of 128^3), so
# 2^21 tiles is about a minute before the sweep's own estimate can say how long the points take
MAX_GEMM_TILES = 1 << 21
# options that apply to one target only: given to the other they would be silently ignored (`sweep kernel gemm
# --phase prefill` swept no prefill at all); the model's with the defaults they take when not given
MODEL_ONLY: dict[str, Any] = {"phase": "decode", "kv": None, "prompt": None, "preset": "serving"}
KERNEL_ONLY = ("m", "n", "k", "epilogue", "variant", "param", "dtype")
# the options of `sweep kernel gemm` alone (each is a GEMM parameter; another kind's would be silently unused)
GEMM_ONLY = ("m", "n", "k", "epilogue", "variant", "batch")
# each kind's KernelCall parameters (torchsim.lowering.kernel_call.KernelKind), for the messages
KIND_PARAMS = {"grouped_gemm": "tokens_per_expert, n, k, epilogue",
               "attention_prefill": "batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, causal",
               "attention_decode": "batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, page_size, num_splits",
               "mla_decode": "batch, heads_q, seq_q, seq_kv, head_dim, head_dim_v",
               "rmsnorm": "rows, hidden, centered, bias", "add_rmsnorm": "rows, hidden",
               "rope": "tokens, heads_q, heads_kv, head_dim",
               "silu_mul": "rows, hidden", "elementwise": "numel, inputs, outputs, op", "softmax": "rows, cols",
               "embedding": "tokens, hidden, vocab", "router_topk": "tokens, experts, top_k", "argmax": "rows, vocab",
               "reduce": "numel_in, numel_out"}
# KernelCall parameters that are switches: true/false (or 1/0), not any truthy value (`centered=yes`, `bias=2`)
BOOL_PARAMS = frozenset({"centered", "bias", "causal", "shared_b", "tune"})
# KernelCall parameters that count things (torchsim.lowering.kernel_call.KernelKind lists each kind's): whole
# numbers in [1, MAX_DIM] (`--param rows=1.5` or `rows=-1` would otherwise be simulated as given)
COUNT_PARAMS = frozenset({"m", "n", "k", "batch", "rows", "hidden", "cols", "tokens", "heads_q", "heads_kv", "seq_q",
                          "seq_kv", "head_dim", "head_dim_v", "numel", "numel_in", "numel_out", "vocab", "experts",
                          "top_k", "page_size", "num_splits"})


def _value(text: str) -> Any:
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def _param(item: str) -> tuple[str, Any]:
    """`--param KEY=VALUE` -> (key, value), the value range-checked when the key counts things."""
    key, sep, val = item.partition("=")
    key, value = key.strip(), _value(val.strip())
    if not sep or not key:
        raise UsageError(f"--param {item!r}: expected KEY=VALUE")
    if isinstance(value, float) and not math.isfinite(value):
        raise UsageError(f"--param {item!r}: {val.strip()!r} is not a finite number")
    if key in COUNT_PARAMS:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"--param {item!r}: {key} counts things, a whole number >= 1, got {val.strip()!r}")
        if value > MAX_DIM:
            raise UsageError(f"--param {item!r}: {value} is above torchsim's limit of {MAX_DIM} for one dimension")
    if key in BOOL_PARAMS:
        if value not in (True, False) or isinstance(value, float):  # True/False, or the ints 1/0
            raise UsageError(f"--param {item!r}: {key} is a switch; valid: true, false, 1, 0")
        value = bool(value)
    return key, value


def _kernel_call(args: argparse.Namespace) -> Any:
    from torchsim.graph import DType
    from torchsim.lowering.kernel_call import KernelCall, KernelKind

    if not args.kind:
        raise UsageError("`torchsim sweep kernel` needs a kind, e.g. `torchsim sweep kernel gemm --m ...`")
    try:
        kind = KernelKind(args.kind)
    except ValueError:
        valid = ", ".join(k.value for k in KernelKind)
        raise UsageError(f"unknown kernel kind {args.kind!r}; valid: {valid}") from None
    if kind is KernelKind.COLLECTIVE:
        raise UsageError("sweep kernel collective: a collective has no tile-graph template to sweep; price it with "
                         "`torchsim collective` (its links are a system's, e.g. --system dgx-h100)")
    if args.quant and args.quant != "none" and kind not in (KernelKind.GEMM, KernelKind.GROUPED_GEMM):
        raise UsageError(f"--quant applies to gemm and grouped_gemm kernels, not {kind.value}")
    if kind is not KernelKind.GEMM:
        given = [f"--{o}" for o in GEMM_ONLY if getattr(args, o) not in (None, "")]
        if given:
            raise UsageError(f"{', '.join(given)} {'is an option' if len(given) == 1 else 'are options'} of `sweep "
                             f"kernel gemm`; {kind.value} takes its parameters as --param KEY=VALUE "
                             f"({KIND_PARAMS.get(kind.value, 'see torchsim.lowering.kernel_call.KernelKind')})")
    params: dict[str, Any] = {}
    if kind is KernelKind.GEMM:
        for dim in ("m", "n", "k"):
            v = getattr(args, dim)
            if v is None or v <= 0:
                raise UsageError(f"sweep kernel gemm needs --{dim} > 0, got {v}")
            params[dim] = v
        batch = args.batch or 1
        tiles = -(-args.m // 128) * -(-args.n // 128) * batch
        if tiles > MAX_GEMM_TILES:  # the size estimate builds each kernel's tile graph: refuse before that
            raise UsageError(f"a {batch}x{args.m}x{args.n}x{args.k} GEMM has {tiles:,} 128x128 output tiles, "
                             f"above the {MAX_GEMM_TILES:,} a sweep builds (building its tile graph alone would take "
                             f"minutes per point); sweep a smaller GEMM")
        params["epilogue"] = args.epilogue or "none"
        if batch != 1:
            params["batch"] = batch
        if args.variant:
            params["variant"] = args.variant
    given_params: dict[str, str] = {}
    for item in args.param:
        key, value = _param(item)
        if key in given_params:
            raise UsageError(f"--param {given_params[key]!r} and --param {item!r} both set {key}; give it once")
        if kind is KernelKind.GEMM and key in GEMM_ONLY:
            raise UsageError(f"--param {item!r}: {key} is the --{key} option of `sweep kernel gemm`; give it once, as "
                             f"--{key}")
        given_params[key] = item
        params[key] = value
    if kind is KernelKind.ELEMENTWISE and "op" in params:  # as `kernel elementwise --op`: a typo is not priced as add
        from torchsim.lowering.templates.elementwise import OP_COST, known_op

        if not known_op(str(params["op"])):
            raise UsageError(f"--param op={params['op']}: not an elementwise op torchsim prices; known: "
                             f"{', '.join(sorted(OP_COST))} (and copies: copy, cat, clone, ...)")
    if not params:
        raise UsageError(f"sweep kernel {kind.value} needs its parameters (--param KEY=VALUE)")
    dtype = DType.parse(args.dtype or "bf16")
    if args.quant and args.quant != "none":
        if kind not in (KernelKind.GEMM, KernelKind.GROUPED_GEMM):
            raise UsageError(f"--quant applies to gemm and grouped_gemm kernels, not {kind.value}")
        from torchsim.lowering.quant import parse

        params["quant"] = args.quant
        dtype = parse(args.quant).mma_dtype(dtype)
    call = KernelCall.make(kind, dtype, name=f"sweep.{kind.value}", **params)
    _check_params_used(call, [_param(item)[0] for item in args.param], getattr(args, "hw", "h100-sxm"))
    return call


def _check_params_used(call: Any, given: list[str], hw_name: str) -> None:
    """A --param no template reads would be swept without effect (a typo: `--param hiden=4096`): name it."""
    if not given:
        return
    from torchsim.hwmodels import get_profile
    from torchsim.lowering.kernel_call import params_read
    from torchsim.lowering.templates import build_kernels

    missing = ""
    with params_read() as seen:
        try:
            build_kernels(call, get_profile(hw_name))
        except KeyError as exc:  # a parameter the kernel needs is not given (perhaps the misspelt one)
            missing = f" ({exc.args[0] if exc.args else exc})"
        except (ValueError, TypeError):
            return  # the call itself is bad: the sweep's own build reports it, naming the parameter
    unread = sorted(set(given) - seen)
    if unread:
        raise UsageError(f"--param {', '.join(unread)}: not a parameter the {call.kind.value} kernel reads on "
                         f"{hw_name}; it reads {', '.join(sorted(seen)) or 'none'}{missing}")


def _check_options(args: argparse.Namespace) -> None:
    """Before any work (the base profile, the capture, the estimate): the output path is a name, --ray-address has
    its executor, and no option of the other target is given (each would be silently ignored)."""
    for opt in ("out", "plot"):
        value = getattr(args, opt)
        if value is not None and not value.strip():
            raise UsageError(f"--{opt} {value!r}: an empty path; give a file name, e.g. --{opt} "
                             f"sweep.{'parquet' if opt == 'out' else 'png'}")
    if args.ray_address is not None and args.executor != "ray":
        raise UsageError(f"--ray-address {args.ray_address!r} needs --executor ray (the default local executor runs "
                         "on this machine's process pool)")
    kernel = args.target == "kernel"
    given = [f"--{k}" for k in (MODEL_ONLY if kernel else KERNEL_ONLY) if getattr(args, k) not in (None, "", [])]
    if given:
        what = "a model step (`torchsim sweep MODEL`)" if kernel else "one kernel (`torchsim sweep kernel KIND`)"
        raise UsageError(f"{', '.join(given)} applies only to sweeping {what}, not to "
                         f"{'a kernel' if kernel else 'the model ' + repr(args.target)}; leave it out")


def run(args: argparse.Namespace) -> int:
    from torchsim.hwmodels import get_profile
    from torchsim.sweeps.execute import ExecutorError
    from torchsim.sweeps.outputs import plot, write_parquet
    from torchsim.sweeps.space import kernel_workload, metadata, model_workload, parse_vary, run_sweep

    if not args.vary:
        raise UsageError("give at least one --vary FIELD=START:STOP:COUNT or FIELD=V1,V2,...")
    if args.jobs < 0:
        raise UsageError(f"--jobs must be >= 0, got {args.jobs}")
    _check_options(args)
    base = get_profile(args.hw)
    knobs = [parse_vary(v, base) for v in args.vary]
    if args.target == "kernel":
        work = kernel_workload(_kernel_call(args))
    else:
        if args.kind:
            raise UsageError(f"unexpected {args.kind!r} after the model name {args.target!r}")
        opts = {k: d if getattr(args, k) is None else getattr(args, k) for k, d in MODEL_ONLY.items()}
        work = model_workload(args.target, batch=args.batch or 1, quant=args.quant, base=base, **opts)
    try:
        rows = run_sweep(base, knobs, work, executor=args.executor, jobs=args.jobs, ray_address=args.ray_address,
                         yes=args.yes, progress=not args.no_progress and sys.stderr.isatty(),
                         log=lambda s: print(s, file=sys.stderr))
    except ExecutorError as exc:
        raise UsageError(str(exc)) from None
    n = write_parquet(rows, args.out, metadata(base, knobs, work))
    print(f"wrote {args.out}: {len(rows)} rows, {n} bytes")
    if args.plot:
        title = f"{work.label} {work.phase} on {base.name}".strip()
        plot(rows, knobs, args.plot, title)
        print(f"wrote {args.plot}")
    col = "total_us" if "total_us" in rows[0] else "kernels_us"
    best = min(rows, key=lambda r: r[col])
    worst = max(rows, key=lambda r: r[col])
    knob_text = lambda r: ", ".join(f"{k.field}={r[k.field]:g}" for k in knobs)  # noqa: E731
    print(f"fastest {best[col]:.1f} us at {knob_text(best)}; slowest {worst[col]:.1f} us at {knob_text(worst)}")
    return 0
