"""Public config.json files of the families torchsim defines itself (Llama 3.2 with tied embeddings, Llama 3.3,
Mistral with its sliding window; tests/data/model_configs): the weight bytes and the captured GEMM FLOPs of a
prefill step match an analytic count from the config within 1%, as the HF families' do (test_hf_families)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torchsim.lowering import plan
from torchsim.lowering.kernel_call import KernelKind
from torchsim.lowering.precision import WeightPrecision, weight_bytes
from torchsim.models.registry import build_model, get_config

CONFIGS = Path(__file__).parent / "data" / "model_configs"
TOKENS = 64


def _count(c: dict) -> tuple[int, int]:
    """(parameters, GEMM FLOPs of a TOKENS-token prefill with the LM head on the last token) of a Llama-shaped
    decoder: q/k/v/o, SwiGLU gate/up/down, two RMSNorms a layer, the final norm, an LM head unless tied."""
    h, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    nq = c["num_attention_heads"]
    nkv = c.get("num_key_value_heads", nq)
    hd = c.get("head_dim") or h // nq
    proj = 2 * h * nq * hd + 2 * h * nkv * hd
    mlp = 3 * h * c["intermediate_size"]
    tied = bool(c.get("tie_word_embeddings", False))
    params = vocab * h + layers * (proj + mlp + 2 * h) + h + (0 if tied else vocab * h)
    flops = TOKENS * layers * 2 * (proj + mlp) + 2 * vocab * h
    return params, flops


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json")), ids=lambda p: p.stem)
def test_weight_bytes_and_prefill_flops_match_the_config(path: Path) -> None:
    data = json.loads(path.read_text())
    model = build_model(get_config(path))
    params, flops = _count(data)
    assert weight_bytes(model, WeightPrecision.MODEL) == pytest.approx(2 * params, rel=0.01)
    plan._plan_graph.cache_clear()
    got = plan.plan_model(model, batch=1, q_len=TOKENS, past_len=0)
    plan._plan_graph.cache_clear()
    assert not got.unsupported
    gemm = sum(2 * c.p("m") * c.p("n") * c.p("k") * c.p("batch", 1) for c in got.calls if c.kind is KernelKind.GEMM)
    assert gemm == pytest.approx(flops, rel=0.01)


def test_tied_embeddings_drop_the_lm_head_weights() -> None:
    """Llama 3.2 1B ties its LM head to the embedding: 1.24 B parameters, not 1.50 B (the head still runs)."""
    path = CONFIGS / "llama-3.2-1b.json"
    data = json.loads(path.read_text())
    assert data["tie_word_embeddings"] is True
    wb = weight_bytes(build_model(get_config(path)), WeightPrecision.MODEL)
    assert wb / 2 == pytest.approx(1.236e9, rel=0.01)
    untied = {**data, "tie_word_embeddings": False}
    assert _count(untied)[0] - _count(data)[0] == data["vocab_size"] * data["hidden_size"]
