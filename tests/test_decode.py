"""Decoding attention: Flash-Decoding (split kernel + combine), paged K/V, FlashMLA, build_kernels, errors."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchsim.graph import DType, Op
from torchsim.hwmodels import get_profile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.templates import build_kernel, build_kernels
from torchsim.lowering.templates.attention_config import AttnShape, AttnVariant
from torchsim.lowering.templates.decode import flash_decode, flash_mla, split_heuristic
from torchsim.sim import simulate

GPUS = ("a100-sxm", "h100-sxm", "h200", "b200")


def ops_of(kg) -> set[Op]:
    return {Op(int(o)) for c in kg.classes for o in c.graph.op}


@given(ctas=st.integers(1, 400), slots=st.integers(1, 300), blocks=st.integers(1, 200))
@settings(max_examples=80, deadline=None)
def test_split_heuristic_fills_the_machine_without_splitting_full_grids(ctas: int, slots: int, blocks: int) -> None:
    s = split_heuristic(ctas, slots, blocks)
    assert 1 <= s <= max(1, min(128, slots, blocks))
    if ctas >= 0.8 * slots:
        assert s == 1
    if s > 1:  # never a split count that gives the same blocks per split as one fewer
        assert math.ceil(blocks / s) != math.ceil(blocks / (s - 1))


def test_split_kernel_then_combine_over_every_output_row() -> None:
    hw = get_profile("h100-sxm")
    shape = AttnShape(2, 32, 8, 1, 8192, 128)
    split, comb = flash_decode(shape, hw, num_splits=4)
    assert split.attrs["splits"] == 4 and split.attrs["launches"] == 2
    assert split.num_ctas == 2 * 8 * 4  # batch x kv heads x splits (4 packed query rows fit one block)
    assert comb.attrs["rows"] == 2 * 32 and comb.attrs["splits"] == 4
    assert split.flops == shape.flops()
    (one,) = flash_decode(shape, hw, num_splits=1)
    assert one.attrs["launches"] == 1 and Op.TMA_STORE in ops_of(one) and Op.TMA_STORE not in ops_of(split)


def test_splits_with_different_trip_counts_are_separate_cta_classes() -> None:
    hw = get_profile("h100-sxm")
    kg = flash_decode(AttnShape(1, 8, 8, 1, 1000, 128), hw, num_splits=3)[0]
    per, splits, bn = kg.attrs["blocks_per_split"], kg.attrs["splits"], kg.attrs["bn"]
    n_blocks = math.ceil(1000 / bn)
    last = n_blocks - (splits - 1) * per
    keys = {(per, 0), (last, int(1000 % bn != 0))}  # the last split is shorter and masks the ragged end
    assert len(kg.classes) == len(keys)
    assert sorted(c.count for c in kg.classes) == sorted([8 * (splits - 1), 8])


@pytest.mark.parametrize("seq_q", [1, 5, 128])
def test_any_query_length_packs_gqa_heads_into_rows(seq_q: int) -> None:
    hw = get_profile("h200")
    kgs = flash_decode(AttnShape(1, 32, 8, seq_q, 2048, 128), hw)
    assert kgs[0].attrs["packed_rows"] == seq_q * 4
    res = [simulate(k, hw) for k in kgs]
    assert all(r.cycles > 0 for r in res)


@pytest.mark.parametrize("hw_name", GPUS)
def test_long_kv_decoding_is_hbm_bound(hw_name: str) -> None:
    hw = get_profile(hw_name)
    split = flash_decode(AttnShape(8, 32, 8, 1, 8192, 128), hw)[0]
    r = simulate(split, hw)
    assert r.bound == "DRAM bandwidth"
    assert r.dram_bytes_per_s >= 0.7 * hw.dram_bytes_per_s_value


@pytest.mark.parametrize("hw_name", GPUS)
def test_no_decode_launch_beats_its_roofline(hw_name: str) -> None:
    hw = get_profile(hw_name)
    kgs = flash_decode(AttnShape(2, 16, 4, 3, 3000, 64), hw, num_splits=3)
    if hw_name != "a100-sxm":
        kgs += flash_mla(2, 64, 1, 1024, hw, num_splits=2)
    for kg in kgs:
        r = simulate(kg, hw)
        floor = kg.dram_bytes / float(hw.dram_peak_bytes_per_s.value)
        if kg.flops:
            floor = max(floor, kg.flops / hw.peak_tensor_flops_per_s(kg.classes[0].graph.dtype))
        assert r.time_s >= floor


def test_paged_kv_reads_a_block_table_and_gathers_small_pages() -> None:
    hw = get_profile("h100-sxm")
    shape = AttnShape(2, 8, 2, 1, 4096, 128)
    contiguous = flash_decode(shape, hw, num_splits=2)[0]
    big = flash_decode(shape, hw, num_splits=2, page_size=256)[0]
    small = flash_decode(shape, hw, num_splits=2, page_size=16)[0]
    assert Op.LDG not in ops_of(contiguous) and Op.LDG in ops_of(big) and Op.LDG in ops_of(small)
    assert Op.TMA_LOAD in ops_of(big)
    kv_loads = [c.graph.node_names[i] for c in small.classes for i in range(c.graph.num_nodes)
                if c.graph.op[i] == Op.CP_ASYNC]
    assert kv_loads and all(n.startswith(("load_K", "load_V")) for n in kv_loads)
    r_c, r_b, r_s = simulate(contiguous, hw), simulate(big, hw), simulate(small, hw)
    assert r_b.dram_bytes > r_c.dram_bytes  # the block table comes on top of the same K/V tiles
    assert r_s.dram_bytes >= 2 * 2 * 4096 * 128 * 2 * shape.dtype.nbytes  # every page of K and V is read


def test_flash_mla_shares_the_latent_kv_and_adds_combine_when_split() -> None:
    hw = get_profile("h100-sxm")
    kgs = flash_mla(4, 128, 1, 4096, hw, num_splits=4)
    assert [k.attrs["template"] for k in kgs] == ["flash_mla", "flash_decode/combine"]
    mla = kgs[0]
    assert mla.flops == pytest.approx(2 * 4 * 128 * 4096 * (576 + 512))
    loads = {c.graph.tiles[c.graph.tile[i]].tensor for c in mla.classes for i in range(c.graph.num_nodes)
             if c.graph.op[i] == Op.TMA_LOAD and not c.graph.node_names[i].startswith("prologue:")}
    assert loads == {"Q", "K"}  # V is the first 512 columns of the loaded latent K block
    assert mla.num_ctas == 4 * 2 * 4  # batch x (128 heads / 64 rows) x splits


def test_build_kernels_returns_every_launch_of_a_decode_call() -> None:
    hw = get_profile("b200")
    call = KernelCall.make(KernelKind.ATTENTION_DECODE, batch=4, heads_q=32, heads_kv=8, seq_q=1, seq_kv=8192,
                           head_dim=128, paged=True)
    kgs = build_kernels(call, hw)
    assert kgs[0].attrs["page_size"] == 16
    assert [k.attrs["template"] for k in kgs] == ["flash_decode/fa3", "flash_decode/combine"][:len(kgs)]
    assert build_kernel(call, hw).name == kgs[0].name
    mla = KernelCall.make(KernelKind.MLA_DECODE, batch=2, heads_q=128, seq_q=1, seq_kv=2048, head_dim=576,
                          head_dim_v=512)
    assert build_kernels(mla, hw)[0].attrs["template"] == "flash_mla"


@pytest.mark.parametrize("call, hw_name, words", [
    (lambda hw: flash_decode(AttnShape(1, 32, 6, 1, 128, 128), hw), "h100-sxm", ["heads_kv=6", "valid heads_kv"]),
    (lambda hw: flash_decode(AttnShape(1, 8, 8, 1, 128, 128), hw, variant=AttnVariant.FA4), "b200",
     ["fa2", "fa3"]),
    (lambda hw: flash_decode(AttnShape(1, 8, 8, 1, 128, 128), hw, page_size=24), "h100-sxm",
     ["page_size", "power of two"]),
    (lambda hw: flash_decode(AttnShape(1, 8, 8, 1, 128, 128), hw, num_splits=0), "h100-sxm", ["num_splits"]),
    (lambda hw: flash_mla(1, 128, 1, 1024, hw), "a100-sxm", ["FlashMLA", "sm90", "a100-sxm"]),
    (lambda hw: flash_mla(1, 128, 1, 1024, hw, head_dim=512), "h100-sxm", ["head_dim", "576"]),
    (lambda hw: flash_mla(1, 128, 1, 1024, hw, head_dim_v=576), "h100-sxm", ["head_dim_v", "512"]),
    (lambda hw: flash_mla(1, 128, -1, 1024, hw), "h100-sxm", ["seq_q", "positive"]),
])
def test_bad_decode_input_names_the_parameter(call, hw_name: str, words: list[str]) -> None:
    with pytest.raises(ValueError) as err:
        call(get_profile(hw_name))
    for w in words:
        assert w in str(err.value)


# -- MLA decode on sm80: vLLM's Triton MLA ---------------------------------------------------------------------------
def test_mla_decode_on_sm80_is_vllms_triton_mla() -> None:
    """FlashMLA needs sm90; on an A100 an MLA decode call runs vLLM's TRITON_MLA kernels: 16 heads a CTA over 4
    K/V splits of 32-token blocks, then the combine. One latent row per token is read once (V is its first 512
    columns), so a large batch streams the cache near the DRAM bandwidth, and a single sequence, 4 CTAs on 108
    SMs, is latency-bound."""
    from torchsim.lowering.templates.decode import triton_mla

    a100 = get_profile("a100-sxm")
    call = KernelCall.make(KernelKind.MLA_DECODE, DType.BF16, batch=64, heads_q=16, seq_q=1, seq_kv=8192,
                           head_dim=576, head_dim_v=512)
    ks = build_kernels(call, a100)
    assert [k.attrs["template"] for k in ks] == ["triton_mla", "flash_decode/combine"]
    assert ks[0].attrs["splits"] == 4 and ks[0].num_ctas == 64 * 4
    big = simulate(ks[0], a100)
    cache = 64 * 8192 * 576 * 2
    assert big.dram_bytes == pytest.approx(cache, rel=0.05)  # the latent rows once, not K and V
    assert cache / big.time_s > 0.7 * a100.dram_bytes_per_s_value
    one = simulate(triton_mla(1, 16, 1, 8192, a100)[0], a100)
    assert one.bound.startswith("latency") and one.time_s > 5 * big.time_s / 64
    with pytest.raises(ValueError, match=r"\(576, 512\)"):
        triton_mla(1, 16, 1, 1024, a100, head_dim=128, head_dim_v=128)


def test_an_mla_cache_holds_one_latent_row_per_token() -> None:
    """The memory check and the HBM floor count DeepSeek's cache as its latent rows (576 x 2 bytes a token and
    layer, K and V sharing them), for the decode's MLA kernel and for the prefill's decompressed attention (whose
    heads x (192 + 128) dims are transient), not as per-head K and V."""
    from types import SimpleNamespace

    from torchsim.prediction.pipeline import _kv_bytes, _latent_width

    mla = KernelCall.make(KernelKind.MLA_DECODE, DType.BF16, batch=4, heads_q=16, seq_q=1, seq_kv=1000,
                          head_dim=576, head_dim_v=512)
    pre = KernelCall.make(KernelKind.ATTENTION_PREFILL, DType.BF16, batch=4, heads_q=16, heads_kv=16, seq_q=999,
                          seq_kv=999, head_dim=192, head_dim_v=128, causal=True)
    gqa = KernelCall.make(KernelKind.ATTENTION_DECODE, DType.BF16, batch=4, heads_q=32, heads_kv=8, seq_q=1,
                          seq_kv=1000, head_dim=128)
    decode, prefill = SimpleNamespace(calls=(mla,)), SimpleNamespace(calls=(pre,))
    assert _latent_width([prefill, decode]) == 576
    assert _kv_bytes(decode) == 4 * 1000 * 576 * 2
    assert _kv_bytes(prefill, latent=576) == 4 * 999 * 576 * 2
    assert _kv_bytes(SimpleNamespace(calls=(gqa,))) == 2 * 4 * 1000 * 8 * 128 * 2  # K and V per KV head


def test_a_prefill_only_mla_prediction_counts_its_cache_as_latent_rows() -> None:
    """With no decode step there is no MLA decode call to read the latent width from: the memory check takes it
    from the model's config (kv_lora_rank + qk_rope_head_dim), as the plan cache's model facts keep it."""
    from types import SimpleNamespace

    from torchsim.hwmodels import get_profile
    from torchsim.models.registry import get_config
    from torchsim.prediction.pipeline import _memory_fit, _model_facts

    pre = KernelCall.make(KernelKind.ATTENTION_PREFILL, DType.BF16, batch=4, heads_q=16, heads_kv=16, seq_q=999,
                          seq_kv=999, head_dim=192, head_dim_v=128, causal=True)
    prefill, hw = SimpleNamespace(calls=(pre,)), get_profile("h100-sxm")
    kw: dict[str, Any] = {"tp": 1, "batch": 4, "kv_dtype": None, "allow": True}
    _, latent = _memory_fit("m", hw, 1e9, [prefill], latent=576, **kw)
    _, heads = _memory_fit("m", hw, 1e9, [prefill], **kw)
    assert latent["kv_bytes"] == 4 * 999 * 576 * 2
    assert heads["kv_bytes"] == 2 * 4 * 999 * 16 * 192 * 2  # a non-MLA reading: K and V per head
    cfg = get_config(str(Path(__file__).parent / "data" / "hf_configs" / "deepseek-v2-lite.json"))
    assert cfg.latent_kv_width == 512 + 64
    assert _model_facts(cfg, SimpleNamespace(parameters=lambda: ()), None)["latent_kv_width"] == 576
