"""End-to-end predictions beside the published GPU serving rows of ../shared/validation/published_dev.csv, MAPE.

    python benchmarks/validate_e2e.py [--csv PATH] [--only E2E-052,...] [--workers N]

The rows are TensorRT-LLM `trtllm-bench throughput` runs (offline, every request queued at once, in-flight
batching, CUDA graphs): output tokens/s for fixed input/output lengths. One serving model, the same for every
row (nothing is fitted to a row):

- concurrency: the requests whose KV cache at full length (ISL + OSL tokens) fits in 95% of the device memory
  left after the weights, capped at 4096 (the bound trtllm-bench's engine-setting heuristic computes, and
  GUARANTEED_NO_EVICT scheduling reserves a request's whole length);
- KV cache: FP8 for NVIDIA's ModelOpt FP8 checkpoints (`nvidia/...-FP8`: their hf_quant_config.json sets
  kv_cache_quant_algo FP8, which TensorRT-LLM follows), else the model's dtype; `--kv bf16` reruns every row with
  a bf16 cache, and the `HBM bound` column shows the most any concurrency that fits could reach (decode at the
  sustained HBM bandwidth, prefill free) - above it a measurement cannot be explained by the assumed KV dtype;
- each request's prompt is prefilled in forward passes of at least 8192 tokens (max(1, round(8192 / ISL))
  prompts each); decode runs the whole concurrency as one batch, KV growing from ISL to ISL + OSL;
- output tokens/s = concurrency x OSL / (OSL decode steps + concurrency x prefill time per prompt): prefill and
  decode are not overlapped (TensorRT-LLM mixes them into one batch; an upper bound on the time);
- NVIDIA's FP4 checkpoints (`nvidia/...-FP4`) as NVFP4 GEMMs (`predict(quant="nvfp4")`, block-scaled tcgen05 at the
  FP4 rate; their KV cache assumed FP8 as the FP8 checkpoints');
- `serving` preset, CUDA graphs, FP8 rows as FP8 E4M3 GEMMs (`predict(dtype="fp8")`); a simulation budget of
  1M node events per kernel, so the decode attention at these batch sizes is simulated, not a roofline.
Rows skipped, with the reason: Tenstorrent hardware (validated elsewhere),
NVFP4 (no FP4 GEMM template), pipeline parallelism, metrics other than output tokens/s. Tensor-parallel rows
(tp > 1) run one rank of the Megatron split (torchsim.lowering.parallel) with NCCL-costed all-reduces; weights
and KV heads per GPU set the concurrency.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from torchsim.prediction.kernel_sim import DEFAULT_MAX_SIM_EVENTS
from torchsim.validation.e2e import predict_serving, serving_for
from torchsim.validation.published import grouped_mape, rows
from torchsim.validation.timing import method_for


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=None)
    ap.add_argument("--only", default="", help="comma-separated row ids")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--max-sim-events", type=int, default=5 * DEFAULT_MAX_SIM_EVENTS,
                    help="simulation budget per kernel (default 1M, five times predict's: the decode attention of "
                    "hundreds of sequences is simulated instead of estimated by a roofline)")
    ap.add_argument("--kv", choices=("checkpoint", "bf16"), default="checkpoint",
                    help="KV cache dtype: as the checkpoint sets it (default), or bf16 for every row")
    args = ap.parse_args()
    only = {x.strip() for x in args.only.split(",") if x.strip()}
    results: list[tuple[str, float, float]] = []
    skipped: list[str] = []
    table: list[str] = []
    t0 = time.time()
    for r in rows("e2e_inference", args.csv):
        if only and r.id not in only:
            continue
        if any(t in r.hardware for t in ("Wormhole", "Blackhole")):
            continue  # Tenstorrent rows: benchmarks/validate_tensix.py
        s = serving_for(r, args.kv)
        if isinstance(s, str):
            skipped.append(f"{r.id:<8} {r.hardware[:24]:<24} {r.params.get('model', '')}: {s}")
            continue
        t = time.time()
        pred, parts = predict_serving(s, args.workers, args.max_sim_events)
        method = method_for(r)[0].name
        group = f"{s.profile} {s.model} {s.quant or s.dtype}"
        results.append((group, pred, r.value))
        table.append(f"{r.id:<8} {s.profile:<8} {s.model:<11} {s.quant or s.dtype:<4} {s.kv_cache:<4} {method:<11} "
                     f"{s.isl:>5}/{s.osl:<5} "
                     f"{s.concurrency:>5} {r.value:>9.0f} {pred:>9.0f} {100 * (pred - r.value) / r.value:>+7.1f} "
                     f"{s.hbm_bound:>9.0f}  "
                     f"{parts['tpot_ms']:7.2f} {parts['prefill_s'] / (parts['prefill_s'] + parts['decode_s']):6.1%} "
                     f"{parts['floor_ratio']:5.2f} {parts['roofline_kernels']:3.0f}  ({time.time() - t:.0f} s)")
        print(f"{r.id}: {s.describe()}", flush=True)
    print(f"\n{'id':<8} {'profile':<8} {'model':<11} {'dt':<4} {'kv':<4} {'timing':<11} {'ISL/OSL':>11} "
          f"{'conc':>5} {'measured':>9} "
          f"{'predicted':>9} {'err%':>7} {'HBM bound':>9}  {'TPOT ms':>7} {'prefill':>6} {'/HBM':>5} {'rf':>3}")
    print("\n".join(table))
    print("  (output tokens/s; HBM bound: the most this concurrency could reach, decode at sustained HBM bandwidth and "
          "prefill free; TPOT: mean decode step at the concurrency; prefill: share of the time; /HBM: decode step "
          "over its HBM floor; rf: roofline-estimated kernels)")
    if skipped:
        print("\nskipped:\n  " + "\n  ".join(skipped))
    print(f"\nMAPE per group ({time.time() - t0:.0f} s):")
    for g, (count, err) in sorted(grouped_mape(results).items()):
        print(f"  {g:<32} n={count:<3} MAPE {err:6.1f}%")


if __name__ == "__main__":
    main()
