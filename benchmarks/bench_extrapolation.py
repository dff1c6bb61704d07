"""Extrapolated kernels (torchsim.prediction.repeats) against their full simulation, and wall times at scale.

    python benchmarks/bench_extrapolation.py --corpus     error of each corpus kernel vs its full simulation
    python benchmarks/bench_extrapolation.py --walls      cold wall time, warm rerun + peak memory of the large cases
    python benchmarks/bench_extrapolation.py --startup    --help and argument errors (median of 5 processes)
    python benchmarks/bench_extrapolation.py --reuse      calls interpolated along one size vs their full simulation
    python benchmarks/bench_extrapolation.py              all four

The corpus (>= 40 kernels: GEMM, grouped GEMM, FA2/FA3/FA4 prefill (causal: long prompts and batches of short
ones), Flash-Decoding, FlashMLA, RMSNorm on the four GPUs, add_rmsnorm and embeddings on two, and Tensix
matmuls) is sized so that a full simulation is feasible. Each kernel is simulated twice through
the prediction path (`simulate_launches`, sustained clock): with a small budget (`--budget`, so it is extrapolated
where its template has a known repeating structure) and with `EXACT` (in full). Both run the same code, so the
error is the extrapolation's alone. Wall times run each case in a fresh process with an empty disk cache.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from torchsim.hwmodels import get_profile  # noqa: E402
from torchsim.lowering.kernel_call import KernelCall, KernelKind  # noqa: E402
from torchsim.prediction.kernel_sim import EXACT, clear_memo, merged, simulate_launches  # noqa: E402

GPUS = ("h100-sxm", "h200", "b200", "a100-sxm")


def corpus() -> list[tuple[str, str, KernelCall]]:
    from torchsim.models.routing_synthetic import synthetic_routing

    def routing(pattern: str, tokens: int, experts: int, top_k: int) -> tuple[int, ...]:
        return synthetic_routing(pattern, num_layers=1, num_experts=experts, top_k=top_k, tokens=tokens).layer(0)

    out: list[tuple[str, str, KernelCall]] = []
    for hw in GPUS:
        for m, n, k in ((2048, 4096, 14336), (4096, 4096, 8192), (2048, 28672, 4096), (8192, 4096, 4096)):
            out.append((f"gemm {m}x{n}x{k}", hw, KernelCall.make(KernelKind.GEMM, m=m, n=n, k=k)))
        out.append(("grouped gemm 8 experts x 2048 tok, n=4096 k=8192", hw,
                    KernelCall.make(KernelKind.GROUPED_GEMM, tokens_per_expert=routing("balanced", 8192, 8, 2),
                                    n=4096, k=8192)))
        for heads, seq in ((4, 16384), (8, 8192)):
            out.append((f"attention prefill h{heads} {seq}", hw,
                        KernelCall.make(KernelKind.ATTENTION_PREFILL, batch=1, heads_q=heads, heads_kv=heads,
                                        seq_q=seq, seq_kv=seq, head_dim=128, causal=False)))
        out.append(("flash-decoding b8 h32x8 kv65536", hw,
                    KernelCall.make(KernelKind.ATTENTION_DECODE, batch=8, heads_q=32, heads_kv=8, seq_q=1,
                                    seq_kv=65536, head_dim=128)))
        out.append(("rmsnorm 262144x4096", hw, KernelCall.make(KernelKind.RMSNORM, rows=262144, hidden=4096)))
    out.append(("gemm fp8 4096x4096x8192", "h100-sxm",
                KernelCall.make(KernelKind.GEMM, dtype=_fp8(), m=4096, n=4096, k=8192)))
    out.append(("attention prefill fa3 on sm100 h4 16384", "b200",
                KernelCall.make(KernelKind.ATTENTION_PREFILL, batch=1, heads_q=4, heads_kv=4, seq_q=16384,
                                seq_kv=16384, head_dim=128, causal=False, variant="fa3")))
    for hw in GPUS:  # causal prefill: quadratic in the sequence (repeats.causal_attention_family); on B200
        seq = 65536 if hw == "b200" else 32768  # FA4's 256-row tiles: 32k is too few query blocks to truncate
        out.append((f"attention prefill causal h32x8 {seq}", hw,
                    KernelCall.make(KernelKind.ATTENTION_PREFILL, batch=1, heads_q=32, heads_kv=8, seq_q=seq,
                                    seq_kv=seq, head_dim=128, causal=True)))
    out.append(("attention prefill causal h32x32 32768", "h100-sxm",  # MHA: 4x the K/V in flight and in L2
                KernelCall.make(KernelKind.ATTENTION_PREFILL, batch=1, heads_q=32, heads_kv=32, seq_q=32768,
                                seq_kv=32768, head_dim=128, causal=True)))
    for hw in ("h100-sxm", "b200"):  # a batch of short causal prompts: too few query blocks, the sequences repeat
        out.append(("attention prefill causal b64 h32x8 2048", hw,
                    KernelCall.make(KernelKind.ATTENTION_PREFILL, batch=64, heads_q=32, heads_kv=8, seq_q=2048,
                                    seq_kv=2048, head_dim=128, causal=True)))
    out.append(("attention prefill causal h32x8 24000 window 4096", "h100-sxm",
                KernelCall.make(KernelKind.ATTENTION_PREFILL, batch=1, heads_q=32, heads_kv=8, seq_q=24000,
                                seq_kv=24000, head_dim=128, causal=True, window=4096)))
    for hw in ("h100-sxm", "b200"):
        out.append(("flashmla b16 h128 kv32768", hw,
                    KernelCall.make(KernelKind.MLA_DECODE, batch=16, heads_q=128, seq_q=1, seq_kv=32768)))
    for hw in ("h100-sxm", "a100-sxm"):  # grids streaming DRAM: a queue filling over the first waves (add_rmsnorm),
        # many CTAs of few nodes (embedding); RoPE's two CTA classes are simulated in full (docs/predict.md)
        out.append(("add_rmsnorm 131072x4096", hw, KernelCall.make(KernelKind.ADD_RMSNORM, rows=131072, hidden=4096)))
        out.append(("embedding 131072 tokens x 4096", hw, KernelCall.make(KernelKind.EMBEDDING, tokens=131072,
                                                                          hidden=4096, vocab=128256)))
    for hw in ("wormhole-n150", "blackhole-p150"):
        out.append(("tensix matmul 2048x4096x32768", hw, KernelCall.make(KernelKind.GEMM, m=2048, n=4096, k=32768)))
        out.append(("tensix matmul 4096x4096x65536", hw, KernelCall.make(KernelKind.GEMM, m=4096, n=4096, k=65536)))
    return out


def _fp8() -> Any:
    from torchsim.graph import DType

    return DType.FP8_E4M3


def run_corpus(budget: int, only: str | None) -> list[dict[str, Any]]:
    rows = []
    for label, hw_name, call in corpus():
        if only and only not in f"{label} {hw_name}":
            continue
        hw = get_profile(hw_name)
        clear_memo()
        t = time.perf_counter()
        ext = merged(simulate_launches(call, hw, max_events=budget))
        t_ext = time.perf_counter() - t
        if not ext.method.startswith("extrapolated"):
            why = (f"steady state not reached, simulated in full: {ext.extrapolation}" if ext.extrapolation
                   else "nothing worth truncating at this size")
            print(f"  {hw_name:14s} {label:48s} {ext.method} ({why})", flush=True)
            rows.append({"kernel": label, "hw": hw_name, "method": ext.method, "error": None})
            continue
        clear_memo()
        t = time.perf_counter()
        full = merged(simulate_launches(call, hw, max_events=EXACT))
        t_full = time.perf_counter() - t
        err = ext.time_s / full.time_s - 1
        rows.append({"kernel": label, "hw": hw_name, "method": ext.method, "error": err, "ext_s": t_ext,
                     "full_s": t_full, "events_ext": ext.events, "events_full": full.events,
                     "extrapolation": ext.extrapolation})
        print(f"  {hw_name:14s} {label:48s} {ext.method:22s} error {100 * err:+6.2f}%  "
              f"{ext.events:>9,} vs {full.events:>10,} events  {t_ext:6.1f} s vs {t_full:6.1f} s", flush=True)
    errs = [abs(r["error"]) for r in rows if r["error"] is not None]
    if errs:
        print(f"\n{len(errs)} of {len(rows)} kernels extrapolated: mean |error| {100 * sum(errs) / len(errs):.2f}%, "
              f"worst {100 * max(errs):.2f}% (stated bound: mean <= 0.5%, worst <= 2%)")
    return rows


def reuse_groups() -> list[tuple[str, str, list[KernelCall]]]:
    """Calls that differ in one size (torchsim.prediction.reuse): decode attention over the KV length, decode
    GEMMs over M below the tile height."""
    out = []
    for hw in GPUS:
        out.append(("flash-decoding b8 h32x8 kv 2049..8000", hw,
                    [KernelCall.make(KernelKind.ATTENTION_DECODE, batch=8, heads_q=32, heads_kv=8, seq_q=1, seq_kv=kv,
                                     head_dim=128) for kv in range(2049, 8001, 350)]))
        out.append(("decode gemm m 1..64 n4096 k4096", hw,
                    [KernelCall.make(KernelKind.GEMM, m=m, n=4096, k=4096) for m in (1, 2, 4, 8, 16, 24, 32, 48, 64)]))
    return out


def run_reuse(only: str | None) -> list[dict[str, Any]]:
    from torchsim.prediction.kernel_sim import simulate_many

    rows = []
    for label, hw_name, calls in reuse_groups():
        if only and only not in f"{label} {hw_name}":
            continue
        hw = get_profile(hw_name)
        clear_memo()
        got = simulate_many(calls, hw)
        for c, s in zip(calls, got):
            if not s.method.startswith("interpolated-"):
                continue
            clear_memo()
            full = merged(simulate_launches(c, hw, max_events=EXACT))
            err = s.time_s / full.time_s - 1
            rows.append({"group": label, "hw": hw_name, "call": dict(c.params), "method": s.method, "error": err})
        n = sum(1 for r in rows if r["group"] == label and r["hw"] == hw_name)
        errs = [abs(r["error"]) for r in rows if r["group"] == label and r["hw"] == hw_name]
        print(f"  {hw_name:14s} {label:48s} {n} of {len(calls)} interpolated"
              + (f", worst |error| {100 * max(errs):.3f}%" if errs else ""), flush=True)
    errs = [abs(r["error"]) for r in rows]
    if errs:
        print(f"\n{len(errs)} calls interpolated: mean |error| {100 * sum(errs) / len(errs):.3f}%, worst "
              f"{100 * max(errs):.3f}% (stated bound: mean <= 0.5%, worst <= 2%)")
    return rows


WALLS: list[tuple[str, list[str]]] = [
    *[(f"FA3 prefill {s} tokens h100", ["kernel", "attention", "--batch", "1", "--heads-q", "32", "--head-dim", "128",
                                          "--seq-q", str(s), "--hw", "h100-sxm", "--variant", "fa3", "--json"])
      for s in (32768, 86000, 131072)],
    *[(f"FA4 prefill {s} tokens b200", ["kernel", "attention", "--batch", "1", "--heads-q", "32", "--head-dim", "128",
                                          "--seq-q", str(s), "--hw", "b200", "--variant", "fa4", "--json"])
      for s in (32768, 86000, 131072)],
    ("GEMM 16384^3 h100", ["kernel", "gemm", "--m", "16384", "--n", "16384", "--k", "16384", "--json"]),
    ("grouped GEMM 65536 tokens (8 experts top-2, n=14336 k=4096) h100",
     ["kernel", "grouped-gemm", "--routing", "balanced", "--tokens", "65536", "--experts", "8", "--top-k", "2",
      "--n", "14336", "--k", "4096", "--json"]),
    ("predict llama3-8b h100 (default)", ["predict", "--json", "--no-progress"]),
    ("predict llama3-8b h100 batch 64 prompt 2048", ["predict", "--json", "--no-progress", "--batch", "64"]),
    # Llama-3-70B's 8192-token context cannot take 8192 + 128 tokens: Llama-3.1-70B is the same network; FP8 so
    # that its weights fit one H200
    ("predict llama3.1-70b fp8 h200 batch 8 prompt 8192", ["predict", "llama3.1-70b", "--hw", "h200", "--dtype", "fp8",
                                                           "--batch", "8", "--prompt", "8192", "--json",
                                                           "--no-progress"]),
    ("predict mixtral-8x7b h200 batch 32 prompt 2048", ["predict", "mixtral-8x7b", "--hw", "h200", "--batch", "32",
                                                        "--json", "--no-progress"]),
    ("compare llama3-8b a100/h100/h200/b200", ["compare", "llama3-8b", "--json"]),
]


def run_walls(only: str | None) -> list[dict[str, Any]]:
    rows = []
    for label, argv in WALLS:
        if only and only not in label:
            continue
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "TORCHSIM_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
            out_f, err_f, rss_f = Path(cache) / "out", Path(cache) / "err", Path(cache) / "rss"
            # GNU time reports the command's own peak RSS (a child forked from this process would inherit ours)
            # and its user + system CPU time with its children's (the workers): what the engine's speed moves,
            # less sensitive than the wall to how fast this shared machine runs at the moment
            cmd = ["/usr/bin/time", "-o", str(rss_f), "-f", "%M %U %S", sys.executable, "-m", "torchsim", *argv]
            t = time.perf_counter()
            with out_f.open("w") as o, err_f.open("w") as e:
                subprocess.run(cmd, stdout=o, stderr=e, env=env, cwd=ROOT, check=False)
            wall = time.perf_counter() - t
            out, err = out_f.read_bytes(), err_f.read_bytes()
            fields = rss_f.read_text().split()[-3:] if rss_f.exists() else []
            peak_mb = float(fields[0]) / 1024 if len(fields) == 3 else float("nan")
            cpu = float(fields[1]) + float(fields[2]) if len(fields) == 3 else float("nan")
            warm = float("nan")
            if argv[0] in ("predict", "compare"):  # the same command again on the disk and plan caches it filled
                t = time.perf_counter()
                subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT,
                               check=False)
                warm = time.perf_counter() - t
        info = ""
        try:
            d = json.loads(out.decode().strip().splitlines()[-1])
            info = (f"{d.get('time_us', d.get('ttft_ms', 0)):.1f} {'us' if 'time_us' in d else 'ms TTFT'}  "
                    f"{d.get('method', '')}")
        except (ValueError, IndexError, AttributeError):
            info = err.decode().strip().splitlines()[-1] if err else "no output"
        rows.append({"case": label, "wall_s": wall, "cpu_s": cpu, "warm_s": warm, "peak_mb": peak_mb, "result": info})
        rerun = f"warm {warm:4.2f} s" if warm == warm else " " * 11
        print(f"  {label:60s} {wall:6.1f} s  cpu {cpu:5.1f} s  {rerun}  peak {peak_mb:6.0f} MB  {info}", flush=True)
    return rows


STARTUP: list[tuple[str, list[str]]] = [
    ("torchsim --help", ["--help"]),
    ("torchsim predict --help", ["predict", "--help"]),
    ("argument error: predict --batch lots", ["predict", "--batch", "lots"]),
    ("argument error: kernel gemm --m x", ["kernel", "gemm", "--m", "x"]),
    ("torchsim hw list", ["hw", "list"]),
]


PROBE = "import time; t = time.perf_counter(); sum(i * i for i in range(12_000_000)); print(time.perf_counter() - t)"


def probe() -> float:
    """Seconds a fixed pure-Python loop takes in a fresh process: how fast this shared machine runs right now
    (walls measured an hour apart differ by up to 1.7x for the same code; compare runs by this figure)."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=False)
    try:
        return float(out.stdout.strip())
    except ValueError:
        return float("nan")


def run_startup(only: str | None, repeats: int = 5) -> list[dict[str, Any]]:
    """Median wall time of `repeats` fresh processes per command (none simulates or imports torch)."""
    rows = []
    for label, argv in STARTUP:
        if only and only not in label:
            continue
        walls = []
        for _ in range(repeats):
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "torchsim", *argv], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
                           check=False)
            walls.append(time.perf_counter() - t)
        median = sorted(walls)[len(walls) // 2]
        rows.append({"case": label, "median_s": median, "walls_s": walls})
        print(f"  {label:60s} {median:6.2f} s  (median of {repeats}; {min(walls):.2f}-{max(walls):.2f})", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", action="store_true")
    ap.add_argument("--walls", action="store_true")
    ap.add_argument("--reuse", action="store_true", help="interpolated calls (prediction-level reuse) vs full")
    ap.add_argument("--startup", action="store_true", help="--help and argument errors, median of 5 processes")
    ap.add_argument("--budget", type=int, default=5_000, help="node events above which the corpus extrapolates")
    ap.add_argument("--only", default=None, help="run the cases whose label contains this text")
    ap.add_argument("--json", default=None, help="write the rows to this file")
    args = ap.parse_args()
    both = not (args.corpus or args.walls or args.reuse or args.startup)
    out: dict[str, Any] = {}
    from torchsim.sim import native

    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (other work shares it); engine "
          f"build: {native.ENGINE} ({native.WHY})")
    if args.corpus or both:
        print("extrapolated vs full simulation (sustained clock, same code):")
        out["corpus"] = run_corpus(args.budget, args.only)
    if args.reuse or both:
        print("calls interpolated along one size vs their full simulation:")
        out["reuse"] = run_reuse(args.only)
    if args.startup or args.walls or both:  # the commands as a user runs them after set-up: scripts/dev compiles
        # torchsim's modules to bytecode (which Python would not write where PYTHONDONTWRITEBYTECODE is set)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "torchsim")], check=True,
                       stdout=subprocess.DEVNULL)
    if args.startup or both:
        print("start-up (fresh process, no simulation):")
        out["startup"] = run_startup(args.only)
    if args.walls or both:
        before = probe()
        print(f"machine speed probe (a fixed Python loop, fresh process): {before:.2f} s")
        print("cold wall time (fresh process, empty disk cache), its CPU time (with its workers'), a warm rerun "
              "(same caches) and peak memory:")
        out["walls"] = run_walls(args.only)
        after = probe()
        print(f"machine speed probe after the walls: {after:.2f} s")
        out["probe_s"] = {"before": before, "after": after}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
