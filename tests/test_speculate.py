"""torchsim.prediction.speculate: the prefill kernels a cold prediction starts simulating before torch is
imported are calls of the captured plan, and the prediction is the same with or without them."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import pytest

from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.prediction import pipeline, speculate
from torchsim.prediction.kernel_sim import Background, clear_memo, is_memoised
from torchsim.prediction.limits import EventBudget

H100 = get_profile("h100-sxm")
ARGS = dict(preset="serving", tp=1, ep=1, pp=1, quant=None, tune=False)


def _prefill_keys(model: object, dtype: str, batch: int, prompt: int) -> set[tuple[object, ...]]:
    """Every call key of the prefill plan torchsim captures for `model` (memory warnings ignored: the 70B
    model is over one H100's memory)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plans = _capture(model, dtype, batch, prompt)
    return {c.key() for c in plans[0].calls}


def _capture(model: object, dtype: str, batch: int, prompt: int) -> list:  # type: ignore[type-arg]
    return pipeline._capture(
        model, H100, "dgx-h100", [("prefill", None, prompt, 0)], batch, preset="serving", dtype=dtype, kv_cache=None,
        quant=None, routing=None, fallback=None, tune=False, tp=1, ep=1, pp=1, dp=1, mb=1, batch=batch, weights=None,
        workers=1, max_sim_events=60_000, disk=None, allow_oversubscribe=True, prompt_len=prompt, kv0=prompt,
        decode_steps=0, sp=False, budget=EventBudget("test", H100, 60_000, None))[1]


@pytest.mark.parametrize("model,dtype,batch,prompt", [("llama3-8b", "bf16", 1, 2048), ("llama3-8b", "fp8", 4, 512),
                                                      ("llama3.1-70b", "bf16", 2, 256), ("llama2-7b", "fp16", 1, 128),
                                                      ("llama-small", "bf16", 3, 64)])
def test_the_named_calls_are_calls_of_the_captured_prefill(model: str, dtype: str, batch: int, prompt: int) -> None:
    calls = speculate.prefill_calls(model, H100, batch=batch, prompt_len=prompt, dtype=dtype, **ARGS)
    assert {c.kind for c in calls} == {KernelKind.GEMM, KernelKind.ATTENTION_PREFILL} and len(calls) == 6
    assert {c.key() for c in calls} <= _prefill_keys(model, dtype, batch, prompt)


@pytest.mark.parametrize("model,batch,prompt", [("mixtral-tiny", 3, 100), ("mixtral-micro", 2, 64)])
def test_a_mixtral_prefill_names_its_router_and_evenly_split_experts(model: str, batch: int, prompt: int) -> None:
    """With no routing given the lowering splits each MoE layer's tokens x top_k evenly over the experts (300 x 2
    rows over 8 experts: 75 each; 128 x 2 over 4: 64 each); with routing counts, the grouped GEMMs are not named."""
    calls = speculate.prefill_calls(model, H100, batch=batch, prompt_len=prompt, dtype="bf16", **ARGS)
    assert [c.kind for c in calls].count(KernelKind.GROUPED_GEMM) == 2 and len(calls) == 7
    assert {c.key() for c in calls} <= _prefill_keys(model, "bf16", batch, prompt)
    routed = speculate.prefill_calls(model, H100, batch=batch, prompt_len=prompt, dtype="bf16", routing="skewed",
                                     **ARGS)
    assert KernelKind.GROUPED_GEMM not in {c.kind for c in routed} and len(routed) == 5
    assert not speculate.prefill_calls(model, H100, batch=batch, prompt_len=prompt, dtype="fp8", **ARGS)


def test_a_llama_config_file_is_read_without_torch_and_named_alike(tmp_path: Path) -> None:
    cfg = {"model_type": "mistral", "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 2,
           "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32000, "head_dim": 64,
           "max_position_embeddings": 4096, "sliding_window": None, "rms_norm_eps": 1e-5}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    calls = speculate.prefill_calls(str(path), H100, batch=2, prompt_len=256, dtype="bf16", **ARGS)
    assert len(calls) == 6 and {c.key() for c in calls} <= _prefill_keys(str(path), "bf16", 2, 256)
    path.write_text(json.dumps({**cfg, "sliding_window": 128}))  # windowed attention: not named
    assert [c.kind for c in speculate.prefill_calls(str(path), H100, batch=2, prompt_len=256, dtype="bf16",
                                                    **ARGS)].count(KernelKind.ATTENTION_PREFILL) == 0
    path.write_text(json.dumps({**cfg, "attention_bias": True}))  # a bias epilogue: nothing named
    assert speculate.prefill_calls(str(path), H100, batch=2, prompt_len=256, dtype="bf16", **ARGS) == []


@pytest.mark.parametrize("name", ["qwen3-8b", "granite-3.1-8b", "olmo-7b", "olmo2-7b", "phi-3-mini-4k", "gemma-2-9b",
                                  "gemma-3-1b"])
def test_hf_families_with_llama_gemms_are_named_alike(name: str) -> None:
    """The HF families speculate.py treats as Llama's GEMMs: every named call is a call of the prefill transformers'
    model captures to (their sliding windows leave the attention unnamed)."""
    pytest.importorskip("transformers")
    path = str(Path(__file__).parent / "data" / "hf_configs" / f"{name}.json")
    calls = speculate.prefill_calls(path, H100, batch=2, prompt_len=256, dtype="bf16", **ARGS)
    assert len(calls) >= 5 and {c.key() for c in calls} <= _prefill_keys(path, "bf16", 2, 256)


def test_a_mixtral_config_file_is_named_like_the_built_in_model(tmp_path: Path) -> None:
    from torchsim.models.presets import MIXTRAL_MODELS

    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "mixtral", **MIXTRAL_MODELS["mixtral-tiny"],
                                "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": None}))
    calls = speculate.prefill_calls(str(path), H100, batch=2, prompt_len=96, dtype="bf16", **ARGS)
    assert [c.kind for c in calls].count(KernelKind.GROUPED_GEMM) == 2 and len(calls) == 7
    assert {c.key() for c in calls} <= _prefill_keys(str(path), "bf16", 2, 96)


def test_families_with_a_qkv_bias_are_not_named() -> None:
    for name in ("qwen2.5-7b", "stablelm-2-1.6b", "starcoder2-7b", "deepseek-v2-lite", "gpt-oss-20b"):
        path = str(Path(__file__).parent / "data" / "hf_configs" / f"{name}.json")
        assert speculate.prefill_calls(path, H100, batch=2, prompt_len=256, dtype="bf16", **ARGS) == [], name


def test_nothing_is_named_where_the_prediction_goes_elsewhere() -> None:
    def named(model: object = "llama3-8b", hw: object = H100, **kw: object) -> list[KernelCall]:
        return speculate.prefill_calls(model, hw, batch=1, prompt_len=128, dtype=str(kw.pop("dtype", "bf16")),
                                       **{**ARGS, **kw})  # type: ignore[arg-type]

    assert named() and not named(preset="eager") and not named(tp=2) and not named(quant="w4a16")
    assert not named(tune=True) and not named("phi-3") and not named(hw=get_profile("wormhole-n150"))


def test_a_prediction_is_the_same_with_and_without_the_early_start(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHSIM_CACHE_DIR", str(tmp_path))
    started: list[int] = []
    real = pipeline._speculate

    def spy(*a, **kw):  # noqa: ANN002, ANN003, ANN202
        bg = real(*a, **kw)
        started.append(len(bg.keys) if bg is not None else 0)
        return bg

    monkeypatch.setattr(pipeline, "_speculate", spy)
    monkeypatch.setattr("torchsim.prediction.workers.cpus", lambda: 2)
    clear_memo()
    early = pipeline.predict("llama-small", "h100-sxm", prompt_len=256, decode_steps=4, batch=2, cache=False)
    clear_memo()
    plain = pipeline.predict("llama-small", "h100-sxm", prompt_len=256, decode_steps=4, batch=2, cache=False,
                             workers=1)
    assert started and started[0] >= 1  # the early start ran (one call at a time before the plan was known)
    assert (early.ttft_s, early.decode_step_s) == (plain.ttft_s, plain.decode_step_s)
    assert [(k.name, k.duration_us) for k in early.kernels] == [(k.name, k.duration_us) for k in plain.kernels]


def test_a_speculated_call_the_plan_does_not_have_is_dropped_unfinished() -> None:
    clear_memo()
    big = KernelCall.make(KernelKind.GEMM, DType.BF16, epilogue="none", m=16384, n=16384, k=16384)
    small = KernelCall.make(KernelKind.GEMM, DType.BF16, epilogue="none", m=64, n=256, k=256)
    t = time.perf_counter()
    with Background(H100, 60_000, 2, None) as bg:
        bg.speculate([big])  # seconds of simulation, never asked for
        bg.submit([small])
        bg.wait(needed={small.key()})
    assert time.perf_counter() - t < 2.0  # not waited for (it takes ~3 s on a 2-core machine)
    assert is_memoised(small, H100, 60_000) and not is_memoised(big, H100, 60_000)


def test_a_speculated_call_comes_back_with_the_estimate_this_process_would_make() -> None:
    """A worker counts a speculated call's simulation-limit estimate beside its simulation (from the GEMM family the
    simulation builds anyway); the capturing process seeds its budget with it instead of building the family again,
    so the number must be the one it would compute itself."""
    from concurrent.futures import wait

    from torchsim.prediction.limits import call_events, estimate

    clear_memo()
    gemm = KernelCall.make(KernelKind.GEMM, DType.BF16, epilogue="none", m=512, n=1024, k=2048)
    attn = KernelCall.make(KernelKind.ATTENTION_PREFILL, DType.BF16, batch=1, causal=True, head_dim=128, heads_kv=8,
                           heads_q=32, seq_kv=512, seq_q=512)
    with Background(H100, 60_000, 2, None, count=estimate) as bg:
        bg.speculate([gemm, attn])
        while len(bg.futures) < 2:  # the second starts when the first is done
            time.sleep(0.01)
        wait(list(bg.futures))
        got = bg.estimates()
        bg.wait(needed={gemm.key(), attn.key()})
    assert got == {c.key(): call_events(c, H100, 60_000) for c in (gemm, attn)}
    assert all(v > 0 for v in got.values())
    assert is_memoised(gemm, H100, 60_000) and is_memoised(attn, H100, 60_000)
    budget = EventBudget("test", H100, 60_000, None)
    budget.seed(got)
    assert budget.add([gemm, attn]) == sum(got.values())
