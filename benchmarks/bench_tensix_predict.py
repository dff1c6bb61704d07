"""Speed of a Tensix prediction: Llama-3-8B decode step on Wormhole n150, cold (fresh process, imports included,
empty on-disk kernel cache) and warm (memoised in the same process). Issue 6 asks for <= 10 s cold.

Run: `python benchmarks/bench_tensix_predict.py [--hw wormhole-n150] [--weights performance] [--prefill 128]`.
Prints figures (and the kernels that take the step's time); asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

MODEL = "llama3-8b"

CHILD = """
import json, sys, time
t0 = time.perf_counter()
import torchsim.prediction.pipeline as api
t_imp = time.perf_counter()
hw, weights, prompt, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
p = api.predict({model!r}, hw, prompt_len=prompt, decode_steps=steps, weights=weights, decode_samples=1)
t1 = time.perf_counter()
p2 = api.predict({model!r}, hw, prompt_len=prompt, decode_steps=steps, weights=weights, decode_samples=1)
t2 = time.perf_counter()
rows = [dict(kernel=r["kernel"], n=r["count"], total_us=r["total_us"], bound=r["bound"])
        for r in p.table("decode", top=8)]
print(json.dumps(dict(imports=t_imp - t0, cold=t1 - t0, predict=t1 - t_imp, warm=t2 - t1, timings=p.timings_s,
                      stats={{k: v for k, v in p.stats.items() if k != "proofs"}}, step_ms=p.tpot_s * 1e3,
                      ttft_ms=p.ttft_s * 1e3, kernels=len(p.step_kernels("decode")), rows=rows)))
"""


def run_child(hw: str, weights: str, prompt: int, steps: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHSIM_CACHE_DIR": cache}
        out = subprocess.run([sys.executable, "-c", CHILD.format(model=MODEL), hw, weights, str(prompt), str(steps)],
                             capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hw", default="wormhole-n150")
    ap.add_argument("--weights", default="performance", choices=("performance", "accuracy"))
    ap.add_argument("--prefill", type=int, default=1, help="prompt tokens (1: the decode step alone, default)")
    ap.add_argument("--steps", type=int, default=1, help="decode steps")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    r = run_child(args.hw, args.weights, args.prefill, args.steps)
    wall = time.perf_counter() - t0
    print(f"{MODEL} decode step on {args.hw} ({args.weights} weights, prompt {args.prefill}, {args.steps} step), "
          f"load average {load:.2f} on {os.cpu_count()} CPUs")
    print(f"  cold, fresh process, empty disk cache: {r['cold']:.2f} s (imports {r['imports']:.2f} s, predict "
          f"{r['predict']:.2f} s: {json.dumps({k: round(v, 2) for k, v in r['timings'].items()})}); "
          f"process wall {wall:.2f} s")
    print(f"  warm (memoised, same process): {r['warm']:.3f} s")
    print(f"  {r['stats']['distinct_kernels']} distinct kernels, {r['kernels']} launches per decode step; "
          f"step {r['step_ms']:.2f} ms ({1e3 / float(r['step_ms']):.1f} tokens/s/user)")
    for row in r["rows"]:
        print(f"    {row['kernel'][:56]:<56} x{row['n']:<3} {row['total_us']:>9.1f} us  {row['bound']}")


if __name__ == "__main__":
    main()
