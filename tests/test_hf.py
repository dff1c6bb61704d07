"""HF transformers models (the optional `hf` extra): config mapping, meta build + export, routing from checkpoints.

Skipped, with the reason printed by `pytest -rs`, when transformers is not installed.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from torchsim.models.llama import LlamaConfig, LlamaForCausalLM
from torchsim.models.mixtral import build_mixtral, mixtral_config
from torchsim.models.registry import get_config


def test_missing_transformers_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchsim.models import hf

    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ImportError, match=r"pip install 'torchsim\[hf\]'"):
        hf.require_transformers()


transformers = pytest.importorskip("transformers", minversion="5.0",
                                   reason="transformers>=5 not installed (optional extra torchsim[hf])")
from torchsim.models import hf  # noqa: E402  (after the skip: needs transformers)
from torchsim.models.moe_patterns import moe_serving_patterns  # noqa: E402

LINEAR, SDPA, GROUPED_MM = (torch.ops.aten.linear.default, torch.ops.aten.scaled_dot_product_attention.default,
                            torch.ops.aten._grouped_mm.default)


def _signature(ep: torch.export.ExportedProgram) -> Counter[tuple[object, ...]]:
    """Op kind + operand shapes of the compute ops that become kernels (GEMMs, attention, grouped GEMMs)."""
    sig: Counter[tuple[object, ...]] = Counter()
    for n in ep.graph.nodes:
        if n.target in (LINEAR, SDPA, GROUPED_MM):
            shapes = tuple(tuple(a.meta["val"].shape) for a in n.args[:3] if isinstance(a, torch.fx.Node))
            sig[(str(n.target), shapes, bool(n.kwargs.get("enable_gqa", False)))] += 1
    return sig


def test_config_mapping_round_trips() -> None:
    for name in ("llama3-8b", "mixtral-8x7b"):
        cfg = get_config(name)
        hf_cfg = hf.to_hf_config(cfg)
        assert hf_cfg.hidden_size == cfg.hidden_size and hf_cfg.num_key_value_heads == cfg.num_key_value_heads
        assert hf_cfg.rope_parameters["rope_theta"] == cfg.rope_theta
        assert hf.from_hf_config(hf_cfg, name) == cfg
    mix = hf.to_hf_config(get_config("mixtral-8x7b"))
    assert (mix.num_local_experts, mix.num_experts_per_tok, mix._experts_implementation) == (8, 2, "grouped_mm")


@pytest.mark.parametrize("past", [0, 256])
def test_hf_llama_exports_on_meta_like_torchsim_llama(past: int) -> None:
    cfg = replace(get_config("llama3-8b"), num_hidden_layers=1)
    q_len = 1 if past else 128
    model = hf.build_hf_model(cfg)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert all(p.device.type == "meta" for p in model.parameters())
    ep_hf = hf.export_hf(model, 2, q_len, past)
    with torch.device("meta"):
        own = LlamaForCausalLM(cfg)
    ep_own = torch.export.export(own, (), kwargs=own.step_inputs(2, q_len, past))
    assert _signature(ep_hf) == _signature(ep_own)
    sdpa = [k for k in _signature(ep_hf) if "scaled_dot_product" in str(k[0])]
    assert sdpa == [(str(SDPA), ((2, 32, q_len, 128), (2, 8, past + q_len, 128), (2, 8, past + q_len, 128)), True)]


def test_hf_mixtral_grouped_gemms_match_torchsim_mixtral() -> None:
    cfg = mixtral_config("mixtral-8x7b").with_layers(1)
    model = hf.build_hf_model(cfg)
    ep_hf = hf.export_hf(model, 1, 64)
    own = build_mixtral(cfg)
    ep_own = torch.export.export(own, (), kwargs=own.step_inputs(1, 64, 0))
    sig_hf, sig_own = _signature(ep_hf), _signature(ep_own)
    assert sig_hf == sig_own
    assert sum(v for k, v in sig_hf.items() if k[0] == str(GROUPED_MM)) == 2


def _tiny_hf_mixtral() -> Any:
    cfg = hf.to_hf_config(mixtral_config("mixtral-tiny"))
    torch.manual_seed(0)
    return transformers.MixtralForCausalLM(cfg).eval()


def test_routing_recorded_from_a_local_checkpoint(tmp_path: Path) -> None:
    from torchsim.models.routing_hook import find_routers, record_routing, record_routing_from_checkpoint

    model = _tiny_hf_mixtral()
    assert [r.name for r in find_routers(model)] == ["model.layers.0.mlp.gate", "model.layers.1.mlp.gate"]
    tokens = torch.randint(0, 1000, (4, 64), generator=torch.Generator().manual_seed(2))
    in_memory = record_routing(model, [tokens])
    model.save_pretrained(tmp_path / "ckpt")
    loaded = record_routing_from_checkpoint(tmp_path / "ckpt", tokens, batch_tokens=128, dtype=torch.float32)
    print("\n" + loaded.describe())
    assert loaded.counts == in_memory.counts
    assert all(sum(row) == 256 * 2 for row in loaded.counts) and loaded.tokens == 256
    with pytest.raises(FileNotFoundError, match="no config.json"):
        record_routing_from_checkpoint(tmp_path, tokens)


def test_hf_llama_config_json_is_read_by_the_registry(tmp_path: Path) -> None:
    cfg = replace(get_config("llama3-8b"), name="ckpt")
    hf.to_hf_config(cfg).save_pretrained(tmp_path / "ckpt")  # v5 writes rope_parameters, not rope_theta
    loaded = get_config(tmp_path / "ckpt" / "config.json")
    assert isinstance(loaded, LlamaConfig)
    assert (loaded.hidden_size, loaded.num_key_value_heads, loaded.intermediate_size) == (4096, 8, 14336)


def test_hf_moe_block_plans_like_torchsim_moe_block() -> None:
    from test_mixtral import moe_block_kernels

    from torchsim.lowering import patterns, plan
    from torchsim.models.moe_patterns import moe_serving_patterns

    assert {b for _, b in moe_serving_patterns()} <= {b for _, b in patterns.PRESETS["serving"]}
    plan._plan_graph.cache_clear()
    cfg = mixtral_config("mixtral-8x7b").with_layers(1)
    ours = moe_block_kernels(build_mixtral(cfg).layers[0].mlp, 64, 4096)
    theirs = moe_block_kernels(hf.build_hf_model(cfg).model.layers[0].mlp, 64, 4096)
    plan._plan_graph.cache_clear()
    assert [k for k, _ in theirs] == [k for k, _ in ours]
    assert ("reduce", "moe_sum") in theirs and ("router_topk", "topk_softmax") in theirs


# --- HF models in torchsim's segment protocol -----------------------------------------------------------------

Caches = list[torch.Tensor]


def _run_segments(seg: Any, tokens: torch.Tensor, past_k: Caches | None = None,
                  past_v: Caches | None = None) -> tuple[torch.Tensor, Caches, Caches]:
    b, q = tokens.shape
    past = 0 if past_k is None else past_k[0].shape[2]
    cfg = seg.config
    empty = torch.zeros(b, cfg.num_key_value_heads, 0, cfg.head_dim_value)
    x, cos, sin = seg.head(tokens, torch.arange(past, past + q).expand(b, q))
    ks, vs = [], []
    for i, layer in enumerate(seg.layers):
        x, k, v = layer(x, cos, sin, empty if past_k is None else past_k[i], empty if past_v is None else past_v[i])
        ks.append(k)
        vs.append(v)
    return seg.tail(x), ks, vs


@pytest.mark.parametrize("name", ["llama-tiny", "mixtral-micro"])
def test_segments_compute_what_the_hf_model_computes(name: str) -> None:
    from torchsim.models.hf_segments import HFSegmented

    torch.manual_seed(0)
    model = hf.build_hf_model(name, device="cpu", dtype=torch.float32)
    seg = HFSegmented(model)
    tokens = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = model(input_ids=tokens, use_cache=False).logits[:, -1:].argmax(-1)
        got, ks, vs = _run_segments(seg, tokens[:, :11])
        step, _, _ = _run_segments(seg, tokens[:, 11:], ks, vs)  # decode the 12th token from an 11-token cache
        chunk, _, _ = _run_segments(seg, tokens[:, 6:], [k[:, :, :6] for k in ks], [v[:, :, :6] for v in vs])
    assert torch.equal(step, want) and torch.equal(chunk, want)
    assert got.shape == (2, 1)


@pytest.mark.parametrize(("name", "q_len", "past"), [("llama3-8b", 512, 0), ("llama3-8b", 1, 1024),
                                                     ("mixtral-8x7b", 512, 0), ("mixtral-8x7b", 1, 1024)])
def test_hf_and_torchsim_models_give_the_same_serving_plan(name: str, q_len: int, past: int) -> None:
    from torchsim.lowering import patterns, plan
    from torchsim.models.hf_segments import HFSegmented
    from torchsim.models.registry import build_model

    assert {b for _, b in moe_serving_patterns()} <= {b for _, b in patterns.PRESETS["serving"]}
    plan._plan_graph.cache_clear()
    cfg = replace(get_config(name), num_hidden_layers=2)
    ours = plan.plan_model(build_model(cfg), batch=2, q_len=q_len, past_len=past)
    theirs = plan.plan_model(HFSegmented(hf.build_hf_model(cfg)), batch=2, q_len=q_len, past_len=past)
    plan._plan_graph.cache_clear()
    key = [(c.kind, c.params, c.name, c.layer, c.phase) for c in ours.calls]
    assert [(c.kind, c.params, c.name, c.layer, c.phase) for c in theirs.calls] == key
    assert not ours.unsupported and not theirs.unsupported
