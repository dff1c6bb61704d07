"""Causal LMs torchsim has no own family for are built by HF transformers from their public config.json (in
tests/data/hf_configs, no weights): the captured GEMM FLOPs of a prefill step and the weight bytes match an
analytic count from the config within 1%, and what capture cannot take from the model is named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from transformers import AutoConfig  # noqa: E402

from torchsim.lowering import plan  # noqa: E402
from torchsim.lowering.kernel_call import KernelKind  # noqa: E402
from torchsim.lowering.precision import WeightPrecision, weight_bytes  # noqa: E402
from torchsim.models.registry import build_model, get_config  # noqa: E402

CONFIGS = Path(__file__).parent / "data" / "hf_configs"
TOKENS = 64


def _count(c: dict[str, Any]) -> tuple[int, int]:
    """(parameters, GEMM FLOPs of a TOKENS-token prefill step with the LM head on the last token) from the
    config alone, for the families below."""
    h, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    nq = c["num_attention_heads"]
    nkv = c.get("num_key_value_heads", nq)
    hd = c.get("head_dim") or h // nq
    proj = 2 * h * nq * hd + 2 * h * nkv * hd  # q, o and k, v
    extra = {"qwen2": nq * hd + 2 * nkv * hd,  # q/k/v biases
             "qwen3": 2 * hd, "qwen3_moe": 2 * hd,  # q/k RMSNorm per head
             "olmo2": nq * hd + nkv * hd}.get(c["model_type"], 0)  # q/k RMSNorm over all heads
    if "num_experts" in c:
        e, k, mi = c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
        mlp_params, mlp_flops = e * 3 * h * mi + e * h, 2 * (k * 3 * h * mi + e * h)
    else:  # SwiGLU (gate, up, down), or StarCoder2's plain c_fc -> gelu -> c_proj
        mlp_params = (2 if c["model_type"] == "starcoder2" else 3) * h * c["intermediate_size"]
        mlp_flops = 2 * mlp_params
    tied = c.get("tie_word_embeddings", AutoConfig.for_model(c["model_type"]).tie_word_embeddings)  # or its default
    params = vocab * h + layers * (proj + extra + mlp_params + 2 * h) + h + (0 if tied else vocab * h)
    flops = TOKENS * layers * (2 * proj + mlp_flops) + 2 * vocab * h
    return params, flops


def _gemm_flops(p: Any) -> int:
    total = 0
    for c in p.calls:
        if c.kind is KernelKind.GEMM:
            total += 2 * c.p("m") * c.p("n") * c.p("k") * c.p("batch", 1)
        elif c.kind is KernelKind.GROUPED_GEMM:
            total += 2 * sum(c.p("tokens_per_expert")) * c.p("n") * c.p("k")
    return total


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json")), ids=lambda p: p.stem)
def test_captured_flops_and_weight_bytes_match_the_config(path: Path) -> None:
    data = json.loads(path.read_text())
    cfg = get_config(path, approximate=True)
    assert cfg.name == path.stem and cfg.model_type == data["model_type"]
    model = build_model(cfg)
    params, flops = _count(data)
    assert weight_bytes(model, WeightPrecision.MODEL) == pytest.approx(2 * params, rel=0.01)
    plan._plan_graph.cache_clear()
    got = plan.plan_model(model, batch=1, q_len=TOKENS, past_len=0)
    plan._plan_graph.cache_clear()
    assert not got.unsupported
    assert _gemm_flops(got) == pytest.approx(flops, rel=0.01)


def test_layer_norm_families_price_a_centered_norm() -> None:
    plan._plan_graph.cache_clear()
    got = plan.plan_model(build_model(get_config(CONFIGS / "olmo-7b.json")), batch=1, q_len=16, past_len=0)
    plan._plan_graph.cache_clear()
    norms = [c for c in got.calls if c.kind in (KernelKind.RMSNORM, KernelKind.ADD_RMSNORM)]
    assert norms and all(c.p("centered", False) and not c.p("bias", False) for c in norms)  # OLMo-1: no affine


def test_what_capture_replaces_is_named(tmp_path: Path) -> None:
    # sliding windows are modelled (tests/test_sliding_window.py): Phi-3's 2047 below a 4096 context is no
    # approximation; a quantised checkpoint still is
    assert get_config(CONFIGS / "phi-3-mini-4k.json").approximations == ()
    assert get_config(CONFIGS / "qwen2.5-7b.json").approximations == ()
    data = {**json.loads((CONFIGS / "phi-3-mini-4k.json").read_text()),
            "quantization_config": {"quant_method": "awq", "bits": 4}}
    (tmp_path / "phi3-awq").mkdir()
    path = tmp_path / "phi3-awq" / "config.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="quantization_config"):
        get_config(path)
    assert get_config(path, approximate=True).approximations[0].startswith("quantization_config")


def test_an_unknown_model_type_names_the_families(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "no-such-lm", "hidden_size": 64}))
    with pytest.raises(ValueError, match="no-such-lm") as err:
        get_config(path)
    assert "llama" in str(err.value) and "mixtral" in str(err.value) and "transformers" in str(err.value)


def test_qwen2_projection_biases_are_captured() -> None:
    data = json.loads((CONFIGS / "qwen2.5-7b.json").read_text())
    plan._plan_graph.cache_clear()
    got = plan.plan_model(build_model(get_config(CONFIGS / "qwen2.5-7b.json")), batch=1, q_len=16, past_len=0)
    plan._plan_graph.cache_clear()
    biased = [c.name for c in got.calls if c.kind is KernelKind.GEMM and c.p("epilogue") == "bias"]
    # one fused QKV GEMM with a bias epilogue per layer, as serving runtimes run it; o_proj has no bias
    assert len(biased) == data["num_hidden_layers"]
    assert all(n.endswith("self_attn.q_proj+k_proj+v_proj") for n in biased)
    assert not [c for c in got.calls if c.name.startswith("head.rotary_emb")]  # tables read by the RoPE kernel


def test_the_prediction_says_what_it_understood_of_the_model(tmp_path: Path) -> None:
    from torchsim.prediction.pipeline import predict

    data = {"model_type": "qwen3", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1024,
            "max_position_embeddings": 2048}
    (tmp_path / "tiny-qwen3").mkdir()
    path = tmp_path / "tiny-qwen3" / "config.json"
    path.write_text(json.dumps(data))
    p = predict(str(path), "h100-sxm", prompt_len=16, decode_steps=1, workers=1)
    params, _ = _count(data)
    assert p.stats["family"] == "qwen3 (HF transformers)" and p.stats["params"] == params
    assert p.stats["kv_bytes_per_token"] == 2 * 2 * 2 * 64 * 2  # K and V, 2 layers, 2 KV heads, head_dim 64, bf16
    assert f"model  qwen3 (HF transformers): {params / 1e6:,.2f} M parameters" in p.summary()
