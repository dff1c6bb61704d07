"""`torchsim kernel silu-mul|elementwise|softmax|rope|embedding|argmax|router-topk|reduce ...`.

Front ends of the memory-bound templates (lowering.templates.elementwise, norms, reductions); each prints the
common report plus the effective bandwidth (compulsory bytes / time) against the profile's HBM figures.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from torchsim.cli import UsageError
from torchsim.cli.kernel import add_common, emit_outputs, positive, report, simulate_for
from torchsim.graph import DType, KernelGraph
from torchsim.hwmodels import get_profile
from torchsim.lowering.templates.elementwise import OP_COST, elementwise, embedding, known_op, rope, silu_mul
from torchsim.lowering.templates.norms import softmax
from torchsim.lowering.templates.reductions import argmax, reduce, router_topk

Build = Callable[[argparse.Namespace, DType, Any], KernelGraph]

# name -> (help, [(option, help)], builder); every option is a positive integer unless listed in NON_NEGATIVE
KINDS: dict[str, tuple[str, list[tuple[str, str]], Build]] = {
    "silu-mul": ("y = silu(x[:, :H]) * x[:, H:] (vLLM act_and_mul)", [("rows", "tokens"), ("hidden", "output width H")],
                 lambda a, d, hw: silu_mul(a.rows, a.hidden, d, hw)),
    "elementwise": ("PyTorch vectorised elementwise kernel (residual add, casts, copies)",
                    [("numel", "elements per tensor"), ("inputs", "input tensors (default 2)"),
                     ("outputs", "output tensors (default 1)")],
                    lambda a, d, hw: elementwise(a.numel, a.inputs, a.outputs, _op(a.op), d, hw)),
    "softmax": ("softmax over the last dimension", [("rows", "rows"), ("cols", "row length")],
                lambda a, d, hw: softmax(a.rows, a.cols, d, hw)),
    "rope": ("rotary embedding in place on Q and K (vLLM)",
             [("tokens", "tokens"), ("heads-q", "query heads"), ("heads-kv", "key heads"), ("head-dim", "head dim")],
             lambda a, d, hw: rope(a.tokens, a.heads_q, a.heads_kv, a.head_dim, d, hw)),
    "embedding": ("embedding gather (index_select)",
                  [("tokens", "tokens"), ("hidden", "hidden size"), ("vocab", "vocabulary rows")],
                  lambda a, d, hw: embedding(a.tokens, a.hidden, a.vocab, d, hw)),
    "argmax": ("argmax over the vocabulary (greedy sampling)", [("rows", "rows (batch)"), ("vocab", "vocabulary")],
               lambda a, d, hw: argmax(a.rows, a.vocab, d, hw)),
    "router-topk": ("MoE router softmax + top-k (vLLM topk_softmax)",
                    [("tokens", "tokens"), ("experts", "experts"), ("top-k", "experts per token")],
                    lambda a, d, hw: router_topk(a.tokens, a.experts, a.top_k, d, hw)),
    "reduce": ("sum-like reduction", [("numel-in", "input elements"), ("numel-out", "output elements")],
               lambda a, d, hw: reduce(a.numel_in, a.numel_out, d, hw)),
}
DEFAULTS = {"inputs": 2, "outputs": 1}
NON_NEGATIVE = ("inputs", "outputs", "heads-kv")
# element counts of a whole tensor, not one dimension: 2**31 elements is 4 GiB in bf16, above any one
# tensor of a model on one device; the other options are dimensions (torchsim.cli.kernel.MAX_DIM)
NUMEL = ("numel", "numel-in", "numel-out")
MAX_NUMEL = 1 << 31
MAX_TENSORS = 16  # --inputs/--outputs of one elementwise kernel (PyTorch's TensorIterator takes a few)


# --dtype of each kernel on a GPU: the float types PyTorch/vLLM kernels compute in; a gather or an elementwise copy
# also moves the byte-sized FP8 and integer types. Tenstorrent block floats, tf32 (a tensor-core math mode; its
# tensors are fp32) and the packed 4-bit types are not element types of these kernels.
FLOAT_DTYPES = (DType.FP32, DType.BF16, DType.FP16)
DATA_DTYPES = (*FLOAT_DTYPES, DType.FP8_E4M3, DType.FP8_E5M2, DType.INT8, DType.INT32, DType.INT64)
KIND_DTYPES: dict[str, tuple[DType, ...]] = {"elementwise": DATA_DTYPES, "embedding": DATA_DTYPES}


def check_dtype(kind: str, dtype: DType, hw: Any, valid: tuple[DType, ...] | None = None) -> DType:
    """`dtype` if kernel `kind` takes it, else a usage error naming the valid ones."""
    ok: tuple[DType, ...] = valid or KIND_DTYPES.get(kind) or FLOAT_DTYPES
    if dtype not in ok:
        raise UsageError(f"--dtype {dtype.name.lower()} is not an element type of the {kind} kernel on {hw.name}; "
                         f"valid: {', '.join(d.name.lower() for d in ok)}")
    return dtype


def register(sub: Any) -> None:
    for name, (text, options, build) in KINDS.items():
        p = sub.add_parser(name, help=text)
        for opt, helptext in options:
            p.add_argument(f"--{opt}", type=int, required=opt not in DEFAULTS, default=DEFAULTS.get(opt),
                           help=helptext)
        if name == "elementwise":
            p.add_argument("--op", default="add", help="add, mul, copy, silu, exp, gelu, ... (sets the math per "
                           "element)")
        add_common(p)
        p.set_defaults(func=_runner(name, options, build))


def _runner(kind: str, options: list[tuple[str, str]], build: Build) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        for opt, _ in options:
            _check(opt, getattr(args, opt.replace("-", "_")))
        _check_relations(kind, args)
        hw = get_profile(args.hw)
        run_memory_kernel(build(args, check_dtype(kind, DType.parse(args.dtype), hw), hw), args)
        return 0
    return run


def _check_relations(kind: str, args: argparse.Namespace) -> None:
    """What one option implies for another: GQA heads (as `kernel attention`), a reduction's output count."""
    if kind == "rope" and args.heads_kv:
        if args.heads_kv > args.heads_q or args.heads_q % args.heads_kv:
            raise UsageError(f"--heads-q {args.heads_q} is not a multiple of --heads-kv {args.heads_kv} (GQA/MQA: "
                             f"each K head serves heads_q / heads_kv query heads, so heads_kv <= heads_q and divides "
                             f"it); valid --heads-kv: 0 (no K to rotate) or a divisor of {args.heads_q}")
    if kind == "reduce" and (args.numel_out > args.numel_in or args.numel_in % args.numel_out):
        raise UsageError(f"--numel-out {args.numel_out} does not divide --numel-in {args.numel_in}: a reduction's "
                         f"output elements each sum an equal share of its input; valid: a divisor of "
                         f"{args.numel_in} (1 for a full reduction)")


def _check(opt: str, value: int) -> None:
    """Each option's range: a count of tensors, heads that may be 0 (no K to rotate), elements, or a dimension."""
    if opt in ("inputs", "outputs"):
        if not 0 <= value <= MAX_TENSORS:
            raise UsageError(f"--{opt} must be between 0 and {MAX_TENSORS} tensors, got {value}")
    elif opt in NUMEL:
        if not 1 <= value <= MAX_NUMEL:
            raise UsageError(f"--{opt} must be between 1 and {MAX_NUMEL:,} elements (2^31), got {value}")
    elif opt in NON_NEGATIVE and value == 0:
        return
    else:
        positive(opt, value)


def run_memory_kernel(kg: KernelGraph, args: argparse.Namespace) -> None:
    """Simulate and report, adding the effective bandwidth (the kernel's compulsory bytes over its time)."""
    hw = get_profile(args.hw)
    res = simulate_for(kg, args)
    bw = _bandwidth(kg, hw, res.time_s)
    report(res, kg, args, {**bw, "launch": {"rows_per_cta": kg.attrs.get("rows_per_cta"),
                                             "threads": kg.attrs.get("threads")}})
    if not args.json:
        print(f"  effective   {bw['effective_gb_per_s']:10.1f} GB/s   ({bw['pct_of_hbm_peak']:.1f}% of HBM peak "
              f"{float(hw.dram_peak_bytes_per_s.value) / 1e9:.0f} GB/s, {bw['pct_of_sustained']:.1f}% of sustained); "
              f"{kg.attrs.get('rows_per_cta', kg.attrs.get('elements_per_cta'))} rows per CTA of "
              f"{kg.attrs.get('threads')} threads")
    emit_outputs(args, [(kg, res)])


def _bandwidth(kg: KernelGraph, hw: Any, time_s: float) -> dict[str, float]:
    eff = kg.dram_bytes / time_s
    return {"effective_gb_per_s": eff / 1e9, "pct_of_hbm_peak": 100 * eff / float(hw.dram_peak_bytes_per_s.value),
            "pct_of_sustained": 100 * eff / hw.dram_bytes_per_s_value}


def _op(op: str) -> str:
    if not known_op(op):
        raise UsageError(f"--op {op!r} is not an elementwise op torchsim prices; known: {', '.join(sorted(OP_COST))} "
                         f"(and copies: copy, cat, clone, ...)")
    return op
