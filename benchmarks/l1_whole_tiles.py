"""The L1's whole-tile entries (torchsim.sim.l1.L1Cache.access_tile) against its lines one at a time, kernel by
kernel: cycles, DRAM bytes, L2 and L1 hits must be identical; prints the simulation wall of both.

    python benchmarks/l1_whole_tiles.py [--only WORD]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from torchsim.graph import DType  # noqa: E402
from torchsim.hwmodels import get_profile  # noqa: E402
from torchsim.lowering.kernel_call import KernelCall, KernelKind  # noqa: E402
from torchsim.prediction.kernel_sim import EXACT, clear_memo, merged, simulate_launches  # noqa: E402

GPUS = ("a100-sxm", "h100-sxm", "h200", "b200")


def corpus() -> list[tuple[str, KernelCall]]:
    k = KernelKind
    return [
        ("rmsnorm 16384x4096", KernelCall.make(k.RMSNORM, rows=16384, hidden=4096)),
        ("add_rmsnorm 16384x8192", KernelCall.make(k.ADD_RMSNORM, rows=16384, hidden=8192)),
        ("add_rmsnorm 3x4096", KernelCall.make(k.ADD_RMSNORM, rows=3, hidden=4096)),
        ("silu_mul 8192x14336", KernelCall.make(k.SILU_MUL, rows=8192, hidden=14336)),
        ("rope 16384 tok 32x8x128", KernelCall.make(k.ROPE, tokens=16384, heads_q=32, heads_kv=8, head_dim=128)),
        ("embedding 16384x4096", KernelCall.make(k.EMBEDDING, tokens=16384, hidden=4096, vocab=128256)),
        ("elementwise add 2^26", KernelCall.make(k.ELEMENTWISE, numel=1 << 26, inputs=2, outputs=1, op="add")),
        ("softmax 4096x4096", KernelCall.make(k.SOFTMAX, rows=4096, cols=4096)),
        ("argmax 64x128256", KernelCall.make(k.ARGMAX, rows=64, vocab=128256)),
        ("router_topk 8192 tok 8e", KernelCall.make(k.ROUTER_TOPK, tokens=8192, experts=8, top_k=2)),
        ("gemm 1x4096x4096", KernelCall.make(k.GEMM, m=1, n=4096, k=4096)),
        ("gemm 2048x4096x4096", KernelCall.make(k.GEMM, m=2048, n=4096, k=4096)),
        ("grouped gemm 4e", KernelCall.make(k.GROUPED_GEMM, tokens_per_expert=(300, 0, 700, 1000), n=2048,
                                            k=4096)),
        ("attention prefill h8 2048", KernelCall.make(k.ATTENTION_PREFILL, batch=1, heads_q=8, heads_kv=8,
                                                      seq_q=2048, seq_kv=2048, head_dim=128, causal=True)),
        ("decode b8 h32x8 kv4096", KernelCall.make(k.ATTENTION_DECODE, batch=8, heads_q=32, heads_kv=8, seq_q=1,
                                                   seq_kv=4096, head_dim=128)),
        ("fp8 gemm 64x4096x4096", KernelCall.make(k.GEMM, dtype=DType.FP8_E4M3, m=64, n=4096, k=4096)),
    ]


def _run(call: KernelCall, hw: Any, whole: bool) -> tuple[Any, float]:
    import torchsim.sim.engine as engine

    saved = engine.tile_granular
    if not whole:
        engine.tile_granular = lambda reads: {}
    try:
        clear_memo()
        t0 = time.perf_counter()
        r = merged(simulate_launches(call, hw, max_events=EXACT))
        return r, time.perf_counter() - t0
    finally:
        engine.tile_granular = saved


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    bad = 0
    walls = [0.0, 0.0]
    for hw_name in GPUS:
        hw = get_profile(hw_name)
        for label, call in corpus():
            if args.only not in f"{label} {hw_name}":
                continue
            if call.kind is KernelKind.GEMM and call.dtype is DType.FP8_E4M3 and hw_name == "a100-sxm":
                continue
            (a, ta), (b, tb) = _run(call, hw, False), _run(call, hw, True)
            same = (a.time_s, a.dram_bytes, a.l2_hit_rate) == (b.time_s, b.dram_bytes, b.l2_hit_rate)
            bad += not same
            walls[0] += ta
            walls[1] += tb
            print(f"  {hw_name:9s} {label:28s} {a.time_s * 1e6:10.2f} us  lines {ta:6.2f} s  tiles {tb:6.2f} s  "
                  f"{'identical' if same else f'DIFFERENT: {b.time_s * 1e6:.2f} us'}", flush=True)
    print(f"\n{'all identical' if not bad else f'{bad} kernels differ'}; simulation wall {walls[0]:.1f} s with "
          f"lines, {walls[1]:.1f} s with whole tiles")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
