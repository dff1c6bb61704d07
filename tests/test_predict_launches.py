"""predict places every launch of a kernel call (Flash-Decoding's split + combine), FP8 checkpoints, the lazy
top-level `torchsim.predict`."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from torchsim.hwmodels import get_profile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.prediction.kernel_sim import simulate_call, simulate_launches
from torchsim.prediction.pipeline import predict

# llama-small at KV 1024: Flash-Decoding splits the K/V and launches a combine kernel
SPLIT: dict[str, Any] = dict(prompt_len=64, kv_len=1024, decode_steps=1, workers=1)


@pytest.fixture(scope="module")
def long_kv() -> Any:
    return predict("llama-small", "h100-sxm", **SPLIT)


def test_decode_step_includes_the_combine_kernel_as_its_own_launch(long_kv: Any) -> None:
    hw = get_profile("h100-sxm")
    rows = long_kv.step_kernels("decode")
    splits = [i for i, r in enumerate(rows) if r.template.startswith("flash_decode/") and "combine" not in
              r.template]
    assert len(splits) == 4  # one per layer
    for i in splits:
        split, comb = rows[i], rows[i + 1]
        assert split.config["splits"] > 1 and split.config["launches"] == 2
        assert comb.template == "flash_decode/combine" and comb.name == f"{split.name}.combine"
        assert comb.kind == split.kind and comb.layer == split.layer and comb.order == split.order + 1
        gap_us = float(hw.graph_launch_overhead_s.value) * 1e6
        assert comb.start_us == pytest.approx(split.start_us + split.duration_us + gap_us)
        assert comb.duration_us > 0 and comb.dram_bytes > 0
    # the step is every launch and every gap: dropping the combines would lose their time and their gaps
    step_us = long_kv.decode_step_s[0] * 1e6
    assert step_us == pytest.approx(float(hw.launch_overhead_s.value) * 1e6
                                    + sum(r.duration_us + r.gap_us for r in rows))
    combine_us = sum(r.duration_us + r.gap_us for r in rows if r.template.endswith("/combine"))
    assert combine_us > 0.02 * step_us


def test_short_kv_has_no_combine_and_prefill_never_has_one(long_kv: Any) -> None:
    assert not any("combine" in r.template for r in long_kv.step_kernels("prefill"))
    short = predict("llama-small", "h100-sxm", prompt_len=16, decode_steps=1, workers=1)
    assert not any("combine" in r.template for r in short.step_kernels("decode"))
    assert len(long_kv.step_kernels("decode")) == len(short.step_kernels("decode")) + 4


def test_simulate_call_is_the_sum_of_its_launches() -> None:
    hw = get_profile("h100-sxm")
    call = KernelCall.make(KernelKind.ATTENTION_DECODE, batch=2, heads_q=32, heads_kv=8, seq_q=1, seq_kv=4096,
                           head_dim=128)
    launches = simulate_launches(call, hw)
    assert [s.template for s in launches] == ["flash_decode/fa3", "flash_decode/combine"]
    whole = simulate_call(call, hw)
    assert whole.time_s == pytest.approx(sum(s.time_s for s in launches))
    assert whole.cycles == sum(s.cycles for s in launches) and whole.config["launches"] == 2
    gemm = KernelCall.make(KernelKind.GEMM, m=16, n=256, k=256)
    assert simulate_launches(gemm, hw) == (simulate_call(gemm, hw),)


def test_fp8_checkpoint_runs_layer_gemms_in_fp8() -> None:
    bf16 = predict("llama-small", "h100-sxm", prompt_len=256, decode_steps=1, workers=1)
    fp8 = predict("llama-small", "h100-sxm", prompt_len=256, decode_steps=1, workers=1, dtype="fp8")
    gemms = [k for k in fp8.kernels if k.kind == "gemm"]
    assert {k.dtype for k in gemms if k.layer is not None} == {"fp8_e4m3"}
    assert {k.dtype for k in gemms if k.layer is None} == {"bf16"}  # LM head
    assert {k.dtype for k in fp8.kernels if k.kind.startswith("attention")} == {"bf16"}
    assert fp8.stats["weight_bytes"] < bf16.stats["weight_bytes"]
    assert fp8.ttft_s < bf16.ttft_s and fp8.tpot_s < bf16.tpot_s
    assert any("FP8" in a for a in fp8.assumptions)
    with pytest.raises(ValueError, match="valid: bf16, fp16, fp8"):
        predict("llama-small", "h100-sxm", prompt_len=16, decode_steps=1, dtype="int3")


def test_fp8_kv_cache_halves_what_decode_attention_reads() -> None:
    base = predict("llama-small", "h100-sxm", **SPLIT)
    kv8 = predict("llama-small", "h100-sxm", kv_cache="fp8", **SPLIT)

    def attn(p: Any, phase: str) -> list[Any]:
        return [k for k in p.step_kernels(phase) if k.kind == "attention_decode" or k.kind == "attention_prefill"]

    assert {k.dtype for k in attn(kv8, "decode")} == {"fp8_e4m3"}
    assert {k.dtype for k in attn(kv8, "prefill")} == {"bf16"}  # prefill attends over the step's fresh K/V
    split = [k for k in attn(kv8, "decode") if not k.template.endswith("/combine")]
    split_bf16 = [k for k in attn(base, "decode") if not k.template.endswith("/combine")]
    for f, b in zip(split, split_bf16, strict=True):
        q = dict(b.params)
        kv_bf16 = 2 * q["batch"] * q["heads_kv"] * q["seq_kv"] * q["head_dim"] * 2
        assert b.dram_bytes - f.dram_bytes >= 0.45 * kv_bf16  # half of the K/V bytes no longer read
    assert kv8.tpot_s < base.tpot_s and kv8.hbm_floor_s[0] < base.hbm_floor_s[0]
    assert any("KV cache in FP8" in a for a in kv8.assumptions)
    with pytest.raises(ValueError, match="kv_cache 'int4' is not supported; valid: None"):
        predict("llama-small", "h100-sxm", kv_cache="int4", **SPLIT)


def test_top_level_predict_is_lazy() -> None:
    code = ("import sys, torchsim; assert 'torch' not in sys.modules; import torchsim.prediction.pipeline as api; "
            "assert torchsim.predict is api.predict; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr
    import torchsim

    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        torchsim.nothing_here  # noqa: B018
