"""End-to-end serving rows (TensorRT-LLM `trtllm-bench throughput`): the serving assumptions of a row and its
predicted output tokens/s. The report is benchmarks/validate_e2e.py; its docstring gives the serving model.

Timing method `e2e-serving` (timing.py): the serving model carries its own launch model (CUDA graphs), so no
timer gap is added. The kernels here are simulated by torchsim.prediction's pipeline (`predict`), not through
predict_row.simulate_kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchsim.graph.kinds import DType
from torchsim.hwmodels import get_profile
from torchsim.lowering.parallel import kv_heads_per_rank
from torchsim.lowering.precision import WeightPrecision, weight_bytes
from torchsim.lowering.quant import parse as parse_quant
from torchsim.models.registry import build_model, get_config
from torchsim.prediction.pipeline import predict
from torchsim.validation.published import Row

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
    tp: int = 1  # tensor-parallel GPUs (one rank predicted; weights and KV heads split over them)
    quant: str = ""  # a quantised weight format (torchsim.lowering.quant), "" for the dtype's

    def describe(self) -> str:
        tp = f" x{self.tp} (tensor parallel)" if self.tp > 1 else ""
        return (f"{self.model} {self.quant or self.dtype} on {self.profile}{tp}: ISL {self.isl}, OSL {self.osl}, "
                f"{self.concurrency} concurrent requests (weights {self.weight_gib:.1f} GiB per GPU, KV "
                f"{self.kv_cache}), prefill {self.prefill_batch} prompt(s) per pass, decode batch {self.concurrency}, "
                "serving preset, CUDA graphs"
                + (f"; {self.notes}" if self.notes else ""))


def serving_for(row: Row, kv: str = "checkpoint") -> Serving | str:
    """The assumptions for `row` (`kv`: "checkpoint" follows the checkpoint, "bf16" forces it), or why it is
    skipped."""
    if row.profile is None:
        return f"hardware {row.hardware!r} is not a modelled GPU"
    if row.metric != "output_tokens_per_s":
        return f"metric {row.metric} is not modelled here"
    p = row.params
    if int(p.get("pp", 1)) != 1:
        return f"pp={p.get('pp')}: pipeline parallelism is not modelled"
    tp = int(p.get("tp", 1))
    text = row.dtype.lower()
    quant = "nvfp4" if "fp4" in text else ""  # NVIDIA's FP4 checkpoints are NVFP4 (TensorRT Model Optimizer)
    dtype = "fp8" if "fp8" in text else "bf16"
    if p.get("model") not in MODELS:
        return f"model {p.get('model')!r} has no torchsim config"
    model, note = MODELS[p["model"]]
    profile, hw_note = row.profile
    isl, osl = int(p["isl"]), int(p["osl"])
    cfg = get_config(model)
    hw = get_profile(profile)
    # NVIDIA's FP8 and FP4 checkpoints quantise the KV cache to FP8 (for the FP4 ones assumed: their
    # hf_quant_config was not read)
    kv_cache = "fp8" if kv == "checkpoint" and (dtype == "fp8" or quant) and "nvidia/" in text else "bf16"
    if quant and not get_profile(profile).supports(parse_quant(quant).act or DType.BF16):
        return f"{quant} weights on {profile}: no FP4 tensor cores"
    w_bytes = weight_bytes(build_model(cfg), WeightPrecision.of_dtype(dtype),
                           parse_quant(quant) if quant else None) / tp  # per GPU
    kv_per_token = 2 * cfg.num_hidden_layers * kv_heads_per_rank(cfg.num_key_value_heads, tp) * cfg.head_dim_value * (
        1 if kv_cache == "fp8" else 2)  # per GPU
    free = KV_FRACTION * (float(hw.dram_bytes.value) - w_bytes)
    concurrency = min(MAX_CONCURRENCY, int(free // (kv_per_token * (isl + osl))))
    if concurrency < 1:
        return f"{model} {dtype} does not fit {profile} with a KV cache for one request"
    step_bytes = w_bytes + concurrency * kv_per_token * (isl + osl / 2)  # weights + the mean KV read per step
    hbm_bound = concurrency * hw.dram_bytes_per_s_value / step_bytes
    notes = "; ".join(n for n in (note, hw_note) if n)
    if quant:
        notes = "; ".join(n for n in (notes, "NVFP4 checkpoint: FP8 KV cache assumed") if n)
    return Serving(model, profile, dtype, isl, osl, concurrency, max(1, round(PREFILL_TOKENS / isl)),
                   w_bytes / 2**30, kv_cache, hbm_bound, notes, tp, quant)


def predict_serving(s: Serving, workers: int | None, max_events: int) -> tuple[float, dict[str, float]]:
    """Output tokens/s under `s`, with the parts it is made of."""
    kv = "fp8" if s.kv_cache == "fp8" else None
    quant = s.quant or None
    pre = predict(s.model, s.profile, batch=s.prefill_batch, prompt_len=s.isl, decode_steps=0, dtype=s.dtype,
                  kv_cache=kv, workers=workers, max_sim_events=max_events, quant=quant, tp=s.tp,
                  allow_oversubscribe=True)  # the concurrency model above sizes the KV cache itself
    dec = predict(s.model, s.profile, batch=s.concurrency, prompt_len=1, kv_len=s.isl, decode_steps=s.osl,
                  dtype=s.dtype, kv_cache=kv, workers=workers, max_sim_events=max_events, quant=quant, tp=s.tp,
                  allow_oversubscribe=True)  # the concurrency model above sizes the KV cache itself
    prefill_s = s.concurrency * pre.ttft_s / s.prefill_batch
    decode_s = sum(dec.decode_step_s)
    fallback = {(k.kind, k.shapes) for k in pre.kernels + dec.kernels if k.fallback}
    parts = {"prefill_s": prefill_s, "decode_s": decode_s, "tpot_ms": dec.tpot_s * 1e3,
             "floor_ratio": dec.floor_ratio(), "roofline_kernels": float(len(fallback))}
    return s.concurrency * s.osl / (prefill_s + decode_s), parts
