"""How tt-metal puts one program (op) after another on a Tensix chip: the dispatch numbers and the launch model
that torchsim.prediction.pipeline places kernels with (`TensixProfile.launch_model`).

Fast dispatch runs on dispatch cores: for each program it writes launch messages, runtime arguments, circular-
buffer configurations and kernel binaries into the workers' L1 and then sends the go signal. The dispatcher
prepares program i+1 while program i runs, so an op starts at max(end of the previous op + the go-signal gap,
the time the dispatcher finished preparing it); short ops become dispatch-bound. With metal trace (how
tt_transformers runs decode) the command stream is replayed from DRAM and the host does nothing per op; without
trace (tt_transformers' prefill) the host's Python/C++ dispatch is what the device waits for.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from torchsim.hwmodels.quantity import Quantity, calibrated, derived, measured

_TG_PERF = ("tt-metal models/demos/llama3_subdevices/tests/test_decoder_device_perf.py perf_targets (Wormhole "
            "Galaxy, Llama-3 70B decode, metal trace)")
_LLMS = "tt-metal tech_reports/LLMs/llms.md"
_ISSUE_42010 = ("github tenstorrent/tt-metal issue #42010 'Investigate prefetch cache performance' (comment "
                "2026-08-20, table)")


# scripts/calibrate_tensix_prefill.py (torchsim.calibration.tensix_prefill): the median over tt_transformers' TTFT
# rows of (measured - predicted without it); a host-side figure, shared by every Tensix profile
PREFILL_HOST_S = 37.57e-3
_PREFILL_FIT = ("fit by scripts/calibrate_tensix_prefill.py: median of measured - predicted TTFT over 10 rows of "
                "tt_transformers' one-user 128-token prefills (tt-metal models/tt_transformers/PERF.md @ 040a27c1: "
                "E2E-002, -004, -008, -010, -012, -018; tt-metal README 'LLMs' table, June 2025: E2E-032, -034, "
                "TT-E2E-70B-02, -04): host work per prefill outside op dispatch (inputs, logits readback, host "
                "sampling); leave-one-source-out: 41.07 ms without the README rows, 37.57 ms without the PERF.md "
                "rows; TTFT MAPE over the 10 rows 41.1% -> 11.1% (leave-one-source-out 11.9%)")


class DispatchMode(Enum):
    """Who issues the ops of a step."""

    TRACE = "metal trace"  # the command stream replayed from DRAM by the dispatch cores
    HOST = "host dispatch"  # every op issued by the host (Python + ttnn + command queue)


def wormhole_dispatch() -> dict[str, Quantity]:
    """The dispatch Quantities of a Wormhole profile (fields of TensixProfile)."""
    return {
        "program_dispatch_s": measured(6.1e-6, "s", _TG_PERF + ": 'non-overlapped-dispatch-time' (kernels returning "
                                       "at once, TT_METAL_KERNELS_EARLY_RETURN=1) is 2.3-10.7 us per op, median "
                                       "6.1 us (Matmul 5.6-6.1, Binary 5.9-6.8, RMS 6.2-7.3); the dispatcher's time "
                                       "to prepare one program"),
        "op_to_op_s": measured(0.65e-6, "s", _TG_PERF + ": 'op_to_op' 0.54-0.77 us for ops whose dispatch is "
                               "hidden behind the previous op (go signal to first core start); llms.md §4.5.5 "
                               "bounds the traced op-to-op gap by 6 us"),
        "host_dispatch_s": derived(38e-6, "s", _LLMS + " §4.5.4: without trace a Llama decoder layer spent 756 us "
                                   "between ops against 362 us on device; / ~20 ops per layer (tt_transformers "
                                   "decode) = ~38 us of host dispatch per op"),
        "host_dispatch_cached_s": measured(9.4e-6, "s", _ISSUE_42010 + ": eager fast dispatch with the program "
                                           "cache hit, host-bound microbenchmark: 9.1-9.7 us per program "
                                           "'regardless of kernel size'; midpoint 9.4 us"),
        "step_overhead_s": Quantity(300e-6, "s", "documented", _TG_PERF + ": tt-metal's own t/s/u estimate adds "
                                    "'~300 python-overhead' us per decode step (execute_trace, token readback, "
                                    "next inputs)"),
        "prefill_host_s": calibrated(PREFILL_HOST_S, "s", _PREFILL_FIT),
    }


def blackhole_dispatch(clock_ratio: float) -> dict[str, Quantity]:
    """Blackhole: the dispatch firmware runs on the same RISC-V cores at `clock_ratio` x Wormhole's clock;
    the per-program dispatch time scales with it, the host-side figures do not."""
    wh = wormhole_dispatch()
    scaled = {k: derived(float(wh[k]) / clock_ratio, "s", f"Wormhole {wh[k].source}; / {clock_ratio:.2f} "
                         "(dispatch-core RISC-V clock, assumed to scale)")
              for k in ("program_dispatch_s", "op_to_op_s")}
    return wh | scaled


class TimingMethod(Enum):
    """How a published Tensix time was taken (names shared with the GPU timing-method vocabulary to come).

    device-profiler: tt-metal's device profiler, first core start to last core end of the program (the
    "device-based utilisation" of tt-metal's GEMM_FLOPS.md tables): the kernel alone.
    trace: host wall time per op of a metal trace replayed in a loop (GEMM_FLOPS.md 'Use Trace' rows): the
    dispatcher still prepares the op's one program and sends the go signal, the host issues nothing per op.
    host-timer: host wall time per op without trace (eager fast dispatch, program cache hit): the host's
    enqueue of the program comes on top. GEMM_FLOPS.md's non-trace rows sit on a floor of ~50-355 us that is
    their Python harness (per-op synchronisation), not dispatch, so small ops timed that way stay above this.
    """

    DEVICE_PROFILER = "device-profiler"
    TRACE = "trace"
    HOST_TIMER = "host-timer"

    @classmethod
    def parse(cls, name: str | TimingMethod) -> TimingMethod:
        if isinstance(name, TimingMethod):
            return name
        for m in cls:
            if m.value == str(name).strip().lower():
                return m
        raise ValueError(f"unknown timing method {name!r}; valid: {', '.join(m.value for m in cls)}")


def host_visible_s(hw: Any, device_s: float, method: TimingMethod | str) -> float:
    """Time one op of `device_s` device time takes as `method` sees it on `hw` (one op, program cache hit).

    Never below `device_s`: every method sees the whole kernel plus what it adds (the dispatcher preparing the
    program and the go-signal gap for trace; the host's enqueue on top of that for host-timer)."""
    if device_s < 0:
        raise ValueError(f"device time must be >= 0, got {device_s}")
    m = TimingMethod.parse(method)
    if m is TimingMethod.DEVICE_PROFILER:
        return device_s
    traced = device_s + float(hw.program_dispatch_s) + float(hw.op_to_op_s)
    return traced if m is TimingMethod.TRACE else traced + float(hw.host_dispatch_cached_s)


def timing_sources(hw: Any) -> dict[str, str]:
    """The Quantities behind each method's added time (for reports)."""
    return {"device-profiler": "kernel time only",
            "trace": f"+ program_dispatch_s ({hw.program_dispatch_s.source}) + op_to_op_s",
            "host-timer": f"+ trace terms + host_dispatch_cached_s ({hw.host_dispatch_cached_s.source})"}


def launch_terms(hw: Any, mode: str, phase: str) -> tuple[str, Quantity, Quantity, Quantity]:
    """(label, host time per op, device gap between ops, overhead per step) for torchsim.prediction.launch.LaunchModel.

    `mode` "cuda-graphs" (the serving default) means what tt_transformers does: decode under metal trace,
    prefill dispatched by the host (llms.md §4.1: "We typically use tracing for the decode pass of LLMs but not
    the prefill pass"); "eager" means no trace in either phase.
    """
    if mode not in ("cuda-graphs", "eager"):
        raise ValueError(f"unknown launch mode {mode!r} for {hw.name}; valid: cuda-graphs (metal trace for "
                         "decode, as tt_transformers runs it), eager (no trace)")
    traced = mode == "cuda-graphs" and phase == "decode"
    how = DispatchMode.TRACE if traced else DispatchMode.HOST
    issue = hw.program_dispatch_s if traced else _host_issue(hw)
    step = hw.step_overhead_s
    if phase == "prefill":  # the host's own work per prefill beside the ops' dispatch
        step = derived(float(hw.step_overhead_s) + float(hw.prefill_host_s), "s", "step_overhead_s + prefill_host_s ("
                       + hw.prefill_host_s.source + ")")
    return f"{how.value} ({phase})", issue, hw.op_to_op_s, step


def _host_issue(hw: Any) -> Quantity:
    """Without trace the device waits for whichever is slower: the host issuing the op or the dispatcher."""
    host, disp = hw.host_dispatch_s, hw.program_dispatch_s
    return host if float(host) >= float(disp) else disp


__all__ = ["DispatchMode", "TimingMethod", "blackhole_dispatch", "host_visible_s", "launch_terms", "timing_sources",
           "wormhole_dispatch"]
