"""Causal LMs torchsim has no own family for are built by HF transformers from their public config.json (in
tests/data/hf_configs, no weights): the captured GEMM FLOPs of a prefill step and the weight bytes match an
analytic count from the config within 1%, and what capture cannot take from the model is named. The public
configs of the families torchsim defines itself (tests/data/model_configs: Llama 3.2 with tied embeddings,
Llama 3.3, Mistral) meet the same count. phi-3.5-moe.json is Phi-3.5-MoE-instruct's config.json with its longrope
`rope_scaling` (two arrays of 64 factors, not available offline) set to null: RoPE scaling sets the rotation
frequencies, not the work. gpt-oss-120b.json is gpt-oss-20b's config with gpt-oss-120b's 36 layers and 128 experts
(its other sizes are the same: hidden and expert width 2880, 64 query and 8 KV heads of 64, top-4)."""

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
OWN_CONFIGS = Path(__file__).parent / "data" / "model_configs"  # read into torchsim's own Llama definition
TOKENS = 64


def _count(c: dict[str, Any]) -> tuple[int, int]:
    """(parameters, GEMM FLOPs of a TOKENS-token prefill step with the LM head on the last token) from the
    config alone, for the families below."""
    if "kv_lora_rank" in c:
        return _count_mla(c)
    h, layers, vocab, mt = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["model_type"]
    nq = c["num_attention_heads"]
    nkv = c.get("num_key_value_heads", nq)
    hd = c.get("head_dim") or h // nq
    proj = 2 * h * nq * hd + 2 * h * nkv * hd  # q, o and k, v
    extra = {"qwen2": nq * hd + 2 * nkv * hd,  # q/k/v biases
             "qwen3": 2 * hd, "qwen3_moe": 2 * hd, "gemma3_text": 2 * hd,  # q/k RMSNorm per head
             "olmo2": nq * hd + nkv * hd,  # q/k RMSNorm over all heads
             "gpt_oss": nq * hd + 2 * nkv * hd + h + nq,  # q/k/v/o biases, one sink per head
             "phimoe": nq * hd + 2 * nkv * hd + h + 2 * h}.get(mt, 0)  # q/k/v/o biases, the 2 LayerNorms' biases
    norms = 4 if mt in ("gemma2", "gemma3_text") else 2  # Gemma: pre/post norms around attention and MLP
    if "num_experts" in c:
        e, k, mi = c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
        mlp_params, mlp_flops = e * 3 * h * mi + e * h, 2 * (k * 3 * h * mi + e * h)
    elif mt == "phimoe":  # experts (gate_up, down) without biases, a router without one
        e, k, mi = c["num_local_experts"], c["num_experts_per_tok"], c["intermediate_size"]
        mlp_params, mlp_flops = e * 3 * h * mi + e * h, 2 * (k * 3 * h * mi + e * h)
    elif mt == "gpt_oss":  # experts with biases (gate_up, down), a router with a bias
        e, k, mi = c["num_local_experts"], c["num_experts_per_tok"], c["intermediate_size"]
        mlp_params, mlp_flops = e * (3 * h * mi + 2 * mi + h) + e * h + e, 2 * (k * 3 * h * mi + e * h)
    else:  # SwiGLU / GeGLU (gate, up, down), or StarCoder2's plain c_fc -> gelu -> c_proj
        mlp_params = (2 if mt == "starcoder2" else 3) * h * c["intermediate_size"]
        mlp_flops = 2 * mlp_params
    tied = c.get("tie_word_embeddings", AutoConfig.for_model(mt).tie_word_embeddings)  # or its default
    params = vocab * h + layers * (proj + extra + mlp_params + norms * h) + h + (0 if tied else vocab * h)
    params += (h + vocab) if mt == "phimoe" else 0  # the final LayerNorm's bias, the LM head's bias
    flops = TOKENS * layers * (2 * proj + mlp_flops) + 2 * vocab * h
    return params, flops


def _count_mla(c: dict[str, Any]) -> tuple[int, int]:
    """DeepSeek-V2/V3: MLA projections (q directly or through its LoRA pair, the joint latent kv_a projection,
    the kv_b up-projection a prefill applies to every token, o), the first dense layers, then routed experts +
    shared experts + router; a prefill decompresses the latent (kv_b on every token)."""
    h, layers, vocab, nq = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"], c["num_attention_heads"]
    dn, dr, dv, r, ql = (c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"], c["kv_lora_rank"],
                         c["q_lora_rank"])
    q = h * nq * (dn + dr) if ql is None else h * ql + ql * nq * (dn + dr)
    attn_gemm = q + h * (r + dr) + r * nq * (dn + dv) + nq * dv * h
    attn_params = attn_gemm + r + (ql or 0)  # + the kv_a (and q_a) RMSNorm weights
    dense = c["first_k_dense_replace"]
    e, k, mi = c["n_routed_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"]
    shared = c["n_shared_experts"]
    dense_mlp = 3 * h * c["intermediate_size"]
    moe_params = e * 3 * h * mi + e * h + shared * 3 * h * mi
    moe_flops = 2 * (k * 3 * h * mi + e * h + shared * 3 * h * mi)
    params = (2 * vocab * h + h + layers * (attn_params + 2 * h) + dense * dense_mlp
              + (layers - dense) * moe_params)
    flops = (TOKENS * (layers * 2 * attn_gemm + dense * 2 * dense_mlp + (layers - dense) * moe_flops)
             + 2 * vocab * h)
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
    _assert_counts(build_model(cfg), data)


@pytest.mark.parametrize("path", sorted(OWN_CONFIGS.glob("*.json")), ids=lambda p: p.stem)
def test_own_family_configs_match_the_count_too(path: Path) -> None:
    _assert_counts(build_model(get_config(path)), json.loads(path.read_text()))


def test_tied_embeddings_drop_the_lm_head_weights() -> None:
    """Llama 3.2 1B ties its LM head to the embedding: 1.24 B parameters, not 1.50 B (the head still runs)."""
    path = OWN_CONFIGS / "llama-3.2-1b.json"
    data = json.loads(path.read_text())
    assert data["tie_word_embeddings"] is True
    wb = weight_bytes(build_model(get_config(path)), WeightPrecision.MODEL)
    assert wb / 2 == pytest.approx(1.236e9, rel=0.01)
    untied = {**data, "tie_word_embeddings": False}
    assert _count(untied)[0] - _count(data)[0] == data["vocab_size"] * data["hidden_size"]


def _assert_counts(model: Any, data: dict[str, Any]) -> None:
    """Weight bytes and a TOKENS-token prefill's GEMM FLOPs of `model` within 1% of _count(config)."""
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
    # approximation; a quantised checkpoint in a format torchsim models runs in it (AWQ 4-bit: w4a16), one in
    # another format is still named
    assert get_config(CONFIGS / "phi-3-mini-4k.json").approximations == ()
    assert get_config(CONFIGS / "qwen2.5-7b.json").approximations == ()
    base = json.loads((CONFIGS / "phi-3-mini-4k.json").read_text())
    for name, qc in (("phi3-awq", {"quant_method": "awq", "bits": 4}),
                     ("phi3-bnb", {"quant_method": "bitsandbytes", "load_in_4bit": True})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({**base, "quantization_config": qc}))
    awq = get_config(tmp_path / "phi3-awq" / "config.json")
    assert awq.quant == "w4a16" and awq.approximations == ()
    path = tmp_path / "phi3-bnb" / "config.json"
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


def _plans(name: str, preset: str = "serving") -> tuple[Any, Any, Any]:
    model = build_model(get_config(CONFIGS / f"{name}.json", approximate=True))
    plan._plan_graph.cache_clear()
    prefill = plan.plan_model(model, batch=2, q_len=32, past_len=0, preset=preset)
    decode = plan.plan_model(model, batch=2, q_len=1, past_len=96, preset=preset)
    plan._plan_graph.cache_clear()
    assert not prefill.unsupported and not decode.unsupported
    return model, prefill, decode


def _kinds(p: Any, kind: KernelKind) -> list[Any]:
    return [c for c in p.calls if c.kind is kind]


@pytest.mark.parametrize("preset", ["serving", "eager"])
def test_gemma2_attention_is_one_softcapped_kernel(preset: str) -> None:
    data = json.loads((CONFIGS / "gemma-2-9b.json").read_text())
    _, prefill, decode = _plans("gemma-2-9b", preset)
    layers, cap = data["num_hidden_layers"], data["attn_logit_softcapping"]
    pre, dec = _kinds(prefill, KernelKind.ATTENTION_PREFILL), _kinds(decode, KernelKind.ATTENTION_DECODE)
    assert len(pre) == len(dec) == layers
    assert all(c.p("softcap") == cap and c.p("causal") and c.p("head_dim") == 256 for c in pre)
    assert all(c.p("softcap") == cap and c.p("seq_kv") == 97 and c.p("heads_kv") == 8 for c in dec)
    assert not _kinds(prefill, KernelKind.SOFTMAX) and not _kinds(decode, KernelKind.SOFTMAX)  # no eager scores
    if preset == "serving":  # GeGLU as one act-and-mul kernel; Gemma's (1 + weight) norms fused, 4 a layer
        acts = _kinds(prefill, KernelKind.SILU_MUL)
        assert len(acts) == layers and all(c.name.endswith("gelu_mul") for c in acts)
        norms = _kinds(prefill, KernelKind.RMSNORM) + _kinds(prefill, KernelKind.ADD_RMSNORM)
        assert len(norms) == 4 * layers + 1
        assert not [c for c in prefill.calls if "layernorm" in c.name and c.kind is KernelKind.ELEMENTWISE]


def test_gemma3_layers_read_the_rotary_table_of_their_kind() -> None:
    data = json.loads((CONFIGS / "gemma-3-1b.json").read_text())
    model, prefill, decode = _plans("gemma-3-1b")
    kinds = model.head.layer_types
    assert sorted(kinds) == ["full_attention", "sliding_attention"]
    pattern = data["sliding_window_pattern"]  # every 6th layer global, the others local
    for i, layer in enumerate(model.layers):
        want = "full_attention" if (i + 1) % pattern == 0 else "sliding_attention"
        assert kinds[layer.rope_index] == want
    assert len(_kinds(prefill, KernelKind.ATTENTION_PREFILL)) == data["num_hidden_layers"]
    assert len(_kinds(decode, KernelKind.ATTENTION_DECODE)) == data["num_hidden_layers"]
    assert len(_kinds(prefill, KernelKind.ROPE)) == data["num_hidden_layers"]


@pytest.mark.parametrize("preset", ["serving", "eager"])
def test_gpt_oss_attention_has_sinks_and_moe_routes(preset: str) -> None:
    data = json.loads((CONFIGS / "gpt-oss-20b.json").read_text())
    _, prefill, decode = _plans("gpt-oss-20b", preset)
    layers = data["num_hidden_layers"]
    for p, kind in ((prefill, KernelKind.ATTENTION_PREFILL), (decode, KernelKind.ATTENTION_DECODE)):
        attn = _kinds(p, kind)
        assert len(attn) == layers and all(c.p("sinks") and c.p("heads_q") == 64 for c in attn)
        gemms = _kinds(p, KernelKind.GROUPED_GEMM)
        assert len(gemms) == 2 * layers
        tokens = 2 * (32 if p is prefill else 1)
        assert all(sum(c.p("tokens_per_expert")) == tokens * data["num_experts_per_tok"] for c in gemms)
        assert all(len(c.p("tokens_per_expert")) == data["num_local_experts"] for c in gemms)
    if preset == "serving":
        assert len(_kinds(prefill, KernelKind.ROPE)) == layers  # the chunked rotation as one RoPE kernel
        assert len(_kinds(prefill, KernelKind.SILU_MUL)) == layers  # the clamped SwiGLU between expert GEMMs
        assert len(_kinds(prefill, KernelKind.ROUTER_TOPK)) == layers


@pytest.mark.parametrize(("name", "preset"), [("deepseek-v2-lite", "serving"), ("deepseek-v2-lite", "eager"),
                                              ("deepseek-v3", "serving")])
def test_deepseek_decodes_with_flash_mla_and_prefills_decompressed(name: str, preset: str) -> None:
    data = json.loads((CONFIGS / f"{name}.json").read_text())
    _, prefill, decode = _plans(name, preset)
    layers, heads = data["num_hidden_layers"], data["num_attention_heads"]
    mla = _kinds(decode, KernelKind.MLA_DECODE)
    assert len(mla) == layers and not _kinds(decode, KernelKind.ATTENTION_DECODE)
    assert all((c.p("head_dim"), c.p("head_dim_v"), c.p("heads_q"), c.p("seq_kv")) == (576, 512, heads, 97)
               for c in mla)
    pre = _kinds(prefill, KernelKind.ATTENTION_PREFILL)
    dk = data["qk_nope_head_dim"] + data["qk_rope_head_dim"]
    assert len(pre) == layers and all((c.p("head_dim"), c.p("head_dim_v"), c.p("heads_kv")) ==
                                      (dk, data["v_head_dim"], heads) for c in pre)
    # decode absorbs W_UK / W_UV: two per-head batched GEMMs over the tokens a layer; prefill has none
    absorbed = [c for c in _kinds(decode, KernelKind.GEMM) if c.p("batch", 1) == heads]
    assert len(absorbed) == 2 * layers
    assert not [c for c in _kinds(prefill, KernelKind.GEMM) if c.p("batch", 1) == heads]
    moe = layers - data["first_k_dense_replace"]
    gemms = _kinds(decode, KernelKind.GROUPED_GEMM)
    assert len(gemms) == 2 * moe and all(len(c.p("tokens_per_expert")) == data["n_routed_experts"] for c in gemms)
    if preset == "serving":  # one routing kernel over all experts (group-limited for V3)
        routers = _kinds(decode, KernelKind.ROUTER_TOPK)
        assert len(routers) == moe
        assert all((c.p("experts"), c.p("top_k")) == (data["n_routed_experts"], data["num_experts_per_tok"])
                   for c in routers)


def test_the_fused_attention_op_is_the_eager_math() -> None:
    import torch

    from torchsim.lowering.attention_ops import attention_reference

    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 7, 8), torch.randn(1, 2, 7, 8)
    plain = attention_reference(q, k, v, None, 0.3, True, 0.0, 0)
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), scale=0.3,
        attn_mask=torch.ones(5, 7, dtype=torch.bool).tril(2))
    assert torch.allclose(plain, sdpa, atol=1e-5)
    capped = attention_reference(q, k, v, None, 0.3, True, 0.5, 0)  # a cap flattens the scores
    assert not torch.allclose(capped, plain, atol=1e-3)
    sunk = attention_reference(q, k, v, torch.full((4,), 30.0), 0.3, True, 0.0, 0)  # a large sink takes the mass
    assert sunk.abs().max() < 1e-6


@pytest.mark.parametrize("q_len", [1, 3])
def test_mla_as_served_computes_what_the_hf_attention_computes(q_len: int) -> None:
    """torchsim's MLA forward (decode: absorbed W_UK/W_UV over the latent cache; prefill: decompressed MHA)
    equals DeepSeek-V2's own eager attention on real tensors (positions at 0, where both rotary layouts are the
    identity)."""
    import torch
    from transformers.models.deepseek_v2.modeling_deepseek_v2 import DeepseekV2Attention

    from torchsim.models.hf_segments import _LayerCache, _mla_forward

    cfg = AutoConfig.for_model("deepseek_v2", hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                               kv_lora_rank=32, q_lora_rank=None, qk_rope_head_dim=16, qk_nope_head_dim=16,
                               v_head_dim=8, num_hidden_layers=1, vocab_size=64, rope_scaling=None)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    attn = DeepseekV2Attention(cfg, 0).float()
    for p in attn.parameters():
        torch.nn.init.normal_(p, std=0.3)
    past = 5 if q_len == 1 else 0
    x = torch.randn(2, q_len, 64)
    c_kv, k_pe = torch.randn(2, 1, past, 32), torch.randn(2, 1, past, 16)
    mask = torch.full((q_len, past + q_len), float("-inf")).triu(past + 1)[None, None]
    want, _ = DeepseekV2Attention.forward(attn, x, attention_mask=mask, cache=_LayerCache(c_kv, k_pe),
                                          position_embeddings=torch.ones(2, q_len, 8, dtype=torch.complex64))
    got, _ = _mla_forward(attn, x, cache=_LayerCache(c_kv, k_pe),
                          position_embeddings=(torch.ones(2, q_len, 16), torch.zeros(2, q_len, 16)))
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-4)


def test_mla_caches_one_latent_row_per_token() -> None:
    data = json.loads((CONFIGS / "deepseek-v2-lite.json").read_text())
    cfg = get_config(CONFIGS / "deepseek-v2-lite.json")
    row = data["kv_lora_rank"] + data["qk_rope_head_dim"]  # 512 + 64, not K and V of 16 heads
    assert cfg.kv_bytes_per_token(2) == data["num_hidden_layers"] * row * 2
    assert get_config(CONFIGS / "qwen3-8b.json").kv_bytes_per_token(2) == 2 * 36 * 8 * 128 * 2


def test_moe_families_plan_in_the_eager_preset() -> None:
    """The in-place renormalisation and index math of HF's MoE blocks have lowerings (Qwen3-MoE's div_)."""
    _, prefill, decode = _plans("qwen3-30b-a3b", "eager")
    assert _kinds(prefill, KernelKind.GROUPED_GEMM) and _kinds(decode, KernelKind.GROUPED_GEMM)


def test_gemma2_sliding_layers_carry_their_window_into_the_fused_attention() -> None:
    path = CONFIGS / "gemma-2-9b.json"
    window = json.loads(path.read_text())["sliding_window"]
    cfg = get_config(path, approximate=True)
    plan._plan_graph.cache_clear()
    got = plan.plan_model(build_model(cfg), batch=1, q_len=2 * window, past_len=0)
    plan._plan_graph.cache_clear()
    attn = [c for c in got.calls if c.kind is KernelKind.ATTENTION_PREFILL]
    # sliding and global layers alternate, the sliding ones starting
    assert [c.p("window", 0) for c in attn] == [window, 0] * (cfg.num_hidden_layers // 2)
    assert all(c.p("softcap", 0) > 0 for c in attn)


@pytest.mark.parametrize("name", ["gemma-2-9b", "phi-3-mini-4k"])
def test_families_run_on_a_wormhole_without_roofline_kernels(name: str) -> None:
    """Gemma-2's logit soft-capping (a divide by a scalar and a tanh) has Tensix costs (before, its kernels fell
    back to rooflines); so does the LM head of a large vocabulary, split as tt_transformers splits it. Phi-3's
    partial-rotary form (the rotated part concatenated back beside the rest) is one rotary op, no concat."""
    import torchsim

    p = torchsim.predict(str(CONFIGS / f"{name}.json"), "wormhole-n150", prompt_len=64, decode_steps=1, cache=False)
    assert p.stats["fallback_kernels"] == 0, [k.name for k in p.kernels if k.fallback][:5]
    ops = {dict(k.params).get("op") for k in p.kernels if k.kind == "elementwise"}
    if name.startswith("gemma"):
        assert {"div", "tanh"} <= ops
    else:
        assert "cat" not in ops and any(k.kind == "rope" for k in p.kernels)


def test_phi3_head_dim_96_attention_is_simulated_on_every_gpu() -> None:
    """Phi-3/3.5-mini's heads are 96 wide, a head dim FlashAttention-2 (run_mha_fwd_hdim96), -3 (hopper/
    tile_size.h `headdim <= 96`) and -4 (its 8..128 range) all instantiate: prefill and decode attention run
    their templates (before, both fell back to a roofline estimate on every GPU)."""
    import torchsim

    for hw in ("a100-sxm", "h100-sxm", "b200"):
        p = torchsim.predict(str(CONFIGS / "phi-3-mini-4k.json"), hw, prompt_len=256, decode_steps=1, cache=False)
        attn = [k for k in p.kernels if k.kind in ("attention_prefill", "attention_decode")]
        assert attn and all(dict(k.params)["head_dim"] == 96 for k in attn)
        assert p.stats["fallback_kernels"] == 0, (hw, [k.name for k in p.kernels if k.fallback][:5])


@pytest.mark.parametrize("preset", ["serving", "eager"])
def test_phimoe_sparsemixer_runs_as_the_ops_vllm_launches(preset: str) -> None:
    """Phi-3.5-MoE's router (sparsemixer: two masked maxima, no top-k op) is no fused routing kernel in vLLM
    (phimoe_routing_function runs it as torch ops): its maxima, masks and softmaxes keep their own kernels, and
    the experts still run as two grouped GEMMs per layer routing each token to 2 of 16 experts."""
    data = json.loads((CONFIGS / "phi-3.5-moe.json").read_text())
    _, prefill, decode = _plans("phi-3.5-moe", preset)
    for p, tokens in ((prefill, 2 * 32), (decode, 2)):
        assert not _kinds(p, KernelKind.ROUTER_TOPK)
        router = [c for c in p.calls if c.layer == 0 and ".router." in f"{c.name}."]
        assert {KernelKind.SOFTMAX, KernelKind.REDUCE} <= {c.kind for c in router} and len(router) > 10
        grouped = [c for c in _kinds(p, KernelKind.GROUPED_GEMM) if c.layer == 0]
        assert len(grouped) == 2
        assert all(sum(c.p("tokens_per_expert")) == tokens * data["num_experts_per_tok"] for c in grouped)
        assert all(len(c.p("tokens_per_expert")) == data["num_local_experts"] for c in grouped)


def test_phi3_fused_projections_run_as_tt_transformers_splits_them() -> None:
    """tt_transformers splits Phi-3's fused qkv_proj and gate_up_proj at load (load_checkpoints.split_hf_keys) into
    its wqkv and its w1 / w3: on a Wormhole the QKV matmul takes the WQKV format (bfp8_b) and the heads ops after it,
    the gate-up projection runs as two matmuls of half the columns in FF1/FF3's format (bfp4_b, LoFi)."""
    import torchsim

    data = json.loads((CONFIGS / "phi-3-mini-4k.json").read_text())
    p = torchsim.predict(str(CONFIGS / "phi-3-mini-4k.json"), "wormhole-n150", prompt_len=64, decode_steps=1,
                         cache=False)
    layer0 = {k.name.split(".", 2)[-1]: dict(k.params) for k in p.step_kernels("decode") if k.layer == 0}
    assert layer0["self_attn.qkv_proj"]["in1_dtype"] == "bfp8_b"
    assert "self_attn.qkv_proj.nlp_create_qkv_heads_decode" in layer0
    for half in ("w1", "w3"):
        prm = layer0[f"mlp.gate_up_proj.{half}"]
        assert (prm["n"], prm["in1_dtype"], prm["fidelity"]) == (data["intermediate_size"], "bfp4_b", "LoFi")


@pytest.mark.parametrize("name", ["stablelm-2-1.6b", "phi-3-mini-4k"])
def test_partial_rotary_is_one_rope_kernel_in_serving(name: str) -> None:
    """HF's partial-rotary form puts the rotated dims back beside the rest (`cat([rotated, x_pass])`; Phi-3's
    x_pass is empty). vLLM's rotary kernel rotates the first rotary_dim dims in place: in the serving plan that cat
    is part of the one RoPE kernel, over the rotary dims only; HF eager really launches it."""
    data = json.loads((CONFIGS / f"{name}.json").read_text())
    head_dim = data["hidden_size"] // data["num_attention_heads"]
    rotary = int(head_dim * data.get("partial_rotary_factor", 1.0))
    _, prefill, _ = _plans(name, "serving")
    layer0 = [c for c in prefill.calls if c.layer == 0]
    assert [c.p("head_dim") for c in layer0 if c.kind is KernelKind.ROPE] == [rotary]
    assert not [c for c in layer0 if c.kind is KernelKind.ELEMENTWISE and c.p("op", "") == "cat"
                and "self_attn" in c.name]
    _, eager, _ = _plans(name, "eager")
    assert [c for c in eager.calls if c.layer == 0 and c.p("op", "") == "cat" and "self_attn" in c.name]
