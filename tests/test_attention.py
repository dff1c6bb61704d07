"""Attention prefill templates (FlashAttention-2/-3/-4): shapes, CTA classes, physics and bad-input errors."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchsim.graph import DType, Edge, Op, Unit
from torchsim.hwmodels import get_profile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.templates import build_kernel, build_kernels
from torchsim.lowering.templates.attention import attention
from torchsim.lowering.templates.attention_config import AttnShape, AttnVariant, default_config, kv_blocks
from torchsim.sim import simulate

GPUS = ("a100-sxm", "h100-sxm", "h200", "b200")


def roofline_s(kg, hw) -> float:
    peak = hw.peak_tensor_flops_per_s(kg.classes[0].graph.dtype)
    return max(kg.flops / peak, kg.dram_bytes / float(hw.dram_peak_bytes_per_s.value))


# -- shapes ------------------------------------------------------------------------------------------------
@given(sq=st.integers(1, 300), skv=st.integers(1, 300), causal=st.booleans())
@settings(max_examples=60, deadline=None)
def test_score_pairs_match_the_mask(sq: int, skv: int, causal: bool) -> None:
    shape = AttnShape(1, 1, 1, sq, skv, 64, causal)
    brute = sum(1 for r in range(sq) for c in range(skv) if not causal or c <= r + skv - sq)
    assert shape.score_pairs() == brute


@given(sq=st.integers(1, 700), skv=st.integers(1, 700), bm=st.sampled_from([64, 128, 192]),
       bn=st.sampled_from([64, 80, 128, 176]))
@settings(max_examples=60, deadline=None)
def test_causal_blocks_cover_every_visible_key_and_skip_fully_masked_ones(sq: int, skv: int, bm: int,
                                                                          bn: int) -> None:
    shape = AttnShape(1, 1, 1, sq, skv, 64, causal=True)
    for m in range(math.ceil(sq / bm)):
        n, masked = kv_blocks(shape, bm, bn, m)
        last_row = min(sq, (m + 1) * bm) - 1
        assert n * bn >= shape.visible(last_row)  # every visible key is in a visited block
        if n:
            assert (n - 1) * bn < shape.visible(last_row)  # the last visited block holds a visible key
        assert 0 <= masked <= n


def test_flops_and_bytes_do_not_depend_on_the_tiles() -> None:
    hw = get_profile("h100-sxm")
    shape = AttnShape(2, 8, 2, 1000, 1000, 128, causal=True)
    a = attention(shape, hw)
    b = attention(shape, hw, default_config(shape, hw, AttnVariant.FA2))
    assert a.flops == b.flops == shape.flops()
    assert a.dram_bytes == b.dram_bytes
    assert shape.flops() == pytest.approx(4 * 2 * 8 * 128 * 1000 * 1001 / 2)


# -- CTA programs ------------------------------------------------------------------------------------------
def test_causal_ctas_form_one_class_per_trip_count_longest_first() -> None:
    hw = get_profile("h100-sxm")
    shape = AttnShape(2, 4, 4, 1024, 1024, 128, causal=True)
    kg = attention(shape, hw)
    trips = [sum(1 for i in range(c.graph.num_nodes) if c.graph.node_names[i].startswith("qk0[")) for c in kg.classes]
    assert trips == sorted(trips, reverse=True) and len(set(trips)) == len(trips) == 1024 // 128
    assert all(c.count == 2 * 4 for c in kg.classes)
    full = attention(AttnShape(2, 4, 4, 1024, 1024, 128), hw)
    assert len(full.classes) == 1 and full.num_ctas == kg.num_ctas


def test_fa3_has_a_tma_producer_and_ping_ponging_consumer_warp_groups() -> None:
    g = attention(AttnShape(1, 1, 1, 128, 1024, 128), get_profile("h100-sxm")).classes[0].graph
    roles = {grp.name: grp for grp in g.groups}
    assert set(roles) == {"producer", "consumer0", "consumer1"}
    loads = [i for i in range(g.num_nodes) if g.op[i] == Op.TMA_LOAD]
    assert {g.groups[g.group[i]].name for i in loads} == {"producer"}
    mmas = [i for i in range(g.num_nodes) if g.op[i] == Op.MMA]
    assert {g.groups[g.group[i]].name for i in mmas} == {"consumer0", "consumer1"}
    # ping-pong: ORDER edges hand the tensor core from one consumer's MMA to the other's
    cross = [(s, d) for s, d, k in zip(g.edge_src, g.edge_dst, g.edge_kind)
             if k == Edge.ORDER and g.op[s] == Op.MMA and g.op[d] == Op.MMA and g.group[s] != g.group[d]]
    assert len(cross) >= 2 * 6 - 1


def test_fa4_splits_roles_across_mma_softmax_correction_and_load_warps() -> None:
    g = attention(AttnShape(1, 1, 1, 256, 1024, 128), get_profile("b200")).classes[0].graph
    by_group: dict[str, set[str]] = {}
    for i in range(g.num_nodes):
        by_group.setdefault(g.groups[g.group[i]].name, set()).add(Unit(int(g.unit[i])).name)
    assert by_group["mma"] == {"TENSOR"}
    assert by_group["load"] <= {"TMA", "LDST"}
    assert {"SFU", "FMA", "TMEM"} <= by_group["softmax0"] and "TENSOR" not in by_group["softmax0"]
    assert "TMEM" in by_group["correction"]
    assert next(grp for grp in g.groups if grp.name == "mma").num_warps == 1


def test_fa4_moves_part_of_exp_from_the_sfu_to_the_fma_pipe() -> None:
    hw = get_profile("b200")
    shape = AttnShape(1, 16, 16, 2048, 2048, 128)
    cfg = default_config(shape, hw)
    sfu_only = simulate(attention(shape, hw, replace(cfg, exp_poly_fraction=0.0)), hw)
    split = simulate(attention(shape, hw, cfg), hw)
    assert split.unit_busy["sfu"] < sfu_only.unit_busy["sfu"]
    assert split.unit_busy["fma"] > sfu_only.unit_busy["fma"]


def _mma_work(kg) -> float:  # type: ignore[no-untyped-def]
    g = kg.classes[0].graph
    return sum(float(g.work[i]) for i in range(g.num_nodes) if g.op[i] == Op.MMA) * kg.num_ctas


def test_m64_tcgen05_mmas_hold_the_sm100_datapath_as_long_as_m128() -> None:
    """FA3's consumer warp groups issue 64-row MMAs: native for wgmma, half the datapath for tcgen05."""
    shape = AttnShape(1, 2, 2, 128, 1408, 128)  # 1408 = 8 blocks of 176 keys: no padding along N or K
    h100, b200 = get_profile("h100-sxm"), get_profile("b200")
    assert _mma_work(attention(shape, h100)) == pytest.approx(shape.flops())
    assert _mma_work(attention(shape, b200, variant=AttnVariant.FA3)) == pytest.approx(2 * shape.flops())
    fa4 = AttnShape(1, 2, 2, 256, 1024, 128)
    assert _mma_work(attention(fa4, b200)) == pytest.approx(fa4.flops())
    # the knob is the profile's: a what-if B200 whose datapath fills at 64 rows runs FA3 faster
    fast = replace(b200, tensor_datapath_rows=replace(b200.tensor_datapath_rows, value=64))
    big = AttnShape(1, 16, 16, 2048, 2048, 128)
    assert simulate(attention(big, fast, variant=AttnVariant.FA3), fast).time_s < \
        simulate(attention(big, b200, variant=AttnVariant.FA3), b200).time_s


def test_fa3_on_sm100_round_trips_s_p_and_o_through_tmem() -> None:
    g = attention(AttnShape(1, 1, 1, 128, 1024, 128), get_profile("b200"), variant=AttnVariant.FA3).classes[0].graph
    names = g.node_names
    idx = {n: i for i, n in enumerate(names)}
    preds: dict[int, set[int]] = {}
    for s, d, k in zip(g.edge_src, g.edge_dst, g.edge_kind):
        if k == Edge.DATA:
            preds.setdefault(d, set()).add(s)
    assert idx["qk0[1]"] in preds[idx["tmem_ld_S0[1]"]]  # S lands in TMEM; softmax reads it from there
    assert idx["tmem_st_P0[1]"] in preds[idx["pv0[1]"]]  # P V's A operand is P stored back to TMEM
    assert idx["correct_O0[1]"] in preds[idx["pv0[1]"]]  # ... onto O rescaled in TMEM
    assert idx["pv0[0]"] in preds[idx["correct_O0[1]"]]  # which waits for the previous P V
    hopper = attention(AttnShape(1, 1, 1, 128, 1024, 128), get_profile("h100-sxm")).classes[0].graph
    assert not any(hopper.unit[i] == Unit.TMEM for i in range(hopper.num_nodes))


# -- physics -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("hw_name", GPUS)
def test_no_attention_kernel_beats_its_roofline(hw_name: str) -> None:
    hw = get_profile(hw_name)
    for shape in (AttnShape(1, 8, 2, 512, 512, 128), AttnShape(2, 4, 4, 384, 640, 64, causal=True)):
        kg = attention(shape, hw)
        assert simulate(kg, hw).time_s >= roofline_s(kg, hw)


def test_causal_prefill_takes_about_half_the_time_at_long_sequence() -> None:
    """With several waves of CTAs (longest first) the skipped blocks show; in one wave the CTA at the
    diagonal's end, which visits every block, sets the time for both."""
    hw = get_profile("h100-sxm")
    full = simulate(attention(AttnShape(1, 32, 32, 2048, 2048, 128), hw), hw)
    causal = simulate(attention(AttnShape(1, 32, 32, 2048, 2048, 128, causal=True), hw), hw)
    assert 0.45 < causal.time_s / full.time_s < 0.65
    one_wave = AttnShape(1, 8, 8, 2048, 2048, 128)
    assert simulate(attention(replace(one_wave, causal=True), hw), hw).time_s == pytest.approx(
        simulate(attention(one_wave, hw), hw).time_s, rel=0.05)


@pytest.mark.parametrize("hw_name", ["a100-sxm", "h100-sxm", "b200"])
def test_waves_step_when_the_grid_crosses_a_multiple_of_the_sm_slots(hw_name: str) -> None:
    """Grid = batch x heads x query blocks; all CTAs share one K/V head so the kernel is compute-bound."""
    hw = get_profile(hw_name)
    probe = AttnShape(1, 1, 1, 256, 1024, 128)
    slots = hw.sms * simulate(attention(probe, hw), hw).ctas_per_sm
    bm = default_config(probe, hw).bm
    at = simulate(attention(replace(probe, seq_q=slots * bm), hw), hw)
    over = simulate(attention(replace(probe, seq_q=slots * bm + 1), hw), hw)
    assert at.ctas == slots and at.waves == pytest.approx(1.0) and over.waves > 1.0
    # one more CTA costs an extra wave, not 1/slots more (a lone CTA of the last wave has its SM to itself)
    assert over.time_s / at.time_s > 1.3


def test_gqa_shares_kv_through_l2() -> None:
    hw = get_profile("h100-sxm")
    mha = simulate(attention(AttnShape(1, 16, 16, 1024, 1024, 128), hw), hw)
    gqa = simulate(attention(AttnShape(1, 16, 2, 1024, 1024, 128), hw), hw)
    assert gqa.dram_bytes < mha.dram_bytes


def test_fp8_attention_is_faster_than_bf16_on_hopper() -> None:
    hw = get_profile("h100-sxm")
    bf16 = simulate(attention(AttnShape(1, 16, 16, 1024, 1024, 128), hw), hw)
    fp8 = simulate(attention(AttnShape(1, 16, 16, 1024, 1024, 128, dtype=DType.FP8_E4M3), hw), hw)
    assert fp8.time_s < bf16.time_s


def test_simulation_is_deterministic() -> None:
    hw = get_profile("b200")
    shape = AttnShape(1, 4, 1, 512, 512, 64, causal=True)
    assert simulate(attention(shape, hw), hw).cycles == simulate(attention(shape, hw), hw).cycles


def test_kernel_call_builds_the_architectures_variant() -> None:
    call = KernelCall.make(KernelKind.ATTENTION_PREFILL, batch=1, heads_q=8, heads_kv=8, seq_q=256, seq_kv=256,
                           head_dim=128, causal=True)
    assert {hw: build_kernel(call, get_profile(hw)).attrs["variant"] for hw in GPUS} == {
        "a100-sxm": "fa2", "h100-sxm": "fa3", "h200": "fa3", "b200": "fa4"}
    assert len(build_kernels(call, get_profile("h100-sxm"))) == 1


# -- bad input ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, hw_name, variant, words", [
    ({"heads_q": 32, "heads_kv": 5}, "h100-sxm", None, ["heads_q=32", "heads_kv=5", "valid heads_kv: 1, 2, 4, 8"]),
    ({"seq_q": -4}, "h100-sxm", None, ["seq_q", "positive"]),
    ({"seq_kv": 0}, "h100-sxm", None, ["seq_kv", "positive"]),
    ({"head_dim": 80}, "h100-sxm", None, ["head_dim=80", "valid head dims: 64, 96, 128, 192, 256"]),
    ({"head_dim": 256}, "b200", None, ["head_dim=256", "fa4", "valid head dims: 64, 96, 128",
                                       "or (192, 128) as (head_dim, head_dim_v)", "fa2, fa3"]),
    ({"head_dim": 192}, "b200", None, ["head_dim=192", "fa4", "(192, 128)", "fa2, fa3"]),
    ({}, "a100-sxm", AttnVariant.FA3, ["fa3", "TMA", "a100-sxm", "valid variants on a100-sxm: fa2"]),
    ({}, "h100-sxm", AttnVariant.FA4, ["fa4", "TMEM", "valid variants on h100-sxm: fa2, fa3"]),
    ({"dtype": DType.FP8_E4M3}, "a100-sxm", None, ["fp8", "a100-sxm"]),
])
def test_bad_input_names_the_parameter_and_what_is_valid(kwargs: dict, hw_name: str, variant: AttnVariant | None,
                                                         words: list[str]) -> None:
    args = {"batch": 1, "heads_q": 8, "heads_kv": 8, "seq_q": 128, "seq_kv": 128, "head_dim": 128, **kwargs}
    with pytest.raises(ValueError) as err:
        attention(AttnShape(**args), get_profile(hw_name), variant=variant)
    for w in words:
        assert w in str(err.value)


def _mma_beside_exp(hw_name: str, **attrs: object) -> tuple[int, int, int]:
    """Cycles of one MMA, one EXP, and both issued together by two warp groups of one CTA (kernel `attrs`)."""
    import numpy as np

    from torchsim.graph import CtaClass, GraphBuilder, KernelGraph

    hw = get_profile(hw_name)
    out = []
    for parts in (("mma",), ("exp",), ("mma", "exp")):
        b = GraphBuilder("pair")
        for p in parts:
            g = b.group(p, num_warps=4)
            if p == "mma":
                b.node(g, Op.MMA, Unit.TENSOR, work=hw.tensor_flop_per_clk_per_sm(DType.BF16) * 2000)
            else:
                b.node(g, Op.EXP, Unit.SFU, work=float(hw.sfu_ops_per_clk_per_sm.value) * 2000)
        kg = KernelGraph("pair", (CtaClass(b.build(), np.zeros((1, 0), dtype=np.int64), (), threads=256),),
                         attrs=dict(attrs))
        out.append(simulate(kg, hw).cycles)
    return out[0], out[1], out[2]


def test_exp_and_register_accumulator_mma_exclude_each_other_before_blackwell() -> None:
    """sm80/sm90 (accumulators in the register file): MUFU and MMA work serialise; sm100 (TMEM): they overlap."""
    mma, exp, both = _mma_beside_exp("h100-sxm")  # each node alone occupies its pipe for 2000 cycles
    assert both - max(mma, exp) >= 2000 - 64  # the EXP waits for the MMA's injection, not its latency
    mma, exp, both = _mma_beside_exp("b200")
    assert both - max(mma, exp) < 100


def test_register_accumulator_mmas_exclude_exp_on_blackwell_too() -> None:
    """The exclusion follows where the MMAs accumulate, not the part: a B200 kernel whose MMAs accumulate in
    registers (FA2's mma.sync) serialises them with MUFU work; tcgen05 kernels (TMEM, the default) overlap."""
    mma, exp, both = _mma_beside_exp("b200", tmem_accumulators=False)
    assert both - exp >= 2000 - 64  # the EXP waits for the MMA's 2000-cycle injection
    hw = get_profile("b200")
    shape = AttnShape(1, 32, 32, 2048, 2048, 64)
    fa2, fa4 = attention(shape, hw, variant=AttnVariant.FA2), attention(shape, hw)
    assert fa2.attrs["tmem_accumulators"] is False and "tmem_accumulators" not in fa4.attrs
    overlap = replace(hw, sfu_overlaps_tensor=replace(hw.sfu_overlaps_tensor, value=1))
    paired, free = simulate(fa2, hw), simulate(fa2, overlap)
    assert paired.cycles > free.cycles  # the exclusion costs FA2 time on B200
    assert paired.time_s >= roofline_s(fa2, hw)
    assert simulate(fa4, hw).cycles == simulate(fa4, overlap).cycles  # TMEM accumulators: nothing paired


def test_fa2_mma_sync_holds_the_datapath_at_the_warp_mma_rate() -> None:
    """FA2 issues sm80's mma.sync: on A100 that is the tensor rate; on B200 it is the profile's (lower)
    warp-MMA rate, so the same MMAs occupy the datapath longer; a faster warp-MMA rate is never slower."""
    shape = AttnShape(1, 2, 2, 256, 1024, 64)
    a100, b200 = get_profile("a100-sxm"), get_profile("b200")
    assert _mma_work(attention(shape, a100)) == pytest.approx(shape.flops())
    scale = b200.tensor_bf16_flop_per_clk_per_sm.value / b200.warp_mma_flop_per_clk_per_sm.value
    assert scale > 1
    assert _mma_work(attention(shape, b200, variant=AttnVariant.FA2)) == pytest.approx(scale * shape.flops())
    assert _mma_work(attention(shape, b200)) == pytest.approx(shape.flops())  # fa4 (tcgen05): unscaled
    big = AttnShape(1, 32, 32, 2048, 2048, 64)
    slow = simulate(attention(big, b200, variant=AttnVariant.FA2), b200).time_s
    fast_hw = replace(b200, warp_mma_flop_per_clk_per_sm=replace(b200.warp_mma_flop_per_clk_per_sm, value=8192))
    fast = simulate(attention(big, fast_hw, variant=AttnVariant.FA2), fast_hw).time_s
    assert fast < slow
    broken = replace(b200, warp_mma_flop_per_clk_per_sm=replace(b200.warp_mma_flop_per_clk_per_sm, value=0))
    with pytest.raises(ValueError, match="warp_mma_flop_per_clk_per_sm"):
        attention(shape, broken, variant=AttnVariant.FA2)


def test_triton_runs_wgmma_in_every_warp_group_with_cp_async_loads_on_hopper() -> None:
    """Triton's tutorial kernel on sm90: wgmma (tensor rate, no mma.sync scaling), loads issued by the same
    warp groups that compute (cp.async on the LD/ST unit, no TMA), every group stepping through the K/V ring."""
    hw = get_profile("h100-sxm")
    shape = AttnShape(1, 2, 2, 256, 1024, 128)
    kg = attention(shape, hw, variant=AttnVariant.TRITON)
    assert kg.attrs["template"] == "attention/triton"
    assert _mma_work(kg) == pytest.approx(shape.flops())
    g = kg.classes[0].graph
    loads = [i for i in range(g.num_nodes) if g.op[i] == Op.CP_ASYNC]
    assert loads and not any(g.unit[i] == Unit.TMA for i in range(g.num_nodes))
    assert {g.group[i] for i in loads} == {g.group[i] for i in range(g.num_nodes) if g.op[i] == Op.MMA}
    cfg = default_config(shape, hw, AttnVariant.TRITON)
    assert kg.classes[0].threads == 32 * cfg.warps
    assert simulate(kg, hw).time_s >= roofline_s(kg, hw)
    for name in ("a100-sxm", "b200"):
        with pytest.raises(ValueError, match="triton"):
            attention(shape, get_profile(name), variant=AttnVariant.TRITON)


def test_triton_warp_groups_meet_at_a_barrier_every_iteration() -> None:
    """The K/V ring is shared by all warps: no group issues S_j before every group issued P_(j-1) V_(j-1);
    nothing staggers the groups, so their softmaxes start together."""
    g = attention(AttnShape(1, 1, 1, 128, 512, 128), get_profile("h100-sxm"), variant=AttnVariant.TRITON
                  ).classes[0].graph
    idx = {n: i for i, n in enumerate(g.node_names)}
    order = {(s, d) for s, d, k in zip(g.edge_src, g.edge_dst, g.edge_kind) if k == Edge.ORDER}
    assert (idx["pv1[0]"], idx["qk0[1]"]) in order and (idx["pv0[0]"], idx["qk1[1]"]) in order
    data = {(s, d) for s, d, k in zip(g.edge_src, g.edge_dst, g.edge_kind) if k == Edge.DATA}
    assert (idx["rowmax_0[1]"], idx["exp_0[1]"]) in data  # exp2 waits for the row max
    # no ping-pong: the groups' S_j wgmmas interleave on the tensor cores, so each group's softmax starts once
    # every group's S_j is complete
    for g in range(2):
        assert all((idx[f"qk{c}[1]"], idx[f"rowmax_{g}[1]"]) in data for c in range(2))


@pytest.mark.parametrize("hw_name", ["a100-sxm", "h100-sxm", "b200"])
def test_soft_capping_costs_a_tanh_per_score(hw_name: str) -> None:
    from torchsim.lowering.templates.attention_calls import shape_of

    hw = get_profile(hw_name)
    args = dict(batch=1, heads_q=16, heads_kv=8, seq_q=2048, seq_kv=2048, head_dim=128, causal=True)
    plain = KernelCall.make(KernelKind.ATTENTION_PREFILL, **args)
    capped = KernelCall.make(KernelKind.ATTENTION_PREFILL, softcap=50.0, **args)
    assert shape_of(capped).softcap == 50.0
    kp, kc = build_kernel(plain, hw), build_kernel(capped, hw)

    def sfu(kg):  # type: ignore[no-untyped-def]
        return sum(float(c.graph.work[c.graph.unit == int(Unit.SFU)].sum()) * c.count for c in kg.classes)

    assert sfu(kc) > sfu(kp)  # the tanh of every score joins the exp2
    rp, rc = simulate(kp, hw), simulate(kc, hw)
    assert rc.cycles >= rp.cycles
    assert rc.time_s >= kc.flops / hw.peak_tensor_flops_per_s(DType.BF16)  # never beats the roofline


def test_triton_pays_its_generated_softmax_and_epilogue_division() -> None:
    """Triton's softmax is exposed (no ping-pong) and costs more lanes than FlashAttention's (FMNMX on the half-rate
    ALU pipe, exp2 without .ftz), and its epilogue divides O element-wise (one MUFU.RCP per element): on one SM the
    Triton kernel is slower than FA3 on the same shape, its softmax FMA work exceeds the plain lane count, and it
    grows with the K/V length."""
    hw = get_profile("h100-sxm")
    shape = AttnShape(1, 1, 1, 128, 2048, 128)
    kg = attention(shape, hw, variant=AttnVariant.TRITON)
    g = kg.classes[0].graph
    names = list(g.node_names)
    rcp = [i for i, nm in enumerate(names) if nm.startswith("rcp_normalize")]
    assert rcp and all(g.unit[i] == Unit.SFU and g.work[i] == 64 * 128 for i in rcp)  # one RCP per O element
    rowmax = next(i for i, nm in enumerate(names) if nm.startswith("rowmax_0"))
    assert g.work[rowmax] > 64 * 128 * 2.0  # FMNMX costs more than one FFMA slot per score
    t_triton = simulate(kg, hw, max_sms=1).cycles
    t_fa3 = simulate(attention(shape, hw, variant=AttnVariant.FA3), hw, max_sms=1).cycles
    assert t_triton > t_fa3
    longer = simulate(attention(AttnShape(1, 1, 1, 128, 4096, 128), hw, variant=AttnVariant.TRITON), hw,
                      max_sms=1).cycles
    assert longer > t_triton


# -- DeepSeek's MLA prefill: Q/K head dim 192 (128 + 64 RoPE), V 128 -----------------------------------------------
def test_mla_prefill_head_dims_run_on_every_gpu_variant() -> None:
    """FA3 and FA4 take (192, 128) as it is (FA3 with 128-key blocks, as hopper/tile_size.h gives a V of 128, 112
    for a V of 192; FA4's ring fits three stages in its shared memory); FA2 has one head dim for Q/K and V, so
    the V runs zero-padded to 192 (as vLLM pads it for FA2) and costs what a V of 192 costs."""
    from torchsim.lowering.templates.attention import smem_bytes
    from torchsim.sim import simulate

    mla = {"batch": 1, "heads_q": 16, "heads_kv": 16, "seq_q": 1024, "seq_kv": 1024, "head_dim": 192, "causal": True}
    h100, b200, a100 = (get_profile(n) for n in ("h100-sxm", "b200", "a100-sxm"))
    fa3 = attention(AttnShape(**mla, head_dim_v=128), h100)
    assert (fa3.attrs["variant"], fa3.attrs["bn"], fa3.attrs["head_dim_v"]) == ("fa3", 128, 128)
    assert attention(AttnShape(**mla, head_dim_v=192), h100).attrs["bn"] == 112
    fa4 = attention(AttnShape(**mla, head_dim_v=128), b200)
    assert fa4.attrs["variant"] == "fa4" and fa4.classes[0].smem <= b200.smem_per_cta_bytes.value
    assert smem_bytes(default_config(AttnShape(**mla, head_dim_v=128), b200), AttnShape(**mla, head_dim_v=128)) \
        == 256 * 192 * 2 + 3 * 128 * (192 + 128) * 2 // 2  # O in Q's buffer, K/V/K ring at a stride of (K + V) / 2
    padded = attention(AttnShape(**mla, head_dim_v=128), a100)
    full = attention(AttnShape(**mla, head_dim_v=192), a100)
    assert padded.attrs["v_padded_from"] == 128 and "head_dim_v" not in padded.attrs
    assert padded.flops == full.flops and simulate(padded, a100).cycles == simulate(full, a100).cycles
    assert simulate(fa3, h100).cycles < simulate(attention(AttnShape(**mla, head_dim_v=192), h100), h100).cycles


@pytest.mark.parametrize("hw_name", ["a100-sxm", "h100-sxm", "b200"])
def test_head_dim_96_costs_between_64_and_128(hw_name: str) -> None:
    """Head dim 96 (Phi-3/3.5-mini) runs each GPU's default variant; over a few waves of CTAs its time lies between
    the 64- and 128-wide heads' (more work per key than 64, less than 128; with fewer CTAs than SMs FA3's
    192-row tiles of head dim 96 can take longer than the 128-row tiles of head dim 128, as on the real part)."""
    hw = get_profile(hw_name)
    times = {}
    for d in (64, 96, 128):
        kg = attention(AttnShape(batch=1, heads_q=32, heads_kv=32, seq_q=2048, seq_kv=2048, head_dim=d), hw)
        times[d] = simulate(kg, hw).cycles
    assert times[64] < times[96] < times[128]


def test_fa3_head_dim_96_tiles_follow_flash_attention() -> None:
    """hopper/tile_size.h for head dim <= 96: 192 x 144 tiles, causal or not; 128 keys under a sliding window
    and in fp8."""
    hw = get_profile("h100-sxm")
    base = dict(batch=1, heads_q=8, heads_kv=8, seq_q=4096, seq_kv=4096, head_dim=96)
    cfg = {name: default_config(AttnShape(**base, **extra), hw) for name, extra in (
        ("full", {}), ("causal", {"causal": True}), ("window", {"causal": True, "window": 1024}),
        ("fp8", {"dtype": DType.FP8_E4M3}))}
    assert {k: (c.bm, c.bn) for k, c in cfg.items()} == {
        "full": (192, 144), "causal": (192, 144), "window": (192, 128), "fp8": (192, 128)}
