"""Capture: meta-device export to OpGraphs, module paths and source lines, proved reuse of identical layers."""

from __future__ import annotations

import linecache
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from torchsim.lowering.capture import CaptureError, capture_model, capture_module, clear_memo, structure_signature
from torchsim.models import decoder  # the attention every family shares lives here
from torchsim.models.registry import build_model, get_config

DECODER_FILE = Path(decoder.__file__)


@pytest.fixture(scope="module")
def tiny() -> Any:
    return build_model("llama-tiny")


def _code(source: str) -> str:
    line = int(source.rsplit(":", 1)[1])
    return linecache.getline(str(DECODER_FILE), line)


def test_layer_graph_has_shapes_dtypes_paths_and_source_lines(tiny: Any) -> None:
    cfg = tiny.config
    cap = capture_model(tiny, 2, 8, 0)
    layer = cap.segments[1].graph
    q = next(n for n in layer.nodes if n.module_path == "self_attn.q_proj")
    assert str(q.target) == "aten.linear.default"
    assert q.out[0].shape == (2, 8, cfg.num_attention_heads * cfg.head_dim_value)
    assert q.out[0].dtype.name == "BF16"
    assert q.in_specs[1].shape == (cfg.num_attention_heads * cfg.head_dim_value, cfg.hidden_size)
    assert q.source.startswith("decoder.py:") and "q_proj" in _code(q.source)
    sdpa = next(n for n in layer.nodes if n.op_name == "scaled_dot_product_attention")
    assert sdpa.in_specs[1].shape == (2, cfg.num_key_value_heads, 8, cfg.head_dim_value)
    assert "scaled_dot_product_attention" in _code(sdpa.source)
    assert not any(n.op_name == "_assert_tensor_metadata" for n in layer.nodes)


def test_segments_carry_layer_index_and_reuse_the_first_layer(tiny: Any) -> None:
    clear_memo()
    cap = capture_model(tiny, 1, 4, 0)
    paths = [s.path for s in cap.segments]
    assert paths == ["head", *[f"layers.{i}" for i in range(tiny.config.num_hidden_layers)], "tail"]
    assert [s.layer for s in cap.segments[1:-1]] == list(range(tiny.config.num_hidden_layers))
    assert cap.segments[2].reused_from == "layers.0" and cap.segments[1].reused_from == ""
    assert cap.segments[2].graph is cap.segments[1].graph
    assert cap.exports == 4  # head, first and last layer (the proof), tail
    assert any("layers.0 .. layers.1" in p and "same" in p for p in cap.proofs)
    again = capture_model(tiny, 1, 4, 0)
    assert again.exports == 0  # memoised by structure signature


def test_reuse_false_exports_every_layer_to_the_same_signature(tiny: Any) -> None:
    cap = capture_model(tiny, 1, 4, 0, reuse=False)
    assert cap.exports == 2 + tiny.config.num_hidden_layers
    sigs = {s.graph.signature() for s in cap.segments[1:-1]}
    assert len(sigs) == 1


def test_decode_capture_attends_over_past_plus_new(tiny: Any) -> None:
    cap = capture_model(tiny, 1, 1, 37)
    assert cap.phase == "decode"
    sdpa = next(n for n in cap.segments[1].graph.nodes if n.op_name == "scaled_dot_product_attention")
    assert sdpa.in_specs[0].shape[2] == 1 and sdpa.in_specs[1].shape[2] == 38


def test_structurally_different_layers_are_not_grouped() -> None:
    model = build_model("llama-tiny")
    cfg = model.config
    with torch.device("meta"):
        model.layers[1].mlp.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=True,
                                                  dtype=torch.bfloat16)
    cap = capture_model(model, 1, 4, 0)
    assert cap.segments[2].reused_from == ""
    assert cap.segments[1].graph.signature() != cap.segments[2].graph.signature()


def test_layer_index_attributes_do_not_break_identity() -> None:
    model = build_model("llama-tiny")
    for i, layer in enumerate(model.layers):
        layer.self_attn.layer_idx = i
    sigs = {structure_signature(layer, (1,)) for layer in model.layers}
    assert len(sigs) == 1
    layer = model.layers[0]
    layer.self_attn.num_heads += 1  # a real attribute change is structure
    assert structure_signature(layer, (1,)) != structure_signature(model.layers[1], (1,))


def test_same_structure_but_different_code_is_caught_by_the_op_signature() -> None:
    model = build_model("llama-tiny")
    last = model.layers[-1].mlp
    orig = last.forward
    last.forward = lambda x: orig(x) * 2  # type: ignore[method-assign]  # same modules, one more op
    clear_memo()
    with pytest.raises(CaptureError, match="different op graphs"):
        capture_model(model, 1, 4, 0)
    cap = capture_model(model, 1, 4, 0, reuse=False)
    assert cap.segments[1].graph.signature() != cap.segments[-2].graph.signature()


def test_export_failure_names_the_segment() -> None:
    class Branchy(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.sum() > 0:  # data-dependent control flow cannot be exported
                return x
            return -x

    with pytest.raises(CaptureError, match="mysegment.*Branchy"):
        capture_module(Branchy(), (torch.ones(2, device="meta"),), name="mysegment")


def test_model_without_segments_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="capture_segments"):
        capture_model(nn.Linear(2, 2), 1, 1, 0)


def test_build_allocates_no_weights_and_matches_param_count() -> None:
    cfg = get_config("llama3-8b")
    model = build_model(cfg)
    assert all(p.device.type == "meta" for p in model.parameters())
    assert sum(p.numel() for p in model.parameters()) == cfg.param_count()
    assert 8.0e9 < cfg.param_count() < 8.1e9  # Llama-3-8B: 8.03 B parameters (model card)


def test_a_proof_made_at_one_kv_length_serves_the_next(tiny: Any) -> None:
    clear_memo()
    first = capture_model(tiny, 1, 1, 8)
    second = capture_model(tiny, 1, 1, 9)  # the next decode step: the same layers, a longer KV cache
    assert first.exports == 4
    assert second.exports == 1  # the layer at the new shape; head and tail memoised, the proof reused
    assert any("differ only in shape" in p for p in second.proofs)
    assert second.segments[2].graph is second.segments[1].graph
    kv = [n for n in second.segments[1].graph.nodes if n.op_name == "scaled_dot_product_attention"][0]
    assert kv.in_specs[1].shape[2] == 10  # captured at its own shapes: 9 cached + 1 new


def test_an_interrupt_masked_by_torch_cleanup_stays_an_interrupt(monkeypatch: pytest.MonkeyPatch) -> None:
    # Ctrl-C inside torch.export: a context manager unwinding raises its own error with the interrupt as context
    def export(*_a: object, **_k: object) -> None:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise AssertionError("Trying to pop empty mode stack")  # noqa: B904 (implicit context, as torch)

    monkeypatch.setattr(torch.export, "export", export)
    with pytest.raises(KeyboardInterrupt):
        capture_module(nn.Linear(2, 2), (torch.ones(2, device="meta"),), name="layers.0")


def test_a_failed_export_without_an_interrupt_is_a_capture_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def export(*_a: object, **_k: object) -> None:
        raise AssertionError("Trying to pop empty mode stack")

    monkeypatch.setattr(torch.export, "export", export)
    with pytest.raises(CaptureError, match="layers.0.*Linear.*pop empty mode stack"):
        capture_module(nn.Linear(2, 2), (torch.ones(2, device="meta"),), name="layers.0")
