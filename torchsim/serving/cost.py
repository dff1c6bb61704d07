"""What one engine iteration costs on the device: its mixed batch lowered to kernels and simulated.

The model's forward step is captured once (torchsim.prediction.pipeline.step_entry: BASE_ROWS decoding sequences,
with the run's precision, quantisation and tensor-parallel split) and rewritten for each iteration:

- every kernel whose work is per token (the GEMMs, norms, rotary embedding, activation, residual adds, KV-cache
  writes, MoE routing and grouped GEMMs, the collectives after them) runs at the iteration's token count, padded
  to the next CUDA-graph capture size when the engine replays a graph (SchedulerConfig.padded);
- the LM head, its all-gather under tensor parallelism and the sampling run on the sampled rows only (the
  requests that emit a token: decodes and prompts whose last chunk ran);
- each layer's attention becomes a variable-length prefill kernel over the iteration's prompt chunks (each chunk
  attends causally to its request's cached tokens and itself) and a paged decode kernel over the decoding
  requests' KV lengths, as FlashAttention's varlen forward and Flash-Decoding run them.

`IterationCost(batch)` answers from buckets: each GPU GEMM at the iteration's token count rounded up to its tile
height (its time changes only when M crosses a tile row, in steps wave quantisation makes large: an o_proj of
Llama-3-8B on H100 takes 44 us at 1024 tokens and 71 us at 1025..1280), the other per-token kernels simulated at
the token counts of a grid (`token_grid`) and interpolated linearly in between (their time is linear in the
tokens), prompt chunks as a uniform prefill kernel at their count and mean lengths rounded up to the kernels'
blocks, decodes in the K/V blocks the decode kernel walks (a sequence of 132 tokens costs two blocks of 128, as
one of 256 does) as a varlen kernel over block counts spread evenly up to the batch's longest with its mean
(interpolated between grid counts an eighth of their power of two apart): the longest sets Flash-Decoding's
split count and split length and, within one wave of CTAs, the time; the mean sets the work of a batch several
waves deep. `exact(batch)` simulates the iteration's own kernels (varlen attention over the real lengths, every
kernel at the padded token count), the reference the buckets are measured against:
benchmarks/bench_serving_buckets.py. Before a run, `prefetch` simulates the kernels a foreseen set of batches
needs at once on the worker processes. Kernels are simulated once per process (torchsim.prediction.kernel_sim's
memo) and kept in the disk cache, so a warm run simulates nothing.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.templates.varlen import varlen_decode_call, varlen_prefill_call
from torchsim.prediction.cache import DiskCache
from torchsim.prediction.kernel_sim import DEFAULT_MAX_SIM_EVENTS, simulate_launches, simulate_many
from torchsim.prediction.launch import LaunchModel
from torchsim.serving.engine import IterBatch, SchedulerConfig

BASE_ROWS = 64  # sequences of the captured decode step the iterations are rewritten from
BASE_PAST = 511  # its KV length before the new token (the decode attention it holds is replaced)
_TOKEN_PARAMS = ("m", "rows", "tokens", "numel", "nbytes", "numel_in", "numel_out")
_SAMPLED = ("tail.lm_head", "tail.sample")  # kernels that run on the sampled rows only
Q_UNIT = 64  # prompt-chunk lengths are bucketed in multiples of this (FlashAttention's query block on sm80+)
KV_UNIT = 128  # KV lengths in multiples of this (the K/V block of the decode and prefill kernels)
BUCKETS = ("GEMMs at the token count rounded up to their tile height, the other per-token kernels on a grid of "
           "token counts and interpolated, prompt chunks as a uniform prefill kernel at their mean lengths, decodes "
           "as a varlen kernel over K/V blocks with the batch's mean and longest (benchmarks/bench_serving_buckets.py "
           "measures them against exact iterations: 0.38% mean, 1.21% worst over 32 batches of Llama-3-8B on H100)")
N_STEP = 16  # sequence counts of deep decode batches are interpolated between multiples of this
UNIFORM_WAVES = 6.0  # a decode batch this many waves of CTAs deep is costed as a uniform kernel at its mean: its
# total work sets the time, not its longest sequence (bench_serving_buckets: n = 105 and 140 of Llama-3-8B on H100,
# 6.4 and 8.5 waves, within 0.3%; the representative varlen kernel was +1.9% there)


def token_grid(limit: int) -> list[int]:
    """The token counts the per-token kernels are simulated at, up to `limit`: dense where GEMM tiles and waves
    change the time fastest relative to it (powers of two up to 64, then steps of 32 to 256, 64 to 512, 128 to
    1024, 256 to 2048), doubling beyond, where the GEMMs run many waves and their time grows almost linearly with
    the tokens (the interpolation error is measured by benchmarks/bench_serving_buckets.py)."""
    pts = [1, 2, 4, 8, 16, 32, 48, 64]
    for step, top in ((32, 256), (64, 512), (128, 1024), (256, 2048)):
        while pts[-1] < top:
            pts.append(pts[-1] + step)
    while pts[-1] < limit:
        pts.append(2 * pts[-1])
    out = [p for p in pts if p < limit] + [limit]
    return sorted(set(out))


@dataclass(frozen=True)
class _Attn:
    """One layer's attention as the captured step holds it: the parameters the iteration kernels keep."""

    keep: tuple[tuple[str, Any], ...]
    dtype: Any
    kv_params: tuple[tuple[str, Any], ...]  # decode-only parameters (KV-cache dtype, ...)
    name: str
    layer: int | None


class IterationCost:
    """Device time of engine iterations of one model on one GPU (one tensor-parallel rank's kernels)."""

    def __init__(self, calls: Sequence[KernelCall], prof: Any, cfg: SchedulerConfig, *, base_rows: int = BASE_ROWS,
                 max_events: int = DEFAULT_MAX_SIM_EVENTS, disk: DiskCache | None = None,
                 workers: int | None = 1) -> None:
        self.prof, self.cfg, self.base = prof, cfg, base_rows
        self.max_events, self.disk, self.workers = max_events, disk, workers
        self.dense: list[KernelCall] = []
        self.sampled: list[KernelCall] = []
        self.attn: list[_Attn] = []
        for c in calls:
            if c.kind is KernelKind.ATTENTION_DECODE:
                keep = tuple((k, v) for k, v in c.params if k in ("heads_q", "heads_kv", "head_dim", "head_dim_v",
                                                                    "window", "softcap"))
                kvp = tuple((k, v) for k, v in c.params if k not in dict(keep) and k not in
                            ("batch", "seq_q", "seq_kv", "paged"))
                self.attn.append(_Attn(keep, c.dtype, kvp, c.name, c.layer))
            elif c.kind in (KernelKind.MLA_DECODE, KernelKind.ATTENTION_PREFILL):
                raise ValueError(f"{c.name}: {c.kind.value} kernels are not modelled in serving iterations yet "
                                 "(MLA / this model's attention); torchsim serve handles models with standard "
                                 "multi-head / grouped-query attention")
            elif c.name.startswith(_SAMPLED):
                self.sampled.append(c)
            else:
                self.dense.append(c)
        if not self.attn:
            raise ValueError("the captured step has no decode attention kernel to rewrite")
        self.groups: dict[_Attn, int] = {}
        for a in self.attn:  # layers with the same attention (all, unless sliding-window layers alternate)
            k = _Attn(a.keep, a.dtype, a.kv_params, "", None)
            self.groups[k] = self.groups.get(k, 0) + 1
        self.lm = {ph: LaunchModel.for_mode(m, prof, "decode") for ph, m in (("graph", "cuda-graphs"),
                                                                              ("eager", "eager"))}
        self.grid = token_grid(cfg.max_num_batched_tokens)
        tiled = getattr(getattr(prof, "arch", None), "value", "") != "tensix"  # GPU GEMMs: tile rows of M
        self.parts = {name: _counted(calls, tiled) for name, calls in (("dense", self.dense),
                                                                        ("sampled", self.sampled))}
        self._dense: dict[int, tuple[float, int]] = {}
        self._sampled: dict[int, tuple[float, int]] = {}
        self._rest: dict[tuple[str, int], tuple[float, int]] = {}
        self._gemm_m: dict[tuple[str, int], tuple[int, ...]] = {}
        self._gemm: dict[tuple[str, tuple[int, ...]], tuple[float, int]] = {}
        self._attn: dict[tuple[Any, ...], tuple[float, int]] = {}
        self._guess: dict[tuple[str, int], float] = {}
        self._decode_shapes: dict[_Attn, tuple[int, float]] = {}
        self.iterations = 0

    # -- kernels at a size ------------------------------------------------------------------------------------

    def _times(self, calls: list[KernelCall], counts: Sequence[int] | None = None) -> tuple[float, int]:
        """(seconds, launches) of `calls` back to back, each `counts[i]` times (default once)."""
        if not calls:
            return 0.0, 0
        simulate_many(calls, self.prof, max_events=self.max_events, workers=self.workers, disk=self.disk)
        t, n = 0.0, 0
        for c, k in zip(calls, counts or [1] * len(calls)):
            launches = simulate_launches(c, self.prof, max_events=self.max_events)
            t += k * sum(s.time_s for s in launches)
            n += k * len(launches)
        return t, n

    def rest_at(self, part: str, x: int) -> tuple[float, int]:
        """The kernels of `part` ("dense": per token, "sampled": per sampled row) other than the GPU GEMMs, at
        exactly `x` tokens (rows)."""
        key = (part, x)
        if key not in self._rest:
            calls, counts = self.parts[part].rest
            self._rest[key] = self._times([scaled(c, x, self.base) for c in calls], counts)
        return self._rest[key]

    def gemm_sizes(self, part: str, x: int) -> tuple[int, ...]:
        """The M each GEMM of `part` runs at for `x` tokens (rows), rounded up to its tile height: a GEMM's time
        changes only when M crosses a tile row (the rows past M in the last tile are computed all the same)."""
        key = (part, x)
        if key not in self._gemm_m:
            self._gemm_m[key] = tuple(_tile_m(scaled(c, x, self.base), self.prof)
                                      for c in self.parts[part].gemms[0])
        return self._gemm_m[key]

    def gemms_at(self, part: str, x: int) -> tuple[float, int]:
        """The GPU GEMMs of `part` for `x` tokens (rows), each simulated at its tile-rounded M."""
        ms = self.gemm_sizes(part, x)
        key = (part, ms)
        if key not in self._gemm:
            calls, counts = self.parts[part].gemms
            self._gemm[key] = self._times(self._gemm_calls(part, ms), counts)
        return self._gemm[key]

    def _gemm_calls(self, part: str, ms: tuple[int, ...]) -> list[KernelCall]:
        return [c.with_params(m=m) for c, m in zip(self.parts[part].gemms[0], ms)]

    def bucketed(self, part: str, x: int) -> tuple[float, int]:
        """`part` for `x` tokens (rows) from the buckets: GEMMs at their tile-rounded M, the other kernels
        interpolated between the grid's token counts."""
        gt, gn = self.gemms_at(part, x)
        rt, rn = self._lerp(lambda t: self.rest_at(part, t), x)
        return gt + rt, gn + rn

    def dense_at(self, tokens: int) -> tuple[float, int]:
        """(seconds, launches) of the per-token kernels at exactly `tokens` tokens."""
        if tokens not in self._dense:
            self._dense[tokens] = self._times([scaled(c, tokens, self.base) for c in self.dense])
        return self._dense[tokens]

    def sampled_at(self, rows: int) -> tuple[float, int]:
        if rows not in self._sampled:
            self._sampled[rows] = self._times([scaled(c, rows, self.base) for c in self.sampled])
        return self._sampled[rows]

    def _lerp(self, f: Callable[[int], tuple[float, int]], x: int) -> tuple[float, int]:
        i = bisect.bisect_left(self.grid, x)
        if i == len(self.grid) or self.grid[i] == x:  # on the grid, or beyond it: simulated at x
            return f(x)
        lo, hi = self.grid[max(0, i - 1)], self.grid[i]
        (tl, nl), (th, _nh) = f(lo), f(hi)
        return tl + (th - tl) * (x - lo) / (hi - lo), nl

    # -- attention ----------------------------------------------------------------------------------------------

    def attention_calls(self, a: _Attn, batch: IterBatch, *, exact: bool) -> list[KernelCall]:
        """The layer's attention kernels for `batch`: varlen ones over the real lengths (`exact`), or uniform ones
        at the bucketed mean lengths."""
        out = []
        keep = dict(a.keep)
        if batch.chunks:
            n = len(batch.chunks)
            if exact and n > 1 and len(set(batch.chunks)) > 1:
                out.append(varlen_prefill_call(batch.chunks, dtype=a.dtype, name=a.name, layer=a.layer, **keep))
            else:
                q = _bucket(sum(q for q, _ in batch.chunks) / n, Q_UNIT, exact)
                kv = max(q, _bucket(sum(k for _, k in batch.chunks) / n, KV_UNIT, exact))
                out.append(KernelCall.make(KernelKind.ATTENTION_PREFILL, a.dtype, name=a.name, layer=a.layer,
                                           batch=n, seq_q=q, seq_kv=kv, causal=True, **keep))
        if batch.decodes:
            n = len(batch.decodes)
            if exact and len(set(batch.decodes)) > 1:
                out.append(varlen_decode_call(batch.decodes, dtype=a.dtype, name=a.name, layer=a.layer, **keep,
                                              **dict(a.kv_params)))
            else:
                kv = _bucket(sum(batch.decodes) / n, KV_UNIT, exact)
                out.append(KernelCall.make(KernelKind.ATTENTION_DECODE, a.dtype, name=a.name, layer=a.layer,
                                           phase="decode", batch=n, seq_q=1, seq_kv=kv, paged=True, **keep,
                                           **dict(a.kv_params)))
        return out

    def _attention(self, a: _Attn, batch: IterBatch) -> tuple[float, int]:
        """Bucketed (`_parts`): each bucket's kernels simulated once, weighted."""
        total, launches = 0.0, 0.0
        for weight, part in self._weighted(a, batch):
            key = (a, part)
            if key not in self._attn:
                self._attn[key] = self._times(self._part_calls(a, part))
            t, nl = self._attn[key]
            total += weight * t
            launches += weight * nl
        return total, round(launches)

    def _weighted(self, a: _Attn, batch: IterBatch) -> list[tuple[float, tuple[Any, ...]]]:
        """`_parts(batch)`, a decode batch UNIFORM_WAVES or more waves deep as a uniform kernel at its mean block
        count, interpolated between sequence counts N_STEP apart (its time is its total work: linear in the
        sequences between two close counts)."""
        out: list[tuple[float, tuple[Any, ...]]] = []
        wps = self._waves_per_seq(a)
        for weight, part in _parts(batch, self.kv_block(a)):
            if part[0] != "d" or not wps or part[1] * wps < UNIFORM_WAVES:
                out.append((weight, part))
                continue
            _, n, blocks, _ = part
            lo, hi = N_STEP * (n // N_STEP), N_STEP * -(-n // N_STEP)
            if lo == hi or lo * wps < UNIFORM_WAVES:
                out.append((weight, ("d", n, blocks, blocks)))
            else:
                w = (n - lo) / (hi - lo)
                out += [(weight * (1 - w), ("d", lo, blocks, blocks)), (weight * w, ("d", hi, blocks, blocks))]
        return out

    def _part_calls(self, a: _Attn, part: tuple[Any, ...]) -> list[KernelCall]:
        """The kernels of one attention bucket: ("p", sequences, q, kv) a uniform prefill; ("d", sequences, mean kv,
        longest kv) a decode over lengths with that mean and longest."""
        if part[0] == "p":
            _, n, q, kv = part
            return self.attention_calls(a, IterBatch(((q, max(q, kv)),) * n, (), 0), exact=False)
        _, n, blocks, longest = part
        bn, waves_per_seq = self.kv_block(a), self._waves_per_seq(a)
        if n == 1 or longest == blocks or n * waves_per_seq >= UNIFORM_WAVES:  # (`_weighted` keys these so)
            return self.attention_calls(a, IterBatch((), (bn * blocks,) * n, 0), exact=True)
        # a varlen kernel over n sequences with the batch's mean and longest K/V blocks stands for it: the longest
        # sets Flash-Decoding's split count and split length and, within one wave of CTAs, the time; the mean the
        # work of a batch several waves deep. Evenly spread from 2 x mean - longest up to the longest, or, where
        # the longest is over twice the mean, the longest and n - 1 at the count that keeps the mean
        lo = 2 * blocks - longest
        if lo >= 1:
            counts = tuple(round(lo + (longest - lo) * i / (n - 1)) for i in range(n))
        else:
            counts = (longest,) + (max(1, round((n * blocks - longest) / (n - 1))),) * (n - 1)
        return [varlen_decode_call(tuple(bn * c for c in counts), dtype=a.dtype, name=a.name, layer=a.layer,
                                   **dict(a.keep), **dict(a.kv_params))]

    def kv_block(self, a: _Attn) -> int:
        """The K/V block (tokens) the decode kernel of `a` walks the cache in (the template's bn), KV_UNIT where no
        template serves the shape."""
        return self._decode_shape(a)[0]

    def _waves_per_seq(self, a: _Attn) -> float:
        """Waves of CTAs one unsplit sequence of `a`'s decode kernel adds (its heads x query blocks over the CTAs
        the GPU holds at once); 0 where no template serves the shape."""
        return self._decode_shape(a)[1]

    def _decode_shape(self, a: _Attn) -> tuple[int, float]:
        if a not in self._decode_shapes:
            from torchsim.lowering.templates import build_kernels
            from torchsim.prediction.repeats import cta_slots

            n = 64
            try:
                kg = build_kernels(self.attention_calls(a, IterBatch((), (4096,) * n, 0), exact=True)[0],
                                   self.prof)[0]
                ctas = sum(c.count for c in kg.classes) / (n * int(kg.attrs.get("splits", 1) or 1))
                self._decode_shapes[a] = (int(kg.attrs.get("bn", 0) or KV_UNIT), ctas / cta_slots(kg.classes[0],
                                                                                           self.prof))
            except ValueError:
                self._decode_shapes[a] = (KV_UNIT, 0.0)
        return self._decode_shapes[a]

    def stats(self) -> dict[str, int]:
        """How much was costed: iterations, and the distinct GEMM sizes, grid points and attention buckets."""
        return {"iterations_costed": self.iterations, "gemm_sizes": len(self._gemm), "grid_sizes": len(self._rest),
                "attention_buckets": len(self._attn)}

    # -- foreseeing what a load needs --------------------------------------------------------------------------

    def estimate(self, batch: IterBatch) -> float:
        """A roofline guess of `batch`'s time (torchsim.lowering.fallback.roofline of its kernels at their sizes),
        used only to foresee which buckets a load will need (`prefetch`); never a reported time."""
        from torchsim.lowering.fallback import roofline

        def rl(calls: list[KernelCall]) -> float:
            return sum(roofline(c, self.prof).time_s for c in calls)

        def part(name: str, calls: list[KernelCall], x: int) -> float:
            if (name, x) not in self._guess:
                self._guess[name, x] = rl([scaled(c, x, self.base) for c in calls])
            return self._guess[name, x]

        at = sum(count * rl(self.attention_calls(a, batch, exact=False)) for a, count in self.groups.items())
        return self._placed(part("dense", self.dense, self.cfg.padded(batch.tokens))
                            + part("sampled", self.sampled, max(1, batch.sampled)) + at,
                            len(self.dense) + len(self.sampled), batch.tokens)

    def needs(self, batches: Sequence[IterBatch], *, exact: bool = False) -> list[KernelCall]:
        """The distinct kernels (one per shape) the cost of `batches` simulates (from the buckets, or `exact`) that
        are not costed yet."""
        dense: set[int] = set()
        rows: set[int] = set()
        parts: set[tuple[_Attn, tuple[Any, ...]]] = set()
        exact_attn: dict[Any, KernelCall] = {}
        for b in batches:
            dense.add(self.cfg.padded(b.tokens))
            rows.add(max(1, b.sampled))
            for a in self.groups:
                if exact:
                    exact_attn.update((c.key(), c) for c in self.attention_calls(a, b, exact=True))
                else:
                    parts.update((a, p) for _, p in self._weighted(a, b))
        calls: list[KernelCall] = []
        for part, xs in (("dense", dense), ("sampled", rows)):
            if exact:
                done = self._dense if part == "dense" else self._sampled
                calls += [scaled(c, x, self.base) for x in sorted(xs - done.keys())
                          for c in (self.dense if part == "dense" else self.sampled)]
                continue
            rest = {t for x in xs for t in self._neighbours(x)}
            calls += [scaled(c, t, self.base) for t in sorted(rest) if (part, t) not in self._rest
                      for c in self.parts[part].rest[0]]
            for ms in sorted({self.gemm_sizes(part, x) for x in xs}):
                if (part, ms) not in self._gemm:
                    calls += self._gemm_calls(part, ms)
        for a, p in sorted(parts - self._attn.keys(), key=repr):
            calls += self._part_calls(a, p)
        return list({c.key(): c for c in calls + list(exact_attn.values())}.values())

    def prefetch(self, batches: Sequence[IterBatch], *, exact: bool = False, progress: bool = False) -> int:
        """Simulate at once, on the worker processes, every kernel the cost of `batches` will need: the iterations
        then only read the results. Returns how many distinct kernels that was."""
        calls = self.needs(batches, exact=exact)
        if calls:
            simulate_many(calls, self.prof, max_events=self.max_events, workers=self.workers, disk=self.disk,
                          progress=progress)
        return len(calls)

    def _neighbours(self, x: int) -> list[int]:
        """The grid points `_lerp` reads for `x`."""
        i = bisect.bisect_left(self.grid, x)
        if i == len(self.grid) or self.grid[i] == x:
            return [x]
        return [self.grid[max(0, i - 1)], self.grid[i]]

    # -- an iteration -------------------------------------------------------------------------------------------

    def __call__(self, batch: IterBatch) -> float:
        """Seconds of device time for `batch`, from the buckets."""
        self.iterations += 1
        tokens = self.cfg.padded(batch.tokens)
        dt, dn = self.bucketed("dense", tokens)
        st, sn = self.bucketed("sampled", max(1, batch.sampled))
        at, an = 0.0, 0
        for a, count in self.groups.items():
            t, n = self._attention(a, batch)
            at += count * t
            an += count * n
        return self._placed(dt + st + at, dn + sn + an, batch.tokens)

    def exact(self, batch: IterBatch) -> float:
        """Seconds of device time for `batch`, every kernel of it simulated at its own sizes."""
        tokens = self.cfg.padded(batch.tokens)
        dt, dn = self.dense_at(tokens)
        st, sn = self.sampled_at(max(1, batch.sampled))
        at, an = 0.0, 0
        for a, count in self.groups.items():
            t, n = self._times(self.attention_calls(a, batch, exact=True))
            at += count * t
            an += count * n
        return self._placed(dt + st + at, dn + sn + an, batch.tokens)

    def _placed(self, kernel_s: float, launches: int, tokens: int) -> float:
        """The iteration's kernels back to back on one stream: a replayed CUDA graph (tokens within the capture
        sizes) pays the graph launch and the device gap between kernels; an eager iteration the gap, or the host's
        issue time when that is longer (LaunchModel)."""
        lm = self.lm["graph" if tokens <= self.cfg.cuda_graph_max_tokens else "eager"]
        device = float(lm.step_overhead) + kernel_s + max(0, launches - 1) * float(lm.device_gap)
        return max(device, launches * float(lm.host_per_kernel))


@dataclass(frozen=True)
class _Part:
    """The kernels of one part of the step, identical calls counted once: (calls, counts) of its GPU GEMMs and of
    the rest."""

    gemms: tuple[list[KernelCall], list[int]]
    rest: tuple[list[KernelCall], list[int]]


def _counted(calls: Sequence[KernelCall], tiled: bool) -> _Part:
    groups: dict[Any, list[Any]] = {}  # call key -> [call, count], in launch order
    for c in calls:
        groups.setdefault(c.key(), [c, 0])[1] += 1

    def of(gemms: bool) -> tuple[list[KernelCall], list[int]]:
        sel = [(c, n) for c, n in groups.values() if (tiled and c.kind is KernelKind.GEMM) is gemms]
        return [c for c, _ in sel], [n for _, n in sel]

    return _Part(of(True), of(False))


def _tile_m(c: KernelCall, prof: Any) -> int:
    """`c`'s M rounded up to the tile height of the configuration the template library gives it, when the rounded
    GEMM keeps that configuration (else M itself)."""
    from torchsim.prediction.repeats import gemm_call_config

    m = int(c.p("m"))
    cfg = gemm_call_config(c, prof)
    up = -(-m // cfg.bm) * cfg.bm
    if up == m:
        return m
    other = gemm_call_config(c.with_params(m=up), prof)
    return up if (other.bm, other.bn, other.bk, other.stages, other.split_k, other.persistent) == (
        cfg.bm, cfg.bn, cfg.bk, cfg.stages, cfg.split_k, cfg.persistent) else m


def scaled(c: KernelCall, tokens: int, base: int) -> KernelCall:
    """`c` (captured at `base` tokens) at `tokens` tokens: every per-token size scaled."""
    params = dict(c.params)
    new: dict[str, Any] = {}
    for k in _TOKEN_PARAMS:
        if k in params and isinstance(params[k], int):
            v = params[k]
            new[k] = v * tokens // base if v % base == 0 else max(1, round(v * tokens / base))
    if "tokens_per_expert" in params:  # MoE: the captured routing shares, at this token count
        new["tokens_per_expert"] = _shares(params["tokens_per_expert"], tokens, base)
    return c.with_params(**new)


def _shares(counts: tuple[int, ...], tokens: int, base: int) -> tuple[int, ...]:
    """Counts summing to sum(counts) * tokens / base in the same proportions (largest remainders)."""
    total = round(sum(counts) * tokens / base)
    raw = [c * tokens / base for c in counts]
    out = [math.floor(r) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: (out[i] - raw[i], i))[: total - sum(out)]:
        out[i] += 1
    return tuple(out)


def _parts(batch: IterBatch, bn: int = KV_UNIT) -> list[tuple[float, tuple[Any, ...]]]:
    """The attention buckets of `batch`, weighted: its prompt chunks at their count and mean q / KV lengths rounded
    up to the blocks (weight 1); its decodes in K/V blocks of `bn` tokens (the decode kernel's work: a sequence of
    132 tokens costs two blocks of 128, as one of 256 does) at their count and longest, and at the two grid counts
    (`_kv_grid`) around their mean, weighted to interpolate linearly between them."""
    out: list[tuple[float, tuple[Any, ...]]] = []
    if batch.chunks:
        n = len(batch.chunks)
        out.append((1.0, ("p", n, _bucket(sum(q for q, _ in batch.chunks) / n, Q_UNIT, False),
                          _bucket(sum(k for _, k in batch.chunks) / n, KV_UNIT, False))))
    if batch.decodes:
        n = len(batch.decodes)
        blocks = [-(-kv // bn) for kv in batch.decodes]
        longest = _kv_grid(max(blocks), 1 << 62)[1]  # rounded up: the longest sets the split length
        mean = sum(blocks) / n
        lo, hi = _kv_grid(mean, longest)
        if hi == lo:
            out.append((1.0, ("d", n, lo, longest)))
        else:
            w = (mean - lo) / (hi - lo)
            out += [(1.0 - w, ("d", n, lo, longest)), (w, ("d", n, hi, longest))]
    return out


def _kv_grid(x: float, longest: int) -> tuple[int, int]:
    """The grid counts at or below and above `x` (at most `longest`): every count up to 16, then an eighth of x's
    power of two apart (2 from 16, 4 from 32, ...)."""
    unit = max(1, 2 ** (math.floor(math.log2(max(x, 1.0))) - 3))
    lo = max(1, unit * math.floor(x / unit))
    hi = min(longest, unit * math.ceil(x / unit))
    return min(lo, hi), hi


def _bucket(x: float, unit: int, exact: bool) -> int:
    return max(1, round(x)) if exact else max(unit, unit * math.ceil(x / unit))
