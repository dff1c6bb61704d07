"""Issue 14 (what-if, sweep, calibrate): each hostile input is one stderr line naming it, exit 2, before any work.

What the probe found: TMEM on an H100 base asserted inside predict; sm_count = 1000000 ran for minutes; physically
impossible profiles (a CTA with more shared memory than its SM, a clock above the max boost, a sustained bandwidth
above the peak, a switch set to 2) loaded; inf/nan --vary ranges printed numpy warnings; `sweep kernel` priced an
impossible kernel (int4, a tcgen05 GEMM on sm90) by the roofline and ignored --phase; bad output options failed only
after the simulation; calibrate divided by a measured 0, took logs of -5 and inf, wrote a profile from all-NaN
values, ignored a unit of "parsecs", and refused a CSV with a byte-order mark.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.cli_errors import one_line
from torchsim import cli
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.whatif import WhatIfError, derive_profile

GEMM = ["sweep", "kernel", "gemm", "--m", "64", "--n", "64", "--k", "64"]


@pytest.mark.parametrize(("body", "words"), [
    ('tmem_bytes_per_sm = "256 KiB"', ["tmem_bytes_per_sm", "no TMEM", "sm100", "b200"]),
    ('sm_count = "1000000 SMs"', ["sm_count", "1e+06", "limit of 1024"]),
    ('max_ctas_per_sm = "100000 CTAs"', ["max_ctas_per_sm", "limit of 256"]),
    ('smem_per_cta_bytes = "300 KiB"', ["smem_per_cta_bytes 307200 B (set here)", "smem_per_sm_bytes 233472 B"]),
    ('clock_hz = "2.5 GHz"', ["clock_hz 2.5e+09 Hz (set here)", "clock_max_hz 1.98e+09 Hz", "at most"]),
    ('clock_min_hz = "1.9 GHz"', ["clock_min_hz 1.9e+09 Hz", "clock_hz 1.83e+09 Hz"]),
    ('clock_max_hz = "0.3 GHz"', ["clock_min_hz 3.45e+08 Hz", "clock_max_hz 3e+08 Hz (set here)"]),
    ('dram_bytes_per_s = "4 TB/s"\ndram_peak_bytes_per_s = "3.5 TB/s"',
     ["dram_bytes_per_s 4e+12 B/s", "dram_peak_bytes_per_s 3.5e+12 B/s"]),
    ('dram_peak_bytes_per_s = "3 TB/s"', ["dram_bytes_per_s 3.13e+12 B/s (h100-sxm's)", "dram_peak_bytes_per_s 3e+12"]),
    ('static_power_w = "800 W"', ["static_power_w 800 W", "power_limit_w 700 W", "below"]),
    ('sfu_overlaps_tensor = "2 bool"', ["sfu_overlaps_tensor", "2", "0 or 1"]),
    ('sfu_overlaps_tensor = "0.5 bool"', ["sfu_overlaps_tensor", "0 or 1"]),
])
def test_impossible_what_if_files(body: str, words: list[str], tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(f'base = "h100-sxm"\n{body}\n')
    line = one_line(capsys, ["hw", "show", str(f)])
    assert str(f) in line and all(w in line for w in words), line


def test_bad_profiles_fail_at_load_in_predict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The two that ran (an assertion, a minute-long simulation) now fail before the model is captured."""
    for body, word in (('tmem_bytes_per_sm = "256 KiB"', "no TMEM"), ('sm_count = "1000000 SMs"', "limit of 1024")):
        f = tmp_path / "bad.toml"
        f.write_text(f'base = "h100-sxm"\n{body}\n')
        line = one_line(capsys, ["predict", "llama3-8b", "--hw", str(f), "--prompt", "128", "--decode", "2"])
        assert word in line, line


def test_tmem_cannot_be_taken_from_a_part_that_needs_it() -> None:
    with pytest.raises(WhatIfError, match="tmem_bytes_per_sm: 0 B on base 'b200', which has TMEM"):
        derive_profile(get_profile("b200"), {"tmem_bytes_per_sm": 0}, where="x")


def test_valid_what_ifs_still_load() -> None:
    """Unchanged behaviour: the examples, a switch given as true, a lower max boost clock (the sustained clock
    follows it down, as a smaller SM's shared memory caps the CTA's), a sustained bandwidth above the base's peak."""
    for f in Path(__file__).resolve().parents[1].glob("examples/*.toml"):
        assert get_profile(str(f)).dram_bytes_per_s.value > 0
    h100 = get_profile("h100-sxm")
    assert derive_profile(h100, {"sfu_overlaps_tensor": True}, where="x").sfu_overlaps_tensor.value == 1
    slow = derive_profile(h100, {"clock_max_hz": 1.5e9}, where="x")
    assert slow.clock_hz.value == 1.5e9 and "capped" in slow.clock_hz.source
    fast = derive_profile(h100, {"dram_bytes_per_s": 4e12}, where="x")
    assert fast.dram_peak_bytes_per_s.value > 4e12
    assert derive_profile(h100, {"sm_count": 1024}, where="x").sm_count.value == 1024


@pytest.mark.parametrize(("extra", "words"), [
    (["--vary", "clock_hz=5e9"], ["--vary clock_hz=5e9", "clock_hz 5e+09 Hz", "clock_max_hz 1.98e+09 Hz"]),
    (["--vary", "sm_count=inf:132:3"], ["--vary 'sm_count=inf:132:3'", "finite"]),
    (["--vary", "sm_count=66:nan:3"], ["--vary 'sm_count=66:nan:3'", "finite"]),
    (["--vary", "dram_bytes_per_s=1e12,inf"], ["--vary 'dram_bytes_per_s=1e12,inf'", "finite"]),
    (["--vary", "sm_count=1000000"], ["sm_count", "limit of 1024"]),
    (["--vary", "sfu_overlaps_tensor=0,2"], ["sfu_overlaps_tensor", "0 or 1"]),
    (["--vary", "clock_max_hz=1.5e9,2e9", "--vary", "clock_hz=1.8e9"],
     ["sweep point 0", "clock_max_hz=1.5e+09", "clock_hz 1.8e+09 Hz"]),
    (["--vary", "sm_count=66", "--dtype", "int4"], ["sweep kernel gemm on h100-sxm", "no INT4 tensor cores"]),
    (["--vary", "sm_count=66", "--variant", "sm100-tcgen05"], ["sm100-tcgen05", "valid here: ws-cooperative"]),
    (["--vary", "sm_count=66", "--phase", "decode"], ["--phase", "applies only to sweeping a model step"]),
    (["--vary", "sm_count=66", "--kv", "64", "--preset", "eager"], ["--kv, --preset", "not to a kernel"]),
])
def test_bad_sweeps(extra: list[str], words: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                    monkeypatch: pytest.MonkeyPatch) -> None:
    _no_simulation(monkeypatch, "run_jobs")
    line = one_line(capsys, [*GEMM, *extra, "--out", str(tmp_path / "s.parquet")])
    assert all(w in line for w in words) and "RuntimeWarning" not in line, line
    assert not (tmp_path / "s.parquet").exists()


@pytest.mark.parametrize(("argv", "words"), [
    ([*GEMM, "--vary", "sm_count=66", "--out", ""], ["--out"]),
    ([*GEMM, "--vary", "sm_count=66", "--out", "OUT", "--plot", " "], ["--plot"]),
    ([*GEMM, "--vary", "sm_count=66", "--out", "OUT", "--ray-address", "10.0.0.1:6379"],
     ["--ray-address '10.0.0.1:6379'", "--executor ray"]),
    (["sweep", "llama-tiny", "--vary", "sm_count=66", "--m", "64", "--out", "OUT"],
     ["--m", "applies only to sweeping one kernel", "llama-tiny"]),
])
def test_sweep_options_fail_before_any_work(argv: list[str], words: list[str], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _no_simulation(monkeypatch, "run_jobs", "estimate_s", "plan_sweep")
    argv = [str(tmp_path / "s.parquet") if a == "OUT" else a for a in argv]
    line = one_line(capsys, argv)
    assert all(w in line for w in words), line


def _no_simulation(monkeypatch: pytest.MonkeyPatch, *steps: str) -> None:
    """Reaching any of `steps` (the estimate builds kernels, run_jobs simulates) is an internal error (exit 70)."""
    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a sweep started working before its inputs were checked")

    for step in steps:
        monkeypatch.setattr(f"torchsim.sweeps.{'execute' if step == 'run_jobs' else 'space'}.{step}", boom)


# ------------------------------------------------------------------------------------------------------- calibrate

COLUMNS = ("id", "category", "hardware", "workload", "dtype", "params_json", "metric", "value", "unit", "source",
           "notes")
SOURCE = "deepseek-ai/DeepGEMM README.md"  # a source with a timing-method rule (a device profiler)


def _row(i: int, params: str | None = None, value: str = "10", unit: str = "us") -> list[str]:
    shape = json.dumps({"M": 16, "N": 1024 * (i + 1), "K": 4096}) if params is None else params
    return [f"R{i}", "gemm", "h100-sxm", "synthetic GEMM", "bf16", shape, "time_us", value, unit, SOURCE, ""]


def _csv(path: Path, rows: list[list[str]], encoding: str = "utf-8") -> Path:
    with path.open("w", newline="", encoding=encoding) as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        w.writerows(rows)
    return path


GOOD = [_row(i) for i in range(1, 4)]


@pytest.mark.parametrize(("first", "words"), [
    (_row(0, '{"M": "x", "N": 64, "K": 64}'), ["params_json M = \"x\"", "whole number from 1 to 16777216"]),
    (_row(0, '{"M": 1e30, "N": 64, "K": 64}'), ["params_json M", "whole number"]),
    (_row(0, "[1, 2]"), ["params_json must be a JSON object", "got a list"]),
    (_row(0, "[" * 100_000 + "]" * 100_000), ["params_json: 200,000 characters", "limit of 10,000"]),
    (_row(0, "[" * 4000 + "]" * 4000), ["params_json is nested too deeply"]),
    (_row(0, value="0"), ["value '0'", "finite number > 0"]),
    (_row(0, value="-5"), ["value '-5'", "> 0"]),
    (_row(0, value="inf"), ["value 'inf'", "finite"]),
    (_row(0, value="1e308"), ["value '1e308'", "at most 1e+11"]),
    (_row(0, unit="parsecs"), ["unit 'parsecs'", "metric time_us", "valid: us"]),
    (_row(1), ["id 'R1' is also the id of line 2"]),
])
def test_bad_measurement_rows(first: list[str], words: list[str], tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    f = _csv(tmp_path / "m.csv", [first, *GOOD] if first[0] != "R1" else [*GOOD, first])
    out = tmp_path / "x.toml"
    line = one_line(capsys, ["calibrate", "--hw", "h100-sxm", "--measurements", str(f), "--out", str(out)])
    where = f"{f}:5: row R1" if first[0] == "R1" else f"{f}:2: row R0"
    assert line.startswith(f"torchsim calibrate: error: {where}") and all(w in line for w in words), line
    assert not out.exists()


def test_all_nan_values_write_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = _csv(tmp_path / "nan.csv", [_row(i, value="nan") for i in range(4)])
    out = tmp_path / "x.toml"
    line = one_line(capsys, ["calibrate", "--hw", "h100-sxm", "--measurements", str(f), "--out", str(out)])
    assert f"{f}:2: row R0: value 'nan'" in line and not out.exists(), line


@pytest.mark.parametrize(("extra", "words"), [
    (["--min-rows", "-1"], ["--min-rows", "between 1 and", "-1"]),
    (["--min-rows", "0"], ["--min-rows", "got 0"]),
    (["--params", "dram_bytes_per_s,launch_overhead_s,dram_bytes_per_s"], ["--params", "dram_bytes_per_s", "once"]),
])
def test_bad_calibrate_options(extra: list[str], words: list[str], tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    f = _csv(tmp_path / "m.csv", GOOD)
    line = one_line(capsys, ["calibrate", "--hw", "h100-sxm", "--measurements", str(f), *extra])
    assert all(w in line for w in words), line


def test_a_directory_is_named_as_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line(capsys, ["calibrate", "--hw", "h100-sxm", "--measurements", str(tmp_path)])
    assert "is a directory" in line and str(tmp_path) in line and "does not exist" not in line, line


def test_a_byte_order_mark_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from torchsim.calibration.measurements import read_measurements

    plain = read_measurements(_csv(tmp_path / "plain.csv", GOOD), "h100-sxm")
    bom = _csv(tmp_path / "bom.csv", GOOD, encoding="utf-8-sig")
    assert bom.read_bytes().startswith(b"\xef\xbb\xbf") and read_measurements(bom, "h100-sxm") == plain
    assert cli.main(["calibrate", "--hw", "h100-sxm", "--measurements", str(bom), "--params",
                     "launch_overhead_s", "--min-rows", "1"]) == 0, capsys.readouterr().err


def test_the_published_file_reads_as_before() -> None:
    """No change for valid input: every row of published_dev.csv, and the same rows as the validation reader."""
    from torchsim.calibration.measurements import read_measurements
    from torchsim.validation.published import default_csv, read_rows

    try:
        path = default_csv()
    except FileNotFoundError:
        pytest.skip("published_dev.csv is not beside this checkout")
    rows = read_rows(path, strict=True)
    for profile in ("a100-sxm", "h100-sxm", "h200", "b200"):
        assert read_measurements(path, profile) == rows
