"""One Mixtral-8x7B MoE layer through `torchsim.predict`, with routing from a hook, a file, balanced and skewed.

    python benchmarks/mixtral_layer.py [--hw h100-sxm] [--prompt 2048] [--decode-batch 64] [--no-balance]

1. Routing counts recorded by the router forward hook while mixtral-tiny (CPU, random-init weights; no
   checkpoint can be downloaded here) runs on real token ids, printed per layer;
2. the same counts written to a JSON file and loaded back (`--routing FILE` does this for a user's file);
3. the `balanced` and `skewed` (one expert takes 50% of the assignments) synthetic patterns.
Each routing predicts a one-layer Mixtral-8x7B (head + layer 0 + tail) on `--hw`: a prefill of `--prompt` tokens
and one decode step of `--decode-batch` sequences at KV 1024. Printed per routing: tokens per expert (scaled to
the step's tokens), the layer's time (its kernels and gaps), both grouped GEMMs with their tile schedule, and
(full simulation of the same call) the load across SMs that makes the skewed layer slower. A report, not a test.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from torchsim.hwmodels import get_profile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.templates import build_kernel
from torchsim.lowering.templates.grouped_gemm import load_balance
from torchsim.models.mixtral import build_mixtral
from torchsim.models.registry import get_config
from torchsim.models.routing import RoutingCounts
from torchsim.models.routing_hook import record_routing
from torchsim.models.routing_io import load_routing, save_routing
from torchsim.prediction.pipeline import predict
from torchsim.prediction.records import KernelRecord, Prediction
from torchsim.sim import simulate

KV_LEN = 1024


def recorded_routing() -> RoutingCounts:
    """Router hook on mixtral-tiny running real token ids (4 sequences x 64 tokens)."""
    model = build_mixtral("mixtral-tiny", device="cpu", dtype=torch.float32, seed=0)
    ids = torch.randint(0, model.config.vocab_size, (4, 64), generator=torch.Generator().manual_seed(1))
    t0 = time.perf_counter()
    rec = record_routing(model, [ids], source="hook:mixtral-tiny")
    print(f"[1] router hook on real token ids ({time.perf_counter() - t0:.2f} s)\n{rec.describe()}")
    return rec


def one_layer(counts: RoutingCounts, layer: int) -> RoutingCounts:
    return RoutingCounts((counts.layer(layer),), counts.num_experts, counts.top_k, counts.tokens,
                         f"{counts.source} layer {layer}")


def layer_us(p: Prediction, phase: str) -> float:
    return sum(k.duration_us + k.gap_us for k in p.step_kernels(phase) if k.layer == 0)


def grouped(p: Prediction, phase: str) -> list[KernelRecord]:
    return [k for k in p.step_kernels(phase) if k.kind == KernelKind.GROUPED_GEMM.value]


def balance_line(k: KernelRecord, hw: Any, memo: dict[Any, dict[str, float]]) -> str:
    """Load across SMs from a full simulation of the same grouped GEMM (the prediction may have extrapolated K)."""
    call = KernelCall(KernelKind.GROUPED_GEMM, k.params)
    if call.key() not in memo:
        memo[call.key()] = load_balance(simulate(build_kernel(call, hw), hw))
    b = memo[call.key()]
    lo, hi = b["sm_end_min_cycles"] / 1e3, b["sm_end_max_cycles"] / 1e3
    return (f"idle SMs {b['idle_sms']:.0f}, SM finish {lo:.0f}k..{hi:.0f}k cycles, "
            f"tail idle {100 * b['tail_idle_share']:.0f}%, tensor busy max/mean "
            f"{b.get('tensor_busy_max_over_mean', 0):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hw", default="h100-sxm")
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--decode-batch", type=int, default=64)
    ap.add_argument("--no-balance", action="store_true", help="skip the full simulations for the SM load")
    args = ap.parse_args()
    hw = get_profile(args.hw)
    cfg = get_config("mixtral-8x7b").with_layers(1)
    rec = recorded_routing()
    with tempfile.TemporaryDirectory() as tmp:
        path = save_routing(one_layer(rec, 0), Path(tmp) / "routing.json", model="mixtral-tiny")
        from_file = load_routing(path)
        print(f"[2] written to and loaded from {path.name}: {list(from_file.layer(0))} "
              f"(same as recorded layer 0: {from_file.layer(0) == rec.layer(0)})")
        sources: list[tuple[str, Any]] = [("hook", one_layer(rec, 0)), ("file", str(path)),
                                          ("balanced", "balanced"), ("skewed", "skewed")]
        runs: dict[str, tuple[Prediction, Prediction]] = {}
        for name, routing in sources:
            t0 = time.perf_counter()
            pre = predict(cfg, hw, prompt_len=args.prompt, decode_steps=0, routing=routing, progress=False)
            dec = predict(cfg, hw, batch=args.decode_batch, prompt_len=1, kv_len=KV_LEN, decode_steps=1,
                          routing=routing)
            runs[name] = (pre, dec)
            print(f"[3] predicted {name:<8} in {time.perf_counter() - t0:5.1f} s")
    memo: dict[Any, dict[str, float]] = {}
    base = runs["balanced"]
    for phase, idx, what in (("prefill", 0, f"prefill {args.prompt} tokens"),
                             ("decode", 1, f"decode step, batch {args.decode_batch}, KV {KV_LEN}")):
        print(f"\nMixtral-8x7B layer 0 on {hw.name}, {what} (serving preset, CUDA graphs)")
        print(f"  {'routing':<9} {'layer us':>9} {'vs bal.':>8} {'MoE GEMMs us':>13}  tokens per expert (max/mean)")
        for name, pair in runs.items():
            p = pair[idx]
            g = grouped(p, phase)
            tpe = dict(g[0].params)["tokens_per_expert"]
            imb = max(tpe) / (sum(tpe) / len(tpe))
            print(f"  {name:<9} {layer_us(p, phase):9.1f} {layer_us(p, phase) / layer_us(base[idx], phase):8.3f} "
                  f"{sum(k.duration_us for k in g):13.1f}  {list(tpe)} ({imb:.2f})")
        for name in ("balanced", "skewed"):
            for k in grouped(runs[name][idx], phase):
                c = k.config
                n = dict(k.params)["n"]
                line = (f"    {name:<8} {'up  ' if n > 8192 else 'down'} n={n:<5} {k.duration_us:8.1f} us "
                        f"{k.bound:<8} tiles {c.get('tiles')} on grid {c.get('grid')}, rows/computed "
                        f"{100 * c.get('tile_efficiency', 0):.0f}%, tiles per CTA {c.get('tiles_per_cta')} "
                        f"[{k.method}]")
                print(line)
                if not args.no_balance:
                    print(f"             {balance_line(k, hw, memo)}")
        bal, skew = (layer_us(runs[n][idx], phase) for n in ("balanced", "skewed"))
        gb, gs = (grouped(runs[n][idx], phase) for n in ("balanced", "skewed"))
        tiles = [(a.config.get("tiles"), b.config.get("tiles")) for a, b in zip(gb, gs, strict=True)]
        why = ("the same tile schedule (every expert fits its M tiles either way), so the same time"
               if all(a == b for a, b in tiles) else
               "more M tiles (the cold experts pad their last tile), more rounds per CTA and a longer tail on the "
               "SMs that finish first")
        print(f"  skewed / balanced layer time {skew / bal:.3f}: grouped GEMM tiles {tiles}: {why}")


if __name__ == "__main__":
    main()
