"""torchsim's Mixtral: configs, meta build, export with static grouped_mm, numerics of the grouped experts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from torchsim.models.mixtral import (
    GroupedExperts,
    MixtralConfig,
    MixtralForCausalLM,
    TopKRouter,
    build_mixtral,
    mixtral_config,
)
from torchsim.models.registry import build_model, get_config, model_names

GROUPED_MM = torch.ops.aten._grouped_mm.default


def _export_one_layer(name: str, batch: int, q_len: int, past: int) -> torch.export.ExportedProgram:
    model = build_mixtral(mixtral_config(name).with_layers(1))
    return torch.export.export(model, (), kwargs=model.step_inputs(batch, q_len, past))


def _shapes(node: torch.fx.Node) -> list[tuple[int, ...]]:
    return [tuple(a.meta["val"].shape) for a in node.args if isinstance(a, torch.fx.Node)]


def test_named_config_matches_published_parameter_counts() -> None:
    cfg = get_config("mixtral-8x7b")
    assert isinstance(cfg, MixtralConfig) and "mixtral-8x7b" in model_names()
    with torch.device("meta"):
        model = MixtralForCausalLM(cfg)
    counted = sum(p.numel() for p in model.parameters())
    assert counted == cfg.param_count()
    # Mistral AI's Mixtral 8x7B announcement: 46.7B total parameters, 12.9B used per token.
    assert round(counted / 1e9, 1) == 46.7 and round(cfg.active_param_count() / 1e9, 1) == 12.9
    assert all(p.device.type == "meta" for p in model.parameters())


@pytest.mark.parametrize(("batch", "q_len", "past"), [(1, 128, 0), (4, 1, 1024)])
def test_export_shows_two_static_grouped_gemms(batch: int, q_len: int, past: int) -> None:
    ep = _export_one_layer("mixtral-8x7b", batch, q_len, past)
    gmm = [n for n in ep.graph.nodes if n.target is GROUPED_MM]
    rows = batch * q_len * 2  # every token copied to its top-2 experts
    assert [_shapes(n) for n in gmm] == [[(rows, 4096), (8, 4096, 2 * 14336), (8,)],
                                        [(rows, 14336), (8, 14336, 4096), (8,)]]
    assert all(isinstance(d, int) for n in gmm for d in n.meta["val"].shape)  # no symbolic sizes
    assert {list(n.meta["nn_module_stack"].values())[-1][0] for n in gmm} == {"layers.0.mlp.experts"}
    topk = [n for n in ep.graph.nodes if n.target is torch.ops.aten.topk.default]
    assert [list(n.meta["nn_module_stack"].values())[-1][0] for n in topk] == ["layers.0.mlp.gate"]


def test_grouped_experts_match_a_per_token_loop() -> None:
    torch.manual_seed(0)
    router, experts = TopKRouter(32, 4, 2), GroupedExperts(32, 48, 4)
    h = torch.randn(10, 32)
    weights, indices = router(h)
    with torch.no_grad():
        got = experts(h, weights, indices)
        want = torch.zeros_like(h)
        for t in range(h.shape[0]):
            for j in range(2):
                e = int(indices[t, j])
                gate, up = (experts.gate_up_proj[e] @ h[t]).chunk(2)
                want[t] += weights[t, j] * (experts.down_proj[e] @ (F.silu(gate) * up))
    assert torch.allclose(got, want, atol=1e-5)
    assert torch.allclose(weights.sum(-1), torch.ones(10))


def test_cpu_model_runs_on_real_tokens() -> None:
    model = build_mixtral("mixtral-micro", device="cpu", dtype=torch.float32)
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    first, second = model.run_prefill(tokens), model.run_prefill(tokens)
    assert first.shape == (2, 1) and torch.equal(first, second)
    assert int(first.max()) < 256


def test_registry_builds_and_reads_hf_style_config(tmp_path: Path) -> None:
    assert type(build_model("mixtral-micro")).__name__ == "MixtralForCausalLM"
    data = {"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100, "max_position_embeddings": 256,
            "num_local_experts": 6, "num_experts_per_tok": 2, "rope_theta": 1e6}
    (tmp_path / "config.json").write_text(json.dumps(data))
    cfg = get_config(tmp_path / "config.json")
    assert isinstance(cfg, MixtralConfig)
    assert (cfg.num_local_experts, cfg.num_hidden_layers, cfg.head_dim_value) == (6, 3, 16)
    del data["num_key_value_heads"], data["vocab_size"]
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"missing field\(s\) \['num_key_value_heads', 'vocab_size'\]"):
        get_config(tmp_path / "config.json")


@pytest.mark.parametrize(("change", "message"), [
    ({"num_experts_per_tok": 9}, "num_experts_per_tok \\(9\\) exceeds num_local_experts \\(8\\)"),
    ({"num_local_experts": 0}, "'num_local_experts' must be a positive integer"),
    ({"num_key_value_heads": 5}, "multiple of num_key_value_heads"),
])
def test_bad_configs_are_named(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        replace(mixtral_config("mixtral-tiny"), **change)


def test_unknown_name_lists_known_ones() -> None:
    with pytest.raises(KeyError, match="mixtral-8x7b"):
        mixtral_config("mixtral-9x9b")


def test_plan_sizes_each_grouped_gemm_from_the_routing() -> None:
    """Integration with lowering.plan: every layer's two grouped GEMMs get that layer's counts, scaled to the step."""
    from torchsim.lowering.plan import plan_model
    from torchsim.models.routing import RoutingCounts

    cfg = mixtral_config("mixtral-micro")  # 2 layers, 4 experts, top-2
    routing = RoutingCounts(((8, 4, 4, 0), (2, 2, 6, 6)), num_experts=4, top_k=2, tokens=8, source="test")
    plan = plan_model(build_mixtral(cfg), batch=2, q_len=8, past_len=0, routing=routing, fallback=True)
    grouped = [c for c in plan.calls if c.kind.value == "grouped_gemm"]
    assert [(c.layer, c.p("tokens_per_expert"), c.p("n"), c.p("k")) for c in grouped] == [
        (0, (16, 8, 8, 0), 2 * 128, 64), (0, (16, 8, 8, 0), 64, 128),
        (1, (4, 4, 12, 12), 2 * 128, 64), (1, (4, 4, 12, 12), 64, 128)]


@pytest.fixture
def serving_with_moe() -> Iterator[None]:
    """The serving preset, with the MoE patterns torchsim.models registers on import in front."""
    from torchsim.lowering import patterns, plan
    from torchsim.models.moe_patterns import moe_serving_patterns

    assert {b for _, b in moe_serving_patterns()} <= {b for _, b in patterns.PRESETS["serving"]}
    plan._plan_graph.cache_clear()
    yield
    plan._plan_graph.cache_clear()


def moe_block_kernels(block: Any, tokens: int, hidden: int) -> list[tuple[str, str]]:
    """(kind, name suffix) of the serving kernels of one MoE block captured on its own."""
    from torchsim.lowering.capture import capture_module
    from torchsim.lowering.plan import plan_graph

    x = torch.empty(1, tokens, hidden, dtype=torch.bfloat16, device="meta")
    calls = plan_graph(capture_module(block, (x,)), "serving").calls
    return [(c.kind.value, c.name.rsplit(".", 1)[-1]) for c in calls]


def test_serving_moe_block_is_the_fused_moe_kernel_sequence(serving_with_moe: None) -> None:
    model = build_mixtral(mixtral_config("mixtral-8x7b").with_layers(1))
    assert moe_block_kernels(model.layers[0].mlp, 128, 4096) == [
        ("gemm", "gate"), ("router_topk", "topk_softmax"), ("elementwise", "moe_align"),
        ("grouped_gemm", "experts"), ("silu_mul", "silu_mul"), ("grouped_gemm", "experts"),
        ("reduce", "moe_sum")]
    from torchsim.lowering.plan import plan_model

    plan = plan_model(build_mixtral("mixtral-micro"), batch=1, q_len=8, past_len=0)  # no fallback needed
    assert not plan.unsupported and plan.kinds()["grouped_gemm"] == 4
