"""`torchsim kernel gemm`: the report, --json, and clear errors."""

from __future__ import annotations

import json

import pytest

from torchsim.cli import main


def test_gemm_json_has_required_fields(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kernel", "gemm", "--m", "1024", "--n", "1024", "--k", "1024", "--hw", "h100-sxm", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    for key in ("cycles", "time_us", "tflops", "bound", "waves", "unit_utilisation", "clock_hz", "clock_reason"):
        assert key in d
    assert d["cycles"] > 0 and d["time_us"] == pytest.approx(d["cycles"] / d["clock_hz"] * 1e6)
    assert d["clock_reason"].split(":")[0] in ("boost", "power-limited")


def test_gemm_text_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kernel", "gemm", "--m", "256", "--n", "512", "--k", "256", "--hw", "a100-sxm",
                 "--variant", "sm80-multistage"]) == 0
    out = capsys.readouterr().out
    assert "TFLOPS" in out and "bound" in out and "waves" in out


@pytest.mark.parametrize("bad", [["--m", "0"], ["--m", "-5"]])
def test_nonpositive_dimension_is_a_clear_error(bad: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    args = ["kernel", "gemm", "--n", "64", "--k", "64", *bad]
    assert main(args) == 2
    assert "--m must be a positive integer" in capsys.readouterr().err


def test_variant_on_wrong_architecture(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kernel", "gemm", "--m", "64", "--n", "64", "--k", "64", "--hw", "a100-sxm",
                 "--variant", "ws-cooperative"]) == 2
    assert "valid here: sm80-multistage" in capsys.readouterr().err


def test_report_says_when_mmas_fill_only_part_of_the_tensor_datapath(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["kernel", "attention", "--batch", "1", "--heads-q", "4", "--heads-kv", "4", "--seq-q", "1024",
            "--seq-kv", "1024", "--head-dim", "128", "--hw", "b200"]
    fills = {}
    for variant in ("fa3", "fa4"):
        assert main([*base, "--variant", variant, "--json"]) == 0
        fills[variant] = json.loads(capsys.readouterr().out)["tensor_datapath_fill"]
    assert fills["fa4"] == pytest.approx(1.0) and 0.4 < fills["fa3"] <= 0.5  # 64-row MMAs on a 128-row datapath
    assert main([*base, "--variant", "fa3"]) == 0
    assert "useful FLOPs fill" in capsys.readouterr().out
