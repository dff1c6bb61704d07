"""`torchsim.serving.serve`: a model on a GPU (or a tensor-parallel group) under a request load.

Captures the model's forward step once (torchsim.prediction.pipeline.step_entry), sizes the paged KV cache from
the memory the weights and activations leave (SchedulerConfig.memory_fraction / memory_basis), runs the engine
(torchsim.serving.engine) with iteration times from the simulator (torchsim.serving.cost), and returns a
ServeResult (torchsim.serving.result): latency percentiles, throughput, per-request and per-iteration tables.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from torchsim.graph.kinds import DType
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.serving.cost import BASE_PAST, BASE_ROWS, BUCKETS, IterationCost, scaled
from torchsim.serving.engine import IterBatch, KvCacheTooSmall, SchedulerConfig
from torchsim.serving.engine import run as run_engine
from torchsim.serving.load import MAX_TOKENS, LengthDist, Request, read_requests, synthetic
from torchsim.serving.result import ServeResult


def serve(model: Any = "llama3-8b", hw: Any = "h100-sxm", *, requests: str | Sequence[Request] | None = None,
          rate: float | None = None, concurrency: int | None = None, offline: bool = False,
          num_requests: int = 1000, input_len: str | int = 1024, output_len: str | int = 128, seed: int = 0,
          scheduler: str | SchedulerConfig = "vllm", dtype: str = "bf16", kv_cache: str | None = None,
          quant: str | None = None, tp: int = 1, system: str | None = None, exact: bool = False,
          cache: bool = True, workers: int | None = None, progress: bool = False,
          **scheduler_flags: Any) -> ServeResult:
    """Serve `model` on `hw` under one load: a request file or list (`requests`), Poisson arrivals at `rate`
    requests/s, `concurrency` closed-loop clients, or every request at t = 0 (`offline`); synthetic loads draw
    `num_requests` requests with `input_len`/`output_len` tokens (a number or a LengthDist spec such as
    "uniform:100:2000") from `seed`. `scheduler` is an engine's defaults ("vllm", "trtllm", "sarathi") or a
    SchedulerConfig; `scheduler_flags` override its fields (max_num_seqs=..., chunked_prefill=...).
    `exact=True` simulates every iteration's own kernels instead of the buckets (slow; for measuring them).

    >>> r = serve("llama-tiny", "h100-sxm", offline=True, num_requests=8, input_len=32, output_len=4)
    >>> r.summary_dict()["requests"], r.summary_dict()["output_tokens"]
    (8, 32)
    """
    t0 = time.perf_counter()
    loads = [x for x in (requests is not None, rate is not None, concurrency is not None, offline) if x]
    if len(loads) != 1:
        raise ValueError("give exactly one load: requests (a file), rate (requests/s, Poisson), concurrency "
                         f"(closed-loop clients) or offline (all at t = 0); got {len(loads)}")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate)
                             or rate <= 0):
        raise ValueError(f"rate must be a finite number of requests per second > 0, got {rate!r}")
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                    or concurrency < 1):
        raise ValueError(f"concurrency must be a whole number of clients >= 1, got {concurrency!r}")
    cfg = scheduler if isinstance(scheduler, SchedulerConfig) else SchedulerConfig.preset(scheduler,
                                                                                           **scheduler_flags)
    if isinstance(requests, str):
        reqs = read_requests(requests)
        load = f"requests from {requests}"
    elif requests is not None:
        reqs = list(requests)
        if not reqs:
            raise ValueError("the request list is empty")
        load = f"{len(reqs)} given requests"
    else:
        ins, outs = LengthDist.parse(str(input_len), "input_len"), LengthDist.parse(str(output_len), "output_len")
        reqs = synthetic(num_requests, ins, outs, rate=rate, seed=seed, limit=MAX_TOKENS)
        kind = (f"Poisson arrivals at {rate:g} requests/s" if rate is not None else
                f"{concurrency} closed-loop clients" if concurrency is not None else "offline (all at t = 0)")
        load = (f"{num_requests} requests, {kind}, input {ins.describe()}, output {outs.describe()} tokens, "
                f"seed {seed}")

    from torchsim.prediction.cache import DiskCache
    from torchsim.prediction.pipeline import step_entry

    entry, prof, system_name = step_entry(model, hw, rows=BASE_ROWS, q=1, past=BASE_PAST, dtype=dtype,
                                          kv_cache=kv_cache, quant=quant, tp=tp, system=system, cache=cache)
    calls = entry.plans[0].calls
    context = int(entry.facts.get("context", 0) or 0)
    for r in reqs:
        if context and r.input_len + r.output_len > context:
            raise ValueError(f"request {r.id}: {r.input_len} input + {r.output_len} output tokens = "
                             f"{r.input_len + r.output_len} exceeds {entry.name}'s context of {context} tokens")
        if not cfg.chunked_prefill and r.input_len + r.output_len > cfg.max_num_batched_tokens:
            raise ValueError(f"request {r.id}: {r.input_len + r.output_len} tokens with chunked prefill off do not "
                             f"fit the token budget of {cfg.max_num_batched_tokens} (max_num_batched_tokens) in one "
                             "iteration; raise it or turn chunked prefill on")
    kv_per_token = kv_bytes_per_token(calls, entry.kv_dtype)
    memory = kv_memory(prof, entry.weight_bytes, calls, cfg)
    blocks = int(memory["kv_bytes"] // (kv_per_token * cfg.block_size)) if memory["kv_bytes"] > 0 else 0
    if blocks < 1:
        share = "of the device memory" if cfg.memory_basis == "total" else "of what weights and activations leave"
        raise KvCacheTooSmall(
            f"no room for a KV block of {cfg.block_size} tokens on {prof.name}: {cfg.memory_fraction:g} {share} "
            f"({memory['capacity_bytes'] / 2**30:.1f} GiB, weights {memory['weight_bytes'] / 2**30:.2f} GiB, "
            f"activations {memory['activation_bytes'] / 2**30:.2f} GiB per GPU) leaves "
            f"{max(memory['kv_bytes'], 0.0) / 2**20:.1f} MiB; raise memory_fraction, split over more GPUs (tp) or "
            "quantise the weights")
    t_setup = time.perf_counter()
    cost = IterationCost(calls, prof, cfg, disk=DiskCache() if cache else None, workers=workers)
    # a first pass on roofline guesses foresees the iterations (exactly for offline and closed-loop loads, whose
    # batches do not depend on time; roughly for timed arrivals), so their kernels simulate together on the
    # worker processes; the real pass below reads them, and simulates any it did not foresee
    foreseen: list[IterBatch] = []

    def guess(batch: IterBatch) -> float:
        foreseen.append(batch)
        return cost.estimate(batch)

    run_engine(reqs, cfg, guess, blocks, clients=concurrency)
    prefetched = cost.prefetch(foreseen, exact=exact, progress=progress)
    t_prefetch = time.perf_counter()
    bar = _bar(len(reqs), progress)
    engine = run_engine(reqs, cfg, cost.exact if exact else cost, blocks,
                        clients=concurrency, progress=bar.update_to if bar else None)
    if bar:
        bar.close()
    t_end = time.perf_counter()
    assumptions = (
        cfg.describe(),
        f"load: {load}",
        f"iteration times: the captured step rewritten per iteration ({len(calls)} kernels), "
        + ("every iteration's own kernels simulated (exact, varlen attention over the real lengths)" if exact else
           f"from buckets: {BUCKETS}"),
        "one engine iteration at a time on the device: no host overhead between iterations beyond the launch model's "
        "(engines that schedule on the CPU meanwhile, as vLLM V1 and TensorRT-LLM's overlap scheduler do)",
        f"KV cache: {kv_per_token:,.0f} bytes per token per GPU, {blocks:,} blocks of {cfg.block_size} tokens "
        f"({blocks * cfg.block_size:,} tokens) in {memory['kv_bytes'] / 2**30:.1f} GiB",
        *((f"tensor parallel over {tp} GPUs of {system_name}: one rank's kernels and its collectives",)
          if tp > 1 else ()),
        *(f"approximated: {a}" for a in entry.approximations),
    )
    return ServeResult(model=entry.name, hw=str(prof.name), tp=tp, engine=engine, memory=memory,
                       kv_bytes_per_token=kv_per_token, assumptions=assumptions,
                       timings_s={"setup": t_setup - t0, "simulate": t_prefetch - t_setup, "serve": t_end - t_prefetch,
                                  "total": t_end - t0},
                       stats={**cost.stats(), "kernels_prefetched": prefetched, **entry.facts})


def kv_bytes_per_token(calls: Sequence[KernelCall], kv_dtype: Any) -> float:
    """KV-cache bytes one token takes on one GPU: K and V of every layer's KV heads on this rank."""
    total = 0.0
    for c in calls:
        if c.kind is KernelKind.ATTENTION_DECODE:
            kv = DType.parse(c.p("kv_dtype", "")) if c.p("kv_dtype", "") else (kv_dtype or c.dtype)
            dv = c.p("head_dim_v", 0) or c.p("head_dim")
            total += c.p("heads_kv") * (c.p("head_dim") + dv) * kv.nbytes
    if total <= 0:
        raise ValueError("the captured step has no attention kernel: its KV cache cannot be sized")
    return total


def kv_memory(prof: Any, weight_bytes: float, calls: Sequence[KernelCall], cfg: SchedulerConfig) -> dict[str, float]:
    """Memory for the KV cache on one GPU: the engine's share of memory less weights and the peak activations of
    an iteration at the token budget (its largest GEMM output and the logits of every row)."""
    cap = float(prof.dram_bytes.value) if hasattr(prof, "dram_bytes") else 0.0
    if cap <= 0:
        raise ValueError(f"{prof.name} has no device memory capacity (dram_bytes) to size a KV cache from")
    act = 0.0
    for c in calls:
        if c.kind is KernelKind.GEMM:
            s = scaled(c, cfg.max_num_batched_tokens if not c.name.startswith("tail.") else
                       min(cfg.max_num_seqs, cfg.max_num_batched_tokens), BASE_ROWS)
            act = max(act, s.p("m") * s.p("n") * 4.0)  # the output and its input-sized neighbour (bf16)
    if cfg.memory_basis == "total":
        kv = cfg.memory_fraction * cap - weight_bytes - act
    else:
        kv = cfg.memory_fraction * (cap - weight_bytes - act)
    return {"capacity_bytes": cap, "weight_bytes": weight_bytes, "activation_bytes": act, "kv_bytes": kv}


class _Bar:
    def __init__(self, total: int) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, desc="requests served", unit="req", leave=False)

    def update_to(self, n: int) -> None:
        self.bar.update(n - self.bar.n)

    def close(self) -> None:
        self.bar.close()


def _bar(total: int, enabled: bool) -> _Bar | None:
    if not enabled:
        return None
    try:
        return _Bar(total)
    except ImportError:
        return None
