"""GEMM physics on every GPU profile: rooflines, efficiency bands, monotonicity, waves, order-edge ablation."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchsim.graph import DType, Unit
from torchsim.hwmodels import GPU_PROFILES, get_profile
from torchsim.hwmodels.quantity import assumed
from torchsim.hwmodels.whatif import derive_profile
from torchsim.lowering.templates import gemm
from torchsim.lowering.templates.gemm_config import GemmConfig, Pipeline, default_config
from torchsim.sim import simulate

GPUS = sorted(GPU_PROFILES)


@settings(max_examples=12, deadline=None)
@given(hw_name=st.sampled_from(GPUS), m=st.integers(1, 2500), n=st.integers(16, 2500), k=st.integers(16, 2500),
       fp8=st.booleans())
def test_no_gemm_beats_its_roofline(hw_name: str, m: int, n: int, k: int, fp8: bool) -> None:
    hw = get_profile(hw_name)
    dtype = DType.FP8_E4M3 if fp8 and hw.supports(DType.FP8_E4M3) else DType.BF16
    kg = gemm(m, n, k, dtype, hw)
    res = simulate(kg, hw)
    assert res.time_s >= kg.flops / hw.peak_tensor_flops_per_s(dtype)
    assert res.time_s >= kg.dram_bytes / hw.dram_peak_bytes_per_s.value
    assert res.dram_bytes / res.time_s <= hw.dram_bytes_per_s_value * 1.0001


def test_large_gemm_on_h100_is_tensor_bound_in_band() -> None:
    hw = get_profile("h100-sxm")
    res = simulate(gemm(8192, 8192, 8192, DType.BF16, hw), hw)
    frac = res.tflops * 1e12 / hw.peak_tensor_flops_per_s(DType.BF16)
    assert 0.60 <= frac <= 0.95, frac
    assert res.unit_busy["tensor"] > 0.6


@pytest.mark.parametrize("hw_name", GPUS)
def test_gemv_is_dram_bound(hw_name: str) -> None:
    hw = get_profile(hw_name)
    res = simulate(gemm(1, 14336, 4096, DType.BF16, hw), hw)
    frac = res.dram_bytes_per_s / hw.dram_peak_bytes_per_s.value
    assert res.bound == "DRAM bandwidth"
    assert 0.70 <= frac <= 0.95, frac


def _faster(hw, factor_bw: float = 1.0, factor_clk: float = 1.0):  # type: ignore[no-untyped-def]
    src = "what-if in tests/test_gemm.py"
    return replace(hw, dram_bytes_per_s=assumed(hw.dram_bytes_per_s.value * factor_bw, "B/s", src),
                   dram_peak_bytes_per_s=assumed(hw.dram_peak_bytes_per_s.value * factor_bw, "B/s", src),
                   l2_bytes_per_s=assumed(hw.l2_bytes_per_s.value * factor_bw, "B/s", src),
                   clock_hz=assumed(hw.clock_hz.value * factor_clk, "Hz", src))


@pytest.mark.parametrize("shape", [(1, 4096, 4096), (512, 1024, 2048), (2048, 2048, 1024)])
@pytest.mark.parametrize("hw_name", ["a100-sxm", "h100-sxm", "b200"])
def test_more_bandwidth_or_clock_never_slows(hw_name: str, shape: tuple[int, int, int]) -> None:
    hw = get_profile(hw_name)
    base = simulate(gemm(*shape, DType.BF16, hw), hw).time_s
    for fast in (_faster(hw, factor_bw=1.5), _faster(hw, factor_clk=1.25)):
        cfg = default_config(*shape, DType.BF16, hw)  # same tiles: only the machine changes
        assert simulate(gemm(*shape, DType.BF16, fast, cfg), fast).time_s <= base * 1.0001


def test_waves_step_when_ctas_cross_sm_count() -> None:
    hw = get_profile("h100-sxm")
    cfg = GemmConfig(128, 128, 64, 4, Pipeline.WS_COOPERATIVE, persistent=False)
    t = {}
    for tiles in (hw.sms, hw.sms + 1):
        res = simulate(gemm(128 * tiles, 128, 4096, DType.BF16, hw, cfg), hw)
        t[tiles] = res
    full, over = t[hw.sms], t[hw.sms + 1]
    assert full.waves == 1.0 and over.waves > 1.0
    # the lone CTA of the second wave has the whole memory system to itself, so the step is < 2x
    assert over.time_s > 1.3 * full.time_s


def test_removing_order_edges_makes_sm90_gemm_faster() -> None:
    # Without order edges every load of a CTA is in flight at once, and memory flows are served FIFO in issue
    # order: a CTA whose prologue tensor-map fetch misses in DRAM (the first one; the others hit in L2) would
    # queue behind the other CTAs' whole K loops. Compare without the tensor-map fetch.
    hw = derive_profile(get_profile("h100-sxm"), {"tensormap_bytes": 0}, where="test: no tensor-map fetch")
    cfg = default_config(2048, 2048, 2048, DType.BF16, hw)
    with_order = simulate(gemm(2048, 2048, 2048, DType.BF16, hw, cfg), hw)
    without = simulate(gemm(2048, 2048, 2048, DType.BF16, hw, replace(cfg, order_edges=False)), hw)
    assert without.cycles < with_order.cycles


def test_fp8_needs_fp8_tensor_cores() -> None:
    with pytest.raises(ValueError, match="no FP8_E4M3 tensor cores"):
        gemm(128, 128, 128, DType.FP8_E4M3, get_profile("a100-sxm"))


def test_flops_and_bytes_do_not_depend_on_tiles() -> None:
    hw = get_profile("h100-sxm")
    a = gemm(1000, 3000, 700, DType.BF16, hw, GemmConfig(128, 128, 64, 4, Pipeline.WS_COOPERATIVE))
    b = gemm(1000, 3000, 700, DType.BF16, hw, GemmConfig(128, 256, 64, 3, Pipeline.WS_PINGPONG))
    assert a.flops == b.flops and a.dram_bytes == b.dram_bytes


def test_variant_needs_its_architecture() -> None:
    with pytest.raises(ValueError, match="ws-pingpong.*valid here: sm80-multistage"):
        default_config(256, 256, 256, DType.BF16, get_profile("a100-sxm"), pipeline=Pipeline.WS_PINGPONG)


def test_64_row_tcgen05_mmas_hold_the_datapath_as_long_as_128_row_ones() -> None:
    """On sm100 a 64-row MMA holds the 128-row datapath as long as a 128-row one (twice the datapath work per
    FLOP); on sm90 64 rows is wgmma's native M."""
    for name, pipe, padding in (("b200", Pipeline.SM100_TCGEN05, 2.0), ("h100-sxm", Pipeline.NAIVE_2STAGE, 1.0)):
        hw = get_profile(name)
        for bm, expect in ((64, padding), (128, 1.0)):
            kg = gemm(4096, 4096, 1024, DType.BF16, hw, GemmConfig(bm, 256, 64, 4, pipe))
            work = sum(c.count * sum(float(c.graph.work[i]) for i in range(c.graph.num_nodes)
                                     if c.graph.unit[i] == Unit.TENSOR) for c in kg.classes)
            assert work == pytest.approx(expect * kg.flops), (name, bm)
