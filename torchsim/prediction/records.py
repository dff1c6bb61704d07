"""Prediction records: one KernelRecord per kernel launch on the stream, and the Prediction that holds them.

Produced by prediction.pipeline.predict (the last stage before exports); read by the CLI tables, the JSON output and
the Parquet/Perfetto exporters (`KernelRecord.row()` is one flat row).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, fields
from typing import Any


class MemoryWarning(UserWarning):
    """The scenario needs more device memory than the profile has (also in `Prediction.warnings`, which the CLI
    prints; the CLI silences this Python warning so the line is shown once)."""


class MemoryFitError(ValueError):
    """A scenario whose weights, KV cache and activations do not fit one device (names the numbers and what fits)."""


@dataclass(frozen=True, slots=True)
class KernelRecord:
    """One kernel launch: what ran, where it came from, when it ran (start on the stream) and what bound it."""

    name: str
    kind: str
    template: str
    config: dict[str, Any]  # the template configuration (empty for roofline rows)
    shapes: str  # "m=2048,n=6144,k=4096"
    params: tuple[tuple[str, Any], ...]  # the KernelCall params, sorted
    dtype: str
    phase: str  # "prefill" | "decode"
    decode_step: int | None  # index of the decode step this row was simulated for (None in prefill)
    kv_len: int  # KV-cache length the step attends over
    layer: int | None
    stream: int
    order: int  # position in its step's launch order
    start_cycles: int
    duration_cycles: int
    start_us: float  # on the run's timeline: prefill starts at 0, decode step t at TTFT + steps before it
    duration_us: float
    gap_us: float  # idle time on the stream before this kernel (launch/host model)
    flops: float
    dram_bytes: float
    l2_hit_rate: float
    unit_util: dict[str, float]
    stalls: dict[str, float]
    bound: str
    module_path: str
    source: str
    fallback: bool  # True: a roofline estimate, not a simulation
    method: str  # "exact" | "extrapolated-waves" | "extrapolated-k" | "extrapolated-waves+k" | ... | "roofline: <why>"
    weight: float  # decode steps this row stands for (interpolation weight); 1 in prefill

    def row(self) -> dict[str, Any]:
        """Flat dict for tables, JSON and Parquet (dicts kept as dicts, copied). What dataclasses.asdict gives, without
        its recursive deep copy of every tuple and value (0.6 s of a 1.2 s warm `predict --json` for 1392 rows)."""
        out = {f: getattr(self, f) for f in _RECORD_FIELDS}
        for f in ("config", "unit_util", "stalls"):
            out[f] = dict(out[f])
        return out


_RECORD_FIELDS = tuple(f.name for f in fields(KernelRecord))


def _pattern(name: str) -> str:
    return re.sub(r"(^|\.)(layers|h|blocks)\.\d+(\.|$)", r"\1\2.*\3", name)


@dataclass(frozen=True)
class Prediction:
    """End-to-end prediction of one generation: TTFT, per-step decode times, throughput, every kernel."""

    model: str
    hw: str
    preset: str
    launch: str
    batch: int
    prompt_len: int
    decode_steps: int
    kv_len: int  # KV length at the first decode step
    ttft_s: float
    decode_step_s: tuple[float, ...]  # one per decode step (interpolated between simulated steps)
    sampled_steps: tuple[int, ...]  # decode steps that were simulated
    kernels: tuple[KernelRecord, ...]
    hbm_floor_s: tuple[float, ...]  # per sampled decode step: (weights + KV) bytes / sustained HBM bandwidth
    assumptions: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    timings_s: dict[str, float] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    tp: int = 1  # tensor-parallel ranks: the kernels are one rank's (ranks are symmetric), times the system's
    system: str = ""  # the multi-GPU system a tp > 1 run's collectives cross
    ep: int = 1  # expert-parallel ranks (= tp when on): MoE experts split whole over the ranks
    pp: int = 1  # pipeline stages (each on tp GPUs); stats["pipeline"] has stage times and the bubble

    @property
    def tpot_s(self) -> float:
        """Mean time per output token over the decode steps (0 without decode)."""
        return sum(self.decode_step_s) / len(self.decode_step_s) if self.decode_step_s else 0.0

    @property
    def total_s(self) -> float:
        return self.ttft_s + sum(self.decode_step_s)

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second end to end: batch x (first token + one per decode step) / total time."""
        return self.batch * (1 + self.decode_steps) / self.total_s

    @property
    def decode_tokens_per_s(self) -> float:
        return self.batch / self.tpot_s if self.tpot_s else 0.0

    def step_kernels(self, phase: str, step: int | None = None) -> list[KernelRecord]:
        if phase == "decode" and step is None and self.sampled_steps:
            step = self.sampled_steps[0]
        return [k for k in self.kernels if k.phase == phase and (phase == "prefill" or k.decode_step == step)]

    def floor_ratio(self) -> float:
        """Mean simulated decode step time over the HBM floor at the same steps (>= 1 expected)."""
        sims = [self.decode_step_s[s] for s in self.sampled_steps]
        return sum(sims) / sum(self.hbm_floor_s) if self.hbm_floor_s else 0.0

    def table(self, phase: str = "prefill", step: int | None = None, top: int = 15) -> list[dict[str, Any]]:
        """Kernels of one step grouped across layers (`layers.*`), largest total first, with share of the step."""
        rows = self.step_kernels(phase, step)
        total = sum(r.duration_us + r.gap_us for r in rows) or 1.0
        groups: dict[tuple[str, str, str], dict[str, Any]] = {}
        for r in rows:
            key = (_pattern(r.name), r.kind, r.shapes)
            g = groups.setdefault(key, {"kernel": key[0], "kind": r.kind, "shapes": r.shapes, "count": 0,
                                        "total_us": 0.0, "template": r.template, "bound": r.bound,
                                        "fallback": r.fallback, "source": r.source})
            g["count"] += 1
            g["total_us"] += r.duration_us
        out = sorted(groups.values(), key=lambda g: -g["total_us"])
        for g in out:
            g["mean_us"] = g["total_us"] / g["count"]
            g["share"] = g["total_us"] / total
        return out[:top] if top else out

    def to_dict(self, kernels: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "model": self.model, "hw": self.hw, "preset": self.preset, "launch": self.launch, "batch": self.batch,
            "prompt_len": self.prompt_len, "decode_steps": self.decode_steps, "kv_len": self.kv_len,
            "tp": self.tp, "ep": self.ep, "pp": self.pp, "system": self.system,
            "ttft_ms": self.ttft_s * 1e3, "tpot_ms": self.tpot_s * 1e3, "total_ms": self.total_s * 1e3,
            "tokens_per_s": self.tokens_per_s, "decode_tokens_per_s": self.decode_tokens_per_s,
            "decode_step_ms": [t * 1e3 for t in self.decode_step_s], "sampled_steps": list(self.sampled_steps),
            "hbm_floor_ms": [t * 1e3 for t in self.hbm_floor_s], "decode_over_hbm_floor": self.floor_ratio(),
            "kernels_per_prefill": len(self.step_kernels("prefill")),
            "kernels_per_decode_step": len(self.step_kernels("decode")),
            "fallback_kernels": sum(1 for k in self.kernels if k.fallback),
            "assumptions": list(self.assumptions), "warnings": list(self.warnings),
            "timings_s": dict(self.timings_s), "stats": dict(self.stats),
        }
        if kernels:
            d["kernels"] = [k.row() for k in self.kernels]
        return d

    def to_json(self, kernels: bool = True) -> str:
        return json.dumps(self.to_dict(kernels), indent=1, default=str)

    @property
    def _device_word(self) -> str:
        """What one rank is: a Tenstorrent chip (a prediction with tt_transformers' weight formats) or a GPU."""
        return "chip" if self.stats.get("weights_format") else "GPU"

    def summary(self) -> str:
        lines = [f"{self.model} on {self.hw}: batch {self.batch}, prompt {self.prompt_len}, {self.decode_steps} "
                 f"decode steps from KV {self.kv_len} (preset {self.preset}, launch {self.launch})",
                 f"  TTFT   {self.ttft_s * 1e3:10.3f} ms   ({len(self.step_kernels('prefill'))} kernels)"]
        st = self.stats
        if "params" in st and "weight_bytes" in st:  # what was understood of the model
            kv = f", KV {st['kv_bytes_per_token'] / 1024:,.1f} KiB per token" if "kv_bytes_per_token" in st else ""
            params = f"{st['params'] / 1e9:,.2f} B" if st["params"] >= 1e9 else f"{st['params'] / 1e6:,.2f} M"
            wb = st["weight_bytes"]
            weights = f"{wb / 1e9:,.2f} GB" if wb >= 1e9 else f"{wb / 1e6:,.2f} MB"
            per = f" per {self._device_word}" if max(self.tp, self.ep, self.pp) > 1 else ""
            fmt = (f" in {st['quant']}" if st.get("quant") else  # a quantised format (lowering.quant)
                   f" in {st['weights_format']}" if st.get("weights_format") else "")  # Tensix: tt_transformers
            lines.insert(1, f"  model  {st.get('family', '?')}: {params} parameters, {weights} of weights{fmt}{per}"
                         f"{kv}")
        mem = st.get("memory")
        if mem and mem.get("capacity_bytes"):
            gib = 2.0**30
            lines.insert(2, f"  memory {mem['weight_bytes'] / gib:,.1f} GiB weights + {mem['kv_bytes'] / gib:,.2f} "
                         f"KV + {mem['activation_bytes'] / gib:,.2f} activations = {mem['total_bytes'] / gib:,.1f} of "
                         f"{mem['capacity_bytes'] / gib:,.1f} GiB per {self._device_word}; largest batch that fits "
                         "at this context: "
                         f"{mem['max_batch']:,}")
        pipe = st.get("pipeline")
        if pipe:
            part = pipe["decode"] or pipe["prefill"]
            lines.insert(1, f"  pipeline parallel over {self.pp} stages, {part['micro_batches']} micro-batch(es): "
                         f"stages {', '.join(f'{x * 1e3:.3f}' for x in part['stage_s'])} ms, send "
                         f"{part['send_s'] * 1e6:.1f} us, bubble {part['bubble']:.1%} of the "
                         f"{'decode step' if pipe['decode'] else 'prefill'}")
        if max(self.tp, self.ep) > 1:
            step = self.step_kernels("decode", self.sampled_steps[0]) if self.decode_steps else []
            comm = [k for k in (step or self.step_kernels("prefill")) if k.kind == "collective"]
            dev = f"{self._device_word}s"
            how = (f"tensor parallel over {self.tp} {dev} x experts over all {self.ep} {dev}"
                   if self.ep > self.tp > 1 and dev == "chips" else
                   f"tensor parallel over {self.tp} {dev} x expert parallel over {self.ep} rows" if self.tp > 1 and
                   self.ep > 1 and dev == "chips" else f"tensor parallel over {self.tp} {dev}" if self.tp > 1 else
                   f"expert parallel over {self.ep} {dev} (data-parallel attention)")
            lines.insert(1, f"  {how} of {self.system} (one rank's kernels): "
                         f"{len(comm)} collectives per {'decode step' if step else 'prefill'}, "
                         f"{sum(k.duration_us for k in comm):,.1f} us")
        if self.decode_steps:
            lines.append(f"  TPOT   {self.tpot_s * 1e3:10.3f} ms   ({len(self.step_kernels('decode'))} kernels/step; "
                         f"{self.floor_ratio():.2f}x the HBM floor of weights + KV)")
        lines.append(f"  total  {self.total_s * 1e3:10.3f} ms   {self.tokens_per_s:,.1f} tokens/s end to end")
        return "\n".join(lines)
