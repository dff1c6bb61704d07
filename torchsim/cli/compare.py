"""`torchsim compare MODEL --hw a100-sxm,h100-sxm,h200,b200 ...`: one prediction per hardware profile, side by side.

Prints TTFT, TPOT, tokens/s, the top kernels and their share, and the bound per profile; `--perfetto` writes one
trace with a process per profile aligned at zero, `--parquet` one kernels table, `--plot` a stacked-bar PNG of
time per kernel kind per profile. `export_predictions` is also what `torchsim predict` uses for its outputs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from typing import Any

from torchsim.cli import COMMAND_HELP, UsageError, add_quant_option, approximated, int_in
from torchsim.cli.options import add_parallel_options
from torchsim.cli.outputs import add_output_options, write_prediction_outputs
from torchsim.exports.adapt import kernel_detail
from torchsim.exports.from_prediction import prediction_records
from torchsim.exports.records import KernelDetail, KernelRecord, PredictionRecords
from torchsim.exports.report import comparison_table, summarize
from torchsim.models import DEFAULT_MODEL

DEFAULT_HW = "a100-sxm,h100-sxm,h200,b200"


def register(sub: Any) -> None:
    p = sub.add_parser("compare", help=COMMAND_HELP["compare"],
                       description="Side-by-side TTFT, TPOT, tokens/s, top kernels and bound per hardware profile.")
    p.add_argument("model", nargs="?", default=DEFAULT_MODEL, help=f"model name (default {DEFAULT_MODEL})")
    p.add_argument("--hw", default=DEFAULT_HW,
                   help=f"comma-separated hardware profiles, each optionally NAME:tpN for N of its GPUs "
                        f"(h100-sxm:tp4,h200:tp2,b200; default {DEFAULT_HW})")
    p.add_argument("--prompt", type=int_in(1, 1 << 20), default=2048, help="prompt tokens per sequence (default 2048)")
    p.add_argument("--decode", type=int_in(0, 1 << 20), default=128, help="decode steps (default 128)")
    p.add_argument("--batch", type=int_in(1, 1 << 16), default=1, help="sequences per step (default 1)")
    p.add_argument("--preset", default="serving", choices=("serving", "eager"), help="kernel fusion preset")
    p.add_argument("--routing", default=None, help="MoE routing: balanced, skewed, or a JSON/Parquet file")
    add_parallel_options(p, tp_help="tensor-parallel GPUs on each profile's 8-GPU system (default 1; an --hw item "
                                    "NAME:tpN sets its own)")
    p.add_argument("--fallback", default=None, choices=("roofline",),
                   help="estimate ops without a lowering by a roofline instead of failing")
    p.add_argument("--approximate", action="store_true",
                   help="accept config.json fields torchsim cannot model; each approximation is listed")
    p.add_argument("--kv-cache", default=None, choices=("bf16", "fp16", "fp8"),
                   help="KV-cache dtype (default: the model dtype)")
    add_quant_option(p)
    p.add_argument("--top", type=int_in(0), default=5, help="top kernels listed per profile (default 5)")
    p.add_argument("--workers", type=int_in(1, 256), default=None, help="processes simulating kernels (default: auto)")
    p.add_argument("--json", action="store_true", help="print one JSON object per profile")
    add_output_options(p, detail=True)
    p.set_defaults(func=run)


def parse_hw_tp_list(text: str, default_tp: int) -> list[tuple[Any, int]]:
    """(profile, tensor-parallel GPUs) for each item of `--hw`: a profile name (unknown ones raise KeyError
    listing the known), or NAME:tpN for N of its GPUs
    (h100-sxm:tp4,h200:tp2,b200 sets systems side by side); an item without :tpN takes `default_tp`."""
    from torchsim.hwmodels import get_profile

    items = [n.strip() for n in text.split(",")]
    if not any(items):
        raise UsageError(f"--hw needs at least one profile name, got {text!r}")
    if not all(items):
        raise UsageError(f"--hw {text!r} has an empty item; separate profile names with single commas")
    if len(set(items)) != len(items):
        raise UsageError(f"--hw names a profile twice: {text!r}")
    out = []
    for item in items:
        name, _, spec = item.partition(":")
        tp = default_tp
        if spec:
            digits = spec.strip().lower().removeprefix("tp")
            if not spec.strip().lower().startswith("tp") or not digits.isdigit() or int(digits) < 1:
                raise UsageError(f"--hw item {item!r}: write NAME:tpN with N >= 1 (e.g. h100-sxm:tp4)")
            tp = int(digits)
        out.append((get_profile(name.strip()), tp))
    return out


def detail_for(profiles: Sequence[Any]) -> Any:
    """A callback re-simulating one predicted kernel with node recording, for the `--detail N` views.

    Only kernels that were simulated whole qualify (not roofline rows, not K-extrapolated giants).
    """
    from torchsim.graph import DType
    from torchsim.lowering.kernel_call import KernelCall, KernelKind
    from torchsim.lowering.templates import build_kernel
    from torchsim.sim import simulate

    by_name = {p.name: p for p in profiles}

    def run(pred: PredictionRecords, k: KernelRecord) -> KernelDetail:
        hw = by_name[pred.run.hardware]
        call = KernelCall.make(KernelKind(k.kernel_kind), DType.parse(k.dtype), name=k.kernel_name, phase=k.phase,
                               layer=k.layer, module_path=k.module_path, source=k.source_line, **dict(k.params))
        kg = build_kernel(call, hw)
        return kernel_detail(simulate(kg, hw, record=True), kg, pred.run, k)

    return run


def simulated_whole(k: KernelRecord) -> bool:
    """Whether a kernel can have a detail view: simulated whole (not a roofline row, not K-extrapolated)."""
    return not k.roofline_fallback and k.method in (None, "simulated", "exact") and k.simulated_step == k.decode_step


def export_predictions(args: argparse.Namespace, preds: Sequence[Any], profiles: Sequence[Any],
                       title: str = "") -> list[str]:
    """Write `--parquet/--perfetto/--plot` for `torchsim.prediction.Prediction`s; returns the lines to print."""
    if not any(getattr(args, o, None) for o in ("parquet", "perfetto", "plot")):
        return []
    records = [prediction_records(p) for p in preds]
    return write_prediction_outputs(args, records, profiles, detail_for(profiles), title, simulated_whole)


def _predict_one(model: Any, hw: Any, tp: int, ep: int, common: dict[str, Any], workers: int | None,
                 progress: bool) -> Any:
    from torchsim.prediction.pipeline import predict

    return predict(model, hw, tp=tp, ep=ep, workers=workers, progress=progress, **common)


def _predict_each(label: str, model: Any, entries: Sequence[tuple[Any, int, int]], common: dict[str, Any],
                  workers: int | None, progress: bool) -> list[Any]:
    """One prediction per (profile, tp, ep) entry, in order. With `workers` unset and more than one CPU they run at
    once on forked processes, one core each (one profile's prediction alone leaves a core idle while its largest
    kernels finish), after this process has imported torch and captured the prompt's step once, so that each of
    them reuses that export (torchsim.lowering.capture's memo) instead of repeating it; `workers` given runs them one
    after another, each on that many processes. The results are the same either way (simulation is
    deterministic)."""
    from torchsim.prediction.workers import cpus, worker_pool

    for hw, tp, _ep in entries:
        print(f"predicting {label} on {hw.name}{f' x{tp}' if tp > 1 else ''} ...", file=sys.stderr)
    n = cpus()
    if workers is not None or n < 2 or len(entries) < 2 or not _warm_capture(model, entries[0], common):
        return [_predict_one(model, hw, tp, ep, common, workers, progress) for hw, tp, ep in entries]
    with worker_pool(min(n, len(entries))) as pool:  # workers stop with the command (Ctrl-C, an error)
        futures = [pool.submit(_predict_one, model, hw, tp, ep, common, 1, False) for hw, tp, ep in entries]
        return [f.result() for f in futures]


def _warm_capture(model: Any, entry: tuple[Any, int, int], common: dict[str, Any]) -> bool:
    """Capture the prompt's step of `model` here (torch imported, the export memoised for forked processes);
    False when that fails (the predictions then run here, one after another, and report the error themselves)."""
    from torchsim.prediction.pipeline import step_entry

    hw, tp, _ep = entry
    try:
        step_entry(model, hw, rows=int(common["batch"]), q=int(common["prompt_len"]), past=0,
                   kv_cache=common["kv_cache"], quant=common["quant"], tp=tp, preset=str(common["preset"]))
    except Exception:  # noqa: BLE001 - any failure is the predictions' own to report, with their messages
        return False
    return True


def run(args: argparse.Namespace) -> int:
    entries = parse_hw_tp_list(args.hw, args.tp)
    if args.tp != 1 and all(":" in item for item in args.hw.split(",")):
        raise UsageError(f"--tp {args.tp} applies to --hw items without their own :tpN, and every item of --hw "
                         f"{args.hw} has one; drop --tp or an item's :tpN")
    if args.sp and all(tp == 1 for _hw, tp in entries):
        raise UsageError("--sp splits the sequence around the norms over the tensor-parallel ranks; give --tp N or an "
                         "--hw item NAME:tpN with N > 1")
    profiles = [hw for hw, _tp in entries]
    model = approximated(args)
    common = dict(prompt_len=args.prompt, decode_steps=args.decode, batch=args.batch, preset=args.preset,
                  routing=args.routing, fallback=args.fallback, quant=args.quant, kv_cache=args.kv_cache,
                  pp=args.pp, micro_batches=args.micro_batches, sp=args.sp,
                  allow_oversubscribe=args.allow_oversubscribe)
    preds = _predict_each(args.model, model, [(hw, tp, args.ep if tp > 1 else 1) for hw, tp in entries], common,
                          args.workers, progress=not args.json and sys.stderr.isatty())
    if len({t for _h, t in entries}) > 1:  # systems side by side: each column names its GPU count
        preds = [dataclasses.replace(p, hw=f"{p.hw} TP{tp}") for p, (_hw, tp) in zip(preds, entries, strict=True)]
    from torchsim.validation.accuracy import notes_for as accuracy_notes

    dtype = getattr(args, "dtype", "bf16")
    if args.json:
        for p, hw in zip(preds, profiles):
            print(json.dumps({**p.to_dict(kernels=False), "accuracy": accuracy_notes(hw.name, dtype)}, default=str))
    else:
        for w in (w for p in preds for w in p.warnings):
            print(f"warning: {w}", file=sys.stderr)
        first = preds[0]
        tps = {t for _h, t in entries}
        tp_note = f", tensor parallel over {min(tps)} GPUs" if len(tps) == 1 and min(tps) > 1 else ""
        fmt = f", weights {first.stats['quant']}" if first.stats.get("quant") else ""
        print(f"{first.model}: batch {first.batch}, prompt {first.prompt_len}, {first.decode_steps} decode steps "
              f"(preset {first.preset}, launch {first.launch}{fmt}{tp_note})\n")
        summaries = [summarize(prediction_records(p), top=args.top, ttft_s=p.ttft_s,
                               tpot_s=p.tpot_s if p.decode_steps else None) for p in preds]
        print(comparison_table(summaries, top=args.top))
        print("\naccuracy (against published measurements; docs/validation.md):")
        for hw in profiles:
            print(f"  - {accuracy_notes(hw.name, dtype)['e2e_inference']}")
    title = f"{preds[0].model}: prompt {args.prompt}, {args.decode} decode steps, batch {args.batch}"
    for line in export_predictions(args, preds, profiles, title):
        print(line, file=sys.stderr if args.json else sys.stdout)
    return 0
