"""Issue 14 regression corpus (library and sweep/calibrate/microbench pass): what a hostile probe still got through.

Library entry points given a wrong argument raised bare AttributeError/TypeError/KeyError (`predict(hw=None)`,
`get_profile(None)`, `sweep(vary=None)`), or accepted it (`predict(cache='no')`, `sweep(jobs=-1)`); `sweep kernel
collective` was an internal error; sweep, calibrate and microbench flags that do nothing in the combination given
were ignored (`--phase prefill --kv`, `--m` on an rmsnorm sweep, `--power --full`), repeated or truthy values were
taken silently (`--param rows=1 --param rows=512`, `centered=yes`), measurement rows with unknown categories,
metrics, dtypes or keys were dropped or misread, and what-if names could pose as a built-in profile. Each is now a
ValueError naming the argument (library) or one stderr line, exit 2 (CLI).
"""

from __future__ import annotations

import csv
from functools import partial
from pathlib import Path
from typing import Any

import pytest

import torchsim
from tests.cli_errors import one_line as _one_line
from torchsim import cli
from torchsim.hwmodels import get_profile
from torchsim.lowering.kernel_call import KernelCall, KernelKind

one_line = partial(_one_line, usage=True)  # these commands include serve (its own usage line)

GEMV = KernelCall.make(KernelKind.GEMM, m=64, n=256, k=256)
STEP = {"prompt_len": 16, "decode_steps": 2}
VARY = ["--vary", "sm_count=66,132", "--out", "sw.parquet"]
RMS = ["sweep", "kernel", "rmsnorm", "--param", "rows=1", "--param", "hidden=4096"]
GEMM = ["sweep", "kernel", "gemm", "--m", "256", "--n", "256", "--k", "256"]


@pytest.mark.parametrize(("args", "kwargs", "words"), [
    (("llama-tiny", None), {}, ["hw must be", "NoneType"]),
    (("llama-tiny", 5), {}, ["hw must be", "int"]),
    ((None,), {}, ["model must be", "NoneType"]),
    (({"model_type": "llama"},), {}, ["model must be", "dict", "config.json"]),
    (("mixtral-tiny",), {"routing": 5}, ["routing must be", "RoutingCounts"]),
    (("mixtral-tiny",), {"routing": [[1, 2]]}, ["routing must be", "list"]),
    (("llama-tiny",), {"system": "bogus"}, ["system 'bogus'", "dgx-h100"]),
    (("llama-tiny",), {"sp": True}, ["sp=True", "tp > 1"]),
    (("llama-tiny",), {"cache": "no"}, ["cache must be True or False"]),
    (("llama-tiny",), {"workers": 0}, ["workers", ">= 1"]),
    (("llama-tiny",), {"workers": -3}, ["workers", ">= 1"]),
    (("llama-tiny",), {"dtype": 16}, ["dtype must be a str"]),
])
def test_predict_refuses_wrong_arguments(args: tuple[Any, ...], kwargs: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        torchsim.predict(*args, **STEP, **kwargs)
    assert all(w in str(info.value) for w in words), str(info.value)


@pytest.mark.parametrize(("name", "words"), [
    ("bogus", ["unknown hardware 'bogus'", "h100-sxm"]),
    ("", ["empty name", "h100-sxm"]),
    (None, ["NoneType", "h100-sxm"]),
    ("/nonexistent.toml", ["/nonexistent.toml", "does not exist"]),
])
def test_get_profile_raises_value_errors(name: Any, words: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        get_profile(name)
    assert all(w in str(info.value) for w in words), str(info.value)


def test_unknown_profile_is_still_a_key_error_for_old_callers() -> None:
    with pytest.raises(KeyError) as info:
        get_profile("h900")
    assert str(info.value).startswith("unknown hardware 'h900'")  # not KeyError's quoted form


@pytest.mark.parametrize(("args", "kwargs", "words"), [
    ((GEMV,), {"vary": None}, ["vary must be", "NoneType"]),
    ((GEMV,), {"vary": [5]}, ["--vary knob", "int"]),
    ((None,), {"vary": ["sm_count=66"]}, ["target must be", "NoneType"]),
    (("llama-tiny", None), {"vary": ["sm_count=66"]}, ["hw must be", "NoneType"]),
    ((GEMV,), {"vary": ["sm_count=66"], "executor": "bogus"}, ["executor 'bogus'", "local, ray"]),
    (("llama-tiny",), {"vary": ["sm_count=66"], "kv": 10**9}, ["context of 512", "at most 511"]),
    (("llama-tiny",), {"vary": ["sm_count=66"], "phase": "prefill", "kv": 5}, ["--kv", "prefill"]),
    ((GEMV,), {"vary": ["sm_count=66"], "jobs": -1}, ["jobs", "0 for one worker per core"]),
    ((KernelCall.make(KernelKind.COLLECTIVE, op="all-reduce", nbytes=1024, ranks=8),), {"vary": ["sm_count=66"]},
     ["collective", "torchsim collective"]),
])
def test_sweep_refuses_wrong_arguments(args: tuple[Any, ...], kwargs: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(ValueError) as info:
        torchsim.sweep(*args, **kwargs)
    assert all(w in str(info.value) for w in words), str(info.value)


def test_sweep_takes_one_string_as_one_knob() -> None:
    rows = torchsim.sweep(GEMV, vary="sm_count=66,132", jobs=1)
    assert [r["sm_count"] for r in rows] == [66.0, 132.0]


def test_unknown_executor_is_a_value_error() -> None:
    from torchsim.sweeps.execute import ExecutorError, run_jobs

    with pytest.raises(ValueError, match="unknown executor 'bogus'") as info:
        run_jobs([], executor="bogus")
    assert isinstance(info.value, ExecutorError)


@pytest.mark.parametrize(("argv", "words"), [
    (["sweep", "kernel", "collective", "--param", "bytes=1024", *VARY], ["collective", "torchsim collective"]),
    (["sweep", "llama-tiny", "--kv", "100000", *VARY], ["--kv 100000", "context of 512"]),
    (["sweep", "llama-tiny", "--phase", "prefill", "--kv", "100", *VARY], ["--kv 100", "--phase prefill"]),
    (["sweep", "llama-tiny", "--phase", "decode", "--prompt", "100", *VARY], ["--prompt 100", "--phase decode"]),
    ([*RMS, "--m", "9999", *VARY], ["--m", "sweep kernel gemm", "rows, hidden"]),
    ([*RMS, "--n", "5", *VARY], ["--n", "sweep kernel gemm", "rows, hidden"]),
    ([*RMS, "--batch", "64", *VARY], ["--batch", "sweep kernel gemm", "rows, hidden"]),
    ([*RMS, "--variant", "ws-pingpong", *VARY], ["--variant", "sweep kernel gemm"]),
    ([*RMS, "--epilogue", "silu", *VARY], ["--epilogue", "sweep kernel gemm"]),
    ([*GEMM, "--param", "m=8192", *VARY], ["m=8192", "give it once", "--m"]),
    ([*RMS, "--param", "rows=512", *VARY], ["rows=1", "rows=512", "give it once"]),
    ([*RMS, "--param", "centered=yes", *VARY], ["centered=yes", "true, false, 1, 0"]),
    ([*RMS, "--param", "bias=2", *VARY], ["bias=2", "true, false, 1, 0"]),
    ([*GEMM, "--param", "shared_b=7", "--param", "tune=1", *VARY], ["shared_b=7", "switch"]),
    ([*RMS, "--param", "bogus=1", *VARY], ["bogus", "rows"]),
])
def test_sweep_cli_refuses(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           argv: list[str], words: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    line = one_line(capsys, argv)
    assert all(w in line for w in words), line
    assert not (tmp_path / "sw.parquet").exists()


def _gemm_rows() -> list[dict[str, str]]:
    from torchsim.validation.published import COLUMNS

    row = dict.fromkeys(COLUMNS, "")
    row.update(category="gemm", hardware="h100-sxm", workload="torch.matmul", dtype="bf16", metric="tflops",
               unit="TFLOPS", source="torchsim microbench (test rows)")
    return [{**row, "id": f"G-{i}", "params_json": f'{{"M": {m}, "N": 1024, "K": 1024}}', "value": v}
            for i, (m, v) in enumerate(((1024, "300"), (2048, "450"), (4096, "600")))]


def _csv(path: Path, rows: list[dict[str, str]]) -> Path:
    from torchsim.validation.published import COLUMNS

    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    return path


@pytest.mark.parametrize(("change", "words"), [
    ({"params_json": '{"M": 1e3, "N": 1024, "K": 1024}'}, ["m.csv:2", "row G-0", "M = 1000.0", "whole number"]),
    ({"params_json": '{"M": 1024, "M": 2048, "N": 1024, "K": 1024}'}, ["m.csv:2", "'M' is given twice"]),
    ({"dtype": "int3"}, ["m.csv:2", "dtype 'int3'", "bf16"]),
    ({"id": ""}, ["m.csv:2", "empty id"]),
    ({"metric": "speed"}, ["m.csv:2", "metric 'speed'", "tflops"]),
    ({"category": "frobnicate"}, ["m.csv:2", "category 'frobnicate'", "gemm, attention"]),
    ({"params_json": '{"M": 1024, "N": 1024, "K": 1024, "bogus": 1}'}, ["m.csv:2", "'bogus'", "M, N, K"]),
])
def test_calibrate_refuses_bad_rows(capsys: pytest.CaptureFixture[str], tmp_path: Path, change: dict[str, str],
                                    words: list[str]) -> None:
    rows = _gemm_rows()
    rows[0].update(change)
    path = _csv(tmp_path / "m.csv", rows)
    line = one_line(capsys, ["calibrate", "--hw", "h100-sxm", "--measurements", str(path), "--params",
                             "launch_overhead_s", "--min-rows", "1"])
    assert all(w in line for w in words), line


@pytest.mark.parametrize(("extra", "words"), [
    (["--power", "--full", "--min-rows", "3"], ["--full, --min-rows", "--power"]),
    (["--params", ""], ["--params ''", "names no field"]),
    (["--power", "--out", "p.toml"], ["no power-model field", "microbench --sustained", "p.toml not written"]),
    (["--out", "o.json"], ["o.json", "--force-format"]),
])
def test_calibrate_cli_refuses(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               extra: list[str], words: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    path = _csv(tmp_path / "m.csv", _gemm_rows())
    line = one_line(capsys, ["calibrate", "--hw", "h100-sxm", "--measurements", str(path), *extra])
    assert all(w in line for w in words), line
    assert not (tmp_path / "p.toml").exists()


def test_calibrate_measurements_device_is_not_a_regular_file(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line(capsys, ["calibrate", "--hw", "h100-sxm", "--measurements", "/dev/null"])
    assert "not a regular file" in line and "does not exist" not in line, line


def test_force_format_is_a_flag_of_calibrate_and_microbench(tmp_path: Path) -> None:
    path = _csv(tmp_path / "m.csv", _gemm_rows())
    out = tmp_path / "o.json"
    assert cli.main(["calibrate", "--hw", "h100-sxm", "--measurements", str(path), "--params", "launch_overhead_s",
                     "--min-rows", "1", "--out", str(out), "--force-format"]) == 0
    assert cli.main(["microbench", "--out", str(tmp_path / "mb.txt"), "--force-format", "--device", "cpu", "--hw",
                     "h100-sxm", "--only", "launch"]) == 0
    assert (tmp_path / "mb.txt").read_text().startswith("id,")


@pytest.mark.parametrize(("extra", "words"), [
    (["--only", ""], ["--only ''", "launch"]),
    (["--id-prefix", ""], ["--id-prefix ''", "non-empty"]),
    (["--hw", "wormhole-n150"], ["wormhole-n150", "not a GPU profile", "h100-sxm"]),
    (["--hw", "bogus"], ["unknown profile 'bogus'"]),
    (["--only", "bogus"], ["--only", "bogus", "launch"]),
    (["--sustained", "nan"], ["--sustained", "nan"]),
])
def test_microbench_checks_flags_before_the_device(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                    extra: list[str], words: list[str]) -> None:
    line = one_line(capsys, ["microbench", "--out", str(tmp_path / "mb.csv"), *extra])
    assert all(w in line for w in words) and "needs a CUDA GPU" not in line, line


@pytest.mark.parametrize(("name", "words"), [
    ('"b200"', ["name 'b200'", "built-in profile"]),
    ('"H100-SXM"', ["built-in profile"]),
    ("5", ["name must be a string", "int"]),
    ('"a\\nb"', ["control characters"]),
    ('""', ["name is empty"]),
])
def test_whatif_name_checks(tmp_path: Path, name: str, words: list[str]) -> None:
    from torchsim.hwmodels.whatif import WhatIfError

    path = tmp_path / "w.toml"
    path.write_text(f'base = "h100-sxm"\nname = {name}\nsm_count = 120\n')
    with pytest.raises(WhatIfError) as info:
        get_profile(str(path))
    assert all(w in str(info.value) for w in words), str(info.value)


def test_whatif_own_name_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "w.toml"
    path.write_text('base = "h100-sxm"\nname = "h100-fast"\nsm_count = 120\n')
    assert get_profile(path).name == "h100-fast"
