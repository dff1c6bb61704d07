"""Kernel planning: lowering registry, serving fusions, eager one-kernel-per-op, ordering, origins, MoE hook."""

from __future__ import annotations

import linecache
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from torchsim.graph.kinds import DType
from torchsim.lowering.capture import capture_model
from torchsim.lowering.kernel_call import KernelKind as K
from torchsim.lowering.lowerings import (
    LOWERINGS,
    DuplicateLoweringError,
    PlanContext,
    is_view,
    register_lowering,
)
from torchsim.lowering.opgraph import OpNode, TensorSpec
from torchsim.lowering.plan import Preset, UnsupportedOpsError, plan_capture, plan_model
from torchsim.models import decoder  # the attention every family shares lives here
from torchsim.models.registry import build_model

aten = torch.ops.aten


@pytest.fixture(scope="module")
def tiny() -> Any:
    return build_model("llama-tiny")


def _layer(plan: Any, i: int) -> list[Any]:
    return [c for c in plan.calls if c.layer == i]


def test_serving_layer_is_the_fused_kernel_sequence(tiny: Any) -> None:
    cfg = tiny.config
    hd, hq, hkv = cfg.head_dim_value, cfg.num_attention_heads, cfg.num_key_value_heads
    plan = plan_model(tiny, batch=2, q_len=8, past_len=0, preset="serving")
    layer1 = _layer(plan, 1)
    assert [c.kind for c in layer1] == [K.ADD_RMSNORM, K.GEMM, K.ROPE, K.ELEMENTWISE, K.ATTENTION_PREFILL, K.GEMM,
                                        K.ADD_RMSNORM, K.GEMM, K.SILU_MUL, K.GEMM]
    qkv, o, gate_up, down = (c for c in layer1 if c.kind is K.GEMM)
    assert (qkv.p("m"), qkv.p("n"), qkv.p("k")) == (16, (hq + 2 * hkv) * hd, cfg.hidden_size)
    assert gate_up.p("n") == 2 * cfg.intermediate_size and down.p("k") == cfg.intermediate_size
    assert o.p("n") == cfg.hidden_size
    rope = layer1[2]
    assert (rope.p("tokens"), rope.p("heads_q"), rope.p("heads_kv"), rope.p("head_dim")) == (16, hq, hkv, hd)
    assert layer1[3].p("op") == "kv_cache_write" and layer1[3].p("numel") == 2 * 16 * hkv * hd
    attn = layer1[4]
    assert attn.p("causal") and attn.p("seq_q") == attn.p("seq_kv") == 8 and attn.p("heads_kv") == hkv
    silu = layer1[8]
    assert (silu.p("rows"), silu.p("hidden")) == (16, cfg.intermediate_size)


def test_serving_fuses_residual_adds_across_segments(tiny: Any) -> None:
    plan = plan_model(tiny, batch=1, q_len=4, past_len=0, preset="serving")
    assert _layer(plan, 0)[0].kind is K.RMSNORM  # the embedding has no residual to add
    assert plan.calls[-3].kind is K.ADD_RMSNORM and plan.calls[-3].name == "tail.norm"
    assert not any(c.kind is K.ELEMENTWISE and c.p("op") == "add" for c in plan.calls)
    assert [c.kind for c in plan.calls[-2:]] == [K.GEMM, K.ARGMAX]
    assert plan.calls[-2].p("m") == 1  # the LM head runs on each sequence's last token only


def test_eager_is_one_kernel_per_non_view_op(tiny: Any) -> None:
    cap = capture_model(tiny, 1, 4, 0)
    eager = plan_capture(cap, "eager")
    serving = plan_capture(cap, "serving")
    ops = sum(1 for s in cap.segments for n in s.graph.nodes if not is_view(n))
    assert len(eager.calls) == ops
    assert len(eager.calls) > 3 * len(serving.calls)
    linears = sum(1 for s in cap.segments for n in s.graph.nodes if n.op_name == "linear")
    assert sum(1 for c in eager.calls if c.kind is K.GEMM) == linears
    assert not any(c.kind in (K.RMSNORM, K.ADD_RMSNORM, K.ROPE, K.SILU_MUL) for c in eager.calls)


def test_eager_copies_the_whole_cache_serving_writes_new_tokens(tiny: Any) -> None:
    cfg = tiny.config
    cap = capture_model(tiny, 1, 1, 100)
    per_tensor = cfg.num_key_value_heads * cfg.head_dim_value
    eager_cats = [c for c in plan_capture(cap, "eager").calls if c.p("op", "") == "cat" and c.layer == 0]
    assert sorted(c.p("numel") for c in eager_cats)[-2:] == [101 * per_tensor] * 2
    write = [c for c in plan_capture(cap, "serving").calls if c.p("op", "") == "kv_cache_write" and c.layer == 0]
    assert [c.p("numel") for c in write] == [2 * per_tensor]
    attn = [c for c in plan_capture(cap, "serving").calls if c.kind is K.ATTENTION_DECODE]
    assert len(attn) == cfg.num_hidden_layers and attn[0].p("seq_kv") == 101


def test_every_call_is_traced_to_the_model_source(tiny: Any) -> None:
    plan = plan_model(tiny, batch=1, q_len=4, past_len=0, preset="serving")
    for c in plan.calls:
        assert c.source and c.module_path, c
    qkv = next(c for c in plan.calls if c.kind is K.GEMM and c.layer == 0)
    assert qkv.name == "layers.0.self_attn.q_proj+k_proj+v_proj"
    f, lines = qkv.source.split(":")
    lo, hi = (int(x) for x in lines.split("-"))
    text = "".join(linecache.getline(decoder.__file__, n) for n in range(lo, hi + 1))
    assert f == Path(decoder.__file__).name and all(p in text for p in ("q_proj", "k_proj", "v_proj"))
    assert len(set(qkv.fx_nodes)) == 3


def test_layers_are_relocated_with_their_index(tiny: Any) -> None:
    plan = plan_model(tiny, batch=1, q_len=4, past_len=0)
    for i in range(tiny.config.num_hidden_layers):
        calls = _layer(plan, i)
        assert calls and all(c.name.startswith(f"layers.{i}.") for c in calls)
        assert all(c.module_path.startswith(f"layers.{i}") for c in calls)
    assert [c.key() for c in _layer(plan, 1)[1:]] == [c.key() for c in _layer(plan, 0)[1:]]


def test_duplicate_lowering_registration_raises_and_changes_nothing() -> None:
    before = dict(LOWERINGS)
    with pytest.raises(DuplicateLoweringError, match="linear"):
        register_lowering(aten.erfinv.default, aten.linear.default)(lambda n, c: [])
    assert LOWERINGS == before
    with pytest.raises(DuplicateLoweringError):
        register_lowering(aten.erfinv.default, aten.erfinv.default)(lambda n, c: [])


class _Odd(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.erf(x) + torch.special.erfinv(x)


class _OddModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.odd = _Odd()

    def capture_segments(self, batch: int, q_len: int, past_len: int) -> list[tuple[str, nn.Module, tuple[Any]]]:
        return [("odd", self.odd, (torch.zeros(batch, q_len, 64, device="meta"),))]


def test_unsupported_ops_are_listed_together_or_estimated() -> None:
    model = _OddModel()
    with pytest.raises(UnsupportedOpsError, match=r"erf\.default.*odd.*erfinv\.default.*odd"):
        plan_model(model, batch=1, q_len=8, past_len=0)
    plan = plan_model(model, batch=1, q_len=8, past_len=0, fallback=True)
    flagged = [c for c in plan.calls if c.p("roofline", False)]
    assert len(flagged) == 2 and len(plan.unsupported) == 2
    assert all(c.p("numel") == 8 * 64 for c in flagged)


class _Routing:
    """Minimal routing object: `layer(i)` and `top_k` (the interface of torchsim.models.routing.RoutingCounts)."""

    top_k = 2

    def layer(self, i: int) -> tuple[int, ...]:
        return ((6, 2, 0, 0), (2, 2, 4))[i]


def test_grouped_mm_is_sized_by_routing_counts() -> None:
    spec = [TensorSpec((8, 32), DType.BF16), TensorSpec((4, 32, 48), DType.BF16, False),
            TensorSpec((4,), DType.INT32)]
    node = OpNode("gmm", aten._grouped_mm.default, ("x", "w", "offs"), tuple(spec),
                  (TensorSpec((8, 48), DType.BF16),), (), "mlp.experts", "Experts", "m.py:1")
    lower = LOWERINGS[aten._grouped_mm.default]
    even = lower(node, PlanContext())[0]
    assert even.kind is K.GROUPED_GEMM and even.p("tokens_per_expert") == (2, 2, 2, 2)
    skew = lower(node, PlanContext(routing=_Routing(), layer=0))[0]
    assert skew.p("tokens_per_expert") == (6, 2, 0, 0) and (skew.p("n"), skew.p("k")) == (48, 32)
    with pytest.raises(ValueError, match="3 experts for layer 1"):
        lower(node, PlanContext(routing=_Routing(), layer=1))


def test_preset_names_are_checked() -> None:
    assert Preset.parse("Serving") is Preset.SERVING
    with pytest.raises(ValueError, match="eager, serving"):
        Preset.parse("turbo")


def test_mixtral_layers_get_their_own_routing_counts() -> None:
    from torchsim.models.routing import RoutingCounts

    model = build_model("mixtral-tiny")
    cfg = model.config
    experts, top_k, layers = cfg.num_local_experts, cfg.num_experts_per_tok, cfg.num_hidden_layers
    rows = [[0] * experts for _ in range(layers)]
    for i in range(layers):  # layer i sends every token to experts i and i+1: a different hot pair per layer
        rows[i][i % experts] = rows[i][(i + 1) % experts] = 16
    routing = RoutingCounts.from_lists(rows, top_k=top_k, tokens=16, source="test")
    plan = plan_model(model, batch=1, q_len=8, past_len=0, routing=routing)
    grouped = [c for c in plan.calls if c.kind is K.GROUPED_GEMM]
    assert len(grouped) == 2 * layers  # gate/up and down per MoE layer
    for c in grouped:
        tpe = c.p("tokens_per_expert")
        assert c.layer is not None and sum(tpe) == 8 * top_k and tpe == routing.scaled(8).layer(c.layer)
    assert grouped[0].p("tokens_per_expert") != grouped[2].p("tokens_per_expert")
