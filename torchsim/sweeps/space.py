"""Design-space sweeps: the cartesian product of hardware knobs, one row per point, kernels simulated once.

Sits on top of the prediction path: a model step is captured and planned once (lowering), each point derives a
what-if profile (torchsim.hwmodels.whatif), the distinct (kernel call, kernel-relevant profile numbers) pairs
of all points are simulated once on a process pool or Ray (torchsim.sweeps.execute), and each point's kernels are
placed on the stream by the launch model (torchsim.prediction.launch). Rows go to Parquet (and a PNG).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from torchsim.hwmodels.whatif import WhatIfError, canonical, derive_profile, override_fields
from torchsim.lowering.kernel_call import KernelCall
from torchsim.prediction.kernel_sim import DEFAULT_MAX_SIM_EVENTS, KernelSim, merged

# profile fields a kernel simulation never reads: points differing only here share every kernel simulation
LAUNCH_ONLY = frozenset({"launch_overhead_s", "graph_launch_overhead_s", "dram_bytes", "kernel_trace_overhead_s"})
EVENTS_PER_S = 40_000.0  # measured: node executions per second per worker incl. graph building (2-core box)
CONFIRM_ABOVE_S = 3600.0  # sweeps estimated to take longer need --yes
CONFIRM_ABOVE_POINTS = 1000  # and so do sweeps of more points (each a row, a profile, a launch placement)
MAX_KNOB_VALUES = 10_000  # values one --vary may give


class SweepError(ValueError):
    """A sweep was asked for with bad knobs, an empty range, or needs confirmation; the message says which."""


@dataclass(frozen=True, slots=True)
class Knob:
    """One varied profile field and its values, in the field's unit."""

    field: str
    values: tuple[float, ...]
    unit: str


def parse_vary(text: str, base: Any) -> Knob:
    """`field=a:b:n` (n evenly spaced values from a to b) or `field=v1,v2,...`, numbers in the field's unit.

    >>> from torchsim.hwmodels import get_profile
    >>> parse_vary("sm_count=66,132", get_profile("h100-sxm")).values
    (66.0, 132.0)
    """
    if not isinstance(text, str):
        raise SweepError(f"a --vary knob is a string FIELD=START:STOP:COUNT or FIELD=V1,V2,..., got "
                         f"{type(text).__name__} {text!r:.60}")
    name, sep, spec = text.partition("=")
    name, spec = name.strip(), spec.strip()
    fields = override_fields(base)
    if not sep or not name:
        raise SweepError(f"--vary {text!r}: expected FIELD=START:STOP:COUNT or FIELD=V1,V2,...")
    field_name = canonical(name)
    if field_name not in fields:
        raise SweepError(f"--vary {text!r}: unknown knob {name!r}; knobs are profile fields of {base.name}: "
                         f"{', '.join(sorted(fields))}")
    if not spec:
        raise SweepError(f"--vary {text!r}: empty range; give START:STOP:COUNT or a list V1,V2,...")
    try:
        if ":" in spec:
            parts = spec.split(":")
            if len(parts) != 3:
                raise SweepError(f"--vary {text!r}: a range is START:STOP:COUNT")
            start, stop, count = float(parts[0]), float(parts[1]), int(parts[2])
            if not (math.isfinite(start) and math.isfinite(stop)):  # before linspace, which warns and gives nan
                raise SweepError(f"--vary {text!r}: START and STOP must be finite numbers, got {parts[0].strip()!r} "
                                 f"and {parts[1].strip()!r}")
            if count < 1:
                raise SweepError(f"--vary {text!r}: empty range (COUNT {count} < 1)")
            if count > MAX_KNOB_VALUES:
                raise SweepError(f"--vary {text!r}: COUNT {count} is above {MAX_KNOB_VALUES} values per knob")
            values = tuple(float(v) for v in np.linspace(start, stop, count))
        else:
            values = tuple(float(v) for v in spec.split(",") if v.strip())
            bad = [v for v in values if not math.isfinite(v)]
            if bad:
                raise SweepError(f"--vary {text!r}: {bad[0]} is not a finite number; give values in the field's unit")
    except ValueError as exc:
        if isinstance(exc, SweepError):
            raise
        raise SweepError(f"--vary {text!r}: not a number ({exc})") from None
    if not values:
        raise SweepError(f"--vary {text!r}: empty range")
    if len(set(values)) != len(values):
        raise SweepError(f"--vary {text!r}: repeated values {values}")
    q = fields[field_name]
    for v in values:  # the same checks a what-if file gets, naming the knob
        try:
            derive_profile(base, {field_name: v}, where=f"--vary {text}")
        except WhatIfError as exc:
            raise SweepError(str(exc)) from None
    return Knob(field_name, values, q.unit)


@dataclass(frozen=True)
class Workload:
    """What each point evaluates: one step of a model (`calls` in launch order) or one kernel call."""

    label: str  # model name, or the kernel call's kind
    calls: tuple[KernelCall, ...]
    phase: str = ""  # "decode" | "prefill" for a model step; "" for a kernel
    batch: int = 1
    kv_len: int = 0
    launch: str = "cuda-graphs"
    preset: str = ""
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def is_model(self) -> bool:
        return bool(self.phase)


DEFAULT_KV, DEFAULT_PROMPT = 4096, 2048


def model_workload(model: str, *, phase: str, batch: int = 1, kv: int | None = None, prompt: int | None = None,
                   preset: str = "serving", quant: str | None = None, base: Any = None) -> Workload:
    """Capture and plan one step of `model` once: decode attends over kv + 1 tokens (as predict's first step;
    `kv` default 4096), prefill runs `prompt` tokens (default 2048); the other phase's length is an error.
    `quant`: the decoder-layer GEMMs in a quantised format (as predict's; default the config's
    quantization_config), checked against the `base` profile."""
    from torchsim.lowering.plan import plan_model
    from torchsim.models.registry import build_model, get_config

    if phase not in ("decode", "prefill"):
        raise SweepError(f"--phase {phase!r}: valid: decode, prefill")
    if phase == "prefill" and kv is not None:
        raise SweepError(f"--kv {kv!r} sets the KV length before a decode step; --phase prefill sweeps a prompt of "
                         "--prompt tokens: give --prompt, or --phase decode")
    if phase == "decode" and prompt is not None:
        raise SweepError(f"--prompt {prompt!r} sets the prefill's prompt length; --phase decode (the default) sweeps "
                         "one decode step after --kv tokens: give --kv, or --phase prefill")
    kv = DEFAULT_KV if kv is None else kv
    prompt = DEFAULT_PROMPT if prompt is None else prompt
    for name, v in (("batch", batch), ("kv", kv), ("prompt", prompt)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SweepError(f"--{name} must be a positive integer, got {v!r}")
    if not isinstance(model, str) or not model.strip():
        raise SweepError(f"a sweep's target is a model name (e.g. 'llama3-8b') or a KernelCall, got "
                         f"{type(model).__name__} {model!r:.60}")
    cfg = get_config(model)
    context = _context(cfg)
    tokens, what = (kv + 1, f"--kv {kv} + the decode token") if phase == "decode" else (prompt, f"--prompt {prompt}")
    if context and tokens > context:
        raise SweepError(f"{what} = {tokens} tokens exceeds {getattr(cfg, 'name', model)}'s context of {context} "
                         f"tokens; give {'--kv' if phase == 'decode' else '--prompt'} at most "
                         f"{context - 1 if phase == 'decode' else context}")
    module = build_model(cfg)
    q, past = (1, kv) if phase == "decode" else (prompt, 0)
    plan = plan_model(module, batch=batch, q_len=q, past_len=past, preset=preset)
    quant = quant if quant is not None else (getattr(cfg, "quant", "") or None)
    attrs: dict[str, Any] = {}
    if quant and quant != "none":
        from torchsim.lowering.precision import WeightPrecision, with_precision
        from torchsim.lowering.quant import check_supported, parse

        fmt = parse(quant)
        if base is not None:
            check_supported(fmt, base)
        keep = tuple(getattr(cfg, "quant_keep", ()) or ())
        plan = with_precision(plan, WeightPrecision.FP8 if fmt.name == "fp8" else WeightPrecision.MODEL, None,
                              None if fmt.name == "fp8" else fmt, keep)
        attrs["quant"] = fmt.name
    launch = "cuda-graphs" if preset == "serving" else "eager"
    return Workload(str(getattr(cfg, "name", model)), tuple(plan.calls), phase, batch,
                    kv + 1 if phase == "decode" else prompt, launch, preset, attrs)


def _context(cfg: Any) -> int:
    """The model's context length (as predict reads it), 0 when the config names none."""
    for attr in ("max_context", "max_position_embeddings", "max_seq_len"):
        v = getattr(cfg, attr, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return 0


def kernel_workload(call: KernelCall) -> Workload:
    from torchsim.lowering.kernel_call import KernelKind

    if not isinstance(call, KernelCall):
        raise SweepError(f"a kernel sweep takes a KernelCall, got {type(call).__name__} {call!r:.60}")
    if call.kind is KernelKind.COLLECTIVE:
        raise SweepError("sweep kernel collective: a collective has no tile-graph template to sweep; price it with "
                         "`torchsim collective` (its links are a system's, e.g. --system dgx-h100)")
    return Workload(call.kind.value, (call,), attrs={"shapes": ",".join(f"{k}={v}" for k, v in call.params)})


def kernel_hash(hw: Any) -> str:
    """Hash of the numbers a kernel simulation can read (launch-only fields left out)."""
    qs = override_fields(hw)
    blob = json.dumps({k: [q.value, q.unit] for k, q in qs.items() if k not in LAUNCH_ONLY}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Plan:
    """Points, their profiles, and the distinct simulations they need (jobs), each point's calls -> job."""

    knobs: tuple[Knob, ...]
    points: tuple[tuple[float, ...], ...]
    profiles: tuple[Any, ...]
    jobs: tuple[tuple[KernelCall, Any], ...]
    job_of: tuple[tuple[int, ...], ...]  # per point, per workload call: index into jobs


def plan_sweep(base: Any, knobs: Sequence[Knob], work: Workload) -> Plan:
    """Cartesian product in knob order (the last knob varies fastest); one job per distinct simulation."""
    if not knobs:
        raise SweepError("a sweep needs at least one --vary FIELD=...")
    seen = [k.field for k in knobs]
    if len(set(seen)) != len(seen):
        raise SweepError(f"a knob is varied twice: {seen}")
    points = tuple(itertools.product(*(k.values for k in knobs)))
    name = f"{base.name}+sweep"
    profiles: list[Any] = []
    jobs: list[tuple[KernelCall, Any]] = []
    job_of: list[tuple[int, ...]] = []
    index: dict[tuple[Any, str], int] = {}
    for i, values in enumerate(points):
        where = f"sweep point {i} (" + ", ".join(f"{k.field}={v:g} {k.unit}" for k, v in zip(knobs, values)) + ")"
        try:
            hw = derive_profile(base, {k.field: v for k, v in zip(knobs, values)}, where=where, name=name)
        except WhatIfError as exc:
            raise SweepError(str(exc)) from None
        profiles.append(hw)
        h = kernel_hash(hw)
        row = []
        for c in work.calls:
            key = (c.key(), h)
            if key not in index:
                index[key] = len(jobs)
                jobs.append((c, hw))
            row.append(index[key])
        job_of.append(tuple(row))
    return Plan(tuple(knobs), points, tuple(profiles), tuple(jobs), tuple(job_of))


def estimate_s(base: Any, knobs: Sequence[Knob], work: Workload, workers: int,
               max_events: int = DEFAULT_MAX_SIM_EVENTS) -> tuple[float, int, int]:
    """(seconds, points, distinct simulations) before anything is planned or run: node events of each distinct
    call (built once on the base profile, capped by the simulation budget) times the distinct kernel-relevant
    profiles (knobs outside LAUNCH_ONLY), over `workers` at EVENTS_PER_S."""
    from torchsim.lowering.templates import build_kernel
    from torchsim.prediction.kernel_sim import graph_events

    points = math.prod(len(k.values) for k in knobs)
    variants = math.prod(len(k.values) for k in knobs if k.field not in LAUNCH_ONLY)
    events = 0
    distinct = {c.key(): c for c in work.calls}
    for c in distinct.values():
        try:
            ev = graph_events(build_kernel(c, base))
        except NotImplementedError as exc:
            if not work.is_model:  # the one kernel asked for has no template here: nothing to sweep
                raise SweepError(f"sweep kernel {c.kind.value} on {base.name}: {exc}") from None
            ev = 0  # no template: the roofline prices it, no simulation
        except ValueError as exc:
            if not work.is_model:  # the one kernel asked for cannot be built here: say so, as `torchsim kernel` does
                raise SweepError(f"sweep kernel {c.kind.value} on {base.name}: {exc}") from None
            ev = 0  # a model's kernel the templates refuse is priced by the roofline, as in `predict`
        events += min(ev, 2 * max_events)
    return events * variants / EVENTS_PER_S / max(1, workers), points, len(distinct) * variants


def check_size(estimate: tuple[float, int, int], workers: int, yes: bool) -> str:
    """A one-line estimate; raises SweepError asking for --yes when the sweep would take over an hour."""
    seconds, points, sims = estimate
    line = (f"{points} points, {sims} distinct kernel simulations, about {_duration(seconds)} on {workers} "
            f"worker{'s' if workers != 1 else ''}")
    if (seconds > CONFIRM_ABOVE_S or points > CONFIRM_ABOVE_POINTS) and not yes:
        raise SweepError(f"this sweep is large: {line}. Rerun with --yes to start it, or narrow the ranges")
    return line


def _duration(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} hours"


def rows(plan: Plan, work: Workload, sims: Sequence[Sequence[KernelSim]]) -> list[dict[str, Any]]:
    """One row per point: the knob values, the totals, and per kernel kind its time and dominant bound.
    `sims` holds each job's launches; a model step places every launch on the stream as `predict` does."""
    from torchsim.prediction.launch import LaunchModel

    kinds = sorted({c.kind.value for c in work.calls})
    out = []
    for i, (values, hw, jobs) in enumerate(zip(plan.points, plan.profiles, plan.job_of)):
        point_sims = [merged(sims[j]) for j in jobs]
        row: dict[str, Any] = {"point": i}
        row.update({k.field: v for k, v in zip(plan.knobs, values)})
        row.update(hardware=hw.name, workload=work.label)
        if work.is_model:
            _, step_s = LaunchModel.for_mode(work.launch, hw).place([s for j in jobs for s in sims[j]])
            row.update(phase=work.phase, batch=work.batch, kv_len=work.kv_len, total_us=step_s * 1e6)
        row["kernels_us"] = sum(s.time_s for s in point_sims) * 1e6
        row["dram_gb"] = sum(s.dram_bytes for s in point_sims) / 1e9
        row["fallback_kernels"] = sum(1 for s in point_sims if s.fallback)
        if not work.is_model:
            s = point_sims[0]
            row.update(cycles=s.cycles, bound=s.bound, method=s.method, tflops=s.flops / s.time_s / 1e12,
                       l2_hit_rate=s.l2_hit_rate, **{f"stall_{k}_cycles": v for k, v in sorted(s.stalls.items())},
                       **{f"util_{k}": v for k, v in sorted(s.unit_util.items())})
        for kind in kinds:
            per: dict[str, float] = {}
            total = 0.0
            for c, s in zip(work.calls, point_sims):
                if c.kind.value == kind:
                    total += s.time_s
                    per[s.bound] = per.get(s.bound, 0.0) + s.time_s
            row[f"{kind}_us"] = total * 1e6
            row[f"{kind}_bound"] = max(sorted(per.items()), key=lambda kv: kv[1])[0] if per else ""
        out.append(row)
    return out


def check_run(executor: Any, jobs: Any) -> None:
    """The executor's name and the worker count, before any work."""
    from torchsim.sweeps.execute import EXECUTORS

    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0:
        raise SweepError(f"jobs must be a whole number >= 1, or 0 for one worker per core; got {jobs!r}")
    if executor not in EXECUTORS:
        raise SweepError(f"unknown executor {executor!r}; valid: {', '.join(EXECUTORS)}")


def run_sweep(base: Any, knobs: Sequence[Knob], work: Workload, *, executor: str = "local", jobs: int = 0,
              ray_address: str | None = None, yes: bool = False, progress: bool = False,
              max_events: int = DEFAULT_MAX_SIM_EVENTS, log: Any = None) -> list[dict[str, Any]]:
    """Plan, check the size, simulate every distinct kernel once, and return one row per point.

    >>> from torchsim.hwmodels import get_profile
    >>> from torchsim.lowering.kernel_call import KernelCall, KernelKind
    >>> hw = get_profile("h100-sxm")
    >>> w = kernel_workload(KernelCall.make(KernelKind.GEMM, m=64, n=256, k=256))
    >>> rs = run_sweep(hw, [parse_vary("sm_count=66,132", hw)], w, jobs=1)
    >>> [r["sm_count"] for r in rs]
    [66.0, 132.0]
    """
    from torchsim.sweeps.execute import default_jobs, run_jobs

    check_run(executor, jobs)
    workers = jobs or default_jobs()
    if not knobs:
        raise SweepError("a sweep needs at least one --vary FIELD=...")
    line = check_size(estimate_s(base, knobs, work, workers, max_events), workers, yes)
    plan = plan_sweep(base, knobs, work)
    if log is not None:
        log(f"sweep {work.label} on {base.name}: {line}")
    sims = run_jobs(list(plan.jobs), executor=executor, workers=workers, ray_address=ray_address,
                    progress=progress, max_events=max_events)
    return rows(plan, work, sims)


def metadata(base: Any, knobs: Sequence[Knob], work: Workload) -> dict[str, str]:
    """What the sweep was (deterministic: no times, no host names), for the Parquet file's metadata."""
    spec = {"base": base.name, "base_numbers_hash": base.numbers_hash() if hasattr(base, "numbers_hash") else "",
            "knobs": [{"field": k.field, "unit": k.unit, "values": list(k.values)} for k in knobs],
            "workload": work.label, "phase": work.phase, "batch": work.batch, "kv_len": work.kv_len,
            "preset": work.preset, "launch": work.launch if work.is_model else "", **work.attrs}
    return {"torchsim.sweep": json.dumps(spec, sort_keys=True), "torchsim.sweep_version": "1",
            "torchsim.points": str(math.prod(len(k.values) for k in knobs))}
