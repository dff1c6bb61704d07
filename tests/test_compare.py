"""`torchsim compare` and Prediction -> export records: every decode step present, step times kept, files written."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from torchsim.cli import main
from torchsim.exports.check import check_trace
from torchsim.exports.from_prediction import prediction_records
from torchsim.exports.perfetto import write_trace


@pytest.fixture(scope="module")
def pred():  # type: ignore[no-untyped-def]
    from torchsim.prediction.pipeline import predict

    return predict("llama-tiny", "h100-sxm", prompt_len=32, decode_steps=7, decode_samples=3)


def test_every_decode_step_gets_its_launches_and_its_time(pred) -> None:  # type: ignore[no-untyped-def]
    recs = prediction_records(pred)
    per_step = {t: [k for k in recs.kernels if k.phase == "decode" and k.decode_step == t] for t in range(7)}
    sampled = pred.sampled_steps
    n = len(pred.step_kernels("decode", sampled[0]))
    assert all(len(rows) == n for rows in per_step.values())
    step_end = pred.ttft_s * 1e6
    for t, rows in per_step.items():
        step_start, step_end = step_end, step_end + pred.decode_step_s[t] * 1e6
        assert rows[0].start_us > step_start  # after the step's launch cost
        assert rows[-1].start_us + rows[-1].duration_us == pytest.approx(step_end)  # the step lasts as predicted
        if t in sampled:
            assert all(k.simulated_step == t and not (k.method or "").startswith("interpolated") for k in rows)
        else:
            assert all(k.simulated_step in sampled and k.method.startswith("interpolated") for k in rows)
    prefill = [k for k in recs.kernels if k.phase == "prefill"]
    assert [k.kernel_name for k in prefill] == [k.name for k in pred.step_kernels("prefill")]
    assert [k.kernel_index for k in recs.kernels] == list(range(len(recs.kernels)))
    starts = [k.start_us for k in recs.kernels]
    assert starts == sorted(starts)  # one stream, launches in order


def test_prediction_trace_and_table(pred, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from torchsim.exports.parquet import write_kernels
    from torchsim.hwmodels import get_profile

    recs = prediction_records(pred)
    stats = check_trace(write_trace(tmp_path / "p.pftrace", [recs]).path)
    ks = recs.kernels  # a `launch gap` slice before every kernel but the first of its phase / decode step
    gaps = sum(1 for a, b in zip(ks, ks[1:]) if (a.phase, a.decode_step) == (b.phase, b.decode_step))
    assert gaps > 0
    assert stats.slices == len(ks) + gaps + 2 + pred.decode_steps
    write_kernels(tmp_path / "p.parquet", [recs], [get_profile("h100-sxm")])
    df = pd.read_parquet(tmp_path / "p.parquet")
    fallback = df[df.roofline_fallback]
    assert len(fallback) > 0 and fallback.tensor_busy_fraction.isna().all() and fallback.l2_hit_fraction.isna().all()
    assert fallback.method.str.contains("roofline: no ").all()  # the reason survives interpolation
    assert df.groupby("decode_step").size().nunique() == 1


def test_compare_cli_writes_table_trace_parquet_and_chart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    out = {s: str(tmp_path / f"cmp.{s}") for s in ("pftrace", "parquet", "png")}
    rc = main(["compare", "llama-tiny", "--hw", "h100-sxm,a100-sxm", "--prompt", "32", "--decode", "3",
               "--perfetto", out["pftrace"], "--parquet", out["parquet"], "--plot", out["png"], "--workers", "1"])
    text = capsys.readouterr().out
    assert rc == 0
    header = next(line for line in text.splitlines() if "h100-sxm" in line and "a100-sxm" in line)
    assert header.index("h100-sxm") < header.index("a100-sxm")  # columns in the order asked
    assert "TTFT (ms)" in text and "top kernel 1" in text and text.count("wrote ") == 3
    stats = check_trace(out["pftrace"])
    assert stats.processes == 2
    assert set(pd.read_parquet(out["parquet"]).hardware) == {"h100-sxm", "a100-sxm"}
    assert Path(out["png"]).read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("hw, message", [("h100-sxm,nope", "nope"), ("h100-sxm,h100-sxm", "twice"), (",", "at least")])
def test_compare_cli_bad_hardware_list(hw: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "llama-tiny", "--hw", hw, "--prompt", "8", "--decode", "1"]) == 2
    assert message in capsys.readouterr().err


def test_compare_on_forked_processes_matches_one_after_another(tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """Without --workers the profiles are predicted at once on forked processes; the numbers are those of running
    them one after another (--workers 1), profile by profile and in the order given."""
    import json
    import os

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    argv = ["compare", "llama-tiny", "--hw", "b200,a100-sxm,h100-sxm", "--prompt", "64", "--decode", "4", "--json"]
    outs = []
    for extra in ([], ["--workers", "1"]):
        monkeypatch.setenv("TORCHSIM_CACHE_DIR", str(tmp_path / f"cache{len(outs)}"))  # nothing shared on disk
        assert main([*argv, *extra]) == 0
        outs.append([json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")])
    forked, serial = outs
    assert [d["hw"] for d in forked] == ["b200", "a100-sxm", "h100-sxm"]
    for a, b in zip(forked, serial, strict=True):
        assert (a["ttft_ms"], a["tpot_ms"], a["decode_step_ms"]) == (b["ttft_ms"], b["tpot_ms"], b["decode_step_ms"])
