"""Sliding-window attention end to end: Mistral-7B-v0.1 (sliding_window 4096) with and without its window.

    python benchmarks/sliding_window.py [--hw h100-sxm] [--prompt 32767] [--kv 32768] [--workers 1]

Predicts a `--prompt`-token prefill and one decode step at a `--kv`-token KV cache from Mistral-7B-v0.1's
public config.json (tests/data/model_configs), then again with `sliding_window` removed (full causal
attention, what torchsim simulated before windows were modelled). Prints TTFT, TPOT and the time spent in
attention kernels (prefill; decode split + combine) for both, and their ratios. Every layer has the same
window, so each attention kernel is simulated once and counted for all 32 layers. A kernel over the
prediction's simulation budget is a roofline estimate (flagged in the output); `--engine` simulates one
layer's attention kernels whole instead.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from torchsim.models.registry import get_config
from torchsim.prediction.pipeline import predict

CONFIG = Path(__file__).resolve().parents[1] / "tests" / "data" / "model_configs" / "mistral-7b-v0.1.json"


def attention_us(p, phase: str) -> float:
    rows = p.step_kernels(phase)
    return sum(r.duration_us for r in rows if r.kind in ("attention_prefill", "attention_decode"))


def roofline_rows(p) -> set[str]:
    """Attention kernels the prediction estimated by roofline (over the simulation budget)."""
    return {f"{r.phase} {r.kind}" for r in p.kernels if r.kind.startswith("attention") and r.fallback}


def engine_per_layer(hw_name: str, prompt: int, kv: int) -> None:
    """One layer's attention kernels simulated whole by the engine (no budget), window vs none."""
    from torchsim.hwmodels import get_profile
    from torchsim.lowering.templates.attention import attention
    from torchsim.lowering.templates.attention_config import AttnShape
    from torchsim.lowering.templates.decode import flash_decode
    from torchsim.sim import simulate

    hw = get_profile(hw_name)
    for w in (4096, 0):
        pre = simulate(attention(AttnShape(1, 32, 8, prompt, prompt, 128, causal=True, window=w), hw), hw)
        dec = sum(simulate(k, hw).time_s for k in flash_decode(AttnShape(1, 32, 8, 1, kv, 128, window=w), hw))
        print(f"engine, one layer, window {w or 'removed'}: prefill attention {pre.time_s * 1e3:.3f} ms, "
              f"decode attention {dec * 1e6:.2f} us", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hw", default="h100-sxm")
    ap.add_argument("--prompt", type=int, default=32767, help="prompt tokens (the context is 32768)")
    ap.add_argument("--kv", type=int, default=32768, help="KV length of the decode step")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--engine", action="store_true", help="also simulate one layer's attention kernels whole "
                    "(the 32k full-attention prefill takes minutes)")
    args = ap.parse_args()
    cfg = get_config(CONFIG)
    rows = []
    for label, c in (("window 4096", cfg), ("window removed", replace(cfg, sliding_window=None))):
        p = predict(c, args.hw, prompt_len=args.prompt, decode_steps=1, kv_len=args.kv - 1, workers=args.workers)
        rows.append((label, p.ttft_s * 1e3, attention_us(p, "prefill") / 1e3, p.tpot_s * 1e6,
                     attention_us(p, "decode")))
        est = roofline_rows(p)
        print(f"{label:<16} TTFT {rows[-1][1]:9.2f} ms (attention {rows[-1][2]:8.2f} ms)   "
              f"TPOT {rows[-1][3]:8.1f} us (attention {rows[-1][4]:7.1f} us)"
              + (f"   roofline-estimated: {', '.join(sorted(est))}" if est else ""), flush=True)
    (_, t0, a0, d0, ad0), (_, t1, a1, d1, ad1) = rows
    print(f"window / removed: TTFT {t0 / t1:.3f}, prefill attention {a0 / a1:.3f}; TPOT {d0 / d1:.3f}, decode "
          f"attention {ad0 / ad1:.3f}  ({args.hw}, Mistral-7B-v0.1, prompt {args.prompt}, decode at KV {args.kv})")
    if args.engine:
        engine_per_layer(args.hw, args.prompt, args.kv)


if __name__ == "__main__":
    main()
