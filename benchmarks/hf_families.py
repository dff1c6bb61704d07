"""Prefill TTFT and decode TPOT on one GPU profile for each HF family torchsim builds from a public config.json.

    python benchmarks/hf_families.py [--hw h100-sxm] [--prompt 2048] [--decode 128]

The configs are the ones the tests use (tests/data/hf_configs: Qwen2.5-7B, Qwen3-8B, Qwen3-30B-A3B, OLMo-7B,
OLMo-2-7B, Granite-3.1-8B, Phi-3-mini-4k, Phi-3.5-mini, Phi-3.5-MoE, StableLM-2-1.6B, StarCoder2-7B, Gemma-2-9B,
Gemma-3-1B, gpt-oss-20b, gpt-oss-120b, DeepSeek-V2-Lite, DeepSeek-V3), built by HF transformers on the meta device
(models.hf_family), with the families torchsim defines itself beside them: the built-in Llama-2-7B, Llama-3-8B,
Llama-3.1-8B and Mixtral-8x7B and the public configs of Llama-3.2-1B, Llama-3.3-70B and Mistral-7B-v0.1
(tests/data/model_configs). A config needing an approximation is predicted with it and the approximation is printed;
a checkpoint's quantization_config runs in its format (docs/quantization.md; `--quant none` runs every model in
bf16: gpt-oss's MXFP4 needs B200's FP4 tensor cores). Not a test: a table.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from torchsim.models.registry import get_config
from torchsim.prediction.pipeline import predict

CONFIGS = Path(__file__).resolve().parent.parent / "tests" / "data" / "hf_configs"
OWN_CONFIGS = CONFIGS.parent / "model_configs"
BUILT_IN = ("llama2-7b", "llama3-8b", "llama3.1-8b", "mixtral-8x7b")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hw", default="h100-sxm")
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--quant", default=None, help="a format for every model (default: each config's own)")
    args = ap.parse_args()
    models: list[Any] = [*BUILT_IN, *(get_config(p) for p in sorted(OWN_CONFIGS.glob("*.json"))),
                         *(get_config(p, approximate=True) for p in sorted(CONFIGS.glob("*.json")))]
    print(f"{'model':<16} {'family':<10} {'TTFT ms':>9} {'TPOT ms':>8} {'weights GB':>10} {'format':>9} "
          f"{'wall s':>7}  approximations")
    for m in models:
        t0 = time.perf_counter()
        try:
            p = predict(m, args.hw, prompt_len=args.prompt, decode_steps=args.decode, progress=False,
                        quant=args.quant, allow_oversubscribe=True)  # a family larger than one GPU: a warning
        except ValueError as exc:  # e.g. a context shorter than prompt + decode (OLMo-7B: 2048)
            print(f"{getattr(m, 'name', m):<16} {getattr(m, 'model_type', ''):<10} not predicted: {exc}", flush=True)
            continue
        family = getattr(m, "model_type", "") or f"{str(p.stats.get('family', '')).lower()} (own)"
        approx = "; ".join(a.removeprefix("approximated: ")[:60] for a in p.assumptions if a.startswith("approx"))
        print(f"{p.model:<16} {family:<10} {p.ttft_s * 1e3:>9.3f} {p.tpot_s * 1e3:>8.3f} "
              f"{p.stats['weight_bytes'] / 1e9:>10.2f} {p.stats.get('quant', 'bf16'):>9} "
              f"{time.perf_counter() - t0:>7.1f}  {approx}", flush=True)


if __name__ == "__main__":
    main()
