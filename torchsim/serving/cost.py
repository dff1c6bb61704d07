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

`IterationCost(batch)` answers from buckets: the per-token kernels are simulated at the token counts of a grid
(`token_grid`) and interpolated linearly in between, the attention kernels at their batch size and the mean
chunk / KV length rounded up to the kernels' block sizes (a uniform-length kernel standing for the varlen
one). `exact(batch)` simulates the iteration's own kernels (varlen attention over the real lengths, the
per-token kernels at the padded token count), the reference the buckets are to be measured against (not
measured yet). Kernels are simulated once per process (torchsim.prediction.kernel_sim's memo) and kept in the disk
cache, so a warm run simulates nothing.
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


def token_grid(limit: int) -> list[int]:
    """The token counts the per-token kernels are simulated at: dense where GEMM tiles and waves change the time
    fastest relative to it (powers of two up to 64, then steps of 32 to 256, 64 to 1024, 256 to 4096, 512 beyond),
    up to `limit`."""
    pts = [1, 2, 4, 8, 16, 32, 48, 64]
    for step, top in ((32, 256), (64, 1024), (256, 4096), (512, max(limit, 4096))):
        while pts[-1] < top:
            pts.append(pts[-1] + step)
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
        self._dense: dict[int, tuple[float, int]] = {}
        self._sampled: dict[int, tuple[float, int]] = {}
        self._attn: dict[tuple[Any, ...], tuple[float, int]] = {}
        self.iterations = 0

    # -- kernels at a size ------------------------------------------------------------------------------------

    def _times(self, calls: list[KernelCall]) -> tuple[float, int]:
        if not calls:
            return 0.0, 0
        simulate_many(calls, self.prof, max_events=self.max_events, workers=self.workers, disk=self.disk)
        t, n = 0.0, 0
        for c in calls:
            launches = simulate_launches(c, self.prof, max_events=self.max_events)
            t += sum(s.time_s for s in launches)
            n += len(launches)
        return t, n

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
        """Bucketed: uniform kernels at the batch's size and mean lengths rounded up to the block size."""
        key_parts: list[tuple[Any, ...]] = []
        if batch.chunks:
            n = len(batch.chunks)
            key_parts.append(("p", n, _bucket(sum(q for q, _ in batch.chunks) / n, Q_UNIT, False),
                              _bucket(sum(k for _, k in batch.chunks) / n, KV_UNIT, False)))
        if batch.decodes:
            n = len(batch.decodes)
            key_parts.append(("d", n, _bucket(sum(batch.decodes) / n, KV_UNIT, False)))
        total, launches = 0.0, 0
        for part in key_parts:
            key = (a, part)
            if key not in self._attn:
                self._attn[key] = self._attention_part(a, part)
            t, nl = self._attn[key]
            total += t
            launches += nl
        return total, launches

    def _attention_part(self, a: _Attn, part: tuple[Any, ...]) -> tuple[float, int]:
        if part[0] == "p":
            _, n, q, kv = part
            return self._times(self.attention_calls(a, IterBatch(((q, max(q, kv)),) * n, (), 0), exact=False))
        _, n, kv = part
        return self._times(self.attention_calls(a, IterBatch((), (kv,) * n, 0), exact=False))

    # -- an iteration -------------------------------------------------------------------------------------------

    def __call__(self, batch: IterBatch) -> float:
        """Seconds of device time for `batch`, from the buckets."""
        self.iterations += 1
        tokens = self.cfg.padded(batch.tokens)
        dt, dn = self._lerp(self.dense_at, tokens)
        st, sn = self._lerp(self.sampled_at, max(1, batch.sampled))
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


def scaled(c: KernelCall, tokens: int, base: int) -> KernelCall:
    """`c` (captured at `base` tokens) at `tokens` tokens: every per-token size scaled."""
    params = dict(c.params)
    for k in _TOKEN_PARAMS:
        if k in params and isinstance(params[k], int):
            v = params[k]
            params[k] = v * tokens // base if v % base == 0 else max(1, round(v * tokens / base))
    if "tokens_per_expert" in params:  # MoE: the captured routing shares, at this token count
        params["tokens_per_expert"] = _shares(params["tokens_per_expert"], tokens, base)
    return KernelCall(c.kind, tuple(sorted(params.items())), c.dtype, c.name, c.phase, c.layer, c.stream,
                      c.module_path, c.source, c.fx_nodes)


def _shares(counts: tuple[int, ...], tokens: int, base: int) -> tuple[int, ...]:
    """Counts summing to sum(counts) * tokens / base in the same proportions (largest remainders)."""
    total = round(sum(counts) * tokens / base)
    raw = [c * tokens / base for c in counts]
    out = [math.floor(r) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: (out[i] - raw[i], i))[: total - sum(out)]:
        out[i] += 1
    return tuple(out)


def _bucket(x: float, unit: int, exact: bool) -> int:
    return max(1, round(x)) if exact else max(unit, unit * math.ceil(x / unit))
