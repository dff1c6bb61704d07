"""The global-memory path beyond one DRAM rate: DRAM cost by traffic kind and mix, the C staging buffer's reuse
after its TMA store, and the A100 PCIe board (issue 12)."""

from __future__ import annotations

import pytest

from torchsim.graph import DType, Edge
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.whatif import derive_profile
from torchsim.lowering.templates.gemm import gemm
from torchsim.lowering.templates.gemm_config import GemmConfig, Pipeline
from torchsim.sim import simulate
from torchsim.sim.memory import dram_server
from torchsim.sim.resources import DramServer
from torchsim.sim.sustained import simulate_sustained
from torchsim.validation.published import HW_MAP

CHUNK = 4096.0


def stream(srv: DramServer, kinds: list[bool], n: int = 400) -> float:
    """Bytes per cycle of a back-to-back stream cycling through `kinds` (True = write)."""
    t = 0
    for i in range(n):
        srv.serve_kind(t, CHUNK, kinds[i % len(kinds)])
        t += 1
    return n * CHUNK / srv.free_at


def test_each_kind_streams_at_its_rate_and_a_copy_at_the_copy_rate() -> None:
    rd, wr, cp = 30.0, 25.0, 20.0
    assert stream(DramServer("d", rd, wr, cp, 500), [False]) == pytest.approx(rd, rel=1e-6)
    assert stream(DramServer("d", rd, wr, cp, 500), [True]) == pytest.approx(wr, rel=1e-6)
    assert stream(DramServer("d", rd, wr, cp, 500), [False, True]) == pytest.approx(cp, rel=0.02)
    # a read stream with one write in ten pays for the writes, far less than a copy
    few = stream(DramServer("d", rd, wr, cp, 500), [False] * 9 + [True])
    assert cp < few < 1.0 / (0.9 / rd + 0.1 / wr) + 1e-9


def test_bad_dram_rates_are_named() -> None:
    with pytest.raises(ValueError, match="'dram'.*bandwidths"):
        DramServer("dram", 1.0, 0.0, 1.0, 10)


@pytest.mark.parametrize("name", ["a100-sxm", "a100-pcie", "h100-sxm", "h200", "b200"])
def test_no_traffic_kind_beats_the_sustained_figure_and_what_ifs_move_them_all(name: str) -> None:
    hw = get_profile(name)
    clk = hw.clock_hz_value
    s = hw.dram_bytes_per_s_value / clk
    srv = dram_server(hw, clk)
    assert max(1 / srv.read_cost, 1 / srv.write_cost) == pytest.approx(s)
    assert stream(dram_server(hw, clk), [False, True]) <= s * (1 + 1e-9)
    fast = derive_profile(hw, {"dram_bytes_per_s": 1.5 * hw.dram_bytes_per_s.value}, where="test")
    fsrv = dram_server(fast, clk)
    assert srv.read_cost / fsrv.read_cost == pytest.approx(1.5)
    assert srv.write_cost / fsrv.write_cost == pytest.approx(1.5)


def _edges(kg, cls: int = 0) -> tuple[dict[str, int], set[tuple[int, int]]]:  # type: ignore[no-untyped-def]
    g = kg.classes[cls].graph
    names = {n: i for i, n in enumerate(g.node_names)}
    data = {(int(s), int(d)) for s, d, k in zip(g.edge_src, g.edge_dst, g.edge_kind, strict=True)
            if int(k) == int(Edge.DATA)}
    return names, data


@pytest.mark.parametrize("pipe", [Pipeline.WS_COOPERATIVE, Pipeline.WS_PINGPONG, Pipeline.NAIVE_2STAGE])
def test_sm90_warp_group_waits_for_its_store_before_the_next_tile(pipe: Pipeline) -> None:
    hw = get_profile("h100-sxm")
    bm = 64 if pipe is Pipeline.NAIVE_2STAGE else 128
    kg = gemm(bm * 4, 256 * 132, 512, DType.BF16, hw, GemmConfig(bm, 256, 64, 3, pipe))
    names, data = _edges(kg)
    first = "mma1[t1,k0]" if pipe is not Pipeline.NAIVE_2STAGE else "mma[t1,k0]"  # the last store_C[t0]: consumer1
    assert (names["store_C[t0]"], names[first]) in data


def test_sm100_epilogue_waits_for_its_store_before_staging_the_next_tile() -> None:
    hw = get_profile("b200")
    kg = gemm(128 * 4, 256 * 148, 512, DType.BF16, hw, GemmConfig(128, 256, 64, 3, Pipeline.SM100_TCGEN05))
    names, data = _edges(kg)
    assert (names["store_C[t0]"], names["sts_C[t1]"]) in data


def test_a100_pcie_is_the_sxm_die_on_a_smaller_board() -> None:
    sxm, pcie = get_profile("a100-sxm"), get_profile("a100-pcie")
    assert pcie.power_limit_w.value < sxm.power_limit_w.value
    assert pcie.dram_peak_bytes_per_s.value < sxm.dram_peak_bytes_per_s.value
    assert pcie.tensor_bf16_flop_per_clk_per_sm == sxm.tensor_bf16_flop_per_clk_per_sm
    dense = [simulate_sustained(gemm(4096, 4096, 4096, DType.BF16, hw), hw) for hw in (sxm, pcie)]
    assert dense[1].time_s > dense[0].time_s and dense[1].clock_hz < dense[0].clock_hz
    gemv = [simulate(gemm(1, 8192, 8192, DType.BF16, hw), hw) for hw in (sxm, pcie)]
    assert gemv[1].time_s > gemv[0].time_s  # less HBM bandwidth
    profile = next(p for key, p, _ in HW_MAP if "NVIDIA A100 PCIe 40GB".find(key) >= 0)
    assert profile == "a100-pcie"


def test_deepgemm_config_follows_its_selection_rules() -> None:
    from torchsim.lowering.templates.gemm_config import DEEPGEMM_BLOCK_NS, deepgemm_config
    hw = get_profile("h100-sxm")
    big = deepgemm_config(4096, 7168, 2048, DType.FP8_E4M3, hw)
    assert (big.bm, big.bk, big.pipeline) == (128, 128, Pipeline.WS_COOPERATIVE) and big.bn in DEEPGEMM_BLOCK_NS
    # fewest waves first: N = 2112 at M = 128 fits one wave of 132 SMs only with BLOCK_N = 16
    assert deepgemm_config(128, 2112, 7168, DType.FP8_E4M3, hw).bn == 16
    assert big.smem_bytes(DType.FP8_E4M3) <= hw.smem_per_cta_bytes.value
    with pytest.raises(ValueError, match="sm90 profile and an FP8 dtype"):
        deepgemm_config(4096, 4096, 4096, DType.BF16, hw)


def test_deepgemm_small_m_runs_its_one_math_warp_group_kernel() -> None:
    """M <= 64: DeepGEMM's BLOCK_M 64 kernel (a TMA warp group + one math warp group, fp8_gemm.cuh
    get_num_threads_per_sm), BLOCK_N by the same waves rule, the deep pipeline; it never beats the roofline."""
    from dataclasses import replace

    from torchsim.lowering.templates.gemm_config import deepgemm_config
    hw = get_profile("h100-sxm")
    cfg = deepgemm_config(64, 2112, 7168, DType.FP8_E4M3, hw)
    assert (cfg.bm, cfg.bn, cfg.pipeline, cfg.consumers, cfg.threads()) == (64, 16, Pipeline.WS_COOPERATIVE, 1, 256)
    assert cfg.stages > 2 and cfg.smem_bytes(DType.FP8_E4M3) <= hw.smem_per_cta_bytes.value
    kg = gemm(64, 2112, 7168, DType.FP8_E4M3, hw, cfg)
    names = kg.classes[0].graph.node_names
    assert any(nm.startswith("mma0[") for nm in names) and not any(nm.startswith("mma1[") for nm in names)
    res = simulate(kg, hw)
    t = res.cycles / hw.clock_hz_value
    assert t >= 2.0 * 64 * 2112 * 7168 / hw.peak_tensor_flops_per_s(DType.FP8_E4M3)
    assert t >= 2112 * 7168 / float(hw.dram_peak_bytes_per_s.value)  # the FP8 weight is read once at least
    with pytest.raises(ValueError, match="ws-pingpong splits the tile"):
        replace(cfg, pipeline=Pipeline.WS_PINGPONG)
    with pytest.raises(ValueError, match="ws-cooperative runs one consumer"):
        replace(cfg, bm=32)


def test_deepgemm_block_scales_sync_both_math_warp_groups_per_tile() -> None:
    from dataclasses import replace

    from torchsim.lowering.templates.gemm_config import deepgemm_config
    hw = get_profile("h100-sxm")
    cfg = deepgemm_config(4096, 32768, 512, DType.FP8_E4M3, hw)
    assert cfg.block_scales
    kg = gemm(4096, 32768, 512, DType.FP8_E4M3, hw, cfg)
    names, data = _edges(kg)
    assert (names["sts_scales_b[t1]"], names["mma0[t1,k0]"]) in data  # consumer1's scales gate consumer0
    assert (names["store_C[t0]"], names["ldg_scales_b[t1]"]) in data  # the store drains before the next tile
    plain = simulate(gemm(4096, 32768, 512, DType.FP8_E4M3, hw, replace(cfg, block_scales=False)), hw)
    assert simulate(kg, hw).cycles > plain.cycles
