"""torchsim.predict: a model name (or module, or config) + a GPU -> TTFT, time per output token, every kernel.

The top of the pipeline: capture (lowering.capture) -> plan (lowering.plan) -> simulate each distinct kernel
once (torchsim.prediction.kernel_sim) -> place kernels on a stream with a launch/host model -> Prediction. Decode steps
are simulated at a few KV lengths and interpolated linearly in between.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from torchsim.graph.kinds import DType
from torchsim.hwmodels.gpu import GpuProfile
from torchsim.lowering.capture import capture_model
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.plan import KernelPlan, Preset, plan_capture
from torchsim.lowering.precision import WeightPrecision, kv_cache_dtype, weight_bytes, with_precision
from torchsim.lowering.templates.tensix.model_config import adapt_plan, tensix_weight_bytes
from torchsim.prediction.cache import DiskCache
from torchsim.prediction.kernel_sim import (
    DEFAULT_MAX_SIM_EVENTS,
    Background,
    KernelSim,
    auto_workers,
    is_memoised,
    simulate_launches,
    simulate_many,
)
from torchsim.prediction.launch import LAUNCH_MODES, LaunchModel
from torchsim.prediction.records import KernelRecord, MemoryWarning, Prediction


def predict(model: Any = "llama3-8b", hw: Any = "h100-sxm", *, prompt_len: int = 2048, decode_steps: int = 128,
            kv_len: int | None = None, batch: int = 1, preset: str | Preset = "serving", launch: str | None = None,
            dtype: str = "bf16", kv_cache: str | None = None, weights: str | None = None, routing: Any = None,
            fallback: str | None = None, decode_samples: int = 3, max_sim_events: int = DEFAULT_MAX_SIM_EVENTS,
            workers: int | None = None, cache: bool = True, progress: bool = False, tune: bool = False,
            exact: bool = False) -> Prediction:
    """Predict prefill of `prompt_len` tokens and `decode_steps` decode steps for `batch` sequences on `hw`.

    `kv_len` is the KV length at the first decode step (default `prompt_len`); step t attends over
    kv_len + t + 1 tokens. `launch` defaults to CUDA graphs for `serving` and eager launches for `eager`
    (on Tensix: metal trace for decode, host dispatch for prefill, as tt_transformers runs them). `weights`
    ("performance" | "accuracy", Tensix only) picks tt_transformers' data formats and fidelities per weight role.
    `dtype="fp8"` is an FP8 checkpoint (decoder-layer GEMMs in FP8 E4M3); `kv_cache="fp8"` an FP8 KV cache.
    Kernels above `max_sim_events` node executions are extrapolated from truncated instances of their repeating
    dimensions (torchsim.prediction.repeats; `exact=True` simulates every kernel in full).
    Distinct kernels are simulated once per process (memoised), on `workers` processes when the work is large,
    and kept in the on-disk cache (torchsim.prediction.cache; `cache=False` skips it). `tune=True` (GPU profiles)
    gives every GEMM the simulated autotuner's configuration (lowering.templates.tune: the fastest of a bounded set
    of valid configurations, the default among them) instead of the one-shot heuristic.

    >>> p = predict("llama-tiny", "h100-sxm", prompt_len=32, decode_steps=4)
    >>> p.ttft_s > 0 and len(p.decode_step_s) == 4
    True
    """
    t0 = time.perf_counter()
    if exact:
        from torchsim.prediction.kernel_sim import EXACT

        max_sim_events = EXACT
    preset = Preset.parse(preset)
    launch = launch or ("cuda-graphs" if preset is Preset.SERVING else "eager")
    if launch not in LAUNCH_MODES:
        raise ValueError(f"unknown launch mode {launch!r}; valid: {', '.join(LAUNCH_MODES)}")
    if fallback not in (None, "roofline", "none"):
        raise ValueError(f"unknown fallback {fallback!r}; valid: roofline, none")
    for name, value in (("batch", batch), ("prompt_len", prompt_len), ("decode_samples", decode_samples),
                        ("max_sim_events", max_sim_events)):
        _require_int(name, value, minimum=1)
    _require_int("decode_steps", decode_steps, minimum=0)
    kv0 = prompt_len if kv_len is None else kv_len
    if tune and not isinstance(_profile(hw), GpuProfile):
        raise ValueError(f"tune=True autotunes GPU GEMM configurations; {getattr(_profile(hw), 'name', hw)!r} is not "
                         "a GPU profile (Tensix GEMMs take ttnn's own program configs)")
    _require_int("kv_len", kv0, minimum=1)
    if dtype.lower() not in ("bf16", "bfloat16", "fp16", "float16", "fp8", "fp8_e4m3"):
        raise ValueError(f"dtype {dtype!r} is not supported by torchsim's model builders yet; valid: bf16, fp16, "
                         "fp8 (an FP8 checkpoint: decoder-layer GEMMs in FP8 E4M3, the rest bf16)")
    precision, kv_dtype = WeightPrecision.of_dtype(dtype), kv_cache_dtype(kv_cache)
    prof = _profile(hw)
    name, cfg, module = _resolve_model(model, "bf16" if precision is WeightPrecision.FP8 else dtype)
    ctx_len = _context(cfg)
    for what, start in (("prompt_len", prompt_len), ("kv_len", kv0)):
        if ctx_len and start + decode_steps > ctx_len:
            raise ValueError(f"{what} ({start}) + decode_steps ({decode_steps}) = {start + decode_steps} tokens "
                             f"exceeds {name}'s context of {ctx_len} tokens")
    routing = _resolve_routing(routing, cfg, batch * prompt_len)
    lms = {ph: LaunchModel.for_mode(launch, prof, ph) for ph in ("prefill", "decode")}
    t_setup = time.perf_counter()

    samples = _sample_steps(decode_steps, decode_samples)
    scenarios: list[tuple[str, int | None, int, int]] = [("prefill", None, prompt_len, 0)]
    scenarios += [("decode", s, 1, kv0 + s) for s in samples]
    plans: list[KernelPlan] = []
    disk = DiskCache() if cache else None
    todo: list[KernelCall] = []
    with Background(prof, max_sim_events, 1, disk) as bg:
        for _phase, _step, q, past in scenarios:
            cap = capture_model(module, batch, q, past)
            plan = with_precision(plan_capture(cap, preset, routing=routing, fallback=fallback == "roofline"),
                                  precision, kv_dtype)
            plan = adapt_plan(plan, prof, weights)  # Tensix: tt_transformers' ops, formats, fidelities
            plans.append(_tuned(plan) if tune else plan)
            if len(plans) == 1 and len(scenarios) > 1:
                # the prefill's kernels are simulated on worker processes while the decode steps are captured
                todo = [c for c in {c.key(): c for c in plans[0].calls}.values()
                        if not is_memoised(c, prof, max_sim_events)]
                bg.workers = workers or auto_workers(todo)
                if bg.workers > 1:
                    bg.submit(todo)
        t_plan = time.perf_counter()
        if bg.futures:  # this process simulates the decode steps' kernels meanwhile
            rest = [c for p in plans[1:] for c in p.calls if c.key() not in bg.keys]
            simulate_many(rest, prof, max_events=max_sim_events, workers=1, disk=disk)
        bg.wait()

    distinct = {c.key(): c for p in plans for c in p.calls}
    todo = list({**{c.key(): c for c in todo}, **{c.key(): c for c in distinct.values()
                                                   if not is_memoised(c, prof, max_sim_events)}}.values())
    simulate_many(list(distinct.values()), prof, max_events=max_sim_events, workers=workers, progress=progress,
                  disk=disk)
    # Every launch of a call is placed on its own (a split Flash-Decoding call: split kernel, gap, combine kernel).
    launched = [[(c, s) for c in p.calls for s in simulate_launches(c, prof, max_events=max_sim_events)]
                for p in plans]
    sims = [[s for _c, s in lc] for lc in launched]
    t_sim = time.perf_counter()

    placed = [lms[sc[0]].place(s) for sc, s in zip(scenarios, sims, strict=True)]
    ttft = placed[0][1]
    step_s = _interpolate(samples, [pl[1] for pl in placed[1:]], decode_steps)
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

    w_bytes = tensix_weight_bytes(module, prof, weights) or weight_bytes(module, precision)
    floors = [(w_bytes + _kv_bytes(p)) / prof.dram_bytes_per_s_value for p in plans[1:]]
    warnings = _memory_warning(name, prof, w_bytes, plans)
    n_fb = len({c.key() for lc in launched for c, s in lc if s.fallback})
    assumptions = (
        *(f"approximated: {a}" for a in getattr(cfg, "approximations", ())),  # models.config_fields
        *(("GEMM configurations autotuned by simulation (the fastest of up to 24 valid ones per shape)",)
          if tune else ()),
        *dict.fromkeys(lm.describe() for lm in lms.values()),
        f"preset {preset.value}; greedy sampling on device; LM head on each sequence's last token; "
        + ("contiguous KV cache in FP8 E4M3 (decode attention reads it in FP8)" if kv_dtype is not None else
           "contiguous KV cache in the model's dtype")
        + ("; FP8 checkpoint: decoder-layer GEMMs FP8 E4M3 (bf16 out, activation quantisation fused into the "
           "producing kernel), embedding/LM head/norms/prefill attention in bf16" if precision is WeightPrecision.FP8
           else ""),
        f"decode steps {list(samples)} simulated, the others interpolated linearly in KV length",
        f"{n_fb} of {len(distinct)} distinct kernels are roofline estimates (no template); "
        + ("every kernel simulated in full (exact)" if exact else
           f"kernels over {max_sim_events:,} node events extrapolated from truncated instances (method column)"),
        "HBM floor uses the profile's sustained bandwidth "
        f"({prof.dram_bytes_per_s_value / 1e12:.2f} TB/s, {prof.dram_bytes_per_s.kind})",
    )
    stats = {"distinct_kernels": len(distinct), "simulated_now": len(todo) - (disk.hits if disk else 0),
             "from_disk_cache": disk.hits if disk else 0, "fallback_kernels": n_fb,
             "proofs": list(plans[0].proofs), "weight_bytes": w_bytes, **_model_facts(cfg, module, kv_dtype)}
    timings = {"setup": t_setup - t0, "capture_plan": t_plan - t_setup, "simulate": t_sim - t_plan,
               "total": time.perf_counter() - t0}
    return Prediction(model=name, hw=prof.name, preset=preset.value, launch=launch, batch=batch,
                      prompt_len=prompt_len, decode_steps=decode_steps, kv_len=kv0, ttft_s=ttft,
                      decode_step_s=tuple(float(x) for x in step_s), sampled_steps=tuple(samples),
                      kernels=tuple(records), hbm_floor_s=tuple(floors), assumptions=assumptions,
                      warnings=tuple(warnings), timings_s=timings, stats=stats)


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
    """The plan with its GEMMs autotuned by simulation (the `tune` parameter the GEMM template reads)."""
    calls = tuple(replace(c, params=tuple(sorted({**dict(c.params), "tune": True}.items())))
                  if c.kind is KernelKind.GEMM and not c.p("variant", "") else c for c in plan.calls)
    return replace(plan, calls=calls)


def _model_facts(cfg: Any, module: Any, kv_dtype: Any) -> dict[str, Any]:
    """What was understood of the model: its family, parameter count and KV-cache bytes per token."""
    hf_type = getattr(cfg, "model_type", "")
    family = f"{hf_type} (HF transformers)" if hf_type else str(getattr(cfg, "family", type(module).__name__))
    facts: dict[str, Any] = {"family": family, "params": int(sum(p.numel() for p in module.parameters()))}
    if hasattr(cfg, "kv_bytes_per_token"):
        facts["kv_bytes_per_token"] = int(cfg.kv_bytes_per_token(1 if kv_dtype is not None else 2))
    return facts


def _require_int(name: str, value: Any, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


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


def _kv_bytes(plan: KernelPlan) -> float:
    """KV-cache bytes the step's attention kernels read."""
    total = 0.0
    for c in plan.calls:
        if c.kind in (KernelKind.ATTENTION_DECODE, KernelKind.ATTENTION_PREFILL):
            kv = DType.parse(c.p("kv_dtype", "")) if c.p("kv_dtype", "") else c.dtype  # Tensix: bfp8_b cache
            total += 2.0 * c.p("batch") * c.p("heads_kv") * c.p("seq_kv") * c.p("head_dim") * kv.nbytes
    return total


def _memory_warning(name: str, prof: Any, weight_bytes: float, plans: Sequence[KernelPlan]) -> list[str]:
    kv = max((_kv_bytes(p) for p in plans), default=0.0)
    cap = float(prof.dram_bytes.value) if hasattr(prof, "dram_bytes") else 0.0
    if cap and weight_bytes + kv > cap:
        msg = (f"{name} needs {weight_bytes / 2**30:.1f} GiB of weights + {kv / 2**30:.1f} GiB of KV cache = "
               f"{(weight_bytes + kv) / 2**30:.1f} GiB, more than {prof.name}'s {cap / 2**30:.1f} GiB of device "
               "memory; the prediction assumes it fits (use more GPUs or a smaller batch/context)")
        import warnings

        warnings.warn(msg, MemoryWarning, stacklevel=3)
        return [msg]
    return []
