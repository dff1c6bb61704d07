"""torchsim.predict: a model name (or module, or config) + a GPU -> TTFT, time per output token, every kernel.

The top of the pipeline: capture (lowering.capture) -> plan (lowering.plan) -> simulate each distinct kernel
once (torchsim.prediction.kernel_sim) -> place kernels on a stream with a launch/host model -> Prediction. Decode steps
are simulated at a few KV lengths and interpolated linearly in between.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from torchsim.graph.kinds import DType
from torchsim.hwmodels.gpu import GpuProfile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.quant import QuantFormat, check_supported
from torchsim.lowering.quant import parse as parse_quant
from torchsim.prediction import clock_window
from torchsim.prediction.cache import DiskCache
from torchsim.prediction.kernel_sim import (
    DEFAULT_MAX_SIM_EVENTS,
    Background,
    KernelSim,
    _hw_hash,
    auto_workers,
    is_memoised,
    simulate_launches,
    simulate_many,
)
from torchsim.prediction.launch import LAUNCH_MODES, LaunchModel
from torchsim.prediction.limits import DEFAULT_MAX_TOTAL_EVENTS, EventBudget, estimate
from torchsim.prediction.plancache import PlanCache, PlanEntry, StepPlan, plan_key
from torchsim.prediction.records import KernelRecord, MemoryFitError, MemoryWarning, Prediction

if TYPE_CHECKING:  # torchsim.lowering's capture and planning import torch, which a plan-cache hit does not need
    from torchsim.lowering.plan import KernelPlan, Preset


def predict(model: Any = "llama3-8b", hw: Any = "h100-sxm", *, prompt_len: int = 2048, decode_steps: int = 128,
            kv_len: int | None = None, batch: int = 1, preset: str | Preset = "serving", launch: str | None = None,
            dtype: str = "bf16", kv_cache: str | None = None, weights: str | None = None, routing: Any = None,
            fallback: str | None = None, decode_samples: int = 3, max_sim_events: int = DEFAULT_MAX_SIM_EVENTS,
            workers: int | None = None, cache: bool = True, progress: bool = False, tune: bool = False,
            exact: bool = False, tp: int = 1, ep: int = 1, pp: int = 1, micro_batches: int | None = None,
            allow_oversubscribe: bool = False, system: str | None = None, quant: str | None = None,
            sp: bool = False, max_total_events: int | None = DEFAULT_MAX_TOTAL_EVENTS) -> Prediction:
    """Predict prefill of `prompt_len` tokens and `decode_steps` decode steps for `batch` sequences on `hw`.

    `kv_len` is the KV length at the first decode step (default `prompt_len`); step t attends over
    kv_len + t + 1 tokens. `launch` defaults to CUDA graphs for `serving` and eager launches for `eager`
    (on Tensix: metal trace for decode, host dispatch for prefill, as tt_transformers runs them). `weights`
    ("performance" | "accuracy", Tensix only) picks tt_transformers' data formats and fidelities per weight role.
    `dtype="fp8"` is an FP8 checkpoint (decoder-layer GEMMs in FP8 E4M3); `kv_cache="fp8"` an FP8 KV cache.
    `quant` runs the decoder-layer GEMMs in a quantised format (torchsim.lowering.quant: w8a16, w4a16, w8a8, fp8,
    fp8-block, nvfp4, mxfp4; "none" forces the model's dtype); by default the format a config's
    `quantization_config` names, else none. A format the GPU lacks tensor cores for is an error naming what it has.
    Kernels above `max_sim_events` node executions are extrapolated from truncated instances of their repeating
    dimensions (torchsim.prediction.repeats; `exact=True` simulates every kernel in full).
    Distinct kernels are simulated once per process (memoised), on `workers` processes when the work is large,
    and kept in the on-disk cache (torchsim.prediction.cache; `cache=False` skips it); so are the captured plans
    (torchsim.prediction.plancache: a warm rerun imports no torch and captures nothing). `tune=True` (GPU profiles)
    gives every GEMM the simulated autotuner's configuration (lowering.templates.tune: the fastest of a bounded set
    of valid configurations, the default among them) instead of the one-shot heuristic.
    `tp` > 1 splits the model Megatron-style over `tp` GPUs of a multi-GPU system (torchsim.lowering.parallel:
    one rank's kernels and its all-reduces/all-gathers, costed on the system's links): `hw` is then a GPU profile
    (its 8-GPU system is taken, e.g. dgx-h100 for h100-sxm) or a system name; `system` names the system (a
    built-in one or a what-if `.toml` based on one, whose links it changes) for a profile `hw`. `ep` = `tp`
    splits MoE experts whole over the ranks (vLLM's --enable-expert-parallel); each MoE layer then costs its
    slowest rank's experts.
    `pp` > 1 splits the layers into `pp` pipeline stages (each on its own `tp` GPUs) and runs the batch as
    `micro_batches` (default min(pp, batch)) micro-batches through them, GPipe-style, every step: the step takes
    the first micro-batch's trip through every stage and its activation sends, plus (micro_batches - 1) times
    the slowest stage; what the stages idle meanwhile is the bubble (`stats['pipeline']`).
    Weights, the KV cache at the last step and the largest activation must fit one GPU's memory, or a
    MemoryFitError says by how much and what would fit; `allow_oversubscribe=True` predicts anyway (a warning).
    The node events the prediction will simulate are estimated before its kernels are simulated
    (torchsim.prediction.limits); above `max_total_events` a SimulationLimitError names the estimate and the
    largest kernels (`None`: no limit).

    >>> p = predict("llama-tiny", "h100-sxm", prompt_len=32, decode_steps=4)
    >>> p.ttft_s > 0 and len(p.decode_step_s) == 4
    True
    """
    t0 = time.perf_counter()
    _check_arguments(model, hw, strings={"dtype": dtype, "kv_cache": kv_cache, "weights": weights, "launch": launch,
                                         "fallback": fallback, "system": system, "quant": quant},
                     flags={"cache": cache, "progress": progress, "tune": tune, "exact": exact, "sp": sp,
                            "allow_oversubscribe": allow_oversubscribe}, routing=routing, workers=workers)
    if sp and tp <= 1:
        raise ValueError(f"sp=True splits the sequence around the norms over the tp ranks; tp is {tp!r}: give tp > 1 "
                         "(or sp=False)")
    if exact:
        from torchsim.prediction.kernel_sim import EXACT

        max_sim_events = EXACT
    if not isinstance(preset, str) or preset.strip().lower() not in ("eager", "serving"):
        from torchsim.lowering.plan import Preset

        preset = Preset.parse(preset).value  # a Preset, or an error naming the valid ones
    preset = preset.strip().lower()
    launch = launch or ("cuda-graphs" if preset == "serving" else "eager")
    if launch not in LAUNCH_MODES:
        raise ValueError(f"unknown launch mode {launch!r}; valid: {', '.join(LAUNCH_MODES)}")
    if fallback not in (None, "roofline", "none"):
        raise ValueError(f"unknown fallback {fallback!r}; valid: roofline, none")
    for name, value in (("batch", batch), ("prompt_len", prompt_len), ("decode_samples", decode_samples),
                        ("max_sim_events", max_sim_events), ("tp", tp), ("ep", ep), ("pp", pp)):
        _require_int(name, value, minimum=1)
    _require_int("decode_steps", decode_steps, minimum=0)
    if max_total_events is not None:
        _require_int("max_total_events", max_total_events, minimum=1)
    kv0 = prompt_len if kv_len is None else kv_len
    _require_int("kv_len", kv0, minimum=1)
    if dtype.lower() not in ("bf16", "bfloat16", "fp16", "float16", "fp8", "fp8_e4m3"):
        raise ValueError(f"dtype {dtype!r} is not supported by torchsim's model builders yet; valid: bf16, fp16, "
                         "fp8 (an FP8 checkpoint: decoder-layer GEMMs in FP8 E4M3, the rest bf16)")
    mb = min(pp, batch) if micro_batches is None else micro_batches
    _require_int("micro_batches", mb, minimum=1)
    if batch % mb:
        raise ValueError(f"batch {batch} is not divisible into {mb} micro-batches")
    dp = ep if tp == 1 and ep > 1 else 1  # expert parallelism with data-parallel attention: a batch share per rank
    if (batch // mb) % dp:
        raise ValueError(f"ep={ep} with tp=1 runs attention data-parallel: batch {batch // mb} (per micro-batch) is "
                         f"not divisible over {dp} ranks")
    if system is not None:  # the GPU profile `hw` in the system (or what-if system file) named
        device, system = _devices(system, max(tp, ep) * pp)
        prof = _profile(hw)
        if str(prof.name).split("+")[0] != device.name:
            raise ValueError(f"system {system!r} has {device.name} GPUs; hw is {prof.name!r}")
    else:
        prof, system = _devices(hw, max(tp, ep) * pp)
        if ep > tp > 1 and not isinstance(prof, GpuProfile):  # a 2D Tenstorrent mesh, experts over every chip
            prof, system = _devices(hw, ep * pp)
        elif ep > 1 and tp > 1 and not isinstance(prof, GpuProfile):  # a 2D Tenstorrent mesh: tp chips x ep rows
            prof, system = _devices(hw, tp * ep * pp)
    if _mesh_2d_layout(system, tp, ep) == "deepseek":  # tt-metal's DeepSeek-V3 layout: each row its own users
        dp = ep // tp
        if (batch // mb) % (dp * tp):
            raise ValueError(f"tt-metal's DeepSeek-V3 layout on {system} runs each of its {dp} rows' own users and "
                             f"splits them over the row's {tp} chips for flash MLA decode: batch {batch // mb} is not "
                             f"divisible over {dp} rows x {tp} chips (give a multiple of {dp * tp}; the demo runs 32 "
                             "users a row)")
    if tune and not isinstance(prof, GpuProfile):
        raise ValueError(f"tune=True autotunes GPU GEMM configurations; {getattr(prof, 'name', hw)!r} is not "
                         "a GPU profile (Tensix GEMMs take ttnn's own program configs)")
    fp8_checkpoint = dtype.strip().lower() in ("fp8", "fp8_e4m3", "e4m3")  # WeightPrecision.of_dtype
    if quant is not None and fp8_checkpoint and quant.strip().lower() not in ("none", "fp8"):
        raise ValueError(f"dtype='fp8' is an FP8 checkpoint and quant={quant!r} another format; give one of them "
                         "(quant='fp8' is the same as dtype='fp8')")
    _check_fp8(dtype, prof)
    _check_tensix_fp8(dtype, kv_cache, prof)
    lms = {ph: LaunchModel.for_mode(launch, prof, ph) for ph in ("prefill", "decode")}
    samples = _sample_steps(decode_steps, decode_samples)
    scenarios: list[tuple[str, int | None, int, int]] = [("prefill", None, prompt_len, 0)]
    scenarios += [("decode", s, 1, kv0 + s) for s in samples]
    disk = DiskCache() if cache else None
    plan_cache = PlanCache() if cache else None
    pkey = plan_key(model, prof, _hw_hash(prof), samples, batch=batch, prompt_len=prompt_len, kv_len=kv0,
                    preset=preset, dtype=dtype.strip().lower(), kv_cache=kv_cache, weights=weights, routing=routing,
                    fallback=fallback, tune=tune, tp=tp, ep=ep, pp=pp, micro_batches=mb, system=system,
                    quant=quant, sp=sp, max_sim_events=max_sim_events if ep > 1 else 0) if plan_cache else None
    entry = plan_cache.get(pkey, len(scenarios)) if plan_cache and pkey else None
    todo: list[KernelCall] = []
    # the simulation limit, checked as each step's calls are known (torchsim.prediction.limits)
    budget = EventBudget(str(getattr(entry, "name", model)), prof, max_sim_events, max_total_events)
    if entry is not None:  # the plans of an earlier run of the same prediction: no torch, no capture
        t_setup = t_plan = time.perf_counter()
        plans: list[Any] = list(entry.plans)
        budget.seed(entry.events.get(max_sim_events, {}))
        budget.add(c for p in plans for c in p.calls)
        w_bytes = entry.weight_bytes
        warnings, memory = _memory_fit(entry.name, prof, w_bytes, plans, tp=tp, batch=batch, kv_dtype=entry.kv_dtype,
                                       allow=allow_oversubscribe, share=mb / pp,
                                       latent=int(entry.facts.get("latent_kv_width", 0)))
    else:
        early = _speculate(model, prof, max_sim_events, disk, workers, budget, batch=batch, prompt_len=prompt_len,
                           dtype=dtype, preset=preset, tp=tp, ep=ep, pp=pp, quant=quant, tune=tune, routing=routing)
        with early or contextlib.nullcontext():  # an error before the capture takes it over stops its workers
            entry, plans, w_bytes, warnings, memory, todo, t_setup, t_plan = _capture(
                model, prof, system, scenarios, batch // mb // dp, preset=preset, dtype=dtype, kv_cache=kv_cache,
                quant=quant, routing=routing, fallback=fallback, tune=tune, tp=tp, ep=ep, pp=pp, dp=dp, mb=mb,
                batch=batch, weights=weights, workers=workers, max_sim_events=max_sim_events, disk=disk,
                allow_oversubscribe=allow_oversubscribe, prompt_len=prompt_len, kv0=kv0, decode_steps=decode_steps,
                sp=sp, budget=budget, early=early)
        if plan_cache and pkey:
            entry.events[max_sim_events] = budget.known()
            plan_cache.put(pkey, entry)
    name, precision_fp8, kv_dtype, fmt, keep = entry.name, entry.fp8, entry.kv_dtype, entry.fmt, entry.keep

    distinct = {c.key(): c for p in plans for c in p.calls}
    todo = list({**{c.key(): c for c in todo}, **{c.key(): c for c in distinct.values()
                                                   if not is_memoised(c, prof, max_sim_events)}}.values())
    simulate_many(list(distinct.values()), prof, max_events=max_sim_events, workers=workers, progress=progress,
                  disk=disk)
    # Every launch of a call is placed on its own (a split Flash-Decoding call: split kernel, gap, combine kernel).
    launched = [[(c, s) for c in p.calls for s in simulate_launches(c, prof, max_events=max_sim_events)]
                for p in plans]
    if clock_window.applies(prof):  # one clock per step under the board's averaged power limit, gaps idle
        gaps = [sum(g for _st, g in lms[sc[0]].place([s for _c, s in lc])[0])
                for sc, lc in zip(scenarios, launched, strict=True)]
        launched = [list(zip([c for c, _s in lc], clock_window.share_clock(lc, prof, idle), strict=True))
                    for lc, idle in zip(launched, gaps, strict=True)]
    sims = [[s for _c, s in lc] for lc in launched]
    t_sim = time.perf_counter()

    placed = [lms[sc[0]].place(s) for sc, s in zip(scenarios, sims, strict=True)]
    stages = [_pipelined(lms[sc[0]], lc, pp, mb, entry.layers, system) for sc, lc in zip(scenarios, launched,
                                                                                        strict=True)]
    totals = [pl[1] if st is None else st["step_s"] for pl, st in zip(placed, stages, strict=True)]
    ttft = totals[0]
    step_s = _interpolate(samples, totals[1:], decode_steps)
    step_weights = _weights(samples, decode_steps)
    step_start = [ttft + float(np.sum(step_s[:s])) for s in samples]
    clock = prof.clock_hz_value
    records: list[KernelRecord] = []
    for i, ((phase, step, _q, past), lc, (pos, _end)) in enumerate(zip(scenarios, launched, placed, strict=True)):
        base = 0.0 if phase == "prefill" else step_start[i - 1]
        w = 1.0 if phase == "prefill" else step_weights[i - 1]
        kv = past + _q
        records += [_record(c, s, phase, step, kv, j, base + st, gap, clock, w)
                    for j, ((c, s), (st, gap)) in enumerate(zip(lc, pos, strict=True))]

    floors = [(max(0.0, w_bytes - _expert_bytes(p, idle=True)) + _kv_bytes(p)) / prof.dram_bytes_per_s_value
              for p in plans[1:]]
    n_fb = len({c.key() for lc in launched for c, s in lc if s.fallback})
    assumptions = (
        *(f"approximated: {a}" for a in entry.approximations),  # models.config_fields
        *(("GEMM configurations autotuned by simulation (the fastest of up to 24 valid ones per shape)",)
          if tune else ()),
        *dict.fromkeys(lm.describe() for lm in lms.values()),
        *((_tensix_layout(plans, tp, system, ep) + "; CCL ops costed as tt-metal runs them over the Ethernet links "
           "(torchsim.sim.ccl, traced, not overlapped); weights counted as 1/tp per chip"
           + (f", the experts' as 1/{ep} (every chip its own)" if ep > tp else
              f", the experts' as 1/(tp x ep) = 1/{tp * ep}" if ep > 1 else ""),)
          if tp > 1 and not isinstance(prof, GpuProfile) else ()),
        *((f"tensor parallel over {tp} GPUs of {system} (Megatron column/row splits, vocabulary-parallel embedding "
           "and LM head; ranks symmetric: one rank simulated); all-reduce/all-gather costed as NCCL runs them on the "
           "system's links (device time, on the compute stream, not overlapped)"
           + ("; under the serving preset an all-reduce takes a serving engine's custom one-/two-stage kernel "
              "(vLLM's / TensorRT-LLM's, torchsim.sim.custom_allreduce) where that is faster on an NVLink system"
              if preset == "serving" else "")
           + "; weights counted as 1/tp of the model per GPU",)
          if tp > 1 and isinstance(prof, GpuProfile) else ()),
        *((f"pipeline parallel: {pp} stages of contiguous layers (embedding on the first, LM head on the last), "
           f"{mb} micro-batch(es) of {batch // mb} sequences per step, GPipe-style (first micro-batch through every "
           "stage + its activation sends + (micro-batches - 1) x the slowest stage); activation sends costed as "
           "NCCL send/recv (a two-rank all-to-all) on the system's links; the kernel table shows one micro-batch",)
          if pp > 1 else ()),
        *(("sequence parallel: each all-reduce is a reduce-scatter, the norms and residual adds after it run on "
           "tokens / tp, an all-gather restores every token before the next GEMM (Megatron-LM); steps whose token "
           "count tp does not divide keep the all-reduce",) if sp and tp > 1 else ()),
        *((f"expert parallel over the {ep} tensor-parallel ranks: each holds {ep}-th of the experts whole; every MoE "
           "layer costs its slowest rank's experts (from the routing counts), the other kernels rank 0's",)
          if ep > 1 and dp == 1 and isinstance(prof, GpuProfile) else ()),
        *((f"expert parallel over {ep} GPUs of {system} with data-parallel attention (DeepEP-style): each rank runs "
           f"{batch // dp} of the {batch} sequences through the model and holds {ep}-th of the experts, which see "
           "every rank's tokens (routed like this rank's); an all-to-all dispatches each token's top-k copies before "
           "the experts and another combines them after (NCCL all-to-all cost); every MoE layer costs its slowest "
           "rank's experts",)
          if dp > 1 and isinstance(prof, GpuProfile) else ()),
        f"preset {preset}; greedy sampling on device; LM head on each sequence's last token; "
        + ("contiguous KV cache in FP8 E4M3 (decode attention reads it in FP8)" if kv_dtype is not None else
           "contiguous KV cache in the model's dtype")
        + ("; FP8 checkpoint: decoder-layer GEMMs FP8 E4M3 (bf16 out, activation quantisation fused into the "
           "producing kernel), embedding/LM head/norms/prefill attention in bf16"
           if precision_fp8 and fmt is None else ""),
        *((f"weights {fmt.name}: {fmt.description}; the decoder-layer GEMMs only"
           + (f" (not {', '.join(keep)}: the checkpoint's modules_to_not_convert)" if keep else "")
           + "; embedding, LM head, norms and attention in the model's dtype"
           + ("" if fmt.weight_only else "; activation quantisation fused into the producing kernel"),)
          if fmt is not None else ()),
        f"decode steps {list(samples)} simulated, the others interpolated linearly in KV length",
        f"{n_fb} of {len(distinct)} distinct kernels are roofline estimates (no template); "
        + ("every kernel simulated in full (exact)" if exact else
           f"kernels over {max_sim_events:,} node events extrapolated from truncated instances (method column)"),
        "HBM floor uses the profile's sustained bandwidth "
        f"({prof.dram_bytes_per_s_value / 1e12:.2f} TB/s, {prof.dram_bytes_per_s.kind})",
    )
    from torchsim.sim import native  # the engine build, for the record (a warm rerun may not load the engine else)

    stats = {"distinct_kernels": len(distinct), "simulated_now": len(todo) - (disk.hits if disk else 0),
             "from_disk_cache": disk.hits if disk else 0, "fallback_kernels": n_fb,
             "proofs": list(plans[0].proofs), "weight_bytes": w_bytes, "memory": memory,
             "events": {"estimated": budget.total, "limit": max_total_events,  # torchsim.prediction.limits
                        "simulated": sum(s.events for c in distinct.values()
                                         for s in simulate_launches(c, prof, max_events=max_sim_events))},
             **({"pipeline": {"prefill": stages[0], "decode": stages[1] if len(stages) > 1 else None}}
                if pp > 1 else {}),
             "engine_build": native.ENGINE,  # the compiled engine or its Python source (torchsim.sim.native)
             **entry.facts, **({"quant": fmt.name} if fmt is not None else {})}
    timings = {"setup": t_setup - t0, "capture_plan": t_plan - t_setup, "simulate": t_sim - t_plan,
               "total": time.perf_counter() - t0}
    if callable(getattr(prof, "launch_model", None)):  # a device with its own dispatch (Tensix): what ran, per phase
        modes = [lms[ph].mode for ph in ("decode", "prefill")]
        bare = {m.split(" (")[0] for m in modes}
        launch = bare.pop() if len(bare) == 1 else ", ".join(modes)
    return Prediction(model=name, hw=prof.name, preset=preset, launch=launch, batch=batch,
                      prompt_len=prompt_len, decode_steps=decode_steps, kv_len=kv0, ttft_s=ttft,
                      decode_step_s=tuple(float(x) for x in step_s), sampled_steps=tuple(samples),
                      kernels=tuple(records), hbm_floor_s=tuple(floors), assumptions=assumptions,
                      warnings=tuple(warnings), timings_s=timings, stats=stats, tp=tp, system=system, ep=ep, pp=pp)


def _check_fp8(dtype: str, prof: Any) -> None:
    """An FP8 checkpoint on a GPU without FP8 tensor cores (an A100) is refused, as `kernel gemm --dtype fp8` is."""
    if dtype.strip().lower() in ("fp8", "fp8_e4m3", "e4m3") and isinstance(prof, GpuProfile) \
            and not prof.supports(DType.FP8_E4M3):
        raise ValueError(f"dtype='fp8' runs the decoder-layer GEMMs on FP8 tensor cores; {prof.name} has tensor cores "
                         f"for {', '.join(prof.tensor_formats())} (FP8 needs sm89 or newer: H100, H200, B200); give "
                         f"dtype bf16, or quant w8a16 for 8-bit weights")


def _check_tensix_fp8(dtype: str, kv_cache: str | None, prof: Any) -> None:
    """FP8 on a Tenstorrent chip is refused before the capture: its unpacker/packer have no FP8 data format."""
    if getattr(getattr(prof, "arch", None), "name", "") != "TENSIX":
        return
    for name, flag, value in (("dtype", "--dtype", dtype), ("kv_cache", "--kv-cache", kv_cache)):
        if value is not None and value.strip().lower() in ("fp8", "fp8_e4m3", "e4m3", "fp8_e5m2", "e5m2"):
            raise ValueError(f"{name}={value!r} ({flag}): {prof.name} has no FP8 data format (Tensix takes bf16, "
                             f"fp16, bfp8_b, bfp4_b); give {name} bf16, and for tt_transformers' block-float weights "
                             f"weights='performance' or 'accuracy' (--weights)")


def step_entry(model: Any, hw: Any, *, rows: int, q: int, past: int, dtype: str = "bf16",
               kv_cache: str | None = None, quant: str | None = None, tp: int = 1, system: str | None = None,
               preset: str = "serving", cache: bool = True) -> tuple[PlanEntry, Any, str]:
    """The plan of one forward step of `rows` sequences of `q` new tokens after `past` cached ones (torchsim.serving
    rewrites it into each engine iteration), with the model's facts and weight bytes per GPU, the device profile and
    the system: (entry, profile, system). From the plan cache when an earlier run captured the same step (no torch)."""
    _check_arguments(model, hw, strings={"dtype": dtype, "kv_cache": kv_cache, "quant": quant, "system": system},
                     flags={"cache": cache})
    for name, value in (("rows", rows), ("q", q), ("tp", tp)):
        _require_int(name, value, minimum=1)
    _require_int("past", past, minimum=0)
    if system is not None:
        device, system = _devices(system, tp)
        prof = _profile(hw)
        if str(prof.name).split("+")[0] != device.name:
            raise ValueError(f"system {system!r} has {device.name} GPUs; hw is {prof.name!r}")
    else:
        prof, system = _devices(hw, tp)
    _check_fp8(dtype, prof)
    scenarios: list[tuple[str, int | None, int, int]] = [("decode" if q == 1 else "prefill", None, q, past)]
    plan_cache = PlanCache() if cache else None
    pkey = plan_key(model, prof, _hw_hash(prof), [], step=f"{rows}x{q}+{past}", preset=preset,
                    dtype=dtype.strip().lower(), kv_cache=kv_cache, quant=quant, tp=tp,
                    system=system) if plan_cache else None
    entry = plan_cache.get(pkey, 1) if plan_cache and pkey else None
    if entry is None:
        budget = EventBudget(str(model), prof, DEFAULT_MAX_SIM_EVENTS, None)
        entry = _capture(model, prof, system, scenarios, rows, preset=preset, dtype=dtype, kv_cache=kv_cache,
                         quant=quant, routing=None, fallback=None, tune=False, tp=tp, ep=1, pp=1, dp=1, mb=1,
                         batch=rows, weights=None, workers=1, max_sim_events=DEFAULT_MAX_SIM_EVENTS, disk=None,
                         allow_oversubscribe=True, prompt_len=max(q, 1), kv0=past + q, decode_steps=0, sp=False,
                         budget=budget)[0]
        if plan_cache and pkey:
            plan_cache.put(pkey, entry)
    return entry, prof, system


def _capture(model: Any, prof: Any, system: str, scenarios: Sequence[tuple[str, int | None, int, int]],
             rows: int, *, preset: str, dtype: str, kv_cache: str | None, quant: str | None, routing: Any,
             fallback: str | None, tune: bool, tp: int, ep: int, pp: int, dp: int, mb: int, batch: int,
             weights: str | None, workers: int | None, max_sim_events: int, disk: DiskCache | None,
             allow_oversubscribe: bool, prompt_len: int, kv0: int, decode_steps: int, sp: bool,
             budget: EventBudget, early: Background | None = None) -> tuple[Any, ...]:
    """Build the model, capture and plan every scenario (the prefill's kernels simulated on worker processes
    meanwhile; `early`: those workers, already simulating the calls `_speculate` named): the plan-cache entry, the
    plans, weight bytes, memory warnings and report, the kernels already simulated, and the times setup and
    planning ended."""
    from torchsim.lowering.capture import capture_model
    from torchsim.lowering.parallel import sequence_parallel, shard_plan
    from torchsim.lowering.plan import Preset, plan_capture
    from torchsim.lowering.precision import WeightPrecision, kv_cache_dtype, weight_bytes, with_precision
    from torchsim.lowering.templates.tensix.deepseek_mesh import is_mla_moe, tt_deepseek_plan
    from torchsim.lowering.templates.tensix.mesh_plan import tt_shard_plan, tt_tp_experts_plan
    from torchsim.lowering.templates.tensix.model_config import adapt_plan, is_tensix, tensix_weight_bytes

    precision, kv_dtype = WeightPrecision.of_dtype(dtype), kv_cache_dtype(kv_cache)
    name, cfg, module = _resolve_model(model, "bf16" if precision is WeightPrecision.FP8 else dtype)
    fmt, keep, tt_experts = _resolve_quant(quant, cfg, prof)
    if fmt is not None and fmt.name == "fp8":  # per-tensor FP8: the FP8 checkpoint's plan
        precision = WeightPrecision.FP8
    ctx_len = _context(cfg)
    if ep > 1 and not _has_experts(cfg):
        raise ValueError(f"ep={ep}: {name} has no MoE layers (expert parallelism splits the experts of MoE layers)")
    for what, start in (("prompt_len", prompt_len), ("kv_len", kv0)):
        if ctx_len and start + decode_steps > ctx_len:
            raise ValueError(f"{what} ({start}) + decode_steps ({decode_steps}) = {start + decode_steps} tokens "
                             f"exceeds {name}'s context of {ctx_len} tokens")
    routing = _resolve_routing(routing, cfg, batch * prompt_len)
    layout_2d = _mesh_2d_layout(system, tp, ep)
    mla_layout = layout_2d == "deepseek"
    if is_tensix(prof) and (pp > 1 or (sp and tp > 1) or (ep > 1 and not layout_2d)):
        raise ValueError(f"ep={ep}, pp={pp}, sp={sp}: on Tenstorrent meshes tensor parallelism is modelled "
                         "(tt_transformers' 1D layout, tt-metal's MoE layouts), and expert parallelism only on a "
                         "Galaxy: tt-metal's gpt-oss 2D layout (--hw galaxy --tp 8 --ep 4: experts over the mesh's 4 "
                         "rows, each split over a row's 8 chips) or its DeepSeek-V3 one (--hw galaxy --tp 8 --ep 32: "
                         "experts over every chip, each row its own users); run with --tp alone")
    t_setup = time.perf_counter()

    plans: list[KernelPlan] = []
    todo: list[KernelCall] = []
    with early or Background(prof, max_sim_events, 1, disk, cost=budget.estimate) as bg:
        for _phase, _step, q, past in scenarios:
            cap = capture_model(module, rows, q, past)
            plan = with_precision(plan_capture(cap, Preset.parse(preset), routing=routing,
                                               fallback=fallback == "roofline"),
                                  precision, kv_dtype, None if fmt is None or fmt.name == "fp8" else fmt, keep)
            if mla_layout:  # tt-metal's DeepSeek-V3 layout (its own formats, set on the calls)
                mesh = _mesh(system)
                if not is_mla_moe(plan):
                    raise ValueError(f"ep={ep} over every chip of {system} is tt-metal's DeepSeek-V3 layout (MLA "
                                     f"attention and routed experts); {name} has not both: use --tp "
                                     f"{int(mesh.mesh_cols.value)} --ep {int(mesh.mesh_rows.value)} for an MoE "
                                     "model's experts over the rows")
                plan = tt_deepseek_plan(plan, int(mesh.mesh_rows.value), int(mesh.mesh_cols.value), system)
                plan = adapt_plan(plan, prof, weights, tt_experts, name)
            elif ep > 1 and is_tensix(prof):  # a Galaxy's rows: each its own experts, the slowest row's
                ranks = [adapt_plan(tt_tp_experts_plan(plan, tp, system, ep=ep, rank=r), prof, weights, tt_experts,
                                    name) for r in range(ep)]
                budget.add(c for p in ranks for c in p.calls)
                plan = _slowest_experts(ranks, prof, max_sim_events, workers, disk)
            elif ep > 1:
                ranks = [shard_plan(plan, tp, system, ep=ep, rank=r) for r in range(ep)]
                budget.add(c for p in ranks for c in p.calls)  # _slowest_experts simulates the ranks' experts
                plan = _slowest_experts(ranks, prof,
                                        max_sim_events, workers, disk)
            elif tp > 1 and is_tensix(prof):  # tt_transformers' 1D layout and tt-metal's CCL ops
                plan = tt_shard_plan(plan, tp, system, ring=_mesh(system).topology(tp) == "ring")
            elif tp > 1:
                plan = shard_plan(plan, tp, system)
                plan = sequence_parallel(plan, tp, system) if sp else plan
            if not (ep > 1 and is_tensix(prof)):
                plan = adapt_plan(plan, prof, weights, tt_experts, name)  # Tensix: tt_transformers' ops, formats
            plans.append(_tuned(plan) if tune else plan)
            if len(plans) == 1:  # the speculated calls the workers have simulated: their estimates counted there
                budget.seed(bg.estimates())
            budget.add(plans[-1].calls)  # before this step's kernels are simulated (an error stops the workers)
            if len(plans) == 1 and len(scenarios) > 1:
                # the prefill's kernels are simulated on worker processes while the decode steps are captured
                todo = [c for c in {c.key(): c for c in plans[0].calls}.values()
                        if not is_memoised(c, prof, max_sim_events)]
                if not bg.started:
                    bg.workers = workers or auto_workers(todo)
                if bg.started or bg.workers > 1:
                    bg.submit(todo)
        t_plan = time.perf_counter()
        w_bytes = (tensix_weight_bytes(module, prof, weights, tt_experts, name)
                   or weight_bytes(module, precision, fmt, keep)) / (tp * pp)
        if dp > 1 or (ep > 1 and is_tensix(prof)):  # every rank (a Galaxy's row) holds only 1/ep of the experts
            experts = _expert_bytes(plans[-1])  # this rank's
            w_bytes -= experts * ((ep // tp if mla_layout else ep) - 1) / pp  # (DeepSeek: 1/tp of them counted)
        # before the decode steps are simulated (an error stops the prefill's workers at once)
        warnings, memory = _memory_fit(name, prof, w_bytes, plans, tp=tp, batch=batch, kv_dtype=kv_dtype,
                                       allow=allow_oversubscribe, share=mb / pp,
                                       latent=int(getattr(cfg, "latent_kv_width", 0) or 0))
        if bg.futures:  # this process simulates the decode steps' kernels meanwhile
            rest = [c for p in plans[1:] for c in p.calls if c.key() not in bg.keys]
            simulate_many(rest, prof, max_events=max_sim_events, workers=1, disk=disk)
        bg.wait(needed={c.key() for p in plans for c in p.calls})
    entry = PlanEntry(name=name, preset=preset, fp8=precision is WeightPrecision.FP8, kv_dtype=kv_dtype, fmt=fmt,
                      keep=keep, plans=tuple(StepPlan(p.calls, p.proofs) for p in plans), weight_bytes=w_bytes,
                      facts={**_model_facts(cfg, module, kv_dtype),
                             **_tensix_formats(prof, weights, tt_experts, name, mla_layout)},
                      approximations=tuple(getattr(cfg, "approximations", ())), layers=_layers(cfg))
    return entry, plans, w_bytes, warnings, memory, todo, t_setup, t_plan


def _speculate(model: Any, prof: Any, max_sim_events: int, disk: DiskCache | None, workers: int | None,
               budget: EventBudget, **args: Any) -> Background | None:
    """Worker processes already simulating the prefill kernels `torchsim.prediction.speculate` names for this
    prediction, started before torch is imported (the capture that follows keeps this process busy for seconds);
    None where it names none, or the prediction is to run on one process."""
    from torchsim.prediction import speculate
    from torchsim.prediction.workers import cpus

    n = workers or cpus()
    calls = speculate.prefill_calls(model, prof, **args) if n > 1 else []
    if not calls:
        return None
    bg = Background(prof, max_sim_events, n, disk, cost=budget.estimate, count=estimate)
    try:
        bg.speculate(calls)
    except BaseException:
        bg.__exit__(*sys.exc_info())
        raise
    return bg


def _record(c: KernelCall, s: KernelSim, phase: str, step: int | None, kv: int, order: int, start_s: float,
            gap_s: float, clock: float, weight: float) -> KernelRecord:
    return KernelRecord(
        name=f"{c.name}.combine" if s.template.endswith("/combine") else c.name, kind=c.kind.value,
        template=s.template, config=s.config,
        shapes=",".join(f"{k}={v}" for k, v in c.params if k not in ("op", "roofline")), params=c.params,
        dtype=c.dtype.name.lower(), phase=phase, decode_step=step, kv_len=kv, layer=c.layer, stream=c.stream,
        order=order, start_cycles=int(round(start_s * clock)), duration_cycles=int(round(s.time_s * clock)),
        start_us=start_s * 1e6,
        duration_us=s.time_s * 1e6, gap_us=gap_s * 1e6, flops=s.flops, dram_bytes=s.dram_bytes,
        l2_hit_rate=s.l2_hit_rate, unit_util=s.unit_util, stalls=s.stalls, bound=s.bound,
        module_path=c.module_path, source=c.source, fallback=s.fallback, method=s.method, weight=weight)


def _tuned(plan: KernelPlan) -> KernelPlan:
    """The plan with its GEMMs autotuned by simulation (the `tune` parameter the GEMM template reads); quantised
    GEMMs keep their format's kernels' tiles."""
    calls = tuple(c.with_params(tune=True)
                  if c.kind is KernelKind.GEMM and not c.p("variant", "") and not c.p("quant", "") else c
                  for c in plan.calls)
    return replace(plan, calls=calls)


def _mesh_2d_layout(system: str, tp: int, ep: int) -> str:
    """Which of tt-metal's layouts over a 2D Tenstorrent mesh `tp` x `ep` names: "deepseek" (`ep` = every chip,
    rows of `tp`: its DeepSeek-V3 layout), "gpt-oss" (`ep` rows of `tp` chips: its gpt-oss mesh_4x8 layout), or ""
    (no 2D mesh, or neither shape)."""
    if not system or ep <= 1:
        return ""
    mesh = _mesh(system)
    if not getattr(mesh, "two_d", False) or tp != int(mesh.mesh_cols.value):
        return ""
    return "deepseek" if ep == mesh.devices else "gpt-oss" if ep == int(mesh.mesh_rows.value) else ""


def _tensix_layout(plans: Sequence[KernelPlan], tp: int, system: str, ep: int = 1) -> str:
    """How a Tenstorrent mesh's plan was laid out (torchsim.lowering.templates.tensix.mesh_plan), for the
    assumptions: tt-metal's gpt-oss layout keeps grouped GEMMs (each expert split over the chips), its Mixtral
    layout a router beside dense expert GEMMs, tt_transformers' dense layout neither."""
    calls = [c for p in plans for c in p.calls]
    where = f"tensor parallel over {tp} chips of {system}"
    if ep > tp:
        return (f"tt-metal's DeepSeek-V3 layout on {system} (models/demos/deepseek_v3; torchsim.lowering.templates."
                f"tensix.deepseek_mesh): each row of {tp} chips its own users, attention and dense MLPs tensor "
                f"parallel along the row (MLA's head shards turned into user shards by an all-to-all for flash MLA "
                f"decode), the routed experts whole over all {ep} chips, run dense over the tokens dispatched down "
                "the column (all_to_all_dispatch / combine); prefill: the prompt split over the rows, the attention "
                "on all of it per row (in its captured non-absorbed form)")
    if ep > 1:
        return (f"tensor parallel over the {tp} chips of a row and expert parallel over the {ep} rows of {system} "
                f"in tt-metal's gpt-oss 2D layout (MeshConfig mesh_4x8 decode: each row holds 1/{ep} of the experts, "
                f"each split over the row's chips; attention replicated down the columns; after the experts' "
                "combine an all-reduce down the column (cluster axis 0), then along the row; the slowest row's "
                "experts; prefill laid out as decode (the demo prefills sequence-parallel over the rows, SP=4, EP=1: "
                "not modelled); torchsim.lowering.templates.tensix.mesh_plan.tt_tp_experts_plan)")
    if any(c.kind is KernelKind.GROUPED_GEMM for c in calls):
        return (f"{where} in tt-metal's gpt-oss layout (MeshConfig mesh_1x8: residual replicated, heads and every "
                "expert split over the chips, the router on every chip, an all-reduce after WO and after the experts; "
                "torchsim.lowering.templates.tensix.mesh_plan.tt_tp_experts_plan)")
    if any(c.kind is KernelKind.ROUTER_TOPK for c in calls):
        return (f"{where} in tt-metal's Mixtral T3000 layout (an expert per chip over every token, residual "
                "replicated, WO's and the experts' partial outputs all-gathered and summed; "
                "torchsim.lowering.templates.tensix.mesh_plan.tt_expert_plan)")
    return (f"{where} as tt_transformers lays a model out on a 1D mesh (residual stream fractured over the chips, "
            "an all-gather before each RMSNorm, column-parallel QKV/FF1/FF3, row-parallel FF2 and WO + "
            "reduce-scatter, or on a ring an all-gather feeding a column-parallel WO, vocabulary-split LM head; "
            "torchsim.lowering.templates.tensix.mesh_plan)")


def _tensix_formats(prof: Any, weights: str | None, experts: Any, model: str | None = None,
                    deepseek: bool = False) -> dict[str, str]:
    """On a Tensix profile, the formats its weights are stored in (the summary's model line): tt_transformers'
    per-role formats of the weights mode (and the model's own branch of them), and the experts' format an MXFP4
    checkpoint fixes; `deepseek`: the DeepSeek-V3 demo's own formats."""
    from torchsim.lowering.templates.tensix.deepseek_mesh import FORMATS
    from torchsim.lowering.templates.tensix.model_config import WeightMode, is_tensix, model_precision

    if not is_tensix(prof):
        return {}
    if deepseek:
        return {"weights_format": FORMATS}
    mode = WeightMode.parse(weights)
    rule = model_precision(mode, model).rule
    extra = f" ({rule})" if rule else ""
    extra += f"; experts {experts.name.lower()} (mxfp4 checkpoint)" if experts is not None else ""
    return {"weights_format": f"tt_transformers {mode.value} formats{extra}"}


def _model_facts(cfg: Any, module: Any, kv_dtype: Any) -> dict[str, Any]:
    """What was understood of the model: its family, parameter count and KV-cache bytes per token."""
    hf_type = getattr(cfg, "model_type", "")
    family = f"{hf_type} (HF transformers)" if hf_type else str(getattr(cfg, "family", type(module).__name__))
    facts: dict[str, Any] = {"family": family, "params": int(sum(p.numel() for p in module.parameters())),
                             "context": _context(cfg)}
    if hasattr(cfg, "kv_bytes_per_token"):
        facts["kv_bytes_per_token"] = int(cfg.kv_bytes_per_token(1 if kv_dtype is not None else 2))
    if getattr(cfg, "latent_kv_width", 0):  # MLA: the latent row each token caches per layer (memory fit)
        facts["latent_kv_width"] = int(cfg.latent_kv_width)
    return facts


def _resolve_quant(quant: str | None, cfg: Any, prof: Any) -> tuple[QuantFormat | None, tuple[str, ...], Any]:
    """The weight format (given, else the config's quantization_config), the module patterns it leaves in the
    model's dtype, and on a Tensix profile the MoE experts' format an MXFP4 checkpoint fixes (tt-metal's gpt-oss demo
    stores them as bfloat4_b; the GPU format is then None); a format `prof` cannot run raises naming what it has."""
    from torchsim.lowering.templates.tensix.model_config import MXFP4_EXPERTS, is_tensix

    keep: tuple[str, ...] = ()
    if quant is None:
        quant = str(getattr(cfg, "quant", "") or "") or None
        keep = tuple(getattr(cfg, "quant_keep", ()) or ())
    if quant is None or quant.strip().lower() in ("none", ""):
        return None, (), None
    fmt = parse_quant(quant)
    if fmt.name == "mxfp4" and is_tensix(prof):
        if not _has_experts(cfg):
            raise ValueError(f"quantisation 'mxfp4' on {prof.name} stores an MoE model's experts as bfp4_b (tt-metal's "
                             f"gpt-oss); {getattr(cfg, 'name', 'this model')} has no experts: Tenstorrent profiles "
                             "take --weights performance|accuracy (bfp8_b/bfp4_b) for dense models")
        return None, (), MXFP4_EXPERTS
    mla = int(getattr(cfg, "latent_kv_width", 0) or 0)
    if fmt.name == "fp8-block" and is_tensix(prof) and _has_experts(cfg) and mla:
        return None, (), None  # DeepSeek-V3's FP8 checkpoint: tt-metal's demo dequantises it into its block-floats
    check_supported(fmt, prof)
    return fmt, keep, None


def _require_int(name: str, value: Any, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _check_arguments(model: Any, hw: Any, *, strings: dict[str, Any], flags: dict[str, Any], routing: Any = None,
                     workers: Any = None) -> None:
    """The types of predict()'s (and step_entry()'s) arguments, before any work: a wrong one is a ValueError naming
    the argument and what is valid, not an AttributeError from deep inside the pipeline."""
    import dataclasses
    import sys

    torch = sys.modules.get("torch")  # an nn.Module exists only once torch is imported
    module = torch is not None and isinstance(model, torch.nn.Module)
    if isinstance(model, bool) or not (isinstance(model, (str, Path)) or module or (
            dataclasses.is_dataclass(model) and not isinstance(model, type))):
        hint = " (a config.json's fields: write them to a file and pass its path)" if isinstance(model, dict) else ""
        raise ValueError(f"model must be a model name (e.g. 'llama3-8b'), a config.json path or directory, a "
                         f"torchsim config (LlamaConfig, MixtralConfig, HFDecoderConfig) or a torch nn.Module; got "
                         f"{type(model).__name__} {model!r:.60}{hint}")
    from torchsim.hwmodels.tensix.profiles import TensixProfile

    if not isinstance(hw, (str, GpuProfile, TensixProfile)):
        raise ValueError(f"hw must be a hardware profile name (e.g. 'h100-sxm'), a system name, a what-if .toml path "
                         f"(a str) or a GpuProfile/TensixProfile; got {type(hw).__name__} {hw!r:.60}")
    for name, value in strings.items():
        if value is not None and not isinstance(value, str):
            raise ValueError(f"{name} must be a str or None; got {type(value).__name__} {value!r:.60}")
    for name, value in flags.items():
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"{name} must be True or False; got {type(value).__name__} {value!r:.60}")
    if workers is not None:
        _require_int("workers", workers, minimum=1)
    system = strings.get("system")
    if system is not None and not system.strip().lower().endswith(".toml"):
        from torchsim.hwmodels.systems import is_system, system_names

        if not is_system(system):
            raise ValueError(f"system {system!r} is not a multi-device system; valid: {', '.join(system_names())} "
                             "or a what-if .toml based on one (a single GPU such as 'h100-sxm' is hw=)")
    if routing is not None and not isinstance(routing, (str, Path)):
        from torchsim.models.routing_counts import RoutingCounts

        if not isinstance(routing, RoutingCounts):
            raise ValueError(f"routing must be None, a pattern name (e.g. 'balanced'), a .json/.parquet routing "
                             f"file or a RoutingCounts; got {type(routing).__name__} {routing!r:.60}")


def _has_experts(cfg: Any) -> bool:
    """Whether a config has MoE layers (torchsim's Mixtral config, or an HF config's own expert count field)."""
    import json

    fields = ("experts", "num_local_experts", "num_experts", "n_routed_experts")
    hf = json.loads(getattr(cfg, "hf_json", "{}") or "{}")
    return any(getattr(cfg, a, None) or hf.get(a) for a in fields)


def _expert_bytes(plan: KernelPlan, idle: bool = False) -> float:
    """Weight bytes of the MoE experts a plan's grouped GEMMs hold (each expert's n x k per GEMM); `idle`: only
    those routed no token, which a decode step does not read, so the HBM floor leaves them out (a batch-1 step of a
    top-4-of-32 model reads an eighth of its experts). On Tensix the weights' format is the call's `in1_dtype`."""
    from torchsim.graph import DType

    def nbytes(c: KernelCall) -> float:
        return DType.parse(str(c.p("in1_dtype"))).nbytes if c.p("in1_dtype", "") else c.dtype.nbytes

    return float(sum(sum(1 for t in c.p("tokens_per_expert") if not (idle and t)) * c.p("n") * c.p("k")
                     * nbytes(c) for c in plan.calls if c.kind is KernelKind.GROUPED_GEMM))


def _layers(cfg: Any) -> int:
    return int(getattr(cfg, "num_hidden_layers", 0) or getattr(cfg, "layers", 0) or 0)


def _pipelined(lm: LaunchModel, launched: Sequence[tuple[KernelCall, KernelSim]], pp: int, mb: int, layers: int,
               system: str) -> dict[str, Any] | None:
    """One step through `pp` pipeline stages with `mb` micro-batches (GPipe-style), or None when pp = 1."""
    if pp == 1:
        return None
    if layers < pp:
        raise ValueError(f"pp={pp} stages need at least {pp} layers; the model has {layers}")
    from torchsim.hwmodels.systems import get_system
    from torchsim.sim.collectives import collective_cost

    per: list[list[KernelSim]] = [[] for _ in range(pp)]
    send_bytes = 0
    for c, s in launched:
        stage = (c.layer * pp // layers if c.layer is not None else 0 if c.name.startswith("head") else pp - 1)
        per[stage].append(s)
        if c.kind is KernelKind.ADD_RMSNORM or c.kind is KernelKind.RMSNORM:  # the residual stream's width
            send_bytes = max(send_bytes, c.p("rows") * c.p("hidden") * 2)
    stage_s = [lm.place(ss)[1] for ss in per]
    send = collective_cost("all-to-all", get_system(system), 2, 2 * max(send_bytes, 1)).time_s  # p2p, each way
    step = sum(stage_s) + (pp - 1) * send + (mb - 1) * max(stage_s)
    busy = mb * sum(stage_s)  # stage-seconds of work in the step
    return {"step_s": step, "stage_s": stage_s, "send_s": send, "micro_batches": mb,
            "bubble": 1.0 - busy / (pp * step)}


def _slowest_experts(ranks: Sequence[KernelPlan], prof: Any, max_events: int, workers: int | None,
                     disk: DiskCache | None) -> KernelPlan:
    """Rank 0's plan with each layer's MoE expert kernels taken from the rank whose experts take longest (the
    block's all-reduce waits for it). The rank plans have the same calls in the same order."""
    moe = [i for i, c in enumerate(ranks[0].calls)
           if c.kind is KernelKind.GROUPED_GEMM or (c.kind is KernelKind.SILU_MUL and ".experts" in c.name)]
    calls = list({c.key(): c for p in ranks for i in moe for c in (p.calls[i],)}.values())
    simulate_many(calls, prof, max_events=max_events, workers=workers, disk=disk)
    by_layer: dict[int | None, list[int]] = {}
    for i in moe:
        by_layer.setdefault(ranks[0].calls[i].layer, []).append(i)
    out = list(ranks[0].calls)
    for idx in by_layer.values():
        cost = [sum(s.time_s for i in idx for s in simulate_launches(p.calls[i], prof, max_events=max_events))
                for p in ranks]
        slow = ranks[max(range(len(ranks)), key=lambda r: (cost[r], -r))]  # the first of equals
        for i in idx:
            out[i] = slow.calls[i]
    return replace(ranks[0], calls=tuple(out))


def _devices(hw: Any, ranks: int) -> tuple[Any, str]:
    """The device profile and, for ranks > 1 (tp x pp GPUs), the name of the multi-GPU system it runs in."""
    from torchsim.hwmodels.systems import builtin_system, get_system, is_system, system_for

    if isinstance(hw, str) and is_system(hw):  # a built-in system, or a what-if file based on one
        what_if = hw.strip().lower().endswith(".toml")
        system = get_system(hw.strip()) if what_if else builtin_system(hw)
        if ranks > system.devices:
            what = "GPUs" if isinstance(system.device, GpuProfile) else "chips"
            raise ValueError(f"{ranks} {what} (max(tp, ep) x pp); {system.name} has {system.devices}")
        return system.device, str(Path(hw.strip()).resolve()) if what_if else system.name
    prof = _profile(hw)
    if ranks == 1:
        return prof, ""
    what = "GPUs" if isinstance(prof, GpuProfile) else "chips"
    try:
        system = system_for(prof.name.split("+")[0], ranks)  # a non-default issue policy renames it NAME+POLICY
    except KeyError as exc:
        raise ValueError(f"{ranks} {what} (max(tp, ep) x pp): {exc.args[0]}") from None
    if ranks > system.devices:
        raise ValueError(f"{ranks} {what} (max(tp, ep) x pp); {system.name} ({prof.name}) has {system.devices}")
    return prof, system.name


def _mesh(system: str) -> Any:
    from torchsim.hwmodels.systems import get_system

    return get_system(system)


def _profile(hw: Any) -> Any:
    if isinstance(hw, str):
        from torchsim.hwmodels import get_profile

        return get_profile(hw)  # KeyError listing the known profiles
    return hw


@lru_cache(maxsize=4)
def _build(cfg: Any, dtype: str) -> Any:
    import torch

    from torchsim.models.registry import build_model

    model = build_model(cfg)
    return model.to(torch.float16) if dtype.lower() in ("fp16", "float16") else model


def _resolve_model(model: Any, dtype: str) -> tuple[str, Any, Any]:
    from torch import nn

    from torchsim.models.registry import get_config

    if isinstance(model, nn.Module):
        cfg = getattr(model, "config", None) or getattr(model, "cfg", None)
        return str(getattr(cfg, "name", type(model).__name__)), cfg, model
    cfg = get_config(model) if isinstance(model, (str, Path)) else model
    return str(getattr(cfg, "name", model)), cfg, _build(cfg, dtype)


def _context(cfg: Any) -> int:
    for attr in ("max_context", "max_position_embeddings", "max_seq_len"):
        v = getattr(cfg, attr, None)
        if isinstance(v, int) and v > 0:
            return v
    return 0


def _resolve_routing(routing: Any, cfg: Any, tokens: int) -> Any:
    """A routing spec (pattern name or file path) becomes RoutingCounts for the model; objects pass through."""
    if routing is None or not isinstance(routing, (str, Path)):
        return routing
    experts = getattr(cfg, "experts", None) or getattr(cfg, "num_local_experts", None)
    if not experts:
        raise ValueError(f"routing {str(routing)!r} given, but model {getattr(cfg, 'name', cfg)!r} has no MoE "
                         "layers; routing applies to Mixtral-family models")
    from torchsim.models.routing import resolve_routing

    layers = getattr(cfg, "layers", None) or cfg.num_hidden_layers
    top_k = getattr(cfg, "top_k", None) or cfg.num_experts_per_tok
    return resolve_routing(routing, num_layers=layers, num_experts=experts, top_k=top_k, tokens=tokens)


def _sample_steps(steps: int, samples: int) -> list[int]:
    if steps <= samples:
        return list(range(steps))
    return sorted({int(round(x)) for x in np.linspace(0, steps - 1, samples)})


def _interpolate(samples: Sequence[int], times: Sequence[float], steps: int) -> np.ndarray:
    if not steps:
        return np.zeros(0)
    return np.interp(np.arange(steps), np.asarray(samples, dtype=float), np.asarray(times, dtype=float))


def _weights(samples: Sequence[int], steps: int) -> list[float]:
    """Decode steps each simulated step stands for under linear interpolation (they sum to `steps`)."""
    out = []
    for i in range(len(samples)):
        one_hot = np.zeros(len(samples))
        one_hot[i] = 1.0
        out.append(float(_interpolate(samples, one_hot.tolist(), steps).sum()))
    return out


def _kv_bytes(plan: KernelPlan, latent: int = 0) -> float:
    """KV-cache bytes the step's attention kernels read, which the cache holds: a sliding layer's window of each
    sequence, a global layer's whole sequence (varlen.cached_kv_tokens). Multi-head latent attention (DeepSeek)
    caches one latent row per token (`latent` wide: 576 = 512 + 64 RoPE dims, the MLA decode's head dim), which
    K and V share: its decode reads that, and its prefill's decompressed K/V (heads x 192 and 128, transient)
    stand for the latent rows the step writes, so with `latent` given a prefill attention whose V is narrower
    than its Q/K counts those."""
    from torchsim.lowering.templates.varlen import cached_kv_tokens

    total = 0.0
    for c in plan.calls:
        kv = DType.parse(c.p("kv_dtype", "")) if c.p("kv_dtype", "") else c.dtype  # Tensix: bfp8_b cache
        if c.kind is KernelKind.MLA_DECODE:
            total += cached_kv_tokens(c) * c.p("head_dim") * kv.nbytes
        elif c.kind is KernelKind.ATTENTION_PREFILL and latent and c.p("head_dim_v", 0) not in (0, c.p("head_dim")):
            total += cached_kv_tokens(c) * latent * kv.nbytes
        elif c.kind in (KernelKind.ATTENTION_DECODE, KernelKind.ATTENTION_PREFILL):
            total += 2.0 * cached_kv_tokens(c) * c.p("heads_kv") * c.p("head_dim") * kv.nbytes
    return total


def _latent_width(plans: Sequence[KernelPlan]) -> int:
    """The latent row an MLA model caches per token (its MLA decode's head dim), 0 for other models."""
    return max((int(c.p("head_dim")) for p in plans for c in p.calls if c.kind is KernelKind.MLA_DECODE), default=0)


def _activation_bytes(plan: KernelPlan) -> float:
    """The largest tensor one kernel of the step writes (GEMM outputs, logits): the transient memory a forward
    pass needs beside weights and KV cache, at least (the caching allocator keeps a few of them alive)."""
    out = 0.0
    for c in plan.calls:
        if c.kind is KernelKind.GEMM:
            out = max(out, c.p("m") * c.p("n") * c.p("batch", 1) * 2.0)
        elif c.kind is KernelKind.GROUPED_GEMM:
            out = max(out, sum(c.p("tokens_per_expert")) * c.p("n") * 2.0)
    return out


def _memory_fit(name: str, prof: Any, weight_bytes: float, plans: Sequence[KernelPlan], *, tp: int, batch: int,
                kv_dtype: Any, allow: bool, share: float = 1.0, latent: int = 0) -> tuple[list[str], dict[str, Any]]:
    """Weights + KV cache (at the last step's length) + activations per GPU against its memory: a report, and
    an error naming what would fit when it does not (a warning with `allow`). `share`: the part of the plans' KV
    one GPU holds (pipeline parallelism: its stage's layers, for every micro-batch). `latent`: an MLA model's
    cached latent row width from its config, which a prefill-only prediction (no MLA decode call to read it from)
    counts its cache in."""
    latent = max(_latent_width(plans), latent)
    kv = max((_kv_bytes(p, latent) for p in plans), default=0.0) * share
    act = max((_activation_bytes(p) for p in plans), default=0.0)
    cap = float(prof.dram_bytes.value) if hasattr(prof, "dram_bytes") else 0.0
    need = weight_bytes + kv + act
    per_seq = (kv + act) / batch
    fits = int((cap - weight_bytes) // per_seq) if cap and per_seq and cap > weight_bytes else 0
    report = {"capacity_bytes": cap, "weight_bytes": weight_bytes, "kv_bytes": kv, "activation_bytes": act,
              "total_bytes": need, "max_batch": fits}
    if not cap or need <= cap:
        return [], report
    gib = 2.0**30
    unit = "GPU" if isinstance(prof, GpuProfile) else "chip"
    would = []
    for more in (2, 4, 8):  # weights and KV heads split over more ranks (KV replication ignored here)
        if more > tp and need * tp / more <= cap:
            would.append(f"--tp {more} ({need * tp / more / gib:.1f} GiB per {unit})")
            break
    if fits >= 1:
        would.append(f"--batch {fits} (the largest that fits at this context)")
    if kv_dtype is None and weight_bytes + kv / 2 + act <= cap:
        would.append("an FP8 KV cache (--kv-cache fp8)")
    msg = (f"{name} needs {weight_bytes / gib:.1f} GiB of weights + {kv / gib:.1f} GiB of KV cache + "
           f"{act / gib:.1f} GiB of activations = {need / gib:.1f} GiB per {unit}, {(need - cap) / gib:.1f} GiB more "
           f"than {prof.name}'s {cap / gib:.1f} GiB; "
           + (f"it would fit with {' or '.join(would)}" if would else f"it does not fit with more {unit}s of this "
              "system or a smaller batch either"))
    if not allow:
        raise MemoryFitError(msg + "; pass allow_oversubscribe=True (--allow-oversubscribe) to predict it anyway")
    import warnings

    msg += "; predicted anyway (allow_oversubscribe), as if it fit"
    warnings.warn(msg, MemoryWarning, stacklevel=3)
    return [msg], report
