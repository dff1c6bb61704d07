"""How fast a power-limited GPU leaves its boost clock: per-call times of GEMMs run back to back from idle.

    python benchmarks/power_window.py --out power_window.json [--seconds 3] [--idle 3]

For each case, after `--idle` seconds with nothing running: back-to-back calls for `--seconds`, a CUDA event
recorded before every call, so each call's device time is known; NVML's SM clock and board power are sampled
alongside (torchsim.calibration.gpu_state). The per-call times against the time since the start show the
limiter's dynamics: how long a burst keeps the boost clock, how the clock settles, and, for a GEMM alternating
with a copy, whether the clock follows each kernel or the window's average power. Cases: three power probes (an
elementwise add over 1 GiB and over an L2-resident 8 MiB, a 1 GiB device-to-device copy_), bf16 and FP8 8192^3,
bf16 4096^3, bf16 8192^3 alternating with a 1 GiB copy. Writes one JSON file (atomically). Needs a CUDA GPU; a
measurement script, not a test.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from torchsim.calibration.gpu_state import Sampler, limits
from torchsim.exports.atomic import write_bytes_atomic


def run_case(torch: Any, name: str, calls: list[Any], seconds: float, idle: float) -> dict[str, Any]:
    """Round-robin over `calls` for `seconds` after `idle` seconds of nothing; per-call device times."""
    for fn in calls:  # warm (library heuristics), then let the board cool and the power average fall
        fn()
    torch.cuda.synchronize()
    time.sleep(idle)
    sampler = Sampler(torch.cuda.current_device(), period_s=0.005)
    events = []
    with sampler:
        t0 = time.perf_counter()
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        prev = start
        i = 0
        while time.perf_counter() - t0 < seconds:
            for _ in range(8):  # enqueue in small batches so the host stays ahead of the GPU
                calls[i % len(calls)]()
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                events.append((i % len(calls), prev, e))
                prev = e
                i += 1
            if len(events) > 64:
                events[-64][2].synchronize()  # bound how far ahead the host runs (~64 calls)
        torch.cuda.synchronize()
    out = []
    at = 0.0
    for which, a, b in events:
        dt = a.elapsed_time(b)
        at += dt
        out.append((which, round(at, 4), round(dt, 5)))
    samples = [(round(t, 4), c, p, m) for t, c, p, m in sampler._samples]  # noqa: SLF001 - the raw trace
    return {"case": name, "calls": out, "nvml": samples, "idle_s": idle, "seconds": seconds}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--idle", type=float, default=3.0)
    args = ap.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("power_window: needs a CUDA GPU", file=sys.stderr)
        return 2
    dev, bf16 = "cuda", torch.bfloat16
    a, b = torch.randn(8192, 8192, device=dev, dtype=bf16), torch.randn(8192, 8192, device=dev, dtype=bf16)
    a4, b4 = torch.randn(4096, 4096, device=dev, dtype=bf16), torch.randn(4096, 4096, device=dev, dtype=bf16)
    a8 = a.to(torch.float8_e4m3fn)
    b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0, device=dev)
    x = torch.randn(256 << 20, device=dev)
    y = torch.empty_like(x)
    xl2 = torch.randn(2 << 20, device=dev)  # 8 MiB: the add below reads and writes 16 MiB, inside the L2
    yl2 = torch.empty_like(xl2)
    torch.add(xl2, 1.0, out=yl2)
    torch.cuda.synchronize()
    l2_graph = torch.cuda.CUDAGraph()  # 200 adds per replay: a few us each, too short to issue eagerly
    with torch.cuda.graph(l2_graph):
        for _ in range(200):
            torch.add(xl2, 1.0, out=yl2)
    y1 = torch.empty_like(x)
    cases: list[tuple[str, list[Any]]] = [
        # power probes: which part of a memory-bound kernel's power is the DRAM's and which the SMs'
        ("probe: add on 1 GiB (SM kernel, DRAM-bound)", [lambda: torch.add(x, 1.0, out=y1)]),
        ("probe: add on 8 MiB (SM kernel, L2-resident), 200 per CUDA-graph replay", [l2_graph.replay]),
        ("probe: copy_ of 1 GiB (cudaMemcpy device to device)", [lambda: y.copy_(x)]),
        ("bf16 8192^3", [lambda: torch.matmul(a, b)]),
        ("fp8 8192^3", [lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=bf16)]),
        ("bf16 4096^3", [lambda: torch.matmul(a4, b4)]),
        ("bf16 8192^3 alternating with a 1 GiB copy", [lambda: torch.matmul(a, b), lambda: y.copy_(x)]),
    ]
    doc: dict[str, Any] = {"gpu": torch.cuda.get_device_name(), "limits": limits(0), "torch": torch.__version__,
                           "timing": "a CUDA event after every call; each call's time is the interval between "
                           "consecutive events (back to back, so it includes the launch gap)", "cases": []}
    for name, calls in cases:
        r = run_case(torch, name, calls, args.seconds, args.idle)
        doc["cases"].append(r)
        first = [dt for w, _, dt in r["calls"][:5] if w == 0]
        last = sorted(dt for w, at, dt in r["calls"] if w == 0 and at > 1000 * args.seconds / 2)
        late = [(c, pw) for t, c, pw, _ in r["nvml"] if t > args.seconds / 2]
        clock = sorted(c for c, _ in late)[len(late) // 2] if late else float("nan")
        power = sorted(pw for _, pw in late if pw is not None)[len(late) // 2] if late else float("nan")
        print(f"{name}: {len(r['calls'])} calls; first {[round(x, 3) for x in first]} ms, second half median "
              f"{last[len(last) // 2] if last else float('nan'):.4f} ms; NVML second half {clock:.0f} MHz "
              f"{power:.0f} W", flush=True)
    write_bytes_atomic(args.out, json.dumps(doc).encode())
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
