"""Tensix fidelity: Blackhole grid by firmware/name/--grid, host-visible vs device time per timing method, the
unpacker's shared L1 rate and Src-register reuse, packer L1 accumulation, and the FPU roofline."""

from __future__ import annotations

from dataclasses import replace

import pytest

from torchsim.cli import UsageError
from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.quantity import Quantity
from torchsim.hwmodels.tensix.core import CoreCosts
from torchsim.hwmodels.tensix.formats import MathFidelity, tile_bytes
from torchsim.hwmodels.tensix.launch import TimingMethod, host_visible_s
from torchsim.hwmodels.tensix.profiles import tensix_with_grid
from torchsim.lowering.templates.tensix.matmul import matmul
from torchsim.sim import simulate

WH = get_profile("wormhole-n150")
BH13 = get_profile("blackhole-p150-13x10")
BH11 = get_profile("blackhole-p150-11x10")


def _time(m: int, n: int, k: int, dt: DType, hw, fid: str, **kw) -> float:
    return simulate(matmul(m, n, k, dt, hw, fidelity=fid, **kw), hw).time_s


def test_blackhole_grids_are_selectable_by_name_and_differ():
    assert BH13.grid == (13, 10) and int(BH13.tensix_enabled) == 140 and BH13.name == "blackhole-p150-13x10"
    assert BH11.grid == (11, 10) and int(BH11.tensix_enabled) == 120 and BH11.name == "blackhole-p150-11x10"
    assert get_profile("blackhole-p150").grid == BH11.grid  # today's firmware (v19.5.0)
    assert get_profile("blackhole-p150-launch").grid == BH13.grid
    # a compute-bound GEMM spread over 130 cores finishes sooner than over 110
    t13 = _time(1280, 3328, 3328, DType.BF16, BH13, "hifi4")
    t11 = _time(1280, 3328, 3328, DType.BF16, BH11, "hifi4")
    assert t13 < t11


def test_grid_option_makes_a_renamed_sub_grid_and_rejects_oversize():
    sub = tensix_with_grid(BH13, "11x10")
    assert sub.grid == (11, 10) and sub.name == "blackhole-p150-13x10@11x10"
    assert tensix_with_grid(BH13, None) is BH13 and tensix_with_grid(BH13, "13x10") is BH13
    with pytest.raises(ValueError, match="does not fit blackhole-p150-11x10: its compute grid is 11x10"):
        tensix_with_grid(BH11, "13x10")
    with pytest.raises(ValueError, match="not of the form COLSxROWS"):
        tensix_with_grid(BH11, "big")


def test_predict_grid_flag_is_tensix_only():
    import argparse

    from torchsim.cli.predict import _grid_profile

    assert _grid_profile(argparse.Namespace(hw="wormhole-n150", grid="4x4")).grid == (4, 4)
    assert _grid_profile(argparse.Namespace(hw="wormhole-n150", grid=None)) == "wormhole-n150"
    with pytest.raises(UsageError, match="--grid is a Tenstorrent option; h100-sxm is a GPU profile"):
        _grid_profile(argparse.Namespace(hw="h100-sxm", grid="8x8"))
    with pytest.raises(UsageError, match="--grid: grid 9x9 does not fit wormhole-n150"):
        _grid_profile(argparse.Namespace(hw="wormhole-n150", grid="9x9"))


@pytest.mark.parametrize("hw", [WH, BH13, BH11, get_profile("wormhole-n300")], ids=lambda h: h.name)
@pytest.mark.parametrize("device_s", [0.0, 2e-6, 1e-3])
def test_host_visible_time_is_never_below_device_time(hw, device_s):
    dev = host_visible_s(hw, device_s, "device-profiler")
    trace = host_visible_s(hw, device_s, TimingMethod.TRACE)
    host = host_visible_s(hw, device_s, "host-timer")
    assert dev == device_s
    assert device_s < trace < host
    assert hw.host_visible_times(device_s) == {"device-profiler": dev, "trace": trace, "host-timer": host}


def test_timing_method_names_and_errors():
    assert {m.value for m in TimingMethod} == {"device-profiler", "host-timer", "trace"}
    valid = "valid: device-profiler, trace, host-timer"
    with pytest.raises(ValueError, match=f"unknown timing method 'wallclock'; {valid}"):
        TimingMethod.parse("wallclock")
    with pytest.raises(ValueError, match="device time must be >= 0"):
        host_visible_s(WH, -1.0, "trace")


def _slower(hw, field: str, factor: float):
    q = getattr(hw, field)
    return replace(hw, **{field: Quantity(float(q) * factor, q.unit, "assumed", "assumed: test what-if")})


@pytest.mark.parametrize("field", ["unpack_l1_bytes_per_clk", "fpu_flop_per_clk_per_phase", "packer_bytes_per_clk"])
@pytest.mark.parametrize("dt,fid", [(DType.BF16, "hifi2"), (DType.BFP8_B, "lofi"), (DType.BF16, "hifi4")])
def test_a_lower_unit_rate_is_never_faster(field, dt, fid):
    base = _time(1024, 1024, 2048, dt, WH, fid)
    slow = _time(1024, 1024, 2048, dt, _slower(WH, field, 0.5), fid)
    assert slow >= base


@pytest.mark.parametrize("hw", [WH, BH13], ids=lambda h: h.name)
@pytest.mark.parametrize("dt,fid", [(DType.BF16, "hifi2"), (DType.BF16, "hifi4"), (DType.BFP8_B, "lofi"),
                                    (DType.BFP8_B, "hifi2"), (DType.BFP4_B, "lofi")])
def test_fpu_roofline_is_never_beaten(hw, dt, fid):
    kg = matmul(2048, 2048, 2048, dt, hw, fidelity=fid)
    gx, gy = kg.attrs["grid"]
    peak = float(hw.fpu_flop_per_clk_per_phase) / MathFidelity.parse(fid).phases * gx * gy * hw.clock_hz_value
    assert simulate(kg, hw).time_s >= kg.flops / peak


def test_feed_limits_cheap_fidelities_not_full_ones():
    """bf16 at HiFi2 needs more unpacker time per tile multiply (>= one 2 KiB tile at 64 B/clk = 32 cycles, plus
    the held operand) than the FPU's 32 cycles, so the unpacker is the busier unit; at HiFi4 (64 cycles) the FPU."""
    hi2 = simulate(matmul(2048, 2048, 2048, DType.BF16, WH, fidelity="hifi2"), WH)
    hi4 = simulate(matmul(2048, 2048, 2048, DType.BF16, WH, fidelity="hifi4"), WH)
    assert hi2.unit_busy["unpacker"] > hi2.unit_busy["fpu"]
    assert hi4.unit_busy["fpu"] > hi4.unit_busy["unpacker"]
    assert hi2.unit_busy["fpu"] < 0.9  # the FPU waits for its operands


def test_unpack_work_counts_one_tile_per_tile_multiply_plus_the_held_operand():
    cost = CoreCosts(WH, MathFidelity.LOFI)
    bf, b8 = tile_bytes(DType.BF16), tile_bytes(DType.BFP8_B)
    one_by_eight = cost.matmul_unpack_work(DType.BFP8_B, DType.BF16, 1, 8, 1)
    assert one_by_eight == b8 * 1 + bf * 8  # in0 held in SrcB, one in1 tile per tile multiply
    four_by_two = cost.matmul_unpack_work(DType.BF16, DType.BFP8_B, 4, 2, 3)
    assert four_by_two == 3 * (b8 * 2 + bf * 8)  # in1 held in SrcA across the subblock's 4 rows
    # never fewer bytes than the tile multiplies read from one operand
    assert four_by_two >= 3 * 8 * min(bf, b8)


def test_packer_l1_accumulation_is_never_slower_than_spilling():
    # a DRAM-latency-bound shape moves by the NoC's request order (FIFO at issue) when a unit's work changes:
    # accumulating must not cost more than that ordering noise (1%); spilling costs the unpacker a bf16 tile
    # per output tile per K block, which a unpacker-bound shape shows in full
    acc = _time(1024, 1024, 4096, DType.BF16, WH, "hifi2", packer_l1_acc=True)
    spill = _time(1024, 1024, 4096, DType.BF16, WH, "hifi2", packer_l1_acc=False)
    assert acc <= 1.01 * spill
