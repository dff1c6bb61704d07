"""Synthetic, deterministic export inputs for tests, benchmarks and docs (no simulation involved).

`synthetic_prediction` is shaped like a Llama prefill + decode run (per layer: norm, QKV GEMM, RoPE,
attention, O GEMM, add+norm, gate/up GEMM, SiLU-mul, down GEMM); `synthetic_detail` like a warp-specialized
GEMM (a TMA producer feeding two MMA consumer groups per CTA). The numbers are made up, never predictions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from torchsim.exports.records import Dependency, KernelDetail, KernelRecord, NodeEvent, PredictionRecords, RunInfo
from torchsim.graph import CtaClass, DType, GraphBuilder, KernelGraph, Op, Space, TileDesc, Unit, aff
from torchsim.hwmodels.quantity import Quantity, assumed

_LAYER = (("input_norm", "rmsnorm", 0.02), ("qkv_proj", "gemm", 0.12), ("rope", "rope", 0.02),
          ("attn", "attention_prefill", 0.15), ("o_proj", "gemm", 0.10), ("post_norm", "add_rmsnorm", 0.02),
          ("gate_up", "gemm", 0.35), ("silu_mul", "silu_mul", 0.04), ("down", "gemm", 0.18))


@dataclass(frozen=True, slots=True)
class SyntheticProfile:
    """A stand-in hardware profile: a name and a few numbers with provenance, enough for `profile_hash`."""

    name: str
    clock_hz: Quantity = field(default_factory=lambda: assumed(1.98e9, "Hz", "synthetic"))
    sm_count: Quantity = field(default_factory=lambda: assumed(132, "1", "synthetic"))
    dram_bytes_per_s: Quantity = field(default_factory=lambda: assumed(3.35e12, "B/s", "synthetic"))


def _kernel(i: int, name: str, kind: str, phase: str, step: int | None, layer: int | None, start_us: float,
            dur_us: float, clock_hz: float, tokens: int, fallback: bool) -> KernelRecord:
    gemm = kind == "gemm"
    params: tuple[tuple[str, object], ...] = (("k", 4096), ("m", tokens), ("n", 4096)) if gemm else \
        (("hidden", 4096), ("rows", tokens))
    return KernelRecord(
        kernel_index=i, kernel_name=name, kernel_kind=kind, phase=phase, decode_step=step, layer=layer,
        start_cycles=round(start_us * 1e-6 * clock_hz), duration_cycles=round(dur_us * 1e-6 * clock_hz),
        clock_hz=clock_hz, start_us=start_us, duration_us=dur_us, dtype="bf16", params=params,
        template=None if fallback else f"{kind}_ws", template_config=None if fallback else {"tile_m": 128},
        flops=2.0 * tokens * 4096 * 4096 if gemm else None, dram_bytes=dur_us * 2.5e6,
        l2_hit_rate=None if fallback else 0.5 + 0.01 * ((layer or 0) % 40),
        unit_busy=None if fallback else {"tensor": 0.7 if gemm else 0.0, "fma": 0.1, "ldst": 0.2, "tma": 0.3},
        stalls_cycles=None if fallback else {"data": 100.0 + (layer or 0) % 7, "order": 10.0, "unit_busy": 5.0,
                                             "memory_queue": 40.0},
        bound=("compute" if gemm and tokens > 256 else "memory"), module_path=f"model.{name}",
        source_line=f"llama.py:{100 + len(name) % 50}", roofline_fallback=fallback)


def synthetic_prediction(hardware: str = "h100-sxm", layers: int = 4, prompt: int = 2048, decode_steps: int = 2,
                         clock_hz: float = 1.98e9, speed: float = 1.0, launch_gap_us: float = 2.0,
                         model: str = "llama3-8b") -> PredictionRecords:
    """(9 * layers + 1) * (1 + decode_steps) kernels; `speed` divides every duration (another GPU)."""
    kernels: list[KernelRecord] = []
    t_us = 0.0
    for phase, step, tokens in [("prefill", None, prompt)] + [("decode", s, 1) for s in range(decode_steps)]:
        scale = (tokens / 2048.0 if phase == "prefill" else 0.004) * 1000.0 / speed
        names = [(f"layers.{layer}.{n}", kind, frac, layer) for layer in range(layers) for n, kind, frac in _LAYER]
        for name, kind, frac, layer in names + [("lm_head", "gemm", 0.5, None)]:
            dur = max(0.5, frac * scale) * (1.0 + 0.05 * ((layer or 0) % 3))
            fallback = kind == "rope"
            kernels.append(_kernel(len(kernels), name, kind, phase, step, layer, t_us, dur, clock_hz, tokens,
                                   fallback))
            t_us += dur + launch_gap_us
    run = RunInfo(run_id=f"{model}-{hardware}-p{prompt}-d{decode_steps}", model=model, hardware=hardware,
                  preset="serving", scenario={"prompt": prompt, "decode": decode_steps, "batch": 1})
    return PredictionRecords(run, kernels)


def synthetic_detail(num_sms: int = 8, ctas: int = 12, k_steps: int = 6, hardware: str = "h100-sxm",
                     clock_hz: float = 1.98e9) -> KernelDetail:
    """A warp-specialized GEMM: CTAs round-robin over SMs; per k-step two TMA loads feed two MMA groups."""
    events: list[NodeEvent] = []
    deps: list[Dependency] = []
    sm_free = [0] * num_sms
    for cta in range(ctas):
        sm = cta % num_sms
        t = sm_free[sm] + 50
        for ks in range(k_steps):
            loads = []
            for j, tensor in enumerate(("A", "B")):
                s = t + 20 * j
                events.append(NodeEvent(sm, cta, "producer", f"tma_load_{tensor}{ks}", "TMA_LOAD", "TMA",
                                        issue_cycle=s - 2, start_cycle=s, end_cycle=s + 400, node_index=ks * 6 + j,
                                        global_bytes=16384.0, dram_bytes=16384.0 * (0.5 if cta % 2 else 1.0),
                                        wait_reason="memory_queue" if j else None, wait_cycles=2 if j else 0))
                loads.append(len(events) - 1)
            for g in range(2):
                s = t + 420 + 10 * g
                events.append(NodeEvent(sm, cta, f"consumer{g}", f"mma{ks}", "MMA", "TENSOR", issue_cycle=s - 5,
                                        start_cycle=s, end_cycle=s + 300, node_index=ks * 6 + 2 + g,
                                        wait_reason="data", wait_cycles=5))
                deps.extend(Dependency(src, len(events) - 1, "data") for src in loads)
            t += 330
        for g in range(2):
            s = t + 450
            events.append(NodeEvent(sm, cta, f"consumer{g}", "epilogue_store", "TMA_STORE", "TMA", issue_cycle=s,
                                    start_cycle=s, end_cycle=s + 200, node_index=k_steps * 6 + g,
                                    global_bytes=32768.0, dram_bytes=32768.0))
        sm_free[sm] = t + 650
    cycles = max(sm_free)
    kernel = KernelRecord(kernel_index=0, kernel_name="gemm_4096", kernel_kind="gemm", phase="", start_cycles=0,
                          duration_cycles=cycles, clock_hz=clock_hz, start_us=0.0, duration_us=cycles / clock_hz * 1e6,
                          dtype="bf16", params=(("k", 64 * k_steps), ("m", 128), ("n", 256)), template="gemm_ws",
                          flops=2.0 * 128 * 256 * 64 * k_steps * ctas,
                          dram_bytes=sum(e.dram_bytes or 0 for e in events),
                          l2_hit_rate=0.4, unit_busy={"tensor": 0.6, "tma": 0.4}, bound="compute")
    run = RunInfo(run_id=f"gemm-{hardware}", model="", hardware=hardware)
    return KernelDetail(kernel, run, num_sms, events, deps)


def toy_ws_gemm(m_tiles: int = 4, n_tiles: int = 4, k_steps: int = 8, stages: int = 2) -> KernelGraph:
    """A small warp-specialized GEMM tile graph for exercising the engine-to-export path.

    Per CTA (128x256 output tile): a producer warp TMA-loads A and B per k-step into `stages` buffers; two
    consumer warp groups each run an MMA on half the tile, then arrive on the buffer's `empty` barrier,
    which the producer waits on before reusing the buffer; finally each consumer stores its half.
    """
    b = GraphBuilder("toy_ws_gemm")
    prod = b.group("producer", num_warps=1)
    cons = [b.group(f"consumer{i}", first_warp=4 + 4 * i, num_warps=4) for i in range(2)]
    empty = [b.barrier(f"empty{s}", expected=2) for s in range(stages)]
    last_mma: list[int] = [-1, -1]
    for ks in range(k_steps):
        s = ks % stages
        if ks >= stages:
            b.node(prod, Op.BARRIER_WAIT, Unit.NONE, barrier=empty[s], phase=ks // stages - 1, name=f"wait_empty{ks}")
        a_tile = TileDesc(Space.GLOBAL, DType.BF16, (128, 64), "A", (aff(m=1), aff(ks)))
        b_tile = TileDesc(Space.GLOBAL, DType.BF16, (64, 256), "B", (aff(ks), aff(n=1)))
        la = b.node(prod, Op.TMA_LOAD, Unit.TMA, work=a_tile.nbytes, tile=a_tile, name=f"tma_A{ks}")
        lb = b.node(prod, Op.TMA_LOAD, Unit.TMA, work=b_tile.nbytes, tile=b_tile, name=f"tma_B{ks}")
        for i, g in enumerate(cons):
            mm = b.node(g, Op.MMA, Unit.TENSOR, work=2.0 * 64 * 128 * 128, name=f"mma{ks}")
            b.data(la, mm)
            b.data(lb, mm)
            arrive = b.node(g, Op.BARRIER_ARRIVE, Unit.NONE, barrier=empty[s], name=f"release{ks}")
            b.data(mm, arrive)
            last_mma[i] = mm
    for i, g in enumerate(cons):
        c_tile = TileDesc(Space.GLOBAL, DType.BF16, (64, 256), "C", (aff(i, m=2), aff(n=1)))
        st = b.node(g, Op.TMA_STORE, Unit.TMA, work=c_tile.nbytes, tile=c_tile, name="store_C")
        b.data(last_mma[i], st)
    params = np.array([[m, n] for m in range(m_tiles) for n in range(n_tiles)], dtype=np.int64)
    cls = CtaClass(b.build(), params, ("m", "n"), threads=384)
    m, n, k = 128 * m_tiles, 256 * n_tiles, 64 * k_steps
    return KernelGraph(f"toy_gemm_{m}x{n}x{k}", (cls,), flops=2.0 * m * n * k, dram_bytes=2.0 * (m * k + k * n + m * n))
