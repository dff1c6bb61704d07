"""Tensix profiles: registered names, provenance of every number, firmware-dependent grid, sanity of figures."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from torchsim.graph import DType
from torchsim.hwmodels import get_profile, profile_names
from torchsim.hwmodels.quantity import KINDS
from torchsim.hwmodels.tensix.core import dst_tiles
from torchsim.hwmodels.tensix.formats import MathFidelity, tile_bytes
from torchsim.hwmodels.tensix.profiles import BlackholeFirmware, blackhole_p150

NAMES = ["wormhole-n150", "wormhole-n300", "blackhole-p150", "blackhole-p150-launch"]
FACTS = Path(__file__).resolve().parents[1].parent / "shared" / "hardware" / "facts.csv"


def test_profiles_are_registered_with_the_shared_registry():
    for name in NAMES:
        assert name in profile_names()
        hw = get_profile(name)
        assert hw.name == name and hw.arch.value == "tensix"


@pytest.mark.parametrize("name", NAMES)
def test_every_number_has_a_kind_and_a_source(name):
    hw = get_profile(name)
    for field, q in hw.quantities().items():
        assert q.kind in KINDS, field
        assert len(q.source) > 10, field
        if q.kind == "assumed":
            assert q.source.startswith("assumed"), field


@pytest.mark.skipif(not FACTS.exists(), reason="shared/hardware/facts.csv not beside the repository")
@pytest.mark.parametrize("name", NAMES)
def test_cited_facts_rows_exist(name):
    with FACTS.open() as f:
        rows = {(r["device"], r["parameter"]) for r in csv.DictReader(f)}
    cites = re.compile(r"facts\.csv (Wormhole-B0 \(n150 / n300\)|Blackhole-A0 \(p150a/p150b/p100a\)) "
                       r"([\w.\-]+(?: / [\w.\-]+)?)")
    hw = get_profile(name)
    found = 0
    for field, q in hw.quantities().items():
        for device, param in cites.findall(q.source):
            assert (device, param) in rows, f"{field} cites missing facts.csv row {device} {param}"
            found += 1
    assert found >= 20


def test_blackhole_grid_is_set_by_firmware():
    launch, fw = blackhole_p150(BlackholeFirmware.LAUNCH), blackhole_p150("19.5")
    assert launch.grid == (13, 10) and int(launch.tensix_enabled) == 140
    assert fw.grid == (11, 10) and int(fw.tensix_enabled) == 120
    assert len(set(launch.worker_xy)) == 130 and len(set(fw.worker_xy)) == 110
    # the launch figure of 774 TFLOPS (LoFi, 140 Tensix) follows from the per-core rate and the clock
    per_core = launch.peak_tensor_flops_per_s(DType.BFP8_B) / launch.sms
    assert per_core * 140 == pytest.approx(774e12, rel=0.01)
    with pytest.raises(ValueError, match="unknown Blackhole firmware '18'; valid: launch, 19.5"):
        blackhole_p150("18")


def test_n300_is_one_chip_and_says_so():
    n300, n150 = get_profile("wormhole-n300"), get_profile("wormhole-n150")
    assert "ONE of its two" in n300.description
    assert n300.dram_bytes_per_s_value == n150.dram_bytes_per_s_value  # per chip, not per board


def test_generations_differ_where_the_hardware_does():
    wh, bh = get_profile("wormhole-n150"), get_profile("blackhole-p150")
    assert wh.clock_hz_value == 1.0e9 and bh.clock_hz_value == 1.35e9
    assert float(bh.noc_flit_bytes) == 2 * float(wh.noc_flit_bytes)
    assert bh.dram_bytes_per_s_value > wh.dram_bytes_per_s_value
    assert wh.fpu_flop_per_clk_per_phase.value == bh.fpu_flop_per_clk_per_phase.value


@pytest.mark.parametrize("name", NAMES)
def test_fidelity_orders_peaks_and_bf16_peak_matches_the_spec_sheet_at_hifi4(name):
    hw = get_profile(name)
    peaks = [hw.peak_tensor_flops_per_s(DType.BF16, f) for f in MathFidelity]
    assert peaks == sorted(peaks, reverse=True)
    assert peaks[0] == pytest.approx(4 * peaks[3])


def test_grid_larger_than_the_chip_is_a_clear_error():
    with pytest.raises(ValueError, match=r"grid 9x8 does not fit wormhole-n150: its compute grid is 8x8"):
        get_profile("wormhole-n150").with_grid(9, 8)
    assert get_profile("wormhole-n150").with_grid(4, 2).sms == 8


def test_formats_and_dst_capacity():
    assert [tile_bytes(d) for d in (DType.BF16, DType.BFP8_B, DType.BFP4_B, DType.FP32)] == [2048, 1088, 576, 4096]
    hw = get_profile("wormhole-n150")
    assert dst_tiles(hw) == 8 and dst_tiles(hw, DType.FP32) == 4 and dst_tiles(hw, half_sync=False) == 16
    with pytest.raises(ValueError, match="data format int64 is not supported by the Tensix"):
        tile_bytes(DType.INT64)


def test_unknown_fidelity_name_lists_the_valid_ones():
    assert MathFidelity.parse("hifi2") is MathFidelity.HIFI2
    assert MathFidelity.parse("LoFi").phases == 1
    with pytest.raises(ValueError, match="unknown math fidelity 'HiFi5'; valid: LoFi, HiFi2, HiFi3, HiFi4"):
        MathFidelity.parse("HiFi5")


def test_prefill_host_time_fit_and_its_place_in_a_prefill() -> None:
    """prefill_host_s: the median residual of the TTFT rows, refitted without each source; it is calibrated with
    its rows named, shifts a prefill (not a decode step) by exactly itself."""
    from dataclasses import replace

    import torchsim.prediction.pipeline as api
    from torchsim.calibration.tensix_prefill import TtftRow, fit_prefill_host
    from torchsim.hwmodels.quantity import Quantity

    rows = [TtftRow("a", "s1", 0.100, 0.060), TtftRow("b", "s1", 0.090, 0.052), TtftRow("c", "s2", 0.200, 0.150),
            TtftRow("d", "s2", 0.070, 0.031)]
    fit = fit_prefill_host(rows)
    assert fit.value_s == pytest.approx(0.0395)  # median of 40, 38, 50, 39 ms
    assert fit.loso == {"s1": pytest.approx(0.0445), "s2": pytest.approx(0.039)}
    assert fit.mape() < fit.mape(0.0) and fit.loso_mape() >= fit.mape() - 1e-12
    with pytest.raises(ValueError, match="no TTFT rows"):
        fit_prefill_host([])
    with pytest.raises(ValueError, match="row x: measured TTFT must be > 0"):
        fit_prefill_host([TtftRow("x", "s", 0.0, 0.01)])

    hw = get_profile("wormhole-n150")
    q = hw.prefill_host_s
    assert q.kind == "calibrated" and "E2E-002" in q.source and "leave-one-source-out" in q.source
    assert get_profile("blackhole-p150").prefill_host_s.value == q.value  # a host-side figure
    kw = dict(prompt_len=16, decode_steps=2, cache=False)
    with_host = api.predict("llama-tiny", hw, **kw)
    without = api.predict("llama-tiny", replace(hw, prefill_host_s=Quantity(0.0, "s", "assumed", "test")), **kw)
    assert with_host.ttft_s - without.ttft_s == pytest.approx(float(q), rel=1e-9)
    assert with_host.tpot_s == pytest.approx(without.tpot_s)
