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
