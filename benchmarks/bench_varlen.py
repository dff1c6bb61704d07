"""Simulator speed on the varlen attention kernels one serving iteration needs (CPU seconds, not wall).

    python benchmarks/bench_varlen.py [--hw h100-sxm] [--decode 256] [--chunks 16]

(a) Flash-Decoding over `--decode` sequences with K/V lengths spread evenly over 128..2048 (heads 32/8, d 128,
16-token pages); (b) the varlen FlashAttention prefill over `--chunks` chunks of 512 tokens with K/V lengths
spread over 512..4096. Each is built and simulated once in a fresh memo (`kernel_sim.simulate_launches`, which
simulates varlen kernels in full) and printed with its node events and the kernel time it predicts.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from torchsim.hwmodels import get_profile
from torchsim.lowering.templates import build_kernels
from torchsim.lowering.templates.varlen import varlen_decode_call, varlen_prefill_call
from torchsim.prediction.kernel_sim import clear_memo, graph_events, simulate_launches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hw", default="h100-sxm")
    ap.add_argument("--decode", type=int, default=256, help="decode sequences, K/V 128..2048")
    ap.add_argument("--chunks", type=int, default=16, help="prefill chunks of 512 tokens, K/V 512..4096")
    args = ap.parse_args()
    hw = get_profile(args.hw)
    cases = {
        f"decode {args.decode} seqs kv 128..2048":
            varlen_decode_call([int(x) for x in np.linspace(128, 2048, args.decode)], 32, 8, 128),
        f"prefill {args.chunks} x 512 kv 512..4096":
            varlen_prefill_call([(512, int(x)) for x in np.linspace(512, 4096, args.chunks)], 32, 8, 128),
    }
    print(f"{'case':<34} {'classes':>7} {'events':>9} {'build cpu s':>11} {'sim cpu s':>9} {'events/s':>9} "
          f"{'kernel us':>9}")
    for name, call in cases.items():
        clear_memo()
        t0 = time.process_time()
        kgs = build_kernels(call, hw)
        t1 = time.process_time()
        sims = simulate_launches(call, hw)
        t2 = time.process_time()
        events = sum(graph_events(k) for k in kgs)
        print(f"{name:<34} {sum(len(k.classes) for k in kgs):>7} {events:>9,} {t1 - t0:>11.2f} {t2 - t1:>9.2f} "
              f"{events / max(t2 - t1, 1e-9):>9,.0f} {sum(s.time_s for s in sims) * 1e6:>9.1f}")


if __name__ == "__main__":
    main()
