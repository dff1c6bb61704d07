"""Tensix matmul program configs: ttnn's own selection rules, out blocks, and what they cost."""

from __future__ import annotations

import pytest

from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.lowering.templates.tensix.matmul import MatmulConfig, matmul, subblock
from torchsim.sim import simulate

WH = get_profile("wormhole-n150")


def test_auto_config_takes_the_1d_in0_multicast_when_the_output_is_one_block_tall():
    # 512x1024x1024 bf16: the 16x16 per-core factor fits L1, so the output is 1 x 2 blocks -> ttnn's 1D config:
    # all of M on each core, N/64 cores rounded up to one tile column, in0 multicast to every core
    kg = matmul(512, 1024, 1024, DType.BF16, WH, fidelity="HiFi2")
    cfg = kg.attrs["config"]
    assert kg.attrs["template"] == "tensix_matmul_1d_mcast"
    assert (cfg["per_core_m"], cfg["per_core_n"], cfg["in0_block_w"]) == (16, 1, 2)
    assert kg.classes[0].count == 32  # N tiles / per_core_N cores have work
    assert cfg["subblock"] == [8, 1]


def test_auto_config_2d_blocks_the_per_core_output_until_l1_fits():
    kg = matmul(4096, 4096, 4096, DType.BF16, WH, fidelity="HiFi2")
    cfg = kg.attrs["config"]
    assert kg.attrs["template"] == "tensix_matmul_2d_mcast"
    assert (cfg["per_core_m"], cfg["per_core_n"]) == (16, 16)  # ceil(Mt / rows) x ceil(Nt / cols)
    assert cfg["in0_block_w"] == 16  # Kt / cols
    assert cfg["out_block"] == [8, 8] and cfg["passes"] == 4  # 16x16 with in0_block_w 16 overflows L1
    assert cfg["subblock"] == [4, 2]


def test_subblock_follows_ttnn_preference_and_limits():
    assert subblock(8, 8) == (4, 2)
    assert subblock(16, 1) == (8, 1)
    assert subblock(8, 8, limit=4) == (2, 2)  # fp32 accumulation: 4 Dst tiles
    assert subblock(8, 8, w_equals_block=True) == (1, 8)  # sharded output: h = 1, w = the block width
    assert subblock(8, 16, w_equals_block=True) == (1, 1)  # 16 tiles do not fit Dst
    assert subblock(1, 4, w_equals_block=True) == (1, 4)


def _dram(cfg: MatmulConfig, m: int, n: int, k: int) -> tuple[float, float]:
    kg = matmul(m, n, k, DType.BF16, WH, fidelity="HiFi2", config=cfg)
    r = simulate(kg, WH)
    return r.dram_bytes, r.time_s


def test_out_blocks_reread_in0_per_block_column_and_in1_per_block_row():
    m = n = k = 2048
    whole = MatmulConfig((8, 8), 8, 8, 8, 4, 2, "row", "col")
    split = MatmulConfig((8, 8), 8, 8, 8, 4, 2, "row", "col", out_block_h=4, out_block_w=2)
    b_whole, _ = _dram(whole, m, n, k)
    b_split, _ = _dram(split, m, n, k)
    a, b, c = m * k * 2, k * n * 2, m * n * 2
    assert b_whole == pytest.approx(a + b + c)
    assert b_split == pytest.approx(a * (8 // 2) + b * (8 // 4) + c)


def test_bad_program_config_names_what_does_not_divide():
    with pytest.raises(ValueError, match="in0_block_w must divide K"):
        matmul(1024, 1024, 1024, DType.BF16, WH, config=MatmulConfig((8, 8), 4, 4, 3, 1, 1, "row", "col"))
    with pytest.raises(ValueError, match="program config needs 9x8 cores, more than the grid 8x8"):
        matmul(1024, 1024, 1024, DType.BF16, WH, config=MatmulConfig((9, 8), 4, 4, 4, 1, 1, "row", "col"))


def _records(m: int, k: int, n: int, dtype: DType, fidelity: str, hw_name: str = "wormhole-n150"):  # type: ignore[no-untyped-def]
    hw = get_profile(hw_name)
    kg = matmul(m, n, k, dtype, hw, fidelity=fidelity)
    return kg, simulate(kg, hw, record=True)


def test_the_output_is_written_while_the_last_block_still_multiplies():
    """tt-metal's writer sends each packed subblock of the last K block to DRAM at once: the first output write
    of a core starts before that core's last math piece ends, and the pieces write the whole output once."""
    kg, res = _records(3072, 4096, 3072, DType.BFP8_B, "LoFi")
    cfg = kg.attrs["config"]
    assert cfg["passes"] == 1 and cfg["per_core_m"] // cfg["subblock"][0] == 3  # three subblock rows -> 3 pieces
    recs = [r for r in res.records if r.cta == 0]
    writes = [r for r in recs if r.name.startswith("out_write")]
    maths = [r for r in recs if r.name.startswith("matmul")]
    assert len(writes) == 3
    assert min(w.start for w in writes) < max(m.end for m in maths)
    g = kg.classes[0].graph
    assert sum(float(g.work[r.node]) for r in writes) == pytest.approx(12 * 12 * 1088)  # 12x12 bfp8_b tiles


def test_a_one_subblock_tall_block_is_written_in_column_pieces():
    kg, res = _records(1280, 3328, 3328, DType.BF16, "HiFi2", "blackhole-p150-13x10")
    cfg = kg.attrs["config"]
    assert cfg["per_core_m"] == cfg["subblock"][0]  # one subblock row
    writes = [r for r in res.records if r.cta == 0 and r.name.startswith("out_write")]
    assert len(writes) == 4  # 8 tile columns / 2 per subblock


def test_blackhole_unpackers_keep_up_with_a_bf16_hifi2_matmul_where_wormhole_ones_do_not():
    """At Wormhole's documented 64 B/clk a 4x2-subblock bf16 HiFi2 matmul is unpacker-bound (at most 80 % of the
    FPU); Blackhole's calibrated 80 B/clk feeds the FPU."""
    wh = get_profile("wormhole-n150")
    bh = get_profile("blackhole-p150")
    assert float(bh.unpack_l1_bytes_per_clk) > float(wh.unpack_l1_bytes_per_clk)
    assert bh.unpack_l1_bytes_per_clk.kind == "calibrated"
    _, r_wh = _records(4096, 4096, 4096, DType.BF16, "HiFi2")
    _, r_bh = _records(5120, 6656, 6656, DType.BF16, "HiFi2", "blackhole-p150-13x10")
    assert r_wh.bound == "unpacker" and r_wh.unit_busy["fpu"] < 0.8
    assert r_bh.bound == "matrix FPU" and r_bh.unit_busy["fpu"] > 0.8
