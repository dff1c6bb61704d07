"""Hardware profiles: provenance as data, citations that exist, sanity of the numbers."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from torchsim.cli import main
from torchsim.graph import DType
from torchsim.hwmodels import GPU_PROFILES, get_profile
from torchsim.hwmodels.quantity import KINDS, Quantity

FACTS = Path(__file__).resolve().parents[2] / "shared" / "hardware" / "facts.csv"
PUBLISHED = Path(__file__).resolve().parents[2] / "shared" / "validation" / "published_dev.csv"


@pytest.mark.parametrize("name", sorted(GPU_PROFILES))
def test_every_number_has_provenance(name: str) -> None:
    qs = GPU_PROFILES[name].quantities()
    assert len(qs) > 30
    for field, q in qs.items():
        assert q.kind in KINDS, field
        assert q.source.strip(), field
        assert q.unit.strip(), field


@pytest.mark.skipif(not FACTS.exists(), reason="../shared/hardware/facts.csv not beside the checkout")
@pytest.mark.parametrize("name", sorted(GPU_PROFILES))
def test_cited_rows_exist(name: str) -> None:
    rows = {(r["device"], r["parameter"]) for r in csv.DictReader(FACTS.open())}
    ids = {r["id"] for r in csv.DictReader(PUBLISHED.open())}
    for field, q in GPU_PROFILES[name].quantities().items():
        for device, param in re.findall(r"facts\.csv (.+?) ((?:compute|memory|latency|tensor|simt|async|power)"
                                        r"\.[^ ()]+(?: / [^ ()]+)*(?: per [A-Za-z]+)*)", q.source):
            param = param.rstrip(":")
            assert (device, param) in rows, f"{name}.{field} cites missing facts.csv row {device} {param}"
        for rid in re.findall(r"published_dev\.csv ([A-Z]+-\d+)", q.source):
            assert rid in ids, f"{name}.{field} cites missing published_dev.csv row {rid}"


@pytest.mark.parametrize("name", sorted(GPU_PROFILES))
def test_numbers_are_sane(name: str) -> None:
    hw = GPU_PROFILES[name]
    bf16 = hw.peak_tensor_flops_per_s(DType.BF16)
    assert hw.peak_tensor_flops_per_s(DType.FP8_E4M3) in (0.0,) or hw.peak_tensor_flops_per_s(DType.FP8_E4M3) >= bf16
    ridge = bf16 / hw.dram_peak_bytes_per_s.value  # FLOP per byte where compute and memory balance
    assert 100 < ridge < 400, ridge
    assert hw.dram_bytes_per_s.value <= hw.dram_peak_bytes_per_s.value
    assert hw.l2_latency_cycles.value < hw.dram_latency_cycles.value


def test_no_two_skus_share_a_headline_figure_by_copy() -> None:
    seen: dict[tuple[str, float], str] = {}
    for name, hw in GPU_PROFILES.items():
        key = ("dram_peak", hw.dram_peak_bytes_per_s.value)
        assert key not in seen, f"{name} and {seen.get(key)} share peak DRAM bandwidth"
        seen[key] = name


def test_negative_value_is_rejected_naming_the_field() -> None:
    from dataclasses import replace
    with pytest.raises(ValueError, match="dram_bytes_per_s"):
        replace(get_profile("h100-sxm"), dram_bytes_per_s=Quantity(-1, "B/s", "assumed", "test"))


def test_unknown_hardware_lists_known() -> None:
    with pytest.raises(KeyError, match="h100-sxm"):
        get_profile("h900")


def test_hw_show_prints_sources(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hw", "show", "h100-sxm"]) == 0
    out = capsys.readouterr().out
    assert "sm_count" in out and "facts.csv H100-SXM5-80GB compute.sm_count" in out
    assert main(["hw", "show", "b200", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["fields"]["dram_latency_cycles"]["source"] == "published_dev.csv UBENCH-017"


def test_hw_show_counts_the_calibrated_fields(capsys: pytest.CaptureFixture[str]) -> None:
    """The fitted parameters of a profile are counted and named, and each one's source names its rows."""
    assert main(["hw", "show", "blackhole-p150", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    fitted = data["calibrated"]
    assert fitted == [k for k, f in data["fields"].items() if f["kind"] == "calibrated"]
    assert "unpack_l1_bytes_per_clk" in fitted and "GEMM-112" in data["fields"]["unpack_l1_bytes_per_clk"]["source"]
    assert main(["hw", "show", "wormhole-n150"]) == 0  # its one fitted field: the host's work per prefill
    line = capsys.readouterr().out.splitlines()[1]
    assert "1 calibrated" in line and line.rstrip().endswith("prefill_host_s")
