"""Weight and activation formats of quantised checkpoints: what a format stores, what its GEMMs multiply in,
what its scales cost, and which GPUs run it.

lowering.precision applies a format to a plan (each decoder-layer GEMM carries the format's name as its `quant`
parameter and the format's MMA dtype); the GEMM templates (templates/gemm.py, grouped_gemm.py) read it: the
weight operand's bytes, the scale loads, the dequantisation inside the main loop of the weight-only formats
(Marlin on sm80, Machete on sm90) and the scale factors of block-scaled MMAs (tcgen05 on sm100); predict counts
the weight bytes in the format. `parse("w4a16")` names the valid formats on a typo; `check_supported(fmt, hw)`
names what a GPU runs when it lacks a format's tensor cores.

>>> f = parse("w4a16")
>>> f.weight.name, f.act, f.weight_bytes(4096, 4096) / (4096 * 4096)
('INT4', None, 0.515625)
>>> parse("nvfp4").weight_bytes(4096, 4096) / (4096 * 4096)
0.5625
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from torchsim.graph.kinds import DType

NVFP4_BLOG = ("NVIDIA technical blog 'Introducing NVFP4 for Efficient and Accurate Low-Precision Inference' "
              "(developer.nvidia.com/blog/introducing-nvfp4-for-efficient-and-accurate-low-precision-inference), "
              "Table 1")
MARLIN_DEQUANT = "vllm-project/vllm csrc/quantization/marlin/dequant.h @ c77aff2e33b64ccbf84ad726a36167d5f4bd234a"
MARLIN_CONFIGS = ("vllm-project/vllm csrc/quantization/gptq_marlin/gptq_marlin.cu small_batch_thread_configs "
                  "(thread_k 128, thread_n 128, 256 threads first; find_string id 44978174)")


@dataclass(frozen=True, slots=True)
class QuantFormat:
    """One weight/activation format. `act` None: weight-only (the MMA runs in the model's dtype on weights
    dequantised in the main loop); otherwise both GEMM operands are `act` (activations quantised by the kernel
    that produces them, as the FP8 checkpoints do)."""

    name: str
    weight: DType  # element type of a decoder-layer weight matrix in memory
    act: DType | None  # MMA input type; None = the model's dtype (weight-only)
    w_group: tuple[int, int]  # (K, N) weight elements sharing one scale; 0 = the whole dimension
    w_scale_bytes: float  # bytes of one weight scale
    a_group: int  # activation elements along K sharing one scale the main loop reads; 0 = none (per token/tensor)
    a_scale_bytes: float
    block_scaled_mma: bool  # the tensor core applies the per-block scales (tcgen05 block-scaled MMA)
    description: str
    source: str

    @property
    def weight_only(self) -> bool:
        return self.act is None

    def mma_dtype(self, model: DType) -> DType:
        """The dtype the GEMM's MMAs run in (the kernel graph's dtype): the model's for weight-only formats."""
        return model if self.act is None else self.act

    def weight_scales(self, k: int, n: int) -> int:
        """Scales of one k x n weight matrix."""
        gk, gn = self.w_group
        return (math.ceil(k / gk) if gk else 1) * (math.ceil(n / gn) if gn else 1)

    def weight_bytes(self, k: int, n: int) -> float:
        """Bytes of one k x n weight matrix in this format: elements plus scales."""
        return k * n * self.weight.nbytes + self.weight_scales(k, n) * self.w_scale_bytes

    def act_scale_bytes(self, m: int, k: int) -> float:
        """Bytes of the activation scales an m x k operand brings into the main loop (block-scaled formats)."""
        return m * math.ceil(k / self.a_group) * self.a_scale_bytes if self.a_group else 0.0

    def needs(self) -> DType | None:
        """The tensor-core input type the format needs beyond the model's dtype (None for weight-only)."""
        return self.act


_GPTQ = ("GPTQ/AWQ checkpoints as Marlin runs them (group_size 128, one fp16 scale per group and output "
         "column; " + MARLIN_CONFIGS + ")")
FORMATS: dict[str, QuantFormat] = {f.name: f for f in (
    QuantFormat("w8a16", DType.INT8, None, (128, 1), 2.0, 0, 0.0, False,
                "8-bit integer weights, group-wise fp16 scales (128 along K), dequantised to the model's dtype in "
                "the GEMM main loop (Marlin on sm80, Machete on sm90)", _GPTQ),
    QuantFormat("w4a16", DType.INT4, None, (128, 1), 2.0, 0, 0.0, False,
                "4-bit integer weights, group-wise fp16 scales (128 along K), dequantised to the model's dtype in "
                "the GEMM main loop (Marlin on sm80, Machete on sm90)", _GPTQ),
    QuantFormat("w8a8", DType.INT8, DType.INT8, (0, 1), 4.0, 0, 0.0, False,
                "int8 weights (one fp32 scale per output channel) and int8 activations (one scale per token, "
                "quantised by the producing kernel): int8 tensor cores, scales applied in the epilogue",
                "SmoothQuant-style W8A8 as llm-compressor/vLLM's CUTLASS scaled_mm run it (per-channel weight, "
                "per-token dynamic activation scales; assumed)"),
    QuantFormat("fp8", DType.FP8_E4M3, DType.FP8_E4M3, (0, 0), 4.0, 0, 0.0, False,
                "FP8 E4M3 weights and activations, per-tensor fp32 scales (TensorRT Model Optimizer / "
                "llm-compressor FP8); the same plan as --dtype fp8",
                "per-tensor FP8 checkpoints (lowering.precision)"),
    QuantFormat("fp8-block", DType.FP8_E4M3, DType.FP8_E4M3, (128, 128), 4.0, 128, 4.0, False,
                "FP8 E4M3 with 128x128 weight blocks and 1x128 activation groups, fp32 scales (DeepSeek-V3's "
                "format): DeepGEMM's block-scaled kernel on sm90 (B scales per tile, FP32 promotion every 128 of "
                "K), block-scaled tcgen05 MMAs on sm100",
                "deepseek-ai/DeepGEMM @ 55ab91f (templates/gemm_config.deepgemm_config); DeepSeek-V3 config.json "
                "quantization_config weight_block_size [128, 128]"),
    QuantFormat("nvfp4", DType.FP4_E2M1, DType.FP4_E2M1, (16, 1), 1.0, 16, 1.0, True,
                "NVFP4: E2M1 weights and activations, one FP8 E4M3 scale per 16 elements along K (+ one fp32 "
                "scale per tensor): tcgen05 block-scaled MMA (kind::mxf4nvf4) at the FP4 rate, sm100 only",
                NVFP4_BLOG + ": 'one shared FP8 scale per 16 value block' and an FP32 per-tensor scale"),
    QuantFormat("mxfp4", DType.FP4_E2M1, DType.FP4_E2M1, (32, 1), 1.0, 32, 1.0, True,
                "MXFP4 (OCP microscaling): E2M1 weights and activations, one E8M0 power-of-two scale per 32 "
                "elements along K: tcgen05 block-scaled MMA (kind::mxf4) at the FP4 rate, sm100 only",
                NVFP4_BLOG + ": MXFP4 '1 shared power-of-two scale per 32 value block'"),
)}

# Dequantisation work per weight element in a weight-only GEMM's main loop: (FP lane ops, INT lane ops), by
# (weight type, the model's dtype). Counted from the conversions Marlin uses (FasterTransformer's bit tricks),
# MARLIN_DEQUANT, plus Marlin's group-scale multiply (one HMUL2 per two elements):
#  - int4 -> bf16 (kU4B8): per 4 elements 2 LOP3 + 1 shift (+1 shift per 8 for the second nibble pair) and
#    2 HSUB2, then 2 HMUL2 for the scale: FP 1.0, INT 0.875;  int4 -> fp16: HSUB2 + HFMA2, 2 LOP3 (+1/8 shift)
#  - int8 -> bf16 (kU8B128): per 4 elements 4 byte_perm + 4 FP32 subtracts + 2 byte_perm, 2 HMUL2 for the
#    scale: FP 1.5, INT 1.5;  int8 -> fp16: 2 PRMT + 2 HSUB2 + 2 HMUL2: FP 1.0, INT 0.5
# Machete (sm90) converts with CUTLASS's NumericArrayConverter of the same tricks (assumed the same counts).
DEQUANT_OPS: dict[tuple[DType, DType], tuple[float, float]] = {
    (DType.INT4, DType.BF16): (1.0, 0.875), (DType.INT4, DType.FP16): (1.0, 0.625),
    (DType.INT8, DType.BF16): (1.5, 1.5), (DType.INT8, DType.FP16): (1.0, 0.5),
}
FLOP_PER_LANE_OP = 2.0  # the FMA pipe's work unit: one lane operation = one FMA = 2 FLOPs (templates' convention)


def parse(name: str) -> QuantFormat:
    """The format named `name` (case and '_' insensitive); a ValueError lists the valid names."""
    key = name.strip().lower().replace("_", "-")
    if key in FORMATS:
        return FORMATS[key]
    raise ValueError(f"unknown quantisation format {name!r}; valid: {', '.join(FORMATS)}")


def dequant_fma_work(fmt: QuantFormat, model: DType, hw: Any) -> float:
    """FMA-pipe work (FLOP units) that dequantising one weight element takes in a weight-only main loop.

    FP ops run on the FMA pipe, integer ops on the INT32 pipe, and a sub-partition issues one warp instruction a
    clock (32 lane ops): the binding one of the three sets the time, charged to the FMA pipe as the work that
    takes that long there (so an H100, whose FMA pipe is twice its INT32 pipe, is bound by the integer half).
    """
    fp, integer = DEQUANT_OPS.get((fmt.weight, model), (0.0, 0.0))
    if not fp and not integer:
        raise ValueError(f"{fmt.name}: no dequantisation of {fmt.weight.name} weights to {model.name} is modelled; "
                         f"valid model dtypes: {', '.join(sorted({m.name.lower() for w, m in DEQUANT_OPS}))}")
    fma_lanes = float(hw.fma_flop_per_clk_per_sm.value) / FLOP_PER_LANE_OP
    int_lanes = float(hw.int32_ops_per_clk_per_sm.value)
    issue_lanes = 32.0 * float(hw.subpartitions_per_sm.value)
    clocks = max(fp / fma_lanes, integer / int_lanes, (fp + integer) / issue_lanes)
    return FLOP_PER_LANE_OP * fma_lanes * clocks


def formats_for(hw: Any) -> tuple[str, ...]:
    """The formats `hw` runs (for error messages)."""
    return tuple(f.name for f in FORMATS.values() if _missing(f, hw) is None)


def _missing(fmt: QuantFormat, hw: Any) -> str | None:
    if not hasattr(hw, "tensor_formats"):  # Tensix: tt_transformers' own formats
        return ("a GPU profile (Tenstorrent profiles take --weights performance|accuracy: bfp8_b/bfp4_b, and an "
                "mxfp4 checkpoint's experts as bfp4_b)")
    need = fmt.needs()
    if need is not None and not hw.supports(need):
        what = {DType.INT8: "int8", DType.FP8_E4M3: "FP8", DType.FP4_E2M1: "FP4 (block-scaled, sm100)"}[need]
        return f"{what} tensor cores"
    return None


def check_supported(fmt: QuantFormat, hw: Any) -> None:
    """Raise naming what `hw` has when it cannot run `fmt` (NVFP4 on an H100, FP8 on an A100)."""
    missing = _missing(fmt, hw)
    if missing is None:
        return
    name = getattr(hw, "name", hw)
    if not hasattr(hw, "tensor_formats"):
        raise ValueError(f"quantisation {fmt.name!r} needs {missing}; {name} is not one")
    raise ValueError(f"quantisation {fmt.name!r} needs {missing}; {name} has tensor cores for "
                     f"{', '.join(hw.tensor_formats())}: formats it runs: {', '.join(formats_for(hw))}")


def format_of_config(qc: Any) -> tuple[str | None, str]:
    """The format an HF `quantization_config` describes, or (None, why not) when torchsim does not model it;
    null is no quantisation. A field of the wrong type (`config_groups` a string, `bits` "4") is a damaged
    file, not an unmodelled format: a ValueError naming the field and what it must be.

    >>> format_of_config({"quant_method": "fp8", "weight_block_size": [128, 128]})[0]
    'fp8-block'
    >>> format_of_config({"quant_method": "gptq", "bits": 4.0, "group_size": 128})[0]
    'w4a16'
    >>> format_of_config({"quant_method": "bitsandbytes", "load_in_4bit": True})[0] is None
    True
    >>> format_of_config({"quant_method": "gptq", "bits": "4"})
    Traceback (most recent call last):
    ValueError: field 'quantization_config.bits' must be an integer (4 or 8), got '4'
    """
    if qc is None:
        return None, "no quantisation"
    if not isinstance(qc, dict):
        raise ValueError(f"field 'quantization_config' must be an object (e.g. {{\"quant_method\": \"gptq\", "
                         f"\"bits\": 4}}) or null, got {_show(qc)}")
    method = str(qc.get("quant_method", "")).lower()
    if method == "fp8":
        block = qc.get("weight_block_size")
        if block in ([128, 128], (128, 128)):
            return "fp8-block", ""
        if block:
            return None, f"FP8 weight_block_size {block} (torchsim models 128x128 blocks)"
        return "fp8", ""
    if method in ("gptq", "awq", "gptq_marlin", "awq_marlin", "marlin"):
        bits_key = "bits" if "bits" in qc or "w_bit" not in qc else "w_bit"
        group_key = "group_size" if "group_size" in qc or "q_group_size" not in qc else "q_group_size"
        bits = _integer(qc.get(bits_key), f"quantization_config.{bits_key}", "4 or 8")
        group = _integer(qc.get(group_key, 128), f"quantization_config.{group_key}", "128, or -1 per column")
        if bits not in (4, 8):
            return None, f"{method} with {bits_key} = {bits} (torchsim models 4 and 8)"
        if group not in (128, -1):
            return None, f"{method} group_size {group} (torchsim models 128)"
        return f"w{bits}a16", ""
    if method == "mxfp4":
        return "mxfp4", ""
    if method == "modelopt":
        algo = str(qc.get("quant_algo", "")).upper()
        table = {"FP8": "fp8", "NVFP4": "nvfp4", "W4A16_AWQ": "w4a16", "W8A8_SQ_PER_CHANNEL": "w8a8",
                 "FP8_BLOCK_SCALES": "fp8-block"}
        return (table[algo], "") if algo in table else (None, f"modelopt quant_algo {algo!r}")
    if method == "compressed-tensors":
        return _compressed_tensors(qc)
    return None, f"quant_method {method!r}"


def _show(value: Any) -> str:
    """A JSON value as an error message quotes it: short, with its JSON type when that is the problem."""
    kind = {str: "a string", list: "a list", int: "an integer", float: "a number", bool: "a boolean"}.get(
        type(value), type(value).__name__)
    return f"{kind} ({str(value)[:40]!r})" if not isinstance(value, str) else repr(value[:40])


def _integer(value: Any, field: str, valid: str) -> int | None:
    """An integer field of a quantization_config; JSON 4.0 is 4 (some exporters write floats), "4" is refused."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"field {field!r} must be an integer ({valid}), got {_show(value)}")
    return value


def _object(value: Any, field: str, valid: str) -> dict[str, Any]:
    """An object field of a compressed-tensors config (null or absent: empty)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"field {field!r} must be an object ({valid}) or null, got {_show(value)}")
    return value


def _compressed_tensors(qc: dict[str, Any]) -> tuple[str | None, str]:
    """llm-compressor's config_groups: the (one) group's weight and input-activation schemes."""
    scheme = '{"num_bits": 8, "type": "int", ...}'
    groups = _object(qc.get("config_groups"), "quantization_config.config_groups",
                     'group name -> {"targets": [...], "weights": {...}, "input_activations": {...}}')
    if len(groups) != 1:
        return None, f"compressed-tensors with {len(groups)} config groups (torchsim models one)"
    (key, g), = groups.items()
    where = f"quantization_config.config_groups.{key}"
    g = _object(g, where, '{"weights": {...}, "input_activations": {...}}')
    w = _object(g.get("weights"), f"{where}.weights", scheme)
    a = _object(g.get("input_activations"), f"{where}.input_activations", scheme) or None
    wb = _integer(w.get("num_bits"), f"{where}.weights.num_bits", "4 or 8")
    wt = str(w.get("type", "int"))
    ab = _integer(a.get("num_bits"), f"{where}.input_activations.num_bits", "4 or 8") if a else None
    group = _integer(w.get("group_size"), f"{where}.weights.group_size", "16, 32 or 128, or null")
    if wt == "float" and wb == 4 and ab == 4 and group == 16:
        return "nvfp4", ""
    if wt == "float" and wb == 8 and ab == 8:
        return ("fp8-block" if w.get("strategy") == "block" else "fp8"), ""
    if wt == "int" and wb == 8 and ab == 8:
        return "w8a8", ""
    if wt == "int" and wb in (4, 8) and a is None and group in (128, None):
        return f"w{wb}a16", ""
    return None, f"compressed-tensors weights {wb}-bit {wt}, activations {ab}-bit"
