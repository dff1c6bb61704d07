"""Attention benchmarks: simulator speed and the physics the templates must show, on every GPU profile.

    python benchmarks/bench_attention.py [--speed-only] [--seq 8192]

Speed: wall time of building + simulating FA3 (batch 1, 32 heads, 8k tokens, head dim 128) on H100 and of
Flash-Decoding (batch 8, 32/8 heads, KV 8k, query lengths 1 and 128) on H100.
Physics per profile: prefill (architecture's own FlashAttention generation) at `--seq` tokens, head dim 128:
% of dense tensor peak and bound; causal / non-causal time; Flash-Decoding at KV 8k: % of sustained DRAM
bandwidth; every kernel against its roofline; the wave step when the grid crosses the SM slots.
"""

from __future__ import annotations

import argparse
import time

from torchsim.hwmodels import get_profile
from torchsim.lowering.templates.attention import attention
from torchsim.lowering.templates.attention_config import AttnShape, default_config
from torchsim.lowering.templates.decode import flash_decode
from torchsim.sim import KernelResult, simulate

GPUS = ("a100-sxm", "h100-sxm", "h200", "b200")


def timed(build, hw) -> tuple[list[KernelResult], float, float]:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    kgs = build()
    t1 = time.perf_counter()
    res = [simulate(k, hw) for k in kgs]
    return res, t1 - t0, time.perf_counter() - t1


def roofline_s(kg, hw) -> float:  # type: ignore[no-untyped-def]
    peak = hw.peak_tensor_flops_per_s(kg.classes[0].graph.dtype)
    return max(kg.flops / peak if kg.flops else 0.0, kg.dram_bytes / float(hw.dram_peak_bytes_per_s.value))


def speed() -> None:
    hw = get_profile("h100-sxm")
    print("Simulator speed (wall seconds on this machine; targets: FA3 <= 3 s, Flash-Decoding <= 1 s)")
    shape = AttnShape(1, 32, 32, 8192, 8192, 128)
    (r,), tb, ts = timed(lambda: [attention(shape, hw)], hw)
    print(f"  FA3 b1 h32 8k d128 on h100-sxm: build {tb:.2f} s + simulate {ts:.2f} s = {tb + ts:.2f} s "
          f"({r.node_events} node events, {r.node_events / ts / 1e3:.0f} k events/s); "
          f"{100 * r.flops / r.time_s / hw.peak_tensor_flops_per_s(shape.dtype):.1f}% of dense peak")
    for sq in (1, 128):
        dshape = AttnShape(8, 32, 8, sq, 8192, 128)
        res, tb, ts = timed(lambda: flash_decode(dshape, hw), hw)  # noqa: B023
        us = sum(x.time_us for x in res)
        print(f"  Flash-Decoding b8 h32/8 q{sq} kv8k on h100-sxm: build {tb:.2f} s + simulate {ts:.2f} s = "
              f"{tb + ts:.2f} s ({sum(x.node_events for x in res)} events, {len(res)} launches, {us:.1f} us)")


def physics(seq: int) -> None:
    print(f"\nPhysics per profile (prefill b1 h32 {seq} tokens d128; decode b8 h32/8 q1 kv8k d128)")
    print(f"{'profile':<9} {'variant':<7} {'%peak':>6} {'bound':<16} {'causal/full':>11} {'decode %BW':>10} "
          f"{'decode bound':<15} {'roofline ok':>11}  {'wave step':>9}")
    for name in GPUS:
        hw = get_profile(name)
        full_shape = AttnShape(1, 32, 32, seq, seq, 128)
        full_kg = attention(full_shape, hw)
        causal_kg = attention(AttnShape(1, 32, 32, seq, seq, 128, causal=True), hw)
        full, causal = simulate(full_kg, hw), simulate(causal_kg, hw)
        dec_kgs = flash_decode(AttnShape(8, 32, 8, 1, 8192, 128), hw)
        dec = [simulate(k, hw) for k in dec_kgs]
        ok = all(r.time_s >= roofline_s(k, hw) for k, r in
                 [(full_kg, full), (causal_kg, causal), *zip(dec_kgs, dec)])
        pct = 100 * full.flops / full.time_s / hw.peak_tensor_flops_per_s(full_shape.dtype)
        bw = 100 * dec[0].dram_bytes_per_s / hw.dram_bytes_per_s_value
        # waves: all CTAs share one K/V head (compute-bound); grid = slots, then slots + 1
        probe = AttnShape(1, 1, 1, 256, 2048, 128)
        bm = default_config(probe, hw).bm
        slots = hw.sms * full.ctas_per_sm
        at = simulate(attention(AttnShape(1, 1, 1, slots * bm, 2048, 128), hw), hw)
        over = simulate(attention(AttnShape(1, 1, 1, slots * bm + 1, 2048, 128), hw), hw)
        print(f"{name:<9} {full_kg.attrs['variant']:<7} {pct:>6.1f} {full.bound:<16} "
              f"{causal.time_s / full.time_s:>11.2f} {bw:>10.1f} {dec[0].bound:<15} {str(ok):>11}  "
              f"x{over.time_s / at.time_s:>8.2f}")
        print(f"{'':<9} waves {full.waves:.2f} ({full.ctas} CTAs, {full.ctas_per_sm}/SM); unit busy: "
              + ", ".join(f"{k} {100 * v:.0f}%" for k, v in full.unit_busy.items())
              + f"; wave step: {slots} CTAs {at.time_us:.1f} us -> {slots + 1} CTAs {over.time_us:.1f} us")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--speed-only", action="store_true")
    ap.add_argument("--seq", type=int, default=8192, help="prefill tokens for the physics table")
    args = ap.parse_args()
    speed()
    if not args.speed_only:
        physics(args.seq)


if __name__ == "__main__":
    main()
