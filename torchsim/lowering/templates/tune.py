"""Simulated autotuning of the GEMM template: what a tuned library does when it picks a tile configuration.

Published GEMM numbers come from libraries that choose among many kernels per shape (cuBLAS's heuristics,
the CUTLASS profiler's best-of sweep, DeepGEMM's own selection over block shapes and cluster sizes).
`default_config` is torchsim's one-shot heuristic; `tune_gemm` is the best-of: it enumerates the
configurations the profile's architecture supports, prunes those that cannot run (shared memory, registers,
threads), keeps a bounded number ranked by a cheap analytic estimate, simulates each and returns the fastest.

The space (all of it is what gemm_config.GemmConfig and the template express; nothing else is invented):

- pipeline organisation: the architecture's variants (`ARCH_PIPELINES`: sm80 multistage; sm90 cooperative,
  ping-pong, 3-stage, naive 2-stage; sm100 tcgen05); never a variant of another architecture;
- tile shape bm x bn (64/128/256, and bk 32/64 on sm80; bk 64, or 128 for FP8 and 32 for fp32/tf32, on
  sm90/sm100);
- pipeline stages: the deepest that fits shared memory starting from 4 (the default's rule) or from 7;
- split-K: when the output tiles cannot fill the SMs, none, the heuristic's split and powers of two up to
  16 (>= 4 K blocks per slice, at most two waves);
- cluster / CTA pair: `b_split` 1 or 2 (TMA multicast of B on sm90, cta_group::2 on sm100).

The template has no stream-K schedule; persistent grids stay as the architecture's default (sm90/sm100
persistent, sm80 one CTA per tile). The default is always a candidate and wins ties, so the tuned time is never
slower than the default's. Deterministic: candidates are sorted, the simulation is deterministic.

Example:
    >>> from torchsim.hwmodels import get_profile
    >>> from torchsim.graph import DType
    >>> r = tune_gemm(256, 256, 256, DType.BF16, get_profile("h100-sxm"), budget=3)
    >>> r.best_time_s <= r.default_time_s
    True
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from torchsim.graph import DType
from torchsim.hwmodels.gpu import Arch, GpuProfile
from torchsim.lowering.templates.gemm import gemm
from torchsim.lowering.templates.gemm_config import (
    ARCH_PIPELINES,
    Epilogue,
    GemmConfig,
    Pipeline,
    default_config,
    fit_config,
)

DEFAULT_BUDGET = 24  # candidates simulated (the default included)
MAX_REGS_PER_THREAD = 255  # CUDA C++ Programming Guide, "Technical Specifications per Compute Capability"
REG_HEADROOM = 32  # assumed: registers a mainloop needs beside its accumulators (addresses, predicates, loop)
TILE_SIDES = (64, 128, 256)
SM80_TILES = ((64, 64), (64, 128), (128, 64), (128, 128), (128, 256), (256, 128))


@dataclass(frozen=True)
class Trial:
    """One simulated candidate."""

    cfg: GemmConfig
    time_s: float
    is_default: bool

    @property
    def label(self) -> str:
        return describe(self.cfg)


@dataclass(frozen=True)
class TuneResult:
    best: GemmConfig
    best_time_s: float
    default: GemmConfig
    default_time_s: float
    trials: tuple[Trial, ...]  # simulated, in candidate order
    pruned: int  # configurations that cannot run on the profile (shared memory, registers, threads)
    pruned_reasons: dict[str, int]
    dropped: int  # valid configurations beyond the budget (lowest analytic estimate first kept)
    wall_s: float

    @property
    def speedup(self) -> float:
        """default time / tuned time (>= 1)."""
        return self.default_time_s / self.best_time_s

    @property
    def margin(self) -> float:
        """Fraction of the default's time the tuned configuration saves (>= 0)."""
        return 1.0 - self.best_time_s / self.default_time_s

    @property
    def default_won(self) -> bool:
        return self.best == self.default

    def as_dict(self) -> dict[str, Any]:
        return {
            "winner": describe(self.best), "winner_time_us": self.best_time_s * 1e6,
            "default": describe(self.default), "default_time_us": self.default_time_s * 1e6,
            "margin_pct": 100 * self.margin, "speedup": self.speedup, "default_won": self.default_won,
            "candidates": [{"config": t.label, "time_us": t.time_s * 1e6, "vs_default": self.default_time_s / t.time_s,
                            "default": t.is_default} for t in self.trials],
            "tried": len(self.trials), "pruned": self.pruned, "pruned_reasons": self.pruned_reasons,
            "dropped_over_budget": self.dropped, "wall_s": self.wall_s,
        }


def describe(cfg: GemmConfig) -> str:
    """A compact label: variant tile stages [split-K] [cluster] [non-persistent]."""
    s = f"{cfg.pipeline.value} {cfg.bm}x{cfg.bn}x{cfg.bk} s{cfg.stages}"
    if cfg.split_k > 1:
        s += f" splitk{cfg.split_k}"
    if cfg.b_split > 1:
        s += f" bsplit{cfg.b_split}"
    if not cfg.persistent:
        s += " nonpersist"
    return s


def _key(cfg: GemmConfig) -> tuple[Any, ...]:
    return (cfg.pipeline.value, cfg.bm, cfg.bn, cfg.bk, cfg.stages, cfg.split_k, cfg.b_split, cfg.persistent,
            cfg.warps)


def invalid_reason(cfg: GemmConfig, dtype: DType, hw: GpuProfile) -> str | None:
    """Why `cfg` cannot run on `hw` (None when it can): the variant's units, shared memory, registers, threads."""
    if cfg.pipeline not in ARCH_PIPELINES.get(hw.arch, ()):
        return "variant not on this architecture"
    if cfg.smem_bytes(dtype) > hw.smem_per_cta_bytes.value:
        return "shared memory"
    threads = cfg.threads()
    if threads > hw.max_threads_per_sm.value:
        return "threads"
    if cfg.pipeline is Pipeline.SM100_TCGEN05:
        # accumulators live in TMEM: FP32 bm x bn, double-buffered so the epilogue overlaps the next tile
        if cfg.bn > 256 or 2 * cfg.bm * cfg.bn * 4 > hw.tmem_bytes_per_sm.value:
            return "tensor memory"
        return None
    consumer = {Pipeline.SM80_MULTISTAGE: 32 * cfg.warps, Pipeline.NAIVE_2STAGE: 128,
                Pipeline.WS_PINGPONG: 256,  # two WGs each hold (bm/2) x bn
                Pipeline.WS_COOPERATIVE: 256, Pipeline.WS_3STAGE: 256}[cfg.pipeline]
    if cfg.bm * cfg.bn / consumer + REG_HEADROOM > MAX_REGS_PER_THREAD:
        return "registers"
    if threads * min(MAX_REGS_PER_THREAD, cfg.bm * cfg.bn // consumer + REG_HEADROOM) > hw.registers_per_sm.value:
        return "registers"
    return None


def _covering(sides: tuple[int, ...], extent: int) -> tuple[int, ...]:
    """Tile sides worth trying for a dimension: a side larger than the smallest one covering `extent` whole
    only adds padding."""
    cover = [s for s in sides if s >= extent]
    return tuple(s for s in sides if not cover or s <= cover[0])


def _splits(cfg: GemmConfig, m: int, n: int, k: int, hw: GpuProfile, batch: int) -> tuple[int, ...]:
    """Split-K factors worth trying: none, and powers of two while the output tiles leave SMs idle, each K
    slice keeps >= 4 K blocks, and the grid stays within two waves."""
    tiles = batch * math.ceil(m / cfg.bm) * math.ceil(n / cfg.bn)
    k_tiles = math.ceil(k / cfg.bk)
    if tiles >= hw.sms:
        return (1,)
    return (1, *(s for s in (2, 4, 8, 16) if k_tiles // s >= 4 and tiles * s <= 2 * hw.sms))


def candidates(m: int, n: int, k: int, dtype: DType, hw: GpuProfile, batch: int = 1) -> list[GemmConfig]:
    """Every configuration of the template's space for this shape on `hw`'s architecture, sorted, invalid ones
    included (`tune_gemm` prunes them)."""
    allowed = ARCH_PIPELINES.get(hw.arch)
    if allowed is None:
        raise ValueError(f"no GPU GEMM template for architecture {hw.arch.value} of {hw.name}")
    out: dict[tuple[Any, ...], GemmConfig] = {}
    bms, bns = _covering(TILE_SIDES, m), _covering(TILE_SIDES, n)

    def add(base: GemmConfig) -> None:
        for start in (4, 7):
            if base.pipeline is Pipeline.NAIVE_2STAGE and start > 4:
                continue
            fitted = fit_config(replace(base, stages=start), m, n, k, dtype, hw, batch)
            for split in sorted({fitted.split_k, *_splits(fitted, m, n, k, hw, batch)}):
                cfg = replace(fitted, split_k=split)
                out.setdefault(_key(cfg), cfg)

    if hw.arch is Arch.SM80:
        for bm, bn in SM80_TILES:
            if bm in bms and bn in bns:
                for bk in (32, 64):
                    add(GemmConfig(bm, bn, bk, 4, Pipeline.SM80_MULTISTAGE, persistent=False,
                                   warps=8 if bm * bn >= 128 * 128 else 4))
    else:
        bk = 128 if dtype.is_fp8 else 32 if dtype.nbytes == 4 else 64  # 4-byte: 64-deep stages do not fit
        for pipe in allowed:
            for bm in bms:
                if bm < 128 and pipe not in (Pipeline.NAIVE_2STAGE, Pipeline.SM100_TCGEN05):
                    continue
                if pipe is Pipeline.SM100_TCGEN05 and bm > 128:
                    continue  # one CTA's tcgen05 MMA is at most 128 rows (the pair is b_split)
                for bn in bns:
                    for b_split in (1, 2):
                        if bn % b_split:
                            continue
                        add(GemmConfig(bm, bn, bk, 4, pipe, persistent=True, b_split=b_split))
    return [out[key] for key in sorted(out)]


def estimate_s(cfg: GemmConfig, m: int, n: int, k: int, dtype: DType, hw: GpuProfile, batch: int = 1) -> float:
    """A cheap analytic time (used only to rank candidates when there are more than the budget): the longest of
    waves of padded tiles at the slower of the tensor pipe and the shared-memory port, the operand tiles
    fetched through L2, and DRAM traffic incl. split-K partials."""
    clock = hw.clock_hz_value
    tiles = batch * math.ceil(m / cfg.bm) * math.ceil(n / cfg.bn) * cfg.split_k
    k_per = math.ceil(math.ceil(k / cfg.bk) / cfg.split_k) * cfg.bk
    t_mma = 2 * cfg.bm * cfg.bn * k_per / (hw.tensor_flop_per_clk_per_sm(dtype) * clock)
    t_smem = (cfg.bm + cfg.bn) * k_per * dtype.nbytes / (float(hw.ldst_bytes_per_clk_per_sm.value) * clock)
    waves = math.ceil(tiles / hw.sms)
    t_compute = waves * max(t_mma, t_smem)
    # operand tiles every CTA fetches through L2 (B multicast across the b_split CTAs of a cluster / pair)
    l2 = tiles * (cfg.bm + cfg.bn / cfg.b_split) * k_per * dtype.nbytes
    t_l2 = l2 / float(hw.l2_bytes_per_s.value)
    dram = batch * (m * k + k * n) * dtype.nbytes + batch * m * n * 2
    if cfg.split_k > 1:
        dram += 2 * batch * m * n * 4 * cfg.split_k  # FP32 partials written and read back
    return max(t_compute, t_l2, dram / hw.dram_bytes_per_s_value)


def _rank(valid: list[GemmConfig], m: int, n: int, k: int, dtype: DType, hw: GpuProfile, batch: int
          ) -> list[GemmConfig]:
    """Budget order: by analytic estimate (to the nanosecond); among equal estimates, variants take turns (the
    best of each variant first, larger tiles first: 1/bm + 1/bn operand bytes per FLOP), then the sort key."""
    def est(c: GemmConfig) -> int:
        return round(estimate_s(c, m, n, k, dtype, hw, batch) * 1e9)

    order = ARCH_PIPELINES[hw.arch]
    per: dict[Pipeline, list[GemmConfig]] = {}
    for c in sorted(valid, key=lambda c: (est(c), 1 / c.bm + 1 / c.bn, _key(c))):
        per.setdefault(c.pipeline, []).append(c)
    turn = {_key(c): i for cs in per.values() for i, c in enumerate(cs)}
    return sorted(valid, key=lambda c: (est(c), turn[_key(c)], order.index(c.pipeline), _key(c)))


Simulator = Callable[[Any, Any], Any]
_MEMO: dict[tuple[Any, ...], TuneResult] = {}


def tune_gemm(m: int, n: int, k: int, dtype: DType, hw: GpuProfile, batch: int = 1, budget: int = DEFAULT_BUDGET,
              epilogue: Epilogue = Epilogue.NONE, shared_b: bool = False, sim: Simulator | None = None,
              log: Callable[[str], None] | None = None) -> TuneResult:
    """Simulate up to `budget` valid configurations (the default always among them) and pick the fastest.

    `sim(kernel, hw) -> KernelResult` (default torchsim.sim.sustained.simulate_sustained). Results are memoised per
    (shape, dtype, profile, budget, epilogue, shared_b) when the default simulator is used.
    """
    for name, v in (("m", m), ("n", n), ("k", k), ("batch", batch)):
        if not isinstance(v, int) or v <= 0:
            raise ValueError(f"tune_gemm: {name} must be a positive integer, got {v!r}")
    if not isinstance(budget, int) or budget < 1:
        raise ValueError(f"tune_gemm: budget must be a positive integer (candidates to simulate), got {budget!r}")
    if not hw.supports(dtype):
        raise ValueError(f"{hw.name} has no {dtype.name} tensor cores; use bf16 or fp16")
    memo_key: tuple[Any, ...] | None = None
    if sim is None:
        try:
            memo_key = (m, n, k, dtype, hw, batch, budget, epilogue, shared_b)
            hash(memo_key)
        except TypeError:
            memo_key = None
        if memo_key is not None and memo_key in _MEMO:
            return _MEMO[memo_key]
    if sim is None:  # at the clock each candidate's power allows, as predictions and `torchsim kernel` run it
        from torchsim.sim.sustained import simulate_sustained
        sim = simulate_sustained
    t0 = time.perf_counter()
    default = default_config(m, n, k, dtype, hw, batch)
    reasons: dict[str, int] = {}
    valid = []
    for cfg in candidates(m, n, k, dtype, hw, batch):
        if _key(cfg) == _key(default):
            continue
        why = invalid_reason(cfg, dtype, hw)
        if why is None:
            valid.append(cfg)
        else:
            reasons[why] = reasons.get(why, 0) + 1
    ranked = _rank(valid, m, n, k, dtype, hw, batch)
    chosen = [default] + sorted(ranked[:budget - 1], key=_key)
    trials: list[Trial] = []
    for cfg in chosen:
        kg = gemm(m, n, k, dtype, hw, cfg, epilogue, batch=batch, shared_b=shared_b)
        res = sim(kg, hw)
        trials.append(Trial(cfg, float(res.time_s), cfg is default))
        if log:
            log(f"  {describe(cfg):<44} {res.time_s * 1e6:10.2f} us")
    best = trials[0]
    for t in trials[1:]:
        if t.time_s < best.time_s:  # strict: ties go to the default (first), then to the earlier candidate
            best = t
    result = TuneResult(best.cfg, best.time_s, default, trials[0].time_s, tuple(trials), sum(reasons.values()),
                        dict(sorted(reasons.items())), max(0, len(ranked) - (budget - 1)),
                        time.perf_counter() - t0)
    if memo_key is not None:
        _MEMO[memo_key] = result
    return result


__all__ = ["DEFAULT_BUDGET", "Trial", "TuneResult", "candidates", "describe", "estimate_s", "invalid_reason",
           "tune_gemm"]
