"""`torchsim kernel KIND ...`: simulate one kernel and print cycles, time, throughput, utilisation and bound.

Each kernel kind is a module in torchsim/cli/kernels/ with `register(subparsers)`; they share the common
options and the report printed here (`add_common`, `run_and_report`).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from dataclasses import replace
from typing import Any

from torchsim.cli import COMMAND_HELP, UsageError, int_in
from torchsim.cli.outputs import add_output_options, wants_records, write_kernel_outputs
from torchsim.hwmodels import get_profile
from torchsim.sim import POLICIES, KernelResult, native, simulate
from torchsim.sim.sustained import simulate_sustained

KERNELS = ("gemm", "attention", "decode", "grouped_gemm", "rmsnorm", "memory_bound")


def register(sub: Any) -> None:
    p = sub.add_parser("kernel", help=COMMAND_HELP["kernel"])
    ks = p.add_subparsers(dest="kernel", required=True)
    for name in KERNELS:
        importlib.import_module(f"torchsim.cli.kernels.{name}").register(ks)


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--hw", default="h100-sxm", help="hardware profile (see `torchsim hw list`)")
    p.add_argument("--dtype", default="bf16", help="bf16, fp16, fp8 (e4m3), fp8_e5m2")
    p.add_argument("--policy", default=None, choices=sorted(POLICIES), help="warp issue policy (GPUs; default gto)")
    p.add_argument("--sms", type=int, default=None, help="restrict the launch to this many SMs (GPUs)")
    p.add_argument("--clock", default="sustained",
                   help="SM clock: 'sustained' (default: the highest clock within the profile's power limit), "
                   "'profile' (the profile's clock_hz, no power model) or a locked clock in GHz, e.g. 1.5")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--exact", action="store_true",
                   help="simulate the kernel in full (default: a large kernel is extrapolated from truncated "
                   "instances of its repeating waves / K / K-V loops, within 2%%; `method` in --json says how)")
    p.add_argument("--max-events", type=int_in(1), default=None,
                   help=f"simulate kernels up to this many node executions (default {MAX_EVENTS:,})")
    add_output_options(p)


MAX_DIM = 1 << 24  # a shape dimension above this is a typo, not a kernel (and would exhaust memory building it)
MAX_EVENTS = 50_000_000  # node executions `torchsim kernel` simulates without --max-events (~2-5 min here)


def simulate_for(kernel: Any, args: argparse.Namespace, family: Any = None) -> KernelResult:
    """Simulate `kernel` on --hw with the command's --policy, --sms, --clock and output options (`family`: its
    repeating structure when check_size found one, so it is not looked for twice)."""
    hw = get_profile(args.hw)
    gpu_only = [f for f, v in (("--sms", args.sms), ("--policy", args.policy)) if v is not None]
    if gpu_only and getattr(hw.arch, "name", "") == "TENSIX":  # Tensix cores run tt-metal programs: no warps, SMs
        verb = "apply" if len(gpu_only) > 1 else "applies"
        raise UsageError(f"{' and '.join(gpu_only)} {verb} to GPUs (warp issue, SM count); {hw.name} is a Tenstorrent "
                         f"profile (its kernels take --grid)")
    if args.sms is not None:
        positive("sms", args.sms)
        if hasattr(hw, "sms") and args.sms > hw.sms:  # the engine would quietly run on all of them
            raise UsageError(f"--sms {args.sms}: {hw.name} has {hw.sms} SMs (sm_count); give 1..{hw.sms}")
    kw: dict[str, Any] = {"policy": args.policy or "gto", "record": wants_records(args), "max_sms": args.sms}
    clock = str(getattr(args, "clock", "sustained"))
    if clock == "profile":
        res = simulate(kernel, hw, **kw)
        return replace(res, clock_reason=f"profile clock_hz ({hw.clock_hz.kind}), --clock profile")
    if clock == "sustained":
        if not getattr(args, "exact", True) and not kw["record"] and args.sms is None:
            from torchsim.prediction.repeats import parallel_samples, simulate_kernel
            from torchsim.prediction.workers import cpus

            def run(g: Any, h: Any) -> KernelResult:
                return simulate(g, h, policy=args.policy or "gto")
            with parallel_samples(cpus()):  # one kernel on an idle machine: its samples on every CPU
                return simulate_kernel(family or kernel, hw, run=run)  # extrapolated when large (method in attrs)
        return simulate_sustained(kernel, hw, **kw)
    try:
        ghz = float(clock)
    except ValueError:
        raise UsageError(f"--clock must be 'sustained', 'profile' or a clock in GHz, got {clock!r}") from None
    if not hasattr(hw, "clock_max_hz"):
        raise UsageError(f"--clock {clock}: {hw.name} has no power model (clock range); use --clock profile")
    try:
        return simulate_sustained(kernel, hw, lock_clock_hz=ghz * 1e9, **kw)
    except ValueError as exc:
        raise UsageError(f"--clock {clock}: {exc}") from None


def positive(name: str, value: int | None) -> int:
    if value is None or value <= 0:
        raise UsageError(f"--{name} must be a positive integer, got {value}")
    if value > MAX_DIM:
        raise UsageError(f"--{name} {value} is above torchsim's limit of {MAX_DIM} for one dimension")
    return int(value)


def may_extrapolate(args: argparse.Namespace) -> bool:
    """Whether the command may extrapolate a large kernel: not --exact, at the sustained clock, no node records
    wanted (--parquet/--perfetto), all SMs."""
    return not getattr(args, "exact", True) and str(getattr(args, "clock", "sustained")) == "sustained" \
        and not wants_records(args) and args.sms is None


def check_size(kernel: Any, args: argparse.Namespace) -> Any:
    """Refuse, before simulating, a kernel whose node executions exceed the limit (the error says how to lift it).
    Returns the kernel's repeating structure (a repeats.Family) when it is large and will be extrapolated."""
    from torchsim.prediction.kernel_sim import graph_events
    from torchsim.prediction.repeats import EXACT_EVENTS, family_of

    events, limit = graph_events(kernel), getattr(args, "max_events", None) or MAX_EVENTS
    family = family_of(kernel, get_profile(args.hw)) if may_extrapolate(args) and events > min(limit, EXACT_EVENTS) \
        else None
    if events > limit and family is None:
        raise UsageError(f"{kernel.name} would take {events:,} node executions to simulate (limit {limit:,}, about "
                         f"{events / 200_000 / 60:.0f} min on one core); pass --max-events {events} to run it, or "
                         f"use `torchsim predict`, which extrapolates large kernels")
    return family


def emit_outputs(args: argparse.Namespace, launches: list[tuple[Any, KernelResult]]) -> None:
    """--parquet/--perfetto/--plot for the launches of one command (run back to back)."""
    for line in write_kernel_outputs(args, launches, get_profile(args.hw)):
        print(line, file=sys.stderr if args.json else sys.stdout)


def run_and_report(kernel: Any, args: argparse.Namespace, extra: dict[str, Any] | None = None,
                   export: bool = True, family: Any = None) -> KernelResult:
    """Simulate and report `kernel`; `family`: its repeating structure, found without the full kernel (then
    `kernel` is a header graph, one of the family's samples named and attributed as the full kernel)."""
    header = family is not None
    family = family or check_size(kernel, args)
    res = simulate_for(kernel, args, family)
    report(res, kernel, args, extra or {}, header)
    if export:
        emit_outputs(args, [(kernel, res)])
    return res


def header_graph(family: Any, dram_bytes: float) -> Any:
    """The graph `run_and_report` reports for a kernel never built in full: the family's smallest sample,
    named and attributed as the full kernel (its FLOPs and `dram_bytes`)."""
    sample = family.build({d.name: d.start for d in family.dims})
    return replace(sample, name=family.name, attrs=family.attrs, flops=family.flops, dram_bytes=dram_bytes)


def _extrapolated_fill(res: KernelResult, hw: Any, kernel: Any) -> float | None:
    """The datapath fill of a kernel never built in full: its FLOPs per FLOP of tensor-datapath work, the work
    extrapolated with the rest of the result (the power model's count of it: torchsim.hwmodels.power.work_of)."""
    from torchsim.hwmodels.power import work_of

    if res.cycles <= 0 or res.flops <= 0:
        return None
    work = work_of(hw, kernel.classes[0].graph.dtype, res.cycles, res.clock_hz, res.unit_busy, res.dram_bytes,
                   int(res.attrs.get("sms", hw.sms))).tensor_flop
    return res.flops / work if work > 0 else None


def report(res: KernelResult, kernel: Any, args: argparse.Namespace, extra: dict[str, Any],
           header: bool = False) -> None:
    """Print (or --json) the result `res` of `kernel` (`header`: a header graph, whose CTAs are a sample's)."""
    hw = get_profile(args.hw)
    peak = hw.peak_tensor_flops_per_s(kernel.classes[0].graph.dtype) if hasattr(hw, "peak_tensor_flops_per_s") else 0
    out = {
        "kernel": res.name, "hw": res.hw, "template": kernel.attrs.get("template", ""),
        "cycles": res.cycles, "time_us": res.time_us, "tflops": res.tflops,
        "clock_hz": res.clock_hz, "clock_reason": res.clock_reason, "power_w": res.power_w or None,
        "pct_of_peak": 100 * res.flops / res.time_s / peak if peak and res.flops else None,
        "dram_gb_per_s": res.dram_bytes_per_s / 1e9,
        "pct_of_dram_bw": 100 * res.dram_bytes_per_s / hw.dram_bytes_per_s_value,
        "bound": res.bound, "waves": res.waves, "ctas": res.ctas, "ctas_per_sm": res.ctas_per_sm,
        "l2_hit_rate": res.l2_hit_rate, "unit_utilisation": res.unit_busy, "stall_cycles": res.stalls,
        "config": {k: v for k, v in kernel.attrs.items() if k != "template"}, **extra,
        "sim_wall_s": res.attrs.get("wall_s"), "engine_build": native.ENGINE, "node_events": res.node_events,
        "method": res.attrs.get("method", "exact"), "extrapolation": res.attrs.get("extrapolation", ""),
        "tensor_datapath_fill": _extrapolated_fill(res, hw, kernel) if header else
        kernel.tensor_datapath_fill() if hasattr(kernel, "tensor_datapath_fill") else None,
    }
    from torchsim.validation import accuracy

    kind, dt = accuracy.kind_of_template(out["template"]), kernel.classes[0].graph.dtype.name.lower()
    out["accuracy"] = {"note": accuracy.note(kind, hw.name, dt), "validation": accuracy.entry(kind, hw.name, dt)}
    # Tenstorrent: device time (the engine's) and the host-visible time of one op per timing method
    visible = hw.host_visible_times(res.time_s) if hasattr(hw, "host_visible_times") else None
    if visible:
        out["device_time_us"] = res.time_us
        out["host_visible_us"] = {k: v * 1e6 for k, v in visible.items()}
    if args.json:
        print(json.dumps(out, default=str))
        return
    print(f"{res.name} on {res.hw}  [{out['template']}]")
    if kernel.attrs.get("quant"):  # a quantised format (torchsim.lowering.quant)
        from torchsim.lowering.quant import parse

        fmt = parse(str(kernel.attrs["quant"]))
        print(f"  format      {fmt.name}: {fmt.description}; {kernel.dram_bytes / 1e6:.2f} MB from DRAM at least")
    print(f"  time        {res.time_us:10.2f} us   ({res.cycles} cycles at {res.clock_hz / 1e9:.3f} GHz)")
    if res.clock_reason:
        print(f"  clock       {res.clock_hz / 1e9:10.3f} GHz  {res.clock_reason}")
    if visible:
        print("  host-seen   " + ", ".join(f"{k} {v * 1e6:.2f} us" for k, v in visible.items()) +
              "  (one op, program cache hit)")
    if res.flops:
        pct = f" ({out['pct_of_peak']:.1f}% of dense peak)" if out["pct_of_peak"] else ""
        print(f"  throughput  {res.tflops:10.1f} TFLOPS{pct}")
    print(f"  DRAM        {out['dram_gb_per_s']:10.1f} GB/s   ({out['pct_of_dram_bw']:.1f}% of sustained "
          f"{hw.dram_bytes_per_s_value / 1e9:.0f} GB/s), L2 hit rate {100 * res.l2_hit_rate:.1f}%")
    print(f"  waves       {res.waves:10.2f}      ({res.ctas} CTAs, {res.ctas_per_sm} per SM)")
    tensor = res.unit_busy.get("tensor", 0.0)
    near = f"  (tensor pipe {100 * tensor:.0f}% busy: close to compute-bound)" \
        if tensor >= 0.8 and "tensor" not in res.bound else ""
    print(f"  bound       {res.bound}{near}")
    print(f"  accuracy    {out['accuracy']['note']}")
    print("  utilisation " + ", ".join(f"{k} {100 * v:.1f}%" for k, v in res.unit_busy.items()))
    fill = out["tensor_datapath_fill"]
    if fill is not None and fill < 0.99:
        print(f"              (tensor counts datapath time; useful FLOPs fill {100 * fill:.0f}% of it: MMAs shorter "
              f"than the {int(hw.tensor_datapath_rows.value)} datapath rows, padded edge tiles)")
    total = sum(res.stalls.values()) or 1.0
    print("  waits       " + ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in res.stalls.items() if v))
