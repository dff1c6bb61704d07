"""The serving engine: a continuous-batching scheduler over a paged KV cache, stepping one iteration at a time.

Each iteration the scheduler (`SchedulerConfig`, data like the engines' own flags) picks which requests run and
how many tokens each processes: decoding requests one token, prefilling ones a chunk of their prompt (or the
whole prompt); the cost model (torchsim.serving.cost) says how long that mixed batch takes on the device, the
clock advances by it, and every request whose prompt is done or who decoded emits a token. KV blocks are
allocated as tokens enter the cache (vLLM's block manager) or reserved whole at admission (TensorRT-LLM's
GUARANTEED_NO_EVICT capacity scheduler); when a running request needs a block and none is free, the most recently
admitted running request is preempted by recompute (its blocks freed, it waits at the head of the queue and
prefills its prompt plus the tokens it already generated again, as vLLM does).

Loads: requests with arrival times (offline: all at 0; Poisson), or `clients` closed-loop clients, each sending
its next request the moment its previous one finishes. Everything is deterministic: the same requests and cost
model give the same iterations.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from torchsim.serving.load import Request


@dataclass(frozen=True)
class SchedulerConfig:
    """A serving engine's scheduling and KV-cache flags (`preset(name)` gives an engine's defaults)."""

    name: str
    max_num_seqs: int  # requests in the running batch at most (vLLM max_num_seqs, TensorRT-LLM max_batch_size)
    max_num_batched_tokens: int  # tokens one iteration processes at most (max_num_tokens)
    chunked_prefill: bool  # prompts split over iterations to fit the token budget
    priority: str  # "decode-first": running requests first, then new prompts (mixed batches); "prefill-first":
    # an iteration runs new prompts only, when there are any (vLLM V0 without chunked prefill)
    admission: str  # "incremental": KV blocks as tokens enter the cache, preemption by recompute when out of them;
    # "reserve": a request's whole input + output reserved at admission, never preempted
    block_size: int  # tokens per KV block (paged attention)
    memory_fraction: float  # the share of memory the KV cache may take ...
    memory_basis: str  # ... "total": of the device's memory, weights and activations included (vLLM
    # gpu_memory_utilization); "free": of what weights and activations leave (TensorRT-LLM
    # kv_cache_free_gpu_mem_fraction)
    cuda_graph_max_tokens: int  # iterations of at most this many tokens replay a CUDA graph captured at the next
    # capture size (the batch padded to it); larger ones launch eagerly at their exact size
    capture_sizes: tuple[int, ...] = ()  # the CUDA-graph capture sizes (token counts), ascending
    source: str = ""

    def __post_init__(self) -> None:
        for n in ("max_num_seqs", "max_num_batched_tokens", "block_size"):
            v = getattr(self, n)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"scheduler {self.name}: {n} must be a whole number >= 1, got {v!r}")
        if not isinstance(self.cuda_graph_max_tokens, int) or self.cuda_graph_max_tokens < 0:
            raise ValueError(f"scheduler {self.name}: cuda_graph_max_tokens must be a whole number >= 0, got "
                             f"{self.cuda_graph_max_tokens!r}")
        if self.priority not in ("decode-first", "prefill-first"):
            raise ValueError(f"scheduler {self.name}: priority {self.priority!r}; valid: decode-first, prefill-first")
        if self.admission not in ("incremental", "reserve"):
            raise ValueError(f"scheduler {self.name}: admission {self.admission!r}; valid: incremental, reserve")
        if self.memory_basis not in ("total", "free"):
            raise ValueError(f"scheduler {self.name}: memory_basis {self.memory_basis!r}; valid: total, free")
        if not (isinstance(self.memory_fraction, float | int) and 0 < self.memory_fraction <= 1):
            raise ValueError(f"scheduler {self.name}: memory_fraction must be in (0, 1], got {self.memory_fraction!r}")

    @staticmethod
    def preset(name: str, **overrides: Any) -> SchedulerConfig:
        """An engine's defaults, with `overrides` (None values ignored): "vllm", "trtllm" or "sarathi"."""
        key = str(name).strip().lower()
        if key not in PRESETS:
            raise ValueError(f"unknown scheduler {name!r}; valid: {', '.join(PRESETS)}")
        cfg = replace(PRESETS[key], **{k: v for k, v in overrides.items() if v is not None})
        if not cfg.capture_sizes or cfg.capture_sizes[-1] != cfg.cuda_graph_max_tokens:
            sizes = tuple(s for s in VLLM_CAPTURE_SIZES if s <= cfg.cuda_graph_max_tokens)
            if cfg.cuda_graph_max_tokens and (not sizes or sizes[-1] != cfg.cuda_graph_max_tokens):
                sizes += (cfg.cuda_graph_max_tokens,)
            cfg = replace(cfg, capture_sizes=sizes)
        return cfg

    def padded(self, tokens: int) -> int:
        """The token count an iteration of `tokens` runs at: the next capture size when a CUDA graph replays it."""
        if tokens <= self.cuda_graph_max_tokens:
            for s in self.capture_sizes:
                if s >= tokens:
                    return s
        return tokens

    def describe(self) -> str:
        return (f"scheduler {self.name}: max {self.max_num_seqs} sequences and {self.max_num_batched_tokens} tokens "
                f"per iteration, chunked prefill {'on' if self.chunked_prefill else 'off'}, {self.priority}, KV "
                + ("allocated as tokens arrive, preemption by recompute" if self.admission == "incremental"
                   else "reserved whole at admission (no preemption)")
                + f", {self.block_size}-token blocks in {self.memory_fraction:g} of the "
                f"{'device memory' if self.memory_basis == 'total' else 'memory weights leave'}, CUDA graphs up to "
                f"{self.cuda_graph_max_tokens} tokens (padded to the capture sizes)"
                + (f" ({self.source})" if self.source else ""))


# CUDA-graph capture sizes as vLLM lays them out (vllm/config CompilationConfig: 1, 2, 4, then multiples of 8; its
# default stops at 512), continued so that a preset capturing larger graphs (trtllm: 2048) takes its sizes from here
VLLM_CAPTURE_SIZES = (1, 2, 4, *range(8, 8193, 8))

PRESETS = {
    "vllm": SchedulerConfig(
        "vllm", max_num_seqs=256, max_num_batched_tokens=8192, chunked_prefill=True, priority="decode-first",
        admission="incremental", block_size=16, memory_fraction=0.9, memory_basis="total", cuda_graph_max_tokens=512,
        source="assumed: vLLM V1 engine defaults (EngineArgs max_num_seqs 256, max_num_batched_tokens 8192 for "
               "offline use, chunked prefill always on, block_size 16, gpu_memory_utilization 0.9, CUDA-graph "
               "capture sizes 1, 2, 4, 8..512 step 8; vllm-project/vllm docs 'Engine Arguments', "
               "'Optimization and Tuning')"),
    "trtllm": SchedulerConfig(
        "trtllm", max_num_seqs=2048, max_num_batched_tokens=8192, chunked_prefill=False, priority="decode-first",
        admission="reserve", block_size=32, memory_fraction=0.95, memory_basis="free", cuda_graph_max_tokens=2048,
        source="assumed: TensorRT-LLM in-flight batching as trtllm-bench runs it (max_batch_size up to 2048, "
               "max_num_tokens 8192, GUARANTEED_NO_EVICT capacity scheduler, tokens_per_block 32, "
               "kv_cache_free_gpu_mem_fraction 0.95, CUDA graphs with padding; NVIDIA/TensorRT-LLM docs "
               "'perf-overview', 'Tuning Max Batch Size and Max Num Tokens')"),
    "sarathi": SchedulerConfig(
        "sarathi", max_num_seqs=256, max_num_batched_tokens=512, chunked_prefill=True, priority="decode-first",
        admission="incremental", block_size=16, memory_fraction=0.9, memory_basis="total", cuda_graph_max_tokens=512,
        source="assumed: Sarathi-Serve stall-free batching (Agrawal et al., OSDI 2024): decodes first, prompt "
               "chunks fill a fixed token budget of 512"),
}


@dataclass(frozen=True)
class IterBatch:
    """What one iteration processes: prefill chunks (tokens, KV length after the chunk) and decoding requests'
    KV lengths (the new token included); `sampled` requests emit a token."""

    chunks: tuple[tuple[int, int], ...]
    decodes: tuple[int, ...]
    sampled: int

    @property
    def tokens(self) -> int:
        return sum(q for q, _ in self.chunks) + len(self.decodes)


@dataclass(eq=False)  # identity: requests are compared by who they are, not their state
class _Seq:
    req: Request
    computed: int = 0  # tokens whose K/V are in the cache
    generated: int = 0  # output tokens emitted
    blocks: int = 0
    admitted_s: float = math.nan
    first_token_s: float = math.nan
    last_token_s: float = math.nan
    finish_s: float = math.nan
    preemptions: int = 0
    spans: list[tuple[str, float, float]] = field(default_factory=list)  # (what, start, end) for the timeline
    prompt: int = field(init=False)  # tokens to prefill: the input, and after a preemption the input and the tokens
    # generated so far (recomputed); once `computed` reaches it the request decodes

    def __post_init__(self) -> None:
        self.prompt = self.req.input_len


@dataclass(frozen=True)
class Iteration:
    index: int
    start_s: float
    duration_s: float
    tokens: int
    padded_tokens: int
    prefill_tokens: int
    prefill_seqs: int
    decode_seqs: int
    running: int
    waiting: int
    kv_blocks_used: int
    preempted: int


@dataclass
class EngineRun:
    """What a run produced: per request and per iteration."""

    requests: list[_Seq]
    iterations: list[Iteration]
    itl_s: array  # every inter-token gap of every request, in emission order
    kv_blocks: int
    config: SchedulerConfig


class KvCacheTooSmall(ValueError):
    """The KV cache cannot hold a request the load has."""


def run(requests: Sequence[Request], cfg: SchedulerConfig, cost: Callable[[IterBatch], float], kv_blocks: int, *,
        clients: int | None = None, progress: Callable[[int], None] | None = None,
        max_iterations: int = 10_000_000) -> EngineRun:
    """Serve `requests` (closed loop with `clients`: the first `clients` at t = 0, each next one when a request
    finishes) on `kv_blocks` KV blocks; `cost(batch)` is an iteration's device time in seconds."""
    if kv_blocks < 1:
        raise KvCacheTooSmall(f"the KV cache holds no block of {cfg.block_size} tokens")
    need = (lambda r: r.input_len + r.output_len) if cfg.admission == "reserve" else (lambda r: r.input_len + 1)
    for r in requests:
        blocks = -(-need(r) // cfg.block_size)
        if blocks > kv_blocks:
            raise KvCacheTooSmall(
                f"request {r.id} ({r.input_len} input + {r.output_len} output tokens) needs {blocks} KV blocks "
                f"({need(r)} tokens) {'reserved at admission ' if cfg.admission == 'reserve' else 'to start '}"
                f"and the KV cache holds {kv_blocks} blocks ({kv_blocks * cfg.block_size} tokens); use more GPUs "
                "(--tp), an FP8 KV cache (--kv-cache fp8), shorter requests or a larger memory fraction")
    seqs = [_Seq(r) for r in requests]
    if clients is not None:
        if clients < 1:
            raise ValueError(f"closed-loop clients must be >= 1, got {clients}")
        pending: deque[_Seq] = deque(seqs[clients:])
        arrivals = deque(seqs[:clients])
        for s in arrivals:
            s.req = replace(s.req, arrival_s=0.0)
    else:
        pending = deque()
        arrivals = deque(sorted(seqs, key=lambda s: (s.req.arrival_s, s.req.id)))
    waiting: deque[_Seq] = deque()
    running: list[_Seq] = []
    free = kv_blocks
    now = 0.0
    its: list[Iteration] = []
    itl = array("d")
    done = 0

    def blocks_for(tokens: int) -> int:
        return -(-tokens // cfg.block_size)

    def preempt(victim: _Seq) -> None:
        nonlocal free
        free += victim.blocks
        victim.blocks, victim.computed = 0, 0
        victim.prompt = victim.req.input_len + victim.generated
        victim.preemptions += 1
        running.remove(victim)
        waiting.appendleft(victim)

    while done < len(seqs):
        if len(its) >= max_iterations:
            raise RuntimeError(f"the serving run did not finish within {max_iterations:,} iterations")
        while arrivals and arrivals[0].req.arrival_s <= now:
            waiting.append(arrivals.popleft())
        budget = cfg.max_num_batched_tokens
        sched: list[tuple[_Seq, int]] = []
        preempted = 0
        prefill_only = cfg.priority == "prefill-first" and bool(waiting) and _admissible(waiting[0], cfg, free,
                                                                                         running, budget)
        if not prefill_only:
            i = 0
            while i < len(running) and budget > 0:
                s = running[i]
                n = 1 if s.computed >= s.prompt else min(s.prompt - s.computed, budget)
                if n < s.prompt - s.computed and not cfg.chunked_prefill and s.computed < s.prompt:
                    i += 1  # an unchunked prompt that does not fit this iteration's budget waits
                    continue
                if cfg.admission == "incremental":
                    extra = blocks_for(s.computed + n) - s.blocks
                    while extra > free:  # preempt the most recently admitted running request (maybe this one)
                        victim = running[-1]
                        preempt(victim)
                        preempted += 1
                        if victim is s:
                            break
                    if s not in running:
                        break
                    free -= extra
                    s.blocks += extra
                sched.append((s, n))
                budget -= n
                i += 1
        while waiting and budget > 0 and len(running) < cfg.max_num_seqs and not preempted:
            s = waiting[0]
            if not _admissible(s, cfg, free, running, budget):
                break
            n = min(s.prompt - s.computed, budget)
            want = blocks_for(s.req.input_len + s.req.output_len) if cfg.admission == "reserve" else \
                blocks_for(s.computed + n)
            waiting.popleft()
            free -= want - s.blocks
            s.blocks = want
            if math.isnan(s.admitted_s):
                s.admitted_s = now
            running.append(s)
            sched.append((s, n))
            budget -= n
        if not sched:
            if arrivals:  # idle until the next request arrives
                now = max(now, arrivals[0].req.arrival_s)
                continue
            if waiting:
                raise KvCacheTooSmall(f"request {waiting[0].req.id} cannot be scheduled: {free} of {kv_blocks} KV "
                                      "blocks free and nothing running")
            raise RuntimeError("the serving engine has nothing to run and requests left")  # unreachable
        chunks = tuple((n, s.computed + n) for s, n in sched if s.computed < s.prompt)
        decodes = tuple(s.computed + 1 for s, n in sched if s.computed >= s.prompt)
        sampled = sum(1 for s, n in sched if s.computed + n >= s.prompt)
        batch = IterBatch(chunks, decodes, sampled)
        dt = cost(batch)
        end = now + dt
        for s, n in sched:
            s.spans.append(("prefill" if s.computed < s.prompt else "decode", now, end))
            s.computed += n
            if s.computed >= s.prompt:  # the prompt is done (or this was a decode step): a token comes out
                s.generated += 1
                if math.isnan(s.first_token_s):
                    s.first_token_s = end
                else:
                    itl.append(end - s.last_token_s)
                s.last_token_s = end
                if s.generated >= s.req.output_len:
                    s.finish_s = end
                    free += s.blocks
                    s.blocks = 0
                    running.remove(s)
                    done += 1
                    if pending:  # the client sends its next request now
                        nxt = pending.popleft()
                        nxt.req = replace(nxt.req, arrival_s=end)
                        arrivals.append(nxt)
        its.append(Iteration(len(its), now, dt, batch.tokens, cfg.padded(batch.tokens), sum(q for q, _ in chunks),
                             len(chunks), len(decodes), len(running), len(waiting), kv_blocks - free, preempted))
        now = end
        if progress is not None:
            progress(done)
    return EngineRun(seqs, its, itl, kv_blocks, cfg)


def _admissible(s: _Seq, cfg: SchedulerConfig, free: int, running: list[_Seq], budget: int) -> bool:
    """Whether the head of the queue can start now: a sequence slot, its first chunk in the token budget (its
    whole prompt when prefill is not chunked) and the KV blocks it needs."""
    if len(running) >= cfg.max_num_seqs or budget < 1:
        return False
    rest = s.prompt - s.computed
    if not cfg.chunked_prefill and rest > budget:
        return False
    tokens = s.req.input_len + s.req.output_len if cfg.admission == "reserve" else s.computed + min(rest, budget)
    return -(-tokens // cfg.block_size) - s.blocks <= free
