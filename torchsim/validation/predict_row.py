"""One published kernel row -> torchsim's prediction of what its benchmark measured.

Two steps, so calibration can re-use the expensive one:

- `device_estimate(row, hw)`: build the row's kernel(s) from the template its workload names and simulate them
  on `hw` -> the device time (and FLOPs, DRAM bytes) of each candidate: one for a plain row, several for a row
  that is a peak "over a sweep" (an envelope);
- `compare(row, device, hw)`: put the device time through the row's timing method (timing.py) and express it
  in the row's metric (TFLOPS, time, GB/s).

Every kernel simulation of validation and calibration goes through `simulate_kernel` (one place to switch to a
power-limited sustained clock). The end-to-end serving rows are in e2e.py.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from torchsim.graph.kinds import DType
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.gpu import Arch
from torchsim.lowering.templates import gemm
from torchsim.lowering.templates.attention import attention
from torchsim.lowering.templates.attention_config import AttnShape, AttnVariant
from torchsim.lowering.templates.decode import flash_mla
from torchsim.lowering.templates.gemm_config import deepgemm_config
from torchsim.lowering.templates.grouped_gemm import grouped_gemm, load_balance
from torchsim.sim import KernelResult
from torchsim.sim.sustained import simulate_sustained
from torchsim.validation.published import Row, dtype_of, quant_of
from torchsim.validation.timing import TimingMethod, l2_dirty_bytes, method_for, observed_time_s

KERNEL_CATEGORIES = ("gemm", "attention", "moe_grouped_gemm")
QUICK_FLOPS = 2e12  # --quick skips rows above this many FLOPs
MLA_SWEEP = [(64, 16, 1), (64, 32, 1), (64, 64, 1), (64, 128, 1), (64, 128, 2)]  # (batch, heads_q, seq_q), kv 4096
METRICS = ("tflops", "time_us", "time_ms", "bandwidth_gbps")


def simulate_kernel(kg: Any, hw: Any, l2_dirty_bytes: float = 0.0) -> KernelResult:
    """The one kernel simulation of validation and calibration: at the clock the power limit sustains (the
    clock a kernel of this work draws on the real part), as the prediction path runs it; `l2_dirty_bytes`: the
    dirty L2 lines the row's timer leaves before the call (timing.l2_dirty_bytes)."""
    if l2_dirty_bytes:
        return simulate_sustained(kg, hw, l2_dirty_bytes=l2_dirty_bytes)
    return simulate_sustained(kg, hw)


@dataclass(frozen=True)
class Skip:
    """A row that is not predicted, and why (`quiet`: filtered by --quick, not worth a line)."""

    reason: str
    quiet: bool = False


@dataclass(frozen=True)
class Device:
    """The engine's prediction for a row on one profile, before the timer."""

    group: str  # the MAPE group (profile, kernel, dtype, ...)
    candidates: tuple[tuple[float, float, float], ...]  # (device time s, FLOPs, DRAM bytes) of each candidate
    bound: str
    cols: tuple[str, ...]  # the report's row-specific columns
    envelope: bool = False  # a peak over a sweep: the best candidate is compared
    extra: str = ""  # trailing report text (e.g. tail idle share)


@dataclass(frozen=True)
class Prediction:
    row: Row
    profile: str
    device: Device
    method: TimingMethod
    method_reason: str
    device_time_s: float  # of the compared candidate
    observed_time_s: float  # what the row's timer would see
    predicted: float  # in the row's metric
    fit: bool  # used by calibration (envelopes of 'up to' peaks are not)

    @property
    def measured(self) -> float:
        return self.row.value

    @property
    def group(self) -> str:
        return self.device.group

    @property
    def err(self) -> float:
        return (self.predicted - self.measured) / self.measured


def in_metric(metric: str, t: float, flops: float, dram_bytes: float) -> float:
    if t <= 0:
        raise ValueError(f"non-positive time {t} s")
    if metric == "tflops":
        return flops / t / 1e12
    if metric == "time_us":
        return t * 1e6
    if metric == "time_ms":
        return t * 1e3
    if metric == "bandwidth_gbps":
        return dram_bytes / t / 1e9
    raise ValueError(f"metric {metric!r} is not a kernel metric; valid: {', '.join(METRICS)}")


# ---------------------------------------------------------------- per category: row -> kernels -> Device

def _gemm(r: Row, hw: Any, quick: bool, tune: bool = False) -> Device | Skip:
    dtype, quant = dtype_of(r.dtype), quant_of(r.dtype)
    if quant:  # a block-scaled FP4 GEMM (torchao's nvfp4 recipe: cuBLAS block-scaled MMA), in the format's template
        dtype = DType.FP4_E2M1
    p = r.params
    m, n, k, batch = p.get("M"), p.get("N"), p.get("K"), p.get("batch", 1)
    if dtype is None or not (m and n and k):
        return Skip(f"{r.dtype} not modelled" if dtype is None else f"shape {p} not stated")
    if quick and 2.0 * batch * m * n * k > QUICK_FLOPS:
        return Skip("quick", quiet=True)
    cfg = None
    if tune and not quant:  # simulated autotuning: the fastest of a bounded set of valid configurations (the default
        # among them); a quantised format keeps its kernels' own tiles
        from torchsim.lowering.templates.tune import tune_gemm
        cfg = tune_gemm(m, n, k, dtype, hw, batch, shared_b=False, sim=simulate_kernel).best
    elif "deepgemm" in r.workload.lower() and dtype.is_fp8 and hw.arch is Arch.SM90:
        cfg = deepgemm_config(m, n, k, dtype, hw)  # the row's library picks its tiles by its own rules
    if quant and not hw.supports(dtype):
        return Skip(f"{quant} on {hw.name}: no FP4 tensor cores")
    res = simulate_kernel(gemm(m, n, k, dtype, hw, cfg, batch=batch, shared_b=False, quant=quant), hw,
                          l2_dirty_bytes(method_for(r)[0], hw))
    dt = quant or dtype.name.lower()
    return Device(f"{hw.name} {dt}", ((res.time_s, res.flops, res.dram_bytes),), res.bound,
                  (dt, f"{batch}x{m}x{n}x{k}"))


def variant_of(r: Row) -> tuple[AttnVariant, str] | None:
    w = r.workload.lower()
    if "flashattention-4" in w:
        return AttnVariant.FA4, "fa4"
    if "flashattention-3" in w:
        return AttnVariant.FA3, "fa3"
    if "triton" in w:
        return AttnVariant.TRITON, "triton"
    if "flashattention-2" in w:
        return AttnVariant.FA2, "fa2"
    return None


def shape_of(r: Row) -> AttnShape | None:
    p = r.params
    heads = p.get("heads") or p.get("heads_q")
    d = p.get("head_dim")
    if heads is None and p.get("hidden_dim") and d:
        heads = p["hidden_dim"] // d
    seq = p.get("seqlen")
    if not (p.get("batch") and heads and seq and d):
        return None
    causal = p.get("causal") is True
    return AttnShape(int(p["batch"]), int(heads), int(p.get("heads_kv", heads)), int(seq), int(seq), int(d), causal)


def _mla_envelope(hw: Any, dirty: float) -> Device:
    cands = []
    for batch, heads, sq in MLA_SWEEP:
        kgs = flash_mla(batch, heads, sq, 4096, hw)
        t = sum(simulate_kernel(k, hw, dirty).time_s for k in kgs)
        cands.append((t, float(kgs[0].flops), float(kgs[0].dram_bytes)))  # FlashMLA counts the main kernel's work
    return Device(f"{hw.name} flashmla peak (envelope)", tuple(cands), "best of sweep",
                  ("flashmla (peak)", "sweep kv 4096"), envelope=True)


def _attention(r: Row, hw: Any, quick: bool, cache: dict[str, Device] | None) -> Device | Skip:
    if "flashmla" in r.workload.lower():
        if "sparse" in r.workload.lower() or r.dtype.lower().startswith("fp8"):
            return Skip("sparse / FP8-KV FlashMLA is not modelled")
        dirty = l2_dirty_bytes(method_for(r)[0], hw)
        key = f"mla:{hw.name}:{hw.numbers_hash()}:{dirty}"
        if cache is not None and key in cache:
            return cache[key]
        dev = _mla_envelope(hw, dirty)
        if cache is not None:
            cache[key] = dev
        return dev
    var, shape = variant_of(r), shape_of(r)
    if var is None or shape is None:
        return Skip(f"{r.workload[:60]} (shape not stated)")
    if quick and shape.flops() > QUICK_FLOPS:
        return Skip("quick", quiet=True)
    res = simulate_kernel(attention(shape, hw, variant=var[0]), hw, l2_dirty_bytes(method_for(r)[0], hw))
    dims = f"{shape.batch},{shape.heads_q},{shape.seq_q},{shape.head_dim}"
    return Device(f"{hw.name} {var[1]}", ((res.time_s, res.flops, res.dram_bytes),), res.bound, (var[1], dims))


def layout_of(workload: str) -> str:
    w = workload.lower()
    return "masked" if "masked" in w else "contiguous" if "contiguous" in w else "grouped"


def _moe(r: Row, hw: Any, quick: bool) -> Device | Skip:
    p = r.params
    groups, m, n, k = p.get("groups"), p.get("M_per_group"), p.get("N"), p.get("K")
    dtype = dtype_of(r.dtype)
    if not (groups and m and n and k) or dtype is None:
        return Skip(f"hardware {r.hardware!r} or shape {p} not modelled")
    if quick and 2.0 * groups * m * n * k > QUICK_FLOPS:
        return Skip("quick", quiet=True)
    layout, dt = layout_of(r.workload), dtype.name.lower()
    cfg = None
    if "deepgemm" in r.workload.lower() and dtype.is_fp8 and hw.arch is Arch.SM90:  # its own tile selection: the
        # contiguous layout picks for all rows as one GEMM, the masked one per group (no multicast across experts)
        whole = layout == "contiguous"
        cfg = replace(deepgemm_config(groups * m if whole else m, n, k, dtype, hw, 1 if whole else groups),
                      b_split=1)
    res = simulate_kernel(grouped_gemm((m,) * groups, n, k, dtype, hw, cfg), hw, l2_dirty_bytes(method_for(r)[0], hw))
    tail = load_balance(res).get("tail_idle_share", 0.0)
    return Device(f"{hw.name} {dt} {layout}", ((res.time_s, res.flops, res.dram_bytes),), res.bound,
                  (dt, layout, f"{groups}x{m}x{n}x{k}"), extra=f"{100 * tail:.0f}%")


def device_estimate(r: Row, hw: Any = None, *, quick: bool = False,
                    cache: dict[str, Device] | None = None, tune: bool = False) -> Device | Skip:
    """Simulate `r`'s kernel(s) on `hw` (default: the row's own profile). `cache` shares sweep envelopes between
    rows on the same profile. `tune`: GEMM rows take the simulated autotuner's configuration (tune.py)."""
    if r.category not in KERNEL_CATEGORIES:
        return Skip(f"category {r.category} is not a kernel row")
    if r.profile is None and hw is None:
        return Skip(f"{r.hardware} is not a GPU profile here")
    if r.metric not in METRICS:
        return Skip(f"metric {r.metric} is not modelled")
    hw = hw if hw is not None else get_profile(r.profile[0])  # type: ignore[index]
    if r.category == "gemm":
        return _gemm(r, hw, quick, tune)
    if r.category == "attention":
        return _attention(r, hw, quick, cache)
    return _moe(r, hw, quick)


def compare(r: Row, dev: Device, hw: Any) -> Prediction:
    """`dev` as `r`'s timer would have measured it on `hw`, in `r`'s metric."""
    method, reason = method_for(r)
    best: tuple[float, float, float] | None = None
    for t, flops, dram in dev.candidates:
        obs = observed_time_s(t, method, hw)
        val = in_metric(r.metric, obs, flops, dram)
        better = best is None or (val < best[2] if r.metric.startswith("time") else val > best[2])
        if better:
            best = (t, obs, val)
    assert best is not None
    return Prediction(r, hw.name, dev, method, reason, best[0], best[1], best[2], fit=not dev.envelope)


def predict(r: Row, hw: Any = None, *, quick: bool = False, cache: dict[str, Device] | None = None,
            tune: bool = False) -> Prediction | Skip:
    hw = hw if hw is not None else (get_profile(r.profile[0]) if r.profile else None)
    dev = device_estimate(r, hw, quick=quick, cache=cache, tune=tune)
    if isinstance(dev, Skip):
        return dev
    return compare(r, dev, hw)
