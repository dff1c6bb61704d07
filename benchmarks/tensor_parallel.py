"""Many GPUs: Llama-3-70B over TP 1/2/4/8 and Mixtral-8x7B with TP2 vs. EP2, the share of communication.

    python benchmarks/tensor_parallel.py [--hw h100-sxm,h200] [--dtype bf16,fp8] [--batch 1,8] [--tp 1,2,4,8]
                                         [--prompt 2048] [--decode 128] [--no-mixtral]

For each case: TTFT, TPOT, the collectives' share of a decode step and of prefill, and the speed-up over the
previous TP degree (where more ranks stop helping: the speed-up falls towards 1 as all-reduce latency takes over
from the shrinking GEMMs). One rank of the Megatron split is simulated (torchsim.lowering.parallel); collectives
are NCCL's on the GPU's 8-GPU system (torchsim.sim.collectives), an all-reduce the serving engines' custom
one-/two-stage kernel where that is faster (torchsim.sim.custom_allreduce). A TP degree whose weights do not fit
one GPU is predicted anyway (allow_oversubscribe) and marked "over memory". Wall time per prediction is printed (this
machine, warm cache after the first).
"""

from __future__ import annotations

import argparse
import time
import warnings

from torchsim import predict
from torchsim.prediction.records import MemoryWarning, Prediction


def comm_share(p: Prediction, phase: str) -> float:
    step = p.step_kernels(phase, p.sampled_steps[0] if phase == "decode" else None)
    total = sum(k.duration_us for k in step)
    return sum(k.duration_us for k in step if k.kind == "collective") / total if total else 0.0


def row(label: str, p: Prediction, wall: float, prev_tpot: float | None) -> str:
    speedup = f"{prev_tpot / p.tpot_s:5.2f}x" if prev_tpot else "    - "
    over = " over memory" if p.warnings else ""
    return (f"{label:<34} {p.ttft_s * 1e3:9.2f} {p.tpot_s * 1e3:8.3f} {comm_share(p, 'prefill'):7.1%} "
            f"{comm_share(p, 'decode'):7.1%} {speedup} {wall:6.1f}{over}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hw", default="h100-sxm,h200")
    ap.add_argument("--dtype", default="bf16,fp8")
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--tp", default="1,2,4,8")
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--no-mixtral", action="store_true")
    args = ap.parse_args()
    head = (f"{'case':<34} {'TTFT ms':>9} {'TPOT ms':>8} {'comm/pf':>7} {'comm/dec':>7} {'vs prev':>6} "
            f"{'wall s':>6}")
    print(f"Llama-3-70B, prompt {args.prompt} + {args.decode} decode, serving preset, CUDA graphs")
    print(head)
    warnings.simplefilter("ignore", MemoryWarning)
    for hw in args.hw.split(","):
        for dtype in args.dtype.split(","):
            for batch in (int(b) for b in args.batch.split(",")):
                prev = None
                for tp in (int(t) for t in args.tp.split(",")):
                    t0 = time.perf_counter()
                    p = predict("llama3-70b", hw, prompt_len=args.prompt, decode_steps=args.decode, batch=batch,
                                dtype=dtype, tp=tp, allow_oversubscribe=True)
                    print(row(f"{hw} {dtype} batch {batch} TP{tp}", p, time.perf_counter() - t0, prev), flush=True)
                    prev = p.tpot_s
    if args.no_mixtral:
        return
    print(f"\nMixtral-8x7B on h100-sxm, batch 8, prompt {args.prompt} + {args.decode} decode: TP2 (each expert's "
          "columns split) vs. EP2 (whole experts split)")
    print(head)
    for routing in ("balanced", "skewed"):
        for ep in (1, 2):
            t0 = time.perf_counter()
            p = predict("mixtral-8x7b", "h100-sxm", prompt_len=args.prompt, decode_steps=args.decode, batch=8,
                        tp=2, ep=ep, routing=routing)
            print(row(f"{'EP2' if ep > 1 else 'TP2'} {routing}", p, time.perf_counter() - t0, None), flush=True)


if __name__ == "__main__":
    main()
