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
- `serving` preset, CUDA graphs, FP8 rows as FP8 E4M3 GEMMs (`predict(dtype="fp8")`); a simulation budget of
  1M node events per kernel, so the decode attention at these batch sizes is simulated, not a roofline.
Rows skipped, with the reason: Tenstorrent hardware (validated elsewhere), tensor parallelism > 1 (no
multi-GPU model), NVFP4 (no FP4 GEMM template), metrics other than output tokens/s.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

from torchsim.hwmodels import get_profile
from torchsim.lowering.precision import WeightPrecision, weight_bytes
from torchsim.models.registry import build_model, get_config
from torchsim.prediction.kernel_sim import DEFAULT_MAX_SIM_EVENTS
from torchsim.prediction.pipeline import predict
from torchsim.validation.published import Row, grouped_mape, rows

MODELS = {  # the row's model -> torchsim config, and what the mapping assumes
    "Llama-3.1-8B": ("llama3.1-8b", ""),
    "Llama-3.3-70B": ("llama3-70b", "Llama-3.3-70B has Llama-3-70B's shapes (context 8K here, enough for these rows)"),
}
KV_FRACTION = 0.95  # trtllm-bench's kv_cache_gpu_mem_fraction default
MAX_CONCURRENCY = 4096  # trtllm-bench caps its batch-size estimate here
PREFILL_TOKENS = 8192  # tokens per prefill forward pass (at least)


@dataclass(frozen=True)
class Serving:
    """The serving assumptions one row is predicted under."""

    model: str
    profile: str
    dtype: str
    isl: int
    osl: int
    concurrency: int
    prefill_batch: int
    weight_gib: float
    kv_cache: str  # "fp8" or "bf16"
    hbm_bound: float  # output tokens/s if every decode step ran at the sustained HBM bandwidth and prefill were free
    notes: str

    def describe(self) -> str:
        return (f"{self.model} {self.dtype} on {self.profile}: ISL {self.isl}, OSL {self.osl}, {self.concurrency} "
                f"concurrent requests (weights {self.weight_gib:.1f} GiB, KV {self.kv_cache}), prefill "
                f"{self.prefill_batch} prompt(s) per pass, decode batch {self.concurrency}, serving preset, CUDA graphs"
                + (f"; {self.notes}" if self.notes else ""))


def serving_for(row: Row, kv: str = "checkpoint") -> Serving | str:
    """The assumptions for `row` (`kv`: "checkpoint" follows the checkpoint, "bf16" forces it), or why it is
    skipped."""
    if row.profile is None:
        return f"hardware {row.hardware!r} is not a modelled GPU"
    if row.metric != "output_tokens_per_s":
        return f"metric {row.metric} is not modelled here"
    p = row.params
    if int(p.get("tp", 1)) != 1 or int(p.get("pp", 1)) != 1:
        return f"tp={p.get('tp')}: tensor parallelism (all-reduce over NVLink) is not modelled"
    text = row.dtype.lower()
    if "fp4" in text:
        return "NVFP4 weights: no FP4 GEMM template"
    dtype = "fp8" if "fp8" in text else "bf16"
    if p.get("model") not in MODELS:
        return f"model {p.get('model')!r} has no torchsim config"
    model, note = MODELS[p["model"]]
    profile, hw_note = row.profile
    isl, osl = int(p["isl"]), int(p["osl"])
    cfg = get_config(model)
    hw = get_profile(profile)
    kv_cache = "fp8" if kv == "checkpoint" and dtype == "fp8" and "nvidia/" in text else "bf16"
    w_bytes = weight_bytes(build_model(cfg), WeightPrecision.of_dtype(dtype))
    kv_per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim_value * (
        1 if kv_cache == "fp8" else 2)
    free = KV_FRACTION * (float(hw.dram_bytes.value) - w_bytes)
    concurrency = min(MAX_CONCURRENCY, int(free // (kv_per_token * (isl + osl))))
    if concurrency < 1:
        return f"{model} {dtype} does not fit {profile} with a KV cache for one request"
    step_bytes = w_bytes + concurrency * kv_per_token * (isl + osl / 2)  # weights + the mean KV read per step
    hbm_bound = concurrency * hw.dram_bytes_per_s_value / step_bytes
    notes = "; ".join(n for n in (note, hw_note) if n)
    return Serving(model, profile, dtype, isl, osl, concurrency, max(1, round(PREFILL_TOKENS / isl)),
                   w_bytes / 2**30, kv_cache, hbm_bound, notes)


def predict_row(s: Serving, workers: int | None, max_events: int) -> tuple[float, dict[str, float]]:
    """Output tokens/s under `s`, with the parts it is made of."""
    kv = "fp8" if s.kv_cache == "fp8" else None
    pre = predict(s.model, s.profile, batch=s.prefill_batch, prompt_len=s.isl, decode_steps=0, dtype=s.dtype,
                  kv_cache=kv, workers=workers, max_sim_events=max_events)
    dec = predict(s.model, s.profile, batch=s.concurrency, prompt_len=1, kv_len=s.isl, decode_steps=s.osl,
                  dtype=s.dtype, kv_cache=kv, workers=workers, max_sim_events=max_events)
    prefill_s = s.concurrency * pre.ttft_s / s.prefill_batch
    decode_s = sum(dec.decode_step_s)
    fallback = {(k.kind, k.shapes) for k in pre.kernels + dec.kernels if k.fallback}
    parts = {"prefill_s": prefill_s, "decode_s": decode_s, "tpot_ms": dec.tpot_s * 1e3,
             "floor_ratio": dec.floor_ratio(), "roofline_kernels": float(len(fallback))}
    return s.concurrency * s.osl / (prefill_s + decode_s), parts


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
        pred, parts = predict_row(s, args.workers, args.max_sim_events)
        group = f"{s.profile} {s.model} {s.dtype}"
        results.append((group, pred, r.value))
        table.append(f"{r.id:<8} {s.profile:<8} {s.model:<11} {s.dtype:<4} {s.kv_cache:<4} {s.isl:>5}/{s.osl:<5} "
                     f"{s.concurrency:>5} {r.value:>9.0f} {pred:>9.0f} {100 * (pred - r.value) / r.value:>+7.1f} "
                     f"{s.hbm_bound:>9.0f}  "
                     f"{parts['tpot_ms']:7.2f} {parts['prefill_s'] / (parts['prefill_s'] + parts['decode_s']):6.1%} "
                     f"{parts['floor_ratio']:5.2f} {parts['roofline_kernels']:3.0f}  ({time.time() - t:.0f} s)")
        print(f"{r.id}: {s.describe()}", flush=True)
    print(f"\n{'id':<8} {'profile':<8} {'model':<11} {'dt':<4} {'kv':<4} {'ISL/OSL':>11} {'conc':>5} {'measured':>9} "
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
