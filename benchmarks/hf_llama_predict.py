"""HF LlamaForCausalLM vs torchsim's own Llama-3-8B, same config, through `torchsim.predict` (issue 4, Must show).

    python benchmarks/hf_llama_predict.py [--hw h100-sxm] [--prompt 2048] [--kv 1024] [--decode 4] [--layers 32]

Both models are built on the meta device from the llama3-8b config (HF through `torchsim.models.hf` and
`HFSegmented`), then predicted with the same arguments: a prefill of `--prompt` tokens and `--decode` decode steps
from KV `--kv`. Prints the kernel plans' comparison (kind, shapes, dtype, phase, layer of every launch) and TTFT,
time per output token and total for both, with the relative difference. A report, not a test.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from torchsim.models.hf import build_hf_model
from torchsim.models.hf_segments import HFSegmented
from torchsim.models.registry import get_config
from torchsim.prediction.pipeline import predict
from torchsim.prediction.records import Prediction


def plan_of(p: Prediction) -> list[tuple[object, ...]]:
    return [(k.kind, k.shapes, k.dtype, k.phase, k.decode_step, k.layer) for k in p.kernels]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hw", default="h100-sxm")
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--kv", type=int, default=1024)
    ap.add_argument("--decode", type=int, default=4)
    ap.add_argument("--layers", type=int, default=32)
    args = ap.parse_args()
    cfg = replace(get_config("llama3-8b"), num_hidden_layers=args.layers)
    kw = dict(prompt_len=args.prompt, kv_len=args.kv, decode_steps=args.decode)
    t0 = time.perf_counter()
    own = predict(cfg, args.hw, **kw)
    t1 = time.perf_counter()
    hf_model = HFSegmented(build_hf_model(cfg))
    t2 = time.perf_counter()
    hf = predict(hf_model, args.hw, **kw)
    t3 = time.perf_counter()
    print(f"llama3-8b x{args.layers} layers on {args.hw}: prefill {args.prompt}, {args.decode} decode steps from KV "
          f"{args.kv} (serving preset, CUDA graphs)")
    print(f"  torchsim's own model: predicted in {t1 - t0:.1f} s; HF LlamaForCausalLM: built in {t2 - t1:.1f} s, "
          f"predicted in {t3 - t2:.1f} s ({hf.stats['simulated_now']} kernels simulated anew)")
    a, b = plan_of(own), plan_of(hf)
    diff = sum(1 for x, y in zip(a, b, strict=False) if x != y) + abs(len(a) - len(b))
    print(f"  kernel launches: own {len(a)}, HF {len(b)}; identical kind/shapes/dtype/phase/layer: {a == b} "
          f"({diff} differ)")
    print(f"  weights: own {own.stats['weight_bytes'] / 2**30:.2f} GiB, HF {hf.stats['weight_bytes'] / 2**30:.2f} GiB")
    print(f"  {'':<8} {'own':>12} {'HF':>12} {'HF/own - 1':>11}")
    for name, attr in (("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("total", "total_s")):
        x, y = getattr(own, attr), getattr(hf, attr)
        print(f"  {name:<8} {x * 1e3:9.3f} ms {y * 1e3:9.3f} ms {100 * (y / x - 1):+10.3f}%")


if __name__ == "__main__":
    main()
