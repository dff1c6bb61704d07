"""What a served attention kernel pays for gpt-oss's attention sinks and Gemma-2's soft-capping in decode, and
what a sliding window holds in the KV cache: the sink logit of each row costs its exponentials and FMA work at
the end of the row (or once in the split-KV combine), soft-capping costs its tanh in Flash-Decoding as it does in
prefill, and a sliding layer's KV bytes are one window of each sequence (memory fit and the HBM floor)."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchsim.graph import Unit
from torchsim.hwmodels import get_profile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.templates import build_kernels
from torchsim.lowering.templates.attention import attention
from torchsim.lowering.templates.attention_config import AttnShape, AttnVariant
from torchsim.lowering.templates.decode import flash_decode
from torchsim.lowering.templates.varlen import cached_kv_tokens, kv_tokens
from torchsim.sim import simulate

MISTRAL = Path(__file__).parent / "data" / "model_configs" / "mistral-7b-v0.1.json"  # its public config.json


def unit_work(kg, unit: Unit) -> float:
    """Work of every node on `unit` over all CTAs of a kernel."""
    return kg.unit_work(unit)


@pytest.mark.parametrize(("hw_name", "variant"), [("a100-sxm", None), ("h100-sxm", None),
                                                  ("h100-sxm", AttnVariant.TRITON), ("b200", None)])
def test_sinks_cost_two_exponentials_and_a_few_fma_per_row_in_prefill(hw_name: str, variant) -> None:
    hw = get_profile(hw_name)
    shape = AttnShape(1, 64, 8, 1024, 1024, 64, causal=True, window=128)  # gpt-oss-20b's sliding layers
    kw = {"variant": variant} if variant else {}
    plain = attention(shape, hw, **kw)
    sunk = attention(AttnShape(1, 64, 8, 1024, 1024, 64, causal=True, window=128, sinks=True), hw, **kw)
    rows = shape.batch * shape.heads_q * shape.seq_q  # (the last query block's rows padded to the tile: <= 1.5x)
    assert 2.0 * rows <= unit_work(sunk, Unit.SFU) - unit_work(plain, Unit.SFU) <= 3.0 * rows
    assert unit_work(sunk, Unit.FMA) > unit_work(plain, Unit.FMA)
    assert sunk.attrs["sinks"] is True and "sinks" not in plain.attrs
    t0, t1 = simulate(plain, hw).cycles, simulate(sunk, hw).cycles
    # one logit per row beside 128+ keys: within 2% (a short, latency-bound kernel's schedule may shift either way)
    assert abs(t1 - t0) <= 0.02 * t0


def test_split_decode_folds_the_sink_in_once_in_the_combine() -> None:
    hw = get_profile("h100-sxm")
    plain = flash_decode(AttnShape(4, 64, 8, 1, 32768, 64), hw)
    sunk = flash_decode(AttnShape(4, 64, 8, 1, 32768, 64, sinks=True), hw)
    assert len(plain) == len(sunk) == 2  # a split kernel and its combine
    # the split CTAs write partials and a log-sum-exp: the sink is not theirs to add
    assert unit_work(sunk[0], Unit.SFU) == unit_work(plain[0], Unit.SFU)
    rows = 4 * 64
    assert unit_work(sunk[1], Unit.SFU) - unit_work(plain[1], Unit.SFU) == pytest.approx(rows)
    assert simulate(sunk[1], hw).cycles >= simulate(plain[1], hw).cycles


def test_unsplit_decode_adds_the_sink_at_the_end_of_each_row() -> None:
    hw = get_profile("h100-sxm")
    plain = flash_decode(AttnShape(4, 64, 8, 1, 256, 64), hw, num_splits=1)
    sunk = flash_decode(AttnShape(4, 64, 8, 1, 256, 64, sinks=True), hw, num_splits=1)
    assert len(sunk) == 1
    assert unit_work(sunk[0], Unit.SFU) > unit_work(plain[0], Unit.SFU)


def test_decode_prices_soft_capping() -> None:
    """Gemma-2 decode: every score's tanh runs on the SFU in Flash-Decoding too (it was dropped when the K/V
    heads were packed into rows)."""
    hw = get_profile("h100-sxm")
    plain = flash_decode(AttnShape(1, 16, 8, 1, 8192, 256), hw)
    capped = flash_decode(AttnShape(1, 16, 8, 1, 8192, 256, softcap=50.0), hw)
    # one tanh per score beside its exponential: the SFU work of the split kernel about doubles
    assert unit_work(capped[0], Unit.SFU) > 1.8 * unit_work(plain[0], Unit.SFU)
    assert capped[0].attrs["softcap"] == 50.0
    assert simulate(capped[0], hw).cycles >= simulate(plain[0], hw).cycles  # memory-bound: the tanh may hide


def test_a_call_with_sinks_reaches_the_kernel() -> None:
    hw = get_profile("h100-sxm")
    call = KernelCall.make(KernelKind.ATTENTION_DECODE, batch=2, heads_q=64, heads_kv=8, seq_q=1, seq_kv=4096,
                           head_dim=64, sinks=True)
    assert any(k.attrs.get("sinks") for k in build_kernels(call, hw))


@pytest.mark.parametrize(("params", "held"), [
    ({"batch": 2, "seq_kv": 32768, "window": 4096}, 2 * 4096),
    ({"batch": 2, "seq_kv": 1000, "window": 4096}, 2 * 1000),
    ({"batch": 3, "seq_kv": 9000, "kv_lens": (100, 5000, 9000), "window": 4096}, 100 + 4096 + 4096),
    ({"batch": 2, "seq_kv": 32768}, 2 * 32768),
])
def test_a_sliding_layer_caches_one_window_of_each_sequence(params: dict, held: int) -> None:
    call = KernelCall.make(KernelKind.ATTENTION_DECODE, heads_q=32, heads_kv=8, seq_q=1, head_dim=128, **params)
    assert cached_kv_tokens(call) == held
    assert kv_tokens(call) >= held


def test_mistral_decode_reads_and_holds_one_window_of_kv() -> None:
    """Mistral-7B-v0.1 (window 4096) at a 32k prompt: the decode step's KV bytes (HBM floor, memory fit) are
    those of 4096 keys per layer, not 32k."""
    from torchsim.lowering.plan import plan_model
    from torchsim.models.registry import build_model, get_config
    from torchsim.prediction.pipeline import _kv_bytes

    cfg = get_config(MISTRAL)
    plan = plan_model(build_model(cfg), batch=1, q_len=1, past_len=32767)
    per_token = cfg.kv_bytes_per_token(2)
    assert _kv_bytes(plan) == pytest.approx(4096 * per_token)
    short = plan_model(build_model(cfg), batch=1, q_len=1, past_len=2047)
    assert _kv_bytes(short) == pytest.approx(2048 * per_token)  # shorter than the window: every key


def test_an_moe_decode_floor_counts_only_the_experts_it_routes_to() -> None:
    """A batch-1 decode step of a top-2-of-8 MoE reads 2 of each layer's 8 experts: the HBM floor leaves the
    other 6 out (it counted every expert, so an MoE step could come out 'faster than its floor')."""
    import torchsim
    from torchsim.lowering.plan import plan_model
    from torchsim.models.registry import build_model, get_config
    from torchsim.prediction.pipeline import _expert_bytes

    cfg = get_config("mixtral-tiny")
    step = plan_model(build_model(cfg), batch=1, q_len=1, past_len=64)
    experts, idle = _expert_bytes(step), _expert_bytes(step, idle=True)
    assert experts > 0
    per_layer = [c.p("tokens_per_expert") for c in step.calls if c.kind is KernelKind.GROUPED_GEMM]
    assert all(sum(1 for t in tpe if t) == 2 and len(tpe) == 8 for tpe in per_layer)
    assert idle == pytest.approx(experts * 6 / 8)
    p = torchsim.predict("mixtral-tiny", hw="h100-sxm", prompt_len=64, decode_steps=4, workers=1)
    assert all(p.tpot_s >= f for f in p.hbm_floor_s)
