"""Microbenchmarks a user runs on their own GPU: rows in the published_dev.csv schema for `torchsim calibrate`.

What is measured (each a function parameterised by the device, "cuda" or "cpu", and its shapes):

- `gemm`: torch.matmul in bf16, and FP8 E4M3 through torch._scaled_mm (per-tensor scales, bf16 out) where the
  device supports it; large (compute-bound) and small (launch-bound) shapes -> `gemm` rows, metric time_us;
- `attention`: torch.nn.functional.scaled_dot_product_attention prefill (seq_q = seq_kv) and decode (one query
  token against a KV cache), the FlashAttention backend forced where torch has it -> `attention` rows;
- `bandwidth`: read-only (a sum), write-only (a fill) and copy (copy_) of a buffer -> `microbenchmark` rows,
  metric bandwidth_gbps (bytes moved / time);
- `launch`: back-to-back empty (torch.cuda._sleep(0)) and tiny (a one-element add) kernels, eagerly and replayed
  from a CUDA graph -> `microbenchmark` rows, metric time_us per kernel.

How it is timed (the same for every row, and written into each row's notes): after `warmup` calls, CUDA events
(time.perf_counter and a synchronize on the CPU device) around `iters` back-to-back calls, the mean per call; the
median of `repeats` such loops is the value. L2 is not flushed between calls; clocks are not locked.
That is what timing_methods.csv calls `cuda-events-loop` (the eager back-to-back launch gap is part of each
call) and, for the CUDA-graph replays, `cuda-graph`: each row's `source` names the method so that
torchsim.validation.timing maps it.

torch is imported by the functions, not by this module (the command line stays torch-free until it runs).
"""

from __future__ import annotations

import functools
import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchsim.calibration.gpu_state import Sampler, limits
from torchsim.exports.atomic import write_bytes_atomic
from torchsim.validation.published import COLUMNS, HW_MAP

Log = Callable[[str], None]

GRAPH_GEMM_FLOPS = 1e10  # GEMMs up to this many FLOPs are also timed inside a CUDA graph (their launch gap shows)
SOURCE = "torchsim microbench"  # timing_methods.csv maps "torchsim microbench cuda-graph" and "torchsim microbench"


@dataclass(frozen=True)
class Timing:
    """How each measurement is timed."""

    warmup: int = 5
    iters: int = 20
    repeats: int = 5

    def __post_init__(self) -> None:
        for name in ("warmup", "iters", "repeats"):
            if getattr(self, name) < (0 if name == "warmup" else 1):
                raise ValueError(f"timing {name} must be >= {0 if name == 'warmup' else 1}, got {getattr(self, name)}")


@dataclass(frozen=True)
class Shapes:
    """The shapes one run measures."""

    gemm: tuple[tuple[int, int, int], ...]  # (M, N, K), bf16 (and FP8 where supported)
    prefill: tuple[tuple[int, int, int, int, bool], ...]  # (batch, heads, seqlen, head_dim, causal)
    decode: tuple[tuple[int, int, int, int], ...]  # (batch, heads, kv_len, head_dim), one query token
    copy_bytes: tuple[int, ...]  # buffer sizes of the bandwidth tests
    launch_kernels: int = 1000  # kernels per timed loop of the launch tests
    sustained: tuple[SustainedCase, ...] = ()  # run for seconds each, SM clock and power read (sustained())


@dataclass(frozen=True)
class SustainedCase:
    """One kernel run back to back for seconds: a GEMM (M, N, K) in bf16 or fp8 on random or all-zero data (zeros
    toggle fewer bits, draw less power and so throttle less: a documented effect), an fp32 copy of `shape[0]`
    bytes, or an fp32 add (y = x + 1) over `shape[0]` bytes, the power model's probes: over 1 GiB it is
    DRAM-bound; over a buffer that fits in L2 (the add's read and write inside it) it draws the SMs' and L2's
    power without DRAM traffic, and runs as CUDA-graph replays of 200 adds (one add is too short to issue
    eagerly)."""

    kind: str  # gemm, copy, add
    dtype: str  # bf16, fp8 (gemm); fp32 (copy)
    shape: tuple[int, ...]  # (M, N, K) or (bytes,)
    data: str = "random"  # random, zeros

    def __post_init__(self) -> None:
        ok = ((self.kind == "gemm" and self.dtype in ("bf16", "fp8") and len(self.shape) == 3)
              or (self.kind in ("copy", "add") and self.dtype == "fp32" and len(self.shape) == 1))
        if not ok or self.data not in ("random", "zeros") or min(self.shape) < 1:
            raise ValueError(f"sustained case {self} is not a bf16/fp8 (M, N, K) GEMM or an fp32 copy or add of "
                             f"a positive byte count on random or zeros data")

    def label(self) -> str:
        what = "x".join(map(str, self.shape)) if self.kind == "gemm" else f"{self.shape[0] / MiB:.4g} MiB"
        return f"{self.kind} {self.dtype} {what} {self.data}"


MiB = 1 << 20
SUSTAINED_FULL = (
    SustainedCase("gemm", "bf16", (8192, 8192, 8192)), SustainedCase("gemm", "bf16", (8192, 8192, 8192), "zeros"),
    SustainedCase("gemm", "bf16", (4096, 4096, 4096)), SustainedCase("gemm", "fp8", (8192, 8192, 8192)),
    SustainedCase("gemm", "fp8", (8192, 8192, 8192), "zeros"), SustainedCase("gemm", "bf16", (1, 8192, 8192)),
    SustainedCase("copy", "fp32", (1024 * MiB,)), SustainedCase("add", "fp32", (1024 * MiB,)),
    SustainedCase("add", "fp32", (8 * MiB,)),
)
GRAPH_ADDS = 200  # adds per CUDA-graph replay of the L2-resident probe
FULL = Shapes(
    gemm=((128, 128, 128), (256, 256, 256), (512, 512, 512), (1024, 1024, 1024), (16, 4096, 4096),
          (64, 8192, 8192), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (16384, 8192, 1024),
          # Llama-3-8B's projections (QKV, O, gate-up, down) at a 2048-token prefill and at one decode token
          (2048, 6144, 4096), (2048, 4096, 4096), (2048, 28672, 4096), (2048, 4096, 14336),
          (1, 6144, 4096), (1, 28672, 4096), (1, 4096, 14336)),
    prefill=((16, 16, 1024, 128, False), (4, 16, 4096, 128, False), (4, 16, 4096, 128, True),
             (1, 16, 16384, 128, False), (1, 32, 2048, 128, True), (1, 32, 8192, 128, True),
             (1, 32, 32768, 128, True)),
    decode=((16, 32, 4096, 128), (64, 32, 4096, 128), (16, 32, 16384, 128)),
    copy_bytes=(64 * MiB, 1024 * MiB),
    sustained=SUSTAINED_FULL,
)
QUICK = Shapes(
    gemm=((256, 256, 256), (1024, 1024, 1024), (16, 4096, 4096), (4096, 4096, 4096)),
    prefill=((4, 16, 4096, 128, False),),
    decode=((16, 32, 4096, 128),),
    copy_bytes=(256 * MiB,),
    launch_kernels=200,
    sustained=(SUSTAINED_FULL[0],),
)
TINY = Shapes(  # the CPU pipeline test: seconds, not minutes
    gemm=((8, 8, 8), (16, 32, 16)),
    prefill=((1, 2, 16, 8, False),),
    decode=((1, 2, 16, 8),),
    copy_bytes=(64 * 1024,),
    launch_kernels=10,
    sustained=(SustainedCase("gemm", "bf16", (16, 16, 16)), SustainedCase("copy", "fp32", (64 * 1024,)),
               SustainedCase("add", "fp32", (64 * 1024,))),
)


@dataclass(frozen=True)
class Measurement:
    category: str  # gemm, attention, microbenchmark
    workload: str
    dtype: str
    params: dict[str, Any]
    metric: str
    value: float
    unit: str
    method: str  # cuda-events-loop, cuda-graph, perf-counter-loop
    detail: str = ""  # e.g. the TFLOPS a time corresponds to, the spread of the repeats
    calls: int = 0  # back-to-back calls per timed loop (0: Timing.iters)
    how: str = ""  # how it was timed, where not as `timing` says (the sustained runs)


# ---------------------------------------------------------------- timing

def _torch() -> Any:
    import torch
    return torch


def check_device(device: str) -> None:
    """A clear error when `device` cannot run the suite (no CUDA build, no GPU)."""
    if device not in ("cuda", "cpu"):
        raise ValueError(f"device must be 'cuda' or 'cpu', got {device!r}")
    try:
        torch = _torch()
    except ImportError:
        raise ValueError("needs PyTorch (pip install torch, a CUDA build); nothing was "
                         "written") from None
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"needs a CUDA GPU and a CUDA build of PyTorch; this torch "
                         f"({torch.__version__}) sees no CUDA device; nothing was written")


def _sync(device: str) -> None:
    if device == "cuda":
        _torch().cuda.synchronize()


def time_loop(fn: Callable[[], Any], device: str, timing: Timing, calls_per_fn: int = 1) -> list[float]:
    """Seconds per call of `fn` for each of `timing.repeats` loops of `timing.iters` back-to-back calls after
    `timing.warmup` calls (`calls_per_fn`: kernels one `fn` call issues, e.g. a graph replay)."""
    for _ in range(timing.warmup):
        fn()
    _sync(device)
    out = []
    for _ in range(timing.repeats):
        if device == "cuda":
            torch = _torch()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(timing.iters):
                fn()
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            for _ in range(timing.iters):
                fn()
            seconds = time.perf_counter() - t0
        out.append(seconds / (timing.iters * calls_per_fn))
    if not all(math.isfinite(s) and s > 0 for s in out):
        raise RuntimeError(f"timer returned non-positive per-call times {out}")
    return out


def time_graph(fn: Callable[[], Any], kernels: int, timing: Timing) -> tuple[list[float], int]:
    """CUDA only: seconds per kernel of `kernels` calls of `fn` captured into one CUDA graph, for each of
    `timing.repeats` loops of back-to-back replays (a quarter of `timing.iters`, at least one), and the replays
    per loop."""
    torch = _torch()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()  # warm up on a side stream before capture, as CUDA-graph capture asks
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(kernels):
            fn()
    replays = Timing(timing.warmup, max(1, timing.iters // 4), timing.repeats)
    return time_loop(graph.replay, "cuda", replays, calls_per_fn=kernels), replays.iters


def _method(device: str) -> str:
    return "cuda-events-loop" if device == "cuda" else "perf-counter-loop"


def _spread(ts: list[float]) -> str:
    return f"loops ranged {min(ts) * 1e6:.4g}-{max(ts) * 1e6:.4g} us per call"


# ---------------------------------------------------------------- the measurements

def fp8_supported(device: str) -> bool:
    """torch._scaled_mm with FP8 E4M3 runs here (CUDA: compute capability 8.9 or newer)."""
    torch = _torch()
    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        return False
    if device == "cuda" and torch.cuda.get_device_capability() < (8, 9):
        return False
    try:
        a = torch.zeros(16, 16, device=device).to(torch.float8_e4m3fn)
        one = torch.tensor(1.0, device=device)
        torch._scaled_mm(a, a.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    except (RuntimeError, TypeError, NotImplementedError):
        return False
    return True


def _gemm_fn(device: str, m: int, n: int, k: int, dtype: str, data: str = "random"
             ) -> tuple[Callable[[], Any], str, str]:
    """The call C = A @ B (bf16 torch.matmul, or fp8 E4M3 inputs with per-tensor scales and bf16 output through
    torch._scaled_mm, B column-major as it requires) on random or all-zero inputs; its dtype and workload texts."""
    torch = _torch()
    if dtype not in ("bf16", "fp8"):
        raise ValueError(f"gemm dtype must be bf16 or fp8, got {dtype!r}")
    if min(m, n, k) < 1:
        raise ValueError(f"gemm shape {(m, n, k)} has a non-positive dimension")
    make = torch.randn if data == "random" else torch.zeros
    a = make(m, k, device=device).to(torch.bfloat16)
    b = make(k, n, device=device).to(torch.bfloat16)
    if dtype == "bf16":
        def mm(a: Any = a, b: Any = b) -> Any:
            return torch.matmul(a, b)
        return mm, "bf16", "torch.matmul (bf16 in, bf16 out)"
    a8 = a.to(torch.float8_e4m3fn)
    b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major B
    one = torch.tensor(1.0, device=device)

    def scaled(a: Any = a8, b: Any = b8, s: Any = one) -> Any:
        return torch._scaled_mm(a, b, scale_a=s, scale_b=s, out_dtype=torch.bfloat16)
    return scaled, "fp8_e4m3 in (per-tensor scales) / bf16 out", "torch._scaled_mm (fp8 e4m3 in, bf16 out)"


def _sampler(device: str) -> Sampler | None:
    """An NVML sampler on CUDA where NVML answers (the rows then say at what clock and power they ran)."""
    if device != "cuda":
        return None
    s = Sampler(_torch().cuda.current_device())
    return s if s.available else None


def _timed(fn: Callable[[], Any], device: str, timing: Timing, sampler: Sampler | None
           ) -> tuple[list[float], str]:
    """time_loop under `sampler`; the GPU state it read as a note ("; SM clock ...") or ""."""
    if sampler is None:
        return time_loop(fn, device, timing), ""
    with sampler:
        ts = time_loop(fn, device, timing)
    r = sampler.reading()
    return ts, f"; {r.note()}" if r else ""


def gemm(device: str, shapes: Sequence[tuple[int, int, int]], dtype: str = "bf16", timing: Timing = Timing(),
         log: Log | None = None) -> list[Measurement]:
    """C = A @ B for each (M, N, K): bf16 torch.matmul, or fp8 (E4M3 inputs, per-tensor scales, bf16 output)
    through torch._scaled_mm with B column-major as it requires."""
    if dtype not in ("bf16", "fp8"):
        raise ValueError(f"gemm dtype must be bf16 or fp8, got {dtype!r}")
    out = []
    for m, n, k in shapes:
        fn, label, workload = _gemm_fn(device, m, n, k, dtype)
        sampler = _sampler(device) if 2.0 * m * n * k > GRAPH_GEMM_FLOPS else None
        try:
            ts, state = _timed(fn, device, timing, sampler)
        except RuntimeError as exc:  # e.g. _scaled_mm wants dimensions that are multiples of 16: say so, go on
            if dtype == "bf16":
                raise
            if log:
                log(f"gemm {dtype} {m}x{n}x{k}: skipped ({str(exc).splitlines()[0][:120]})")
            continue
        t = statistics.median(ts)
        tflops = 2.0 * m * n * k / t / 1e12
        out.append(Measurement("gemm", workload, label, {"M": m, "N": n, "K": k, "layout": "NN" if dtype == "bf16"
                                                         else "NT"}, "time_us", t * 1e6, "us", _method(device),
                               f"{tflops:.4g} TFLOPS; {_spread(ts)}{state}"))
        if log:
            log(f"gemm {dtype} {m}x{n}x{k}: {t * 1e6:.4g} us ({tflops:.4g} TFLOPS)")
        if device == "cuda" and 2.0 * m * n * k <= GRAPH_GEMM_FLOPS:  # launch-sensitive: also inside a CUDA graph
            gts, replays = time_graph(fn, timing.iters, timing)
            g = statistics.median(gts)
            out.append(Measurement("gemm", f"{workload}, {timing.iters} back-to-back in one CUDA graph", label,
                                   {"M": m, "N": n, "K": k, "layout": "NN" if dtype == "bf16" else "NT"}, "time_us",
                                   g * 1e6, "us", "cuda-graph", f"{2.0 * m * n * k / g / 1e12:.4g} TFLOPS; per GEMM; "
                                   f"{_spread(gts)}", calls=replays))
            if log:
                log(f"gemm {dtype} {m}x{n}x{k} in a CUDA graph: {g * 1e6:.4g} us per GEMM")
    return out


def _sdpa(device: str) -> list[tuple[Callable[..., Any], str]]:
    """SDPA with each backend torchsim's attention rows can map to a template forced in turn (CUDA), each with
    the workload text naming it: the FlashAttention backend ('FlashAttention-2' -> the FA2 template) and, on
    sm90+, the cuDNN backend, whose Hopper kernel is a wgmma/TMA flash forward of FlashAttention-3's class
    (mapped to the FA3 template as the nearest modelled structure, said so in the text)."""
    torch = _torch()
    f = torch.nn.functional.scaled_dot_product_attention
    if device != "cuda":
        return [(f, "torch SDPA (backend chosen by torch on the CPU)")]
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def forced(backend: Any) -> Callable[..., Any]:
        def run(*args: Any, **kw: Any) -> Any:
            with sdpa_kernel(backend):
                return f(*args, **kw)
        return run
    out = [(forced(SDPBackend.FLASH_ATTENTION), "torch SDPA, FlashAttention-2 backend (SDPBackend.FLASH_ATTENTION)")]
    cudnn = getattr(SDPBackend, "CUDNN_ATTENTION", None)
    if cudnn is not None and torch.cuda.get_device_capability() >= (9, 0):
        out.append((forced(cudnn), "torch SDPA, cuDNN backend (SDPBackend.CUDNN_ATTENTION: on sm90 a wgmma/TMA "
                    "flash forward, compared with the FlashAttention-3 template)"))
    return out


def _short(backend: str) -> str:
    """'FlashAttention-2', 'cuDNN' or 'SDPA': the backend a workload text names, for progress lines."""
    return backend.split(",")[1].split()[0] if "," in backend else "SDPA"


def attention(device: str, prefill: Sequence[tuple[int, int, int, int, bool]],
              decode: Sequence[tuple[int, int, int, int]], timing: Timing = Timing(),
              log: Log | None = None) -> list[Measurement]:
    """SDPA forward, bf16: prefill (batch, heads, seq, head_dim, causal) with seq_q = seq_kv, and decode (batch,
    heads, kv_len, head_dim) with one query token per sequence."""
    torch = _torch()
    out = []
    cases = [(b, h, s, s, d, c) for b, h, s, d, c in prefill] + [(b, h, 1, kv, d, False) for b, h, kv, d in decode]
    for (sdpa, backend), (b, h, sq, skv, d, causal) in ((x, c) for x in _sdpa(device) for c in cases):
        if min(b, h, sq, skv, d) < 1:
            raise ValueError(f"attention shape {(b, h, sq, skv, d)} has a non-positive dimension")
        q = torch.randn(b, h, sq, d, device=device, dtype=torch.bfloat16)
        k = torch.randn(b, h, skv, d, device=device, dtype=torch.bfloat16)
        v = torch.randn(b, h, skv, d, device=device, dtype=torch.bfloat16)

        def fn(q: Any = q, k: Any = k, v: Any = v, c: bool = causal, sdpa: Any = sdpa) -> Any:
            return sdpa(q, k, v, is_causal=c)
        try:
            ts, state = _timed(fn, device, timing, _sampler(device))
        except RuntimeError as exc:  # e.g. no flash kernel for this head_dim on this GPU: say so, go on
            if log:
                log(f"attention {_short(backend)} {(b, h, sq, skv, d)}: skipped "
                    f"({str(exc).splitlines()[0][:120]})")
            continue
        t = statistics.median(ts)
        flops = 4.0 * b * h * sq * skv * d * (0.5 if causal else 1.0)
        kind = "prefill" if sq == skv else "decode"
        params: dict[str, Any] = ({"batch": b, "heads": h, "seqlen": sq, "head_dim": d, "causal": causal}
                                  if kind == "prefill" else
                                  {"batch": b, "heads": h, "seqlen_q": 1, "seqlen_kv": skv, "head_dim": d,
                                   "causal": False})
        kv_gbps = 2.0 * b * h * skv * d * 2 / t / 1e9
        detail = (f"{flops / t / 1e12:.4g} TFLOPS (4*b*h*sq*skv*d{', halved for causal' if causal else ''})"
                  if kind == "prefill" else f"KV read {kv_gbps:.4g} GB/s")
        out.append(Measurement("attention", f"{backend}, {kind} forward", "bf16", params, "time_us", t * 1e6, "us",
                               _method(device), f"{detail}; {_spread(ts)}{state}"))
        if log:
            log(f"attention {_short(backend)} {kind} b{b} h{h} sq{sq} skv{skv} d{d}"
                f"{' causal' if causal else ''}: {t * 1e6:.4g} us")
    return out


def bandwidth(device: str, sizes: Sequence[int], timing: Timing = Timing(),
              log: Log | None = None) -> list[Measurement]:
    """Read-only (x.sum()), write-only (x.fill_) and copy (y.copy_(x)) of an fp32 buffer of each size in bytes;
    GB/s = bytes moved (the buffer once, twice for a copy) / time."""
    torch = _torch()
    out = []
    for size in sizes:
        n = size // 4
        if n < 1:
            raise ValueError(f"bandwidth buffer of {size} bytes holds no fp32 element")
        x = torch.ones(n, device=device, dtype=torch.float32)
        y = torch.empty_like(x)
        ops: list[tuple[str, str, Callable[[], Any], int]] = [
            ("read", "read-only (x.sum(): one read, a scalar written)", x.sum, 4 * n),
            ("write", "write-only (x.fill_(): one write)", functools.partial(x.fill_, 1.0), 4 * n),
            ("copy", "copy (y.copy_(x): one read + one write)", functools.partial(y.copy_, x), 8 * n),
        ]
        for op, what, fn, moved in ops:
            ts, state = _timed(fn, device, timing, _sampler(device))
            t = statistics.median(ts)
            out.append(Measurement("microbenchmark", f"memory bandwidth, {what}, {4 * n} B buffer", "fp32",
                                   {"op": op, "bytes": 4 * n, "bytes_moved": moved}, "bandwidth_gbps",
                                   moved / t / 1e9, "GB/s", _method(device), f"{t * 1e6:.4g} us per call; "
                                   f"{_spread(ts)}{state}"))
            if log:
                log(f"bandwidth {op} {4 * n / MiB:.4g} MiB: {moved / t / 1e9:.4g} GB/s")
    return out


def launch(device: str, kernels: int, timing: Timing = Timing(), log: Log | None = None) -> list[Measurement]:
    """Per-kernel time of `kernels` back-to-back empty (torch.cuda._sleep(0); CUDA only) and tiny (add_ on a
    one-element tensor) kernels, eagerly and (CUDA only) replayed from one CUDA graph."""
    torch = _torch()
    if kernels < 1:
        raise ValueError(f"launch kernels must be >= 1, got {kernels}")
    t1 = torch.zeros(1, device=device)
    cases: list[tuple[str, Callable[[], Any]]] = [("tiny (one-element add_)", lambda: t1.add_(1.0))]
    if device == "cuda" and hasattr(torch.cuda, "_sleep"):
        cases.insert(0, ("empty (torch.cuda._sleep(0))", lambda: torch.cuda._sleep(0)))
    loop = Timing(timing.warmup, max(1, kernels), timing.repeats)
    out = []
    for what, fn in cases:
        ts = time_loop(fn, device, loop)
        t = statistics.median(ts)
        out.append(Measurement("microbenchmark", f"kernel launch interval, eager back-to-back, {what}", "n/a",
                               {"kernels": loop.iters, "mode": "eager"}, "time_us", t * 1e6, "us", _method(device),
                               f"per kernel; {_spread(ts)}", calls=loop.iters))
        if log:
            log(f"launch eager {what}: {t * 1e6:.4g} us per kernel")
        if device != "cuda":
            continue
        gts, replays = time_graph(fn, kernels, timing)
        g = statistics.median(gts)
        out.append(Measurement("microbenchmark", f"kernel launch interval, CUDA graph replay, {what}", "n/a",
                               {"kernels": kernels, "mode": "cuda-graph"}, "time_us", g * 1e6, "us", "cuda-graph",
                               f"per kernel, {kernels} kernels in one graph; {_spread(gts)}", calls=replays))
        if log:
            log(f"launch cuda-graph {what}: {g * 1e6:.4g} us per kernel")
    return out


def sustained(device: str, cases: Sequence[SustainedCase], seconds: float, log: Log | None = None,
              fp8: bool = True) -> list[Measurement]:
    """Each case run back to back for `seconds`, in chunks of about 50 ms timed with CUDA events: its throughput
    and, where NVML answers, the SM clock and board power it settled at, all over the second half of the run (the
    clock has left boost by then and the power average has caught up). A GEMM gives a `gemm` row in TFLOPS, a copy
    a `microbenchmark` row in GB/s, and each its `sm_clock_mhz` and `board_power_w` rows (what torchsim.sim.
    sustained predicts for that kernel under the profile's power limit)."""
    if not seconds > 0:
        raise ValueError(f"sustained seconds must be > 0, got {seconds}")
    torch = _torch()
    out = []
    for case in cases:
        if case.kind == "gemm" and case.dtype == "fp8" and not fp8:
            continue
        if case.kind == "gemm":
            m, n, k = case.shape
            fn, label, workload = _gemm_fn(device, m, n, k, case.dtype, case.data)
            work, unit = 2.0 * m * n * k, "TFLOPS"
            params: dict[str, Any] = {"M": m, "N": n, "K": k, "layout": "NN" if case.dtype == "bf16" else "NT"}
        else:
            x = (torch.randn if case.data == "random" else torch.zeros)(case.shape[0] // 4, device=device)
            y = torch.empty_like(x)
            work, unit = 2.0 * 4 * x.numel(), "GB/s"
            params = {"op": case.kind, "bytes": 4 * x.numel(), "bytes_moved": int(work)}
            if case.kind == "copy":
                fn, label, workload = functools.partial(y.copy_, x), "fp32", "copy (y.copy_(x): one read + one write)"
            else:
                fn, label, workload = (functools.partial(torch.add, x, 1.0, out=y), "fp32",
                                       "add (y = x + 1: one read + one write)")
                if device == "cuda" and 2 * 4 * x.numel() <= _l2_bytes():  # L2-resident: replay a graph of adds
                    fn, work = _graph_of(fn, GRAPH_ADDS), work * GRAPH_ADDS
                    workload += f", L2-resident, {GRAPH_ADDS} per CUDA-graph replay"
                    params["adds_per_call"] = GRAPH_ADDS
        for _ in range(3):
            fn()
        per_call = time_loop(fn, device, Timing(0, 3, 1))[0]
        chunk = max(1, int(0.05 / per_call))
        sampler = _sampler(device)
        chunks: list[tuple[float, float]] = []  # (seconds into the run at the chunk's end, seconds per call)
        with sampler if sampler is not None else _Nothing():
            t0 = time.perf_counter()
            while True:
                per = time_loop(fn, device, Timing(0, chunk, 1))[0]
                chunks.append((time.perf_counter() - t0, per))
                if chunks[-1][0] >= seconds:
                    break
        late = [per for at, per in chunks if at >= seconds / 2] or [chunks[-1][1]]
        t = statistics.median(late)
        rate = work / t / (1e12 if unit == "TFLOPS" else 1e9)
        reading = sampler.reading(after_s=seconds / 2) if sampler is not None else None
        what = f"{workload}, sustained {seconds:.3g} s back to back, {case.data} data"
        state = f"; {reading.note()}" if reading else ""
        detail = (f"{rate:.4g} {unit} over the second half of a {seconds:.3g} s run ({len(late)} chunks of {chunk} "
                  f"calls, median; {t * 1e6:.4g} us per call){state}")
        timer = "CUDA events" if device == "cuda" else "time.perf_counter"
        kw: dict[str, Any] = dict(calls=chunk, how=f"{timer} around each chunk of {chunk} back-to-back eager calls "
                                  f"for {seconds:.3g} s after 3 warm-up calls, mean per call, median over the chunks "
                                  "that ended in the second half")
        if case.kind == "gemm":
            out.append(Measurement("gemm", what, label, params, "tflops", rate, "TFLOPS", _method(device), detail,
                                   **kw))
        else:
            out.append(Measurement("microbenchmark", f"memory bandwidth, {what}", label, params, "bandwidth_gbps",
                                   rate, "GB/s", _method(device), detail, **kw))
        if reading is not None:
            cp = {"kernel": case.kind, **params, "dtype": case.dtype, "data": case.data, "seconds": seconds}
            out.append(Measurement("microbenchmark", f"SM clock during {what}", label, cp, "sm_clock_mhz",
                                   reading.sm_clock_mhz, "MHz", _method(device), detail, **kw))
            if reading.power_w is not None:
                out.append(Measurement("microbenchmark", f"board power during {what}", label, cp, "board_power_w",
                                       reading.power_w, "W", _method(device), detail, **kw))
        if log:
            log(f"sustained {case.label()}: {rate:.4g} {unit}{state}")
    return out


def _l2_bytes() -> int:
    props = _torch().cuda.get_device_properties(_torch().cuda.current_device())
    return int(getattr(props, "L2_cache_size", 0) or 0)


def _graph_of(fn: Callable[[], Any], n: int) -> Callable[[], Any]:
    """`n` calls of `fn` captured in one CUDA graph; its replay."""
    torch = _torch()
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(n):
            fn()
    return graph.replay


def idle_row(reading: Any, seconds: float) -> Measurement:
    """The board power read with nothing running before the suite (gpu_state.idle_power)."""
    return Measurement("microbenchmark", f"board power at idle ({seconds:g} s before the suite, nothing running)",
                       "n/a", {"kernel": "idle", "seconds": seconds}, "board_power_w", reading.power_w, "W",
                       "cuda-events-loop", reading.note(), calls=1,
                       how=f"NVML board power sampled every 20 ms for {seconds:g} s, the median")


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


PARTS = ("launch", "bandwidth", "gemm", "attention", "sustained")


def run_suite(device: str, shapes: Shapes, timing: Timing = Timing(), log: Log | None = None,
              fp8: bool | None = None, sustained_s: float = 0.0,
              parts: Sequence[str] = PARTS) -> list[Measurement]:
    """Every measurement of `shapes` on `device` in `parts` (fp8 GEMMs where supported, unless `fp8` says
    otherwise; the sustained cases for `sustained_s` seconds each when it is positive)."""
    check_device(device)
    unknown = [p for p in parts if p not in PARTS]
    if unknown or not parts:
        raise ValueError(f"microbench parts must be among {', '.join(PARTS)}, got {', '.join(parts) or 'none'}")
    say = log or (lambda s: None)
    out: list[Measurement] = []
    if "launch" in parts:
        out += launch(device, shapes.launch_kernels, timing, say)
    if "bandwidth" in parts:
        out += bandwidth(device, shapes.copy_bytes, timing, say)
    use_fp8 = fp8_supported(device) if fp8 is None else fp8
    if "gemm" in parts:
        out += gemm(device, shapes.gemm, "bf16", timing, say)
        if use_fp8:
            out += gemm(device, shapes.gemm, "fp8", timing, say)
        else:
            say("gemm fp8: skipped (torch._scaled_mm with float8_e4m3fn is not supported here)")
    if "attention" in parts:
        out += attention(device, shapes.prefill, shapes.decode, timing, say)
    if "sustained" in parts and sustained_s > 0 and shapes.sustained:
        out += sustained(device, shapes.sustained, sustained_s, say, fp8=use_fp8)
    return out


# ---------------------------------------------------------------- environment, profile, rows, file

@dataclass(frozen=True)
class Environment:
    device: str
    gpu: str  # torch.cuda.get_device_name, or "cpu"
    torch_version: str
    cuda_version: str
    driver: str
    l2_bytes: int  # 0 when unknown
    sm_count: int = 0  # 0 when unknown
    limits: tuple[tuple[str, float], ...] = ()  # gpu_state.limits(): max clocks, power limit (what NVML answered)

    def describe(self) -> str:
        sms = f", {self.sm_count} SMs" if self.sm_count else ""
        l2 = f", L2 {self.l2_bytes / MiB:.4g} MiB" if self.l2_bytes else ""
        lim = dict(self.limits)
        env = "".join(f", {text} {lim[key]:.0f} {unit}" for key, text, unit in (
            ("max_sm_clock_mhz", "max SM clock", "MHz"), ("max_mem_clock_mhz", "max memory clock", "MHz"),
            ("power_limit_w", "power limit", "W")) if key in lim)
        return (f"{self.gpu}{sms}{l2}{env}; torch {self.torch_version}, CUDA {self.cuda_version or 'n/a'}, driver "
                f"{self.driver or 'n/a'}")


def environment(device: str) -> Environment:
    torch = _torch()
    if device != "cuda":
        return Environment("cpu", "cpu", torch.__version__, "", "", 0)
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return Environment("cuda", torch.cuda.get_device_name(), torch.__version__, torch.version.cuda or "",
                       _driver_version(), int(getattr(props, "L2_cache_size", 0) or 0),
                       int(getattr(props, "multi_processor_count", 0) or 0),
                       tuple(sorted(limits(torch.cuda.current_device()).items())))


def _driver_version() -> str:
    """The NVIDIA driver version from the kernel module, or from nvidia-smi; "" when neither answers."""
    p = Path("/proc/driver/nvidia/version")
    try:
        for word in p.read_text().split():
            if word[:1].isdigit() and word.count(".") >= 1:
                return word
    except OSError:
        pass
    import shutil
    import subprocess
    if shutil.which("nvidia-smi"):
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=20)
            return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else ""
        except (OSError, subprocess.SubprocessError, IndexError):
            return ""
    return ""


def profile_for(gpu: str, hw: str | None) -> tuple[str, str]:
    """The torchsim profile the rows name (`hw` when given, else the one published.HW_MAP maps the GPU name to),
    and a note (a proxy mapping, or a GPU name that maps elsewhere than `hw`)."""
    mapped = next(((prof, note) for key, prof, note in HW_MAP if key in gpu), None)
    names = gpu_profile_names()
    if hw is not None:
        check_hw(hw)
        if mapped is not None and mapped[0] != hw:
            return hw, f"GPU {gpu!r} would map to {mapped[0]}; rows labelled {hw} as asked"
        return hw, mapped[1] if mapped else ""
    if mapped is None:
        raise ValueError(f"GPU {gpu!r} maps to no torchsim profile; pass --hw with one of {', '.join(names)}")
    if "PCIe" in gpu and mapped[0].endswith("-sxm") and not mapped[1]:
        return mapped[0], f"a PCIe part on the {mapped[0]} profile (proxy: the SXM part has more bandwidth and power)"
    return mapped


def gpu_profile_names() -> list[str]:
    from torchsim.hwmodels.gpu import GPU_PROFILES

    return list(GPU_PROFILES)


def check_hw(hw: str) -> None:
    """`--hw` names a GPU profile: the suite measures CUDA kernels, which a Tensix profile's rows would mislabel."""
    from torchsim.hwmodels import profile_names

    names = gpu_profile_names()
    if hw in profile_names() and hw not in names:
        raise ValueError(f"--hw: {hw!r} is not a GPU profile (the suite measures CUDA kernels; a Tenstorrent "
                         f"profile's rows would be mislabelled); valid: {', '.join(names)}")
    if hw not in names:
        raise ValueError(f"--hw: unknown profile {hw!r}; valid: {', '.join(names)}")


def to_rows(ms: Sequence[Measurement], profile: str, env: Environment, timing: Timing,
            id_prefix: str = "MB", profile_note: str = "") -> list[dict[str, str]]:
    """Rows in the published_dev.csv schema. `source` names torchsim microbench and the timing method (which
    timing_methods.csv maps); `notes` says how the row was timed and on what."""
    if not ms:
        raise ValueError("no measurement to write")
    rows = []
    for i, m in enumerate(ms, start=1):
        if not (math.isfinite(m.value) and m.value > 0):
            raise ValueError(f"measurement {m.workload!r}: value {m.value} is not a positive number")
        n = m.calls or timing.iters
        timer = {"cuda-events-loop": f"CUDA events around {n} back-to-back eager calls",
                 "cuda-graph": f"CUDA events around {n} back-to-back replays of the graph",
                 "perf-counter-loop": f"time.perf_counter around {n} back-to-back calls"}[m.method]
        how = m.how or (f"{timer} after {timing.warmup} warm-up calls, mean per call, median of {timing.repeats} "
                        "loops")
        notes = f"{m.detail}; timed: {how}; L2 not flushed between calls; clocks not locked; {env.describe()}"
        if env.device == "cpu":
            notes += "; CPU device: a pipeline test, not a GPU measurement"
        if profile_note:
            notes += f"; {profile_note}"
        rows.append({"id": f"{id_prefix}-{i:03d}", "category": m.category, "hardware": profile,
                     "workload": m.workload, "dtype": m.dtype, "params_json": json.dumps(m.params, sort_keys=True),
                     "metric": m.metric, "value": f"{m.value:.6g}", "unit": m.unit,
                     "source": f"{SOURCE} {m.method} @ {env.gpu}", "notes": notes})
    return rows


def csv_bytes(rows: Sequence[dict[str, str]]) -> bytes:
    import csv
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(COLUMNS), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow(r)
    return buf.getvalue().encode()


def write_rows(rows: Sequence[dict[str, str]], path: str | Path) -> int:
    """Write the rows atomically (a failed write leaves nothing, and an existing file as it was)."""
    return write_bytes_atomic(path, csv_bytes(rows))
