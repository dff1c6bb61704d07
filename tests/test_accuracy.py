"""The accuracy printed beside a number comes from the shipped validation report, or says there is none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torchsim.validation import accuracy


@pytest.fixture
def shipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    doc = {"entries": {"gemm/h100-sxm/bf16": {"mape_pct": 7.14, "rows": 14, "row_ids": ["GEMM-1"],
                                              "loso_mape_pct": 9.0},
                       "attention/b200/bf16": {"mape_pct": 20.0, "rows": 1, "row_ids": ["ATTN-1"]}}}
    p = tmp_path / "accuracy.json"
    p.write_text(json.dumps(doc))
    monkeypatch.setattr(accuracy, "PATH", p)
    accuracy.table.cache_clear()
    yield
    accuracy.table.cache_clear()


def test_note_quotes_the_shipped_figures(shipped: None) -> None:
    assert accuracy.note("gemm", "h100-sxm", "bf16") == ("GEMM on h100-sxm bf16: 7.1% MAPE over 14 published rows "
                                                         "(leave-one-source-out 9.0%)")
    assert accuracy.note("attention", "b200", "bf16").endswith("over 1 published row")
    assert accuracy.entry("gemm", "h100-sxm", "fp8") is None


def test_outside_anything_validated(shipped: None) -> None:
    assert "outside anything validated" in accuracy.note("gemm", "a100-sxm", "bf16")
    assert "outside anything validated" in accuracy.note("rmsnorm", "h100-sxm", "bf16")


def test_what_if_profiles_quote_their_base(shipped: None) -> None:
    n = accuracy.note("gemm", "h100-sxm+fast_hbm", "bf16")
    assert n.startswith("GEMM on h100-sxm bf16: 7.1%") and "derived from h100-sxm" in n


def test_the_shipped_file_parses() -> None:
    accuracy.table.cache_clear()
    doc = accuracy.table()
    for k, e in doc.get("entries", {}).items():
        assert k.count("/") == 2 and e["rows"] == len(e["row_ids"]) >= 1 and e["mape_pct"] >= 0


def test_kernel_and_predict_carry_the_note(shipped: None, capsys: pytest.CaptureFixture[str]) -> None:
    from torchsim.cli import main

    assert main(["kernel", "gemm", "--m", "128", "--n", "128", "--k", "128", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["accuracy"]["note"].startswith("GEMM on h100-sxm bf16: 7.1% MAPE over 14")
    assert out["accuracy"]["validation"]["rows"] == 14
    assert main(["predict", "llama-tiny", "--prompt", "16", "--decode", "2", "--json", "--no-cache"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "outside anything validated" in doc["accuracy"]["e2e_inference"]
    assert doc["accuracy"]["gemm"].startswith("GEMM on h100-sxm bf16: 7.1%")
