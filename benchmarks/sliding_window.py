"""Sliding-window attention end to end: Mistral-7B-v0.1 (sliding_window 4096) with and without its window.

    python benchmarks/sliding_window.py [--hw h100-sxm] [--prompt 32768] [--kv 32768] [--workers 1]

Predicts a `--prompt`-token prefill and one decode step at a `--kv`-token KV cache from Mistral-7B-v0.1's
public config.json (tests/data/model_configs), then again with `sliding_window` removed (full causal
attention, what torchsim simulated before windows were modelled). Prints TTFT, TPOT and the time spent in
attention kernels (prefill; decode split + combine) for both, and their ratios. Every layer has the same
window, so each attention kernel is simulated once and counted for all 32 layers.
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hw", default="h100-sxm")
    ap.add_argument("--prompt", type=int, default=32768)
    ap.add_argument("--kv", type=int, default=32768, help="KV length of the decode step")
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    cfg = get_config(CONFIG)
    rows = []
    for label, c in (("window 4096", cfg), ("window removed", replace(cfg, sliding_window=None))):
        p = predict(c, args.hw, prompt_len=args.prompt, decode_steps=1, kv_len=args.kv - 1, workers=args.workers)
        rows.append((label, p.ttft_s * 1e3, attention_us(p, "prefill") / 1e3, p.tpot_s * 1e6,
                     attention_us(p, "decode")))
        print(f"{label:<16} TTFT {rows[-1][1]:9.2f} ms (attention {rows[-1][2]:8.2f} ms)   "
              f"TPOT {rows[-1][3]:8.1f} us (attention {rows[-1][4]:7.1f} us)", flush=True)
    (_, t0, a0, d0, ad0), (_, t1, a1, d1, ad1) = rows
    print(f"window / removed: TTFT {t0 / t1:.3f}, prefill attention {a0 / a1:.3f}; TPOT {d0 / d1:.3f}, decode "
          f"attention {ad0 / ad1:.3f}  ({args.hw}, Mistral-7B-v0.1, prompt {args.prompt}, decode at KV {args.kv})")


if __name__ == "__main__":
    main()
