"""Weight and activation formats (torchsim.lowering.quant): byte counts, the quantised GEMM templates against bf16
and their roofline, configs' quantization_config, predict(quant=...) and the errors a GPU without a format gives."""

from __future__ import annotations

import pytest

from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.plan import KernelPlan, Preset
from torchsim.lowering.precision import WeightPrecision, weight_bytes, with_precision
from torchsim.lowering.quant import FORMATS, dequant_fma_work, format_of_config, parse
from torchsim.lowering.templates.gemm import gemm
from torchsim.lowering.templates.grouped_gemm import grouped_gemm
from torchsim.sim import simulate

A100, H100, B200 = (get_profile(n) for n in ("a100-sxm", "h100-sxm", "b200"))


# -- byte counts ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "per_element"), [
    ("w8a16", 1 + 2 / 128), ("w4a16", 0.5 + 2 / 128), ("w8a8", 1.0), ("fp8", 1.0), ("fp8-block", 1.0),
    ("nvfp4", 0.5 + 1 / 16), ("mxfp4", 0.5 + 1 / 32)])
def test_a_formats_weight_bytes_are_its_elements_and_scales(name: str, per_element: float) -> None:
    k, n = 4096, 2048
    fmt = parse(name)
    exact = fmt.weight_bytes(k, n)
    # per-channel / per-tensor / 128x128-block scales are a few bytes per column or block on top
    assert exact == pytest.approx(k * n * per_element, rel=2e-3)
    assert exact >= k * n * fmt.weight.nbytes


def test_the_model_weight_bytes_follow_the_format() -> None:
    from torchsim.models.registry import build_model, get_config

    module = build_model(get_config("llama-small"))
    bf16 = weight_bytes(module, WeightPrecision.MODEL)
    layer, other = 0, 0
    for name, p in module.named_parameters():
        if ".layers." in f".{name}" and p.dim() >= 2:
            layer += p.numel()
        else:
            other += p.numel()
    assert bf16 == 2 * (layer + other)
    for fmt, per in (("w4a16", 0.5 + 2 / 128), ("w8a16", 1 + 2 / 128), ("nvfp4", 0.5 + 1 / 16)):
        got = weight_bytes(module, WeightPrecision.MODEL, parse(fmt))
        assert got == pytest.approx(layer * per + 2 * other, rel=1e-3)
    # the fp8 format is the FP8 checkpoint's count (one byte per layer matrix element, scales aside)
    assert weight_bytes(module, WeightPrecision.MODEL, parse("fp8")) == pytest.approx(
        weight_bytes(module, WeightPrecision.FP8), rel=1e-4)


def test_a_graphs_dram_bytes_count_the_formats_weights() -> None:
    m, n, k = 16, 4096, 4096
    bf16 = gemm(m, n, k, DType.BF16, A100, shared_b=True)
    w4 = gemm(m, n, k, DType.BF16, A100, shared_b=True, quant="w4a16")
    assert bf16.dram_bytes - w4.dram_bytes == pytest.approx(k * n * 2 - parse("w4a16").weight_bytes(k, n))
    nv = gemm(m, n, k, DType.FP4_E2M1, B200, shared_b=True, quant="nvfp4")
    assert nv.dram_bytes == pytest.approx(m * k * (0.5 + 1 / 16) + parse("nvfp4").weight_bytes(k, n) + m * n * 2)


# -- the templates against bf16 and the roofline --------------------------------------------------------------------

def _roofline_s(kg: object, dtype: DType, hw: object) -> float:
    return max(kg.flops / hw.peak_tensor_flops_per_s(dtype), kg.dram_bytes / hw.dram_bytes_per_s_value)  # type: ignore


@pytest.mark.parametrize(("hw", "fmt", "dtype"), [
    (A100, "w8a16", DType.BF16), (A100, "w4a16", DType.BF16), (A100, "w8a8", DType.INT8),
    (H100, "w4a16", DType.BF16), (H100, "fp8-block", DType.FP8_E4M3), (H100, "w8a8", DType.INT8),
    (B200, "nvfp4", DType.FP4_E2M1), (B200, "mxfp4", DType.FP4_E2M1), (B200, "w4a16", DType.BF16)],
    ids=lambda v: getattr(v, "name", v) if not isinstance(v, str) else v)
def test_a_quantised_decode_gemm_beats_bf16_and_never_its_roofline(hw: object, fmt: str, dtype: DType) -> None:
    m, n, k = 1, 4096, 4096  # batch-1 decode: reading the weights is the work
    base = simulate(gemm(m, n, k, DType.BF16, hw, shared_b=True), hw)  # type: ignore[arg-type]
    kg = gemm(m, n, k, dtype, hw, shared_b=True, quant=fmt)  # type: ignore[arg-type]
    res = simulate(kg, hw)  # type: ignore[arg-type]
    assert res.time_s < base.time_s
    assert res.time_s >= _roofline_s(kg, dtype, hw)


def test_the_fewer_weight_bytes_the_faster_a_memory_bound_decode_gemm() -> None:
    times = {f: simulate(gemm(1, 8192, 4096, DType.BF16, A100, shared_b=True, quant=f), A100).time_s
             for f in ("", "w8a16", "w4a16")}
    assert times[""] > times["w8a16"] > times["w4a16"]


def test_weight_only_dequantisation_is_cuda_core_work_that_grows_with_m() -> None:
    """Marlin's conversion runs on the CUDA cores: FMA-pipe work a bf16 GEMM does not have, once per weight element
    per CTA row block, so it grows with the M tiles; an H100 (FMA pipe twice its INT32 pipe) is bound by the integer
    half, so its per-element cost is above the FP op count."""
    w4 = gemm(64, 4096, 4096, DType.BF16, A100, shared_b=True, quant="w4a16")
    bf = gemm(64, 4096, 4096, DType.BF16, A100, shared_b=True)
    r4, rb = simulate(w4, A100), simulate(bf, A100)
    assert r4.unit_busy.get("fma", 0.0) > 4 * rb.unit_busy.get("fma", 0.0)
    fmt = parse("w4a16")
    assert dequant_fma_work(fmt, DType.BF16, A100) == pytest.approx(2.0)  # 1 FP lane op per element, FMA-bound
    assert dequant_fma_work(fmt, DType.BF16, H100) > 2.0  # 0.875 INT ops on half as many INT32 lanes
    with pytest.raises(ValueError, match="dequantisation"):
        dequant_fma_work(fmt, DType.FP32, A100)


def test_nvfp4_runs_at_twice_fp8_where_compute_bound() -> None:
    m = n = k = 2048
    fp8 = simulate(gemm(m, n, k, DType.FP8_E4M3, B200, shared_b=True), B200)
    kg = gemm(m, n, k, DType.FP4_E2M1, B200, shared_b=True, quant="nvfp4")
    fp4 = simulate(kg, B200)
    assert B200.peak_tensor_flops_per_s(DType.FP4_E2M1) == 2 * B200.peak_tensor_flops_per_s(DType.FP8_E4M3)
    assert fp4.time_s < fp8.time_s and fp4.time_s >= _roofline_s(kg, DType.FP4_E2M1, B200)
    assert "tcgen05_cp_sf" in " ".join(kg.classes[0].graph.node_names)  # scale factors copied to TMEM per stage


def test_a_quantised_grouped_gemm_reads_fewer_bytes_and_is_faster_at_decode() -> None:
    counts = (3, 0, 2, 1, 0, 2, 0, 0)
    bf = grouped_gemm(counts, 2048, 1024, DType.BF16, H100)
    q = grouped_gemm(counts, 2048, 1024, DType.BF16, H100, quant="w4a16")
    assert q.dram_bytes < bf.dram_bytes and q.attrs["quant"] == "w4a16"
    assert simulate(q, H100).time_s < simulate(bf, H100).time_s


# -- configs, plans, predict ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("qc", "want"), [
    ({"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}, "fp8-block"),
    ({"quant_method": "fp8", "activation_scheme": "static"}, "fp8"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "w4a16"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}, "w4a16"),
    ({"quant_method": "gptq", "bits": 8, "group_size": 128}, "w8a16"),
    ({"quant_method": "mxfp4"}, "mxfp4"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "int", "strategy": "channel"},
        "input_activations": {"num_bits": 8, "type": "int", "dynamic": True}}}}, "w8a8"),
    ({"quant_method": "gptq", "bits": 3, "group_size": 128}, None),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True}, None)])
def test_a_quantization_config_names_its_format_or_why_not(qc: dict, want: str | None) -> None:
    got, why = format_of_config(qc)
    assert got == want and (bool(why) == (want is None))


def _plan() -> KernelPlan:
    calls = (KernelCall.make(KernelKind.GEMM, m=1, n=64, k=64, layer=0, name="layers.0.self_attn.q_proj",
                             module_path="layers.0.self_attn"),
             KernelCall.make(KernelKind.GEMM, m=1, n=64, k=64, layer=0, name="layers.0.mlp.down_proj",
                             module_path="layers.0.mlp.down_proj"),
             KernelCall.make(KernelKind.GEMM, m=1, n=256, k=64, name="tail.lm_head", module_path="tail.lm_head"))
    return KernelPlan(calls, Preset.SERVING, "decode", 1, 1, 8)


def test_a_format_converts_the_layer_gemms_only_and_keeps_what_the_checkpoint_keeps() -> None:
    plan = _plan()
    got = with_precision(plan, WeightPrecision.MODEL, None, parse("nvfp4"), keep=("layers.*.self_attn",))
    attn, down, head = got.calls
    assert (down.dtype, down.p("quant")) == (DType.FP4_E2M1, "nvfp4")
    assert attn == plan.calls[0] and head == plan.calls[2]  # kept in bf16; the LM head is outside the layers
    w4 = with_precision(plan, WeightPrecision.MODEL, None, parse("w4a16")).calls[1]
    assert (w4.dtype, w4.p("quant")) == (DType.BF16, "w4a16")  # weight-only: the MMA stays in the model's dtype
    assert with_precision(plan, WeightPrecision.MODEL) is plan  # no format: the plan itself


def test_predict_runs_a_format_and_names_it_in_the_model_line() -> None:
    from torchsim.prediction.pipeline import predict

    base = predict("llama-small", "a100-sxm", prompt_len=16, decode_steps=2, workers=1, cache=False)
    w4 = predict("llama-small", "a100-sxm", prompt_len=16, decode_steps=2, workers=1, cache=False, quant="w4a16")
    assert " in w4a16" in w4.summary() and " in " not in base.summary().splitlines()[1]
    assert "quant" not in base.stats and w4.stats["quant"] == "w4a16"
    assert w4.stats["weight_bytes"] < 0.6 * base.stats["weight_bytes"]
    layer_gemms = [k for k in w4.kernels if k.kind == "gemm" and k.layer is not None]
    assert layer_gemms and all(dict(k.params)["quant"] == "w4a16" for k in layer_gemms)
    assert any(a.startswith("weights w4a16") for a in w4.assumptions)
    same = predict("llama-small", "h100-sxm", prompt_len=16, decode_steps=1, workers=1, cache=False, quant="fp8")
    fp8 = predict("llama-small", "h100-sxm", prompt_len=16, decode_steps=1, workers=1, cache=False, dtype="fp8")
    assert [k.params for k in same.kernels] == [k.params for k in fp8.kernels] and same.ttft_s == fp8.ttft_s


def test_the_memory_check_follows_the_format() -> None:
    from torchsim.models.registry import build_model, get_config
    from torchsim.prediction.pipeline import _memory_fit
    from torchsim.prediction.records import MemoryFitError

    module = build_model(get_config("llama3-70b"))
    pcie = get_profile("a100-pcie")  # 40 GB
    bf16 = weight_bytes(module, WeightPrecision.MODEL)
    w4 = weight_bytes(module, WeightPrecision.MODEL, parse("w4a16"))
    with pytest.raises(MemoryFitError, match="GiB of weights"):
        _memory_fit("llama3-70b", pcie, bf16, [], tp=1, batch=1, kv_dtype=None, allow=False)
    assert not _memory_fit("llama3-70b", pcie, w4, [], tp=1, batch=1, kv_dtype=None, allow=False)[0]  # ~37 GB fit


# -- errors -----------------------------------------------------------------------------------------------------------

def test_a_format_the_gpu_lacks_names_what_it_has() -> None:
    with pytest.raises(ValueError, match=r"'nvfp4' needs FP4 .*h100-sxm has tensor cores for bf16, fp16, tf32, "
                                         r"int8, fp8"):
        gemm(1, 4096, 4096, DType.FP4_E2M1, H100, quant="nvfp4")
    with pytest.raises(ValueError, match=r"'fp8-block' needs FP8 tensor cores; a100-sxm has .*int8: formats it "
                                         r"runs: w8a16, w4a16, w8a8$"):
        gemm(1, 4096, 4096, DType.FP8_E4M3, A100, quant="fp8-block")
    with pytest.raises(ValueError, match="unknown quantisation format 'int3'; valid: " + ", ".join(FORMATS)):
        parse("int3")
    with pytest.raises(ValueError, match="multiplies in FP4_E2M1, got dtype BF16"):
        gemm(1, 4096, 4096, DType.BF16, B200, quant="nvfp4")


def test_predict_refuses_a_format_before_simulating() -> None:
    from torchsim.prediction.pipeline import predict

    with pytest.raises(ValueError, match="h100-sxm has tensor cores for"):
        predict("llama-tiny", "h100-sxm", prompt_len=8, decode_steps=1, quant="mxfp4")
    with pytest.raises(ValueError, match="give one of them"):
        predict("llama-tiny", "h100-sxm", prompt_len=8, decode_steps=1, dtype="fp8", quant="w4a16")
    with pytest.raises(ValueError, match="needs a GPU profile"):
        predict("llama-tiny", "wormhole-n150", prompt_len=8, decode_steps=1, quant="w4a16")


def test_the_cli_names_a_missing_format(capsys: pytest.CaptureFixture[str]) -> None:
    from torchsim.cli import main

    rc = main(["kernel", "gemm", "--m", "1", "--n", "256", "--k", "256", "--hw", "a100-sxm", "--quant", "nvfp4"])
    assert rc != 0 and "a100-sxm has tensor cores for bf16, fp16, tf32, int8" in capsys.readouterr().err


def test_sweep_carries_the_format_to_kernels_and_model_steps() -> None:
    import argparse

    from torchsim.cli import UsageError
    from torchsim.cli.sweep import _kernel_call
    from torchsim.sweeps.space import model_workload

    ns = argparse.Namespace(kind="gemm", m=1, n=256, k=256, epilogue="none", batch=1, variant="", param=[],
                            dtype="bf16", quant="nvfp4")
    call = _kernel_call(ns)
    assert (call.dtype, call.p("quant")) == (DType.FP4_E2M1, "nvfp4")
    with pytest.raises(UsageError, match="gemm and grouped_gemm"):
        _kernel_call(argparse.Namespace(**{**vars(ns), "kind": "rmsnorm", "param": ["rows=1", "hidden=64"]}))
    work = model_workload("llama-tiny", phase="decode", kv=16, quant="w8a16", base=A100)
    layer = [c for c in work.calls if c.kind is KernelKind.GEMM and c.layer is not None]
    assert layer and all(c.p("quant") == "w8a16" for c in layer) and work.attrs["quant"] == "w8a16"
    with pytest.raises(ValueError, match="a100-sxm has tensor cores for"):
        model_workload("llama-tiny", phase="decode", kv=16, quant="fp8", base=A100)
