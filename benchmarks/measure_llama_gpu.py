"""Measure HF Llama-3-8B (random bf16 weights, built from torchsim's llama3-8b config) on the local CUDA GPU: the
numbers `torchsim predict llama3-8b --preset eager` predicts.

    python benchmarks/measure_llama_gpu.py --out llama_gpu.json [--layers 32] [--cases 1x2048,1x8192,16x1024]

Needs a CUDA build of PyTorch and transformers (the `hf` extra). For each (batch x prompt) case: the prefill
forward (one HF forward over the prompt, logits of the last token only), timed with CUDA events around each of 5
calls after 2 warm-ups, the median; for batch 1 at the first case's prompt: an eager decode step (one token against
a DynamicCache of the prompt), timed the same way over 20 steps; the per-kernel device times of one prefill and of
one decode step from torch.profiler (CUPTI kernel activity: kernels only, no launch gaps); the SM clock and board
power NVML read during the prefill loop. Writes one JSON file (atomically) and prints a summary. A measurement
script for a GPU machine, not a test; CPU-only machines cannot run it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from typing import Any

from torchsim.calibration.gpu_state import Sampler, limits
from torchsim.exports.atomic import write_bytes_atomic
from torchsim.models.hf import to_hf_config
from torchsim.models.registry import get_config


def _events_median(fn: Any, warmup: int, iters: int) -> tuple[float, list[float]]:
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    return statistics.median(ts), ts


def _kernel_table(fn: Any, top: int = 40) -> dict[str, Any]:
    """Device time per kernel name of one call of `fn`, from torch.profiler's CUDA activity."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    rows = []
    total = 0.0
    count = 0
    for e in prof.events():
        if not str(getattr(e, "device_type", "")).endswith("CUDA"):
            continue
        dt = e.time_range.elapsed_us()
        if dt > 0:
            rows.append((e.name, dt))
            total += dt
            count += 1
    by: dict[str, list[float]] = {}
    for name, dt in rows:
        by.setdefault(name, []).append(dt)
    table = sorted(({"kernel": k, "calls": len(v), "device_us": sum(v)} for k, v in by.items()),
                   key=lambda r: -float(r["device_us"]))
    return {"kernels": count, "device_us_total": total, "top": table[:top]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--cases", default="1x2048,1x8192,16x1024,64x1024")
    ap.add_argument("--decode-steps", type=int, default=20)
    args = ap.parse_args()
    import torch
    import transformers
    if not torch.cuda.is_available():
        print("measure_llama_gpu: needs a CUDA GPU", file=sys.stderr)
        return 2
    cases = [tuple(int(x) for x in c.split("x")) for c in args.cases.split(",")]
    cfg = replace(get_config("llama3-8b"), num_hidden_layers=args.layers)
    hf_cfg = to_hf_config(cfg)
    hf_cfg._attn_implementation = "sdpa"
    t0 = time.perf_counter()
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(hf_cfg).eval()
    torch.set_default_dtype(torch.float32)
    built = time.perf_counter() - t0
    props = torch.cuda.get_device_properties(0)
    doc: dict[str, Any] = {
        "model": "llama3-8b (HF LlamaForCausalLM from torchsim's config, random bf16 weights, sdpa attention)",
        "layers": args.layers, "gpu": torch.cuda.get_device_name(), "sm_count": props.multi_processor_count,
        "l2_bytes": getattr(props, "L2_cache_size", 0), "limits": limits(0), "torch": torch.__version__,
        "cuda": torch.version.cuda, "transformers": transformers.__version__, "build_s": built,
        "timing": "CUDA events around each call, median of 5 after 2 warm-ups (prefill); of the steps (decode)",
        "prefill": [], "decode": [],
    }
    print(f"built in {built:.1f} s on {doc['gpu']}", flush=True)
    sampler = Sampler(0)
    with torch.inference_mode():
        for batch, prompt in cases:
            ids = torch.randint(0, hf_cfg.vocab_size, (batch, prompt), device="cuda")

            def prefill(ids: Any = ids) -> Any:
                return model(input_ids=ids, use_cache=False, logits_to_keep=1)
            try:
                with sampler:
                    t, ts = _events_median(prefill, 2, 5)
                reading = sampler.reading()
            except torch.OutOfMemoryError as exc:
                doc["prefill"].append({"batch": batch, "prompt": prompt, "error": str(exc).splitlines()[0]})
                torch.cuda.empty_cache()
                continue
            entry = {"batch": batch, "prompt": prompt, "time_ms": t * 1e3, "all_ms": [x * 1e3 for x in ts],
                     "state": reading.note() if reading else ""}
            if (batch, prompt) in (cases[0], cases[-1]):
                try:
                    entry["profile"] = _kernel_table(prefill)
                except Exception as exc:  # noqa: BLE001 - the profiler is a bonus: keep the timing
                    entry["profile_error"] = repr(exc)[:300]
            doc["prefill"].append(entry)
            print(f"prefill b{batch} p{prompt}: {t * 1e3:.2f} ms {entry['state']}", flush=True)
            del ids
            torch.cuda.empty_cache()
        try:
            doc["decode"].append(_decode(model, hf_cfg, cases[0][1], args.decode_steps))
        except Exception as exc:  # noqa: BLE001 - keep the prefill figures
            doc["decode_error"] = repr(exc)[:500]
            print(f"decode failed: {exc!r}", flush=True)
    write_bytes_atomic(args.out, json.dumps(doc, indent=1).encode())
    print(f"wrote {args.out}")
    return 0


def _decode(model: Any, hf_cfg: Any, prompt: int, n_steps: int) -> dict[str, Any]:
    """Eager decode steps at batch 1 from a KV cache of `prompt` tokens."""
    import torch
    batch = 1
    ids = torch.randint(0, hf_cfg.vocab_size, (batch, prompt), device="cuda")
    out = model(input_ids=ids, use_cache=True)
    cache = out.past_key_values
    tok = out.logits[:, -1:].argmax(-1)
    steps = []
    for _ in range(n_steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        out = model(input_ids=tok, past_key_values=cache, use_cache=True)
        b.record()
        b.synchronize()
        steps.append(a.elapsed_time(b))
        tok = out.logits[:, -1:].argmax(-1)
        cache = out.past_key_values
    wall0 = time.perf_counter()
    for _ in range(5):
        out = model(input_ids=tok, past_key_values=cache, use_cache=True)
        tok = out.logits[:, -1:].argmax(-1)
    torch.cuda.synchronize()
    host_ms = (time.perf_counter() - wall0) / 5 * 1e3

    def step() -> Any:
        return model(input_ids=tok, past_key_values=cache, use_cache=True)
    decode = {"batch": batch, "kv_start": prompt, "steps": n_steps,
              "time_ms": statistics.median(steps[2:]), "all_ms": steps, "wall_ms_per_step": host_ms,
              "profile": _kernel_table(step)}
    print(f"decode b1 kv{prompt}: {decode['time_ms']:.2f} ms/step (events), {host_ms:.2f} ms wall; kernels "
          f"{decode['profile']['device_us_total'] / 1e3:.2f} ms device in {decode['profile']['kernels']} "
          "kernels", flush=True)
    return decode


if __name__ == "__main__":
    sys.exit(main())
