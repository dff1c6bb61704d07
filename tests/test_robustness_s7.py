"""Issue 14 regression corpus (second pass): each bad input is one stderr line naming it, exit 2, within a second.

Covers what the first pass left: argparse's range errors printed the whole usage block (19 lines for predict)
above the line that matters; a binary or absurdly nested config.json was refused without the file's name; a
routing Parquet table with a typo'd index (layer 10**12) allocated the whole grid (a hang); `sweep` took
unbounded --m/--batch/--jobs and unchecked --param counts (NaN, -1, 1.5, text: tracebacks or silent results).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from tests.cli_errors import one_line
from torchsim import cli


@pytest.mark.parametrize(("argv", "words"), [
    (["predict", "--decode", "1000000000"], ["--decode", "1048576", "1000000000"]),
    (["predict", "--batch", "1000000"], ["--batch", "65536"]),
    (["predict", "--workers", "-1"], ["--workers", "-1"]),
    (["predict", "--top", "-1"], ["--top", ">= 0"]),
    (["predict", "--detail", "-1"], ["--detail", "-1"]),
    (["compare", "--workers", "-1"], ["--workers"]),
    (["kernel", "gemm", "--m", "64", "--n", "64", "--k", "64", "--stages", "1000000"], ["--stages", "32"]),
    (["kernel", "gemm", "--m", "64", "--n", "64", "--k", "64", "--tiles-per-cta", "-1"], ["--tiles-per-cta"]),
    (["kernel", "gemm", "--m", "64", "--n", "64", "--k", "x"], ["--k", "invalid int value: 'x'"]),
    (["kernel", "gemm", "--m", "64", "--n", "64", "--k", "64", "--bogus"],
     ["torchsim kernel gemm: error: unrecognized arguments: --bogus", "`torchsim kernel gemm --help`"]),
    (["routing", "show", "balanced", "-x", "3"], ["torchsim routing show: error: unrecognized arguments: -x 3"]),
    (["sweep", "kernel", "gemm", "--m", str(2**31 - 1), "--n", "256", "--k", "256", "--vary", "sm_count=66",
      "--out", "s.parquet"], ["--m", "16777216"]),
    (["sweep", "llama3-8b", "--batch", "1000000", "--vary", "sm_count=66", "--out", "s.parquet"], ["--batch"]),
    (["sweep", "llama3-8b", "--jobs", "-1", "--vary", "sm_count=66", "--out", "s.parquet"], ["--jobs"]),
])
def test_argument_errors_are_one_line(argv: list[str], words: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line(capsys, argv)
    assert line.startswith("torchsim ") and ("error: argument" in line or "unrecognized" in line), line
    assert all(w in line for w in words) and "--help` lists the options" in line, line


def test_a_parser_with_its_own_usage_line_keeps_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["serve", "llama-tiny", "--rate", "x"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("usage: torchsim serve") and "--rate" in lines[1], lines


@pytest.mark.parametrize(("content", "words"), [
    (b"\x80\x81\xff\x00garbage", ["not a text file", "byte 0", "JSON"]),
    (pickle.dumps({"hidden_size": 4096}), ["not a text file"]),
    (b"[" * 100_000 + b"]" * 100_000, ["nested too deeply"]),
])
def test_unreadable_config_files_name_the_file(content: bytes, words: list[str], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cfg.json"
    path.write_bytes(content)
    line = one_line(capsys, ["predict", str(path)])
    assert str(path) in line and all(w in line for w in words), line


def _routing_parquet(path: Path, rows: list[tuple[object, object, object]]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols = {name: pa.array([r[i] for r in rows]) for i, name in enumerate(("layer", "expert", "tokens"))}
    meta = {b"torchsim.routing": json.dumps({"top_k": 2, "tokens": 16}).encode()}
    pq.write_table(pa.table(cols).replace_schema_metadata(meta), path)
    return path


@pytest.mark.parametrize(("rows", "words"), [
    ([(0, 0, 8), (10**12, 0, 8)],
     ["no row for (layer, expert) [(1, 0)", "999,999,999,999 missing", "layer 1000000000000"]),
    ([(0, 0, 8), (0, 10**9, 8)], ["no row for", "expert 1000000000"]),
    ([(0, 0, 8), (0, 0, 8)], ["layer 0 expert 0 appears twice"]),
    ([(0, 0, 8), (-1, 1, 8)], ["negative layer or expert index (-1, 1)"]),
    ([(0.5, 0, 8)], ["column 'layer' holds 0.5", "whole numbers"]),
    ([(0, 0, "8")], ["column 'tokens' holds '8'"]),
])
def test_routing_parquet_indices_are_checked_before_allocating(rows: list[tuple[object, object, object]],
                                                                words: list[str], tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = _routing_parquet(tmp_path / "r.parquet", rows)
    line = one_line(capsys, ["routing", "show", str(path)])
    assert str(path) in line and all(w in line for w in words), line


@pytest.mark.parametrize(("param", "words"), [
    ("rows=nan", ["'nan' is not a finite number"]),
    ("rows=inf", ["'inf' is not a finite number"]),
    ("rows=-1", ["rows counts things", "got '-1'"]),
    ("rows=1.5", ["whole number >= 1", "got '1.5'"]),
    ("rows=abc", ["got 'abc'"]),
    ("rows=true", ["got 'true'"]),
    ("rows=100000000000", ["above torchsim's limit of 16777216"]),
    ("rows", ["expected KEY=VALUE"]),
])
def test_sweep_kernel_params_are_checked(param: str, words: list[str], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.parquet"
    line = one_line(capsys, ["sweep", "kernel", "rmsnorm", "--param", param, "--param", "hidden=4096",
                             "--vary", "sm_count=66,132", "--out", str(out)])
    assert f"--param {param!r}" in line and all(w in line for w in words), line
    assert not out.exists()


@pytest.mark.parametrize("name", ["x" * 5000, "h100-\u00fc\u4e2d\U0001F600 \u202e",
                                  "__import__('os').system('id') {0} %s -06"])
def test_whatif_profile_names_do_not_change_the_times(name: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A long, unicode or code-like name/description is only a label: the kernel's time is the same, positive."""
    def time_us(profile: str) -> float:
        assert cli.main(["kernel", "rmsnorm", "--rows", "1", "--hidden", "4096", "--hw", profile, "--json"]) == 0
        return float(json.loads(capsys.readouterr().out)["time_us"])

    plain, odd = tmp_path / "plain.toml", tmp_path / "odd.toml"
    body = 'base = "h100-sxm"\ndram_bytes_per_s = "4e12 B/s"\n'
    plain.write_text(body)
    label = json.dumps(name, ensure_ascii=False)  # a TOML basic string (emoji as themselves, not JSON surrogates)
    odd.write_text(f"name = {label}\ndescription = {label}\n{body}", encoding="utf-8")
    assert time_us(str(plain)) == time_us(str(odd)) > 0


@pytest.mark.parametrize(("argv", "words"), [
    (["routing", "record", "--seq", "1000000000", "-o", "r.json"], ["--seq", "131072"]),
    (["routing", "record", "--batch", "1000000000", "-o", "r.json"], ["--batch", "4096"]),
    (["routing", "record", "--batch", "4000", "--seq", "100000", "-o", "r.json"], ["400,000,000 tokens", "1,048,576"]),
    (["predict", "--decode-samples", "-1"], ["--decode-samples", "between 1"]),
    (["kernel", "grouped-gemm", "--routing", "balanced", "--tokens", "16", "--experts", "10000000", "--n", "256",
      "--k", "256"], ["--experts", "4096"]),
    (["kernel", "grouped-gemm", "--tokens-per-expert", ",".join(["1"] * 5000), "--n", "256", "--k", "256"],
     ["5,000 experts", "4096"]),
    (["kernel", "gemm", "--m", "256", "--n", "256", "--k", "256", "--sms", "100000"], ["--sms 100000", "132 SMs"]),
    (["sweep", "kernel", "gemm", "--m", "64", "--n", "64", "--k", "64", "--epilogue", "bogus", "--vary", "sm_count=66",
      "--out", "s.parquet"], ["--epilogue", "'bogus'"]),
    (["sweep", "kernel", "gemm", "--m", "64", "--n", "64", "--k", "64", "--variant", "bogus", "--vary", "sm_count=66",
      "--out", "s.parquet"], ["--variant", "'bogus'"]),
    (["sweep", "kernel", "elementwise", "--param", "numel=1024", "--param", "op=bogus", "--vary", "sm_count=66",
      "--out", "s.parquet"], ["--param op=bogus", "known: add"]),
])
def test_sizes_and_names_refused_before_work(argv: list[str], words: list[str], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    line = one_line(capsys, argv)
    assert all(w in line for w in words), line
    assert list(tmp_path.iterdir()) == []


def test_binary_measurements_name_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "meas.csv"
    path.write_bytes(b"\x80\x81\xff,garbage\n")
    line = one_line(capsys, ["calibrate", "--hw", "h100-sxm", "--measurements", str(path)])
    assert str(path) in line and "not a text file" in line and "codec" not in line, line


@pytest.mark.parametrize(("fields", "words"), [
    ({"rope_scaling": "yarn"}, ["'rope_scaling' must be an object", '"yarn"']),
    ({"rope_scaling": {"rope_type": "linear", "factor": -2}}, ["'rope_scaling'", "'factor'", "got -2"]),
    ({"rope_scaling": {"rope_type": "linear", "factor": float("nan")}}, ["'factor'", "got nan"]),
    ({"rope_scaling": {"rope_type": "longrope", "short_factor": [1.0, float("inf")]}}, ["NaN or infinite"]),
    ({"torch_dtype": 5}, ["'torch_dtype' must be a dtype name", "got 5"]),
    ({"torch_dtype": "float128"}, ["'torch_dtype'", "'float128' is not a torch dtype", "bfloat16"]),
])
def test_damaged_ignored_fields_are_refused(fields: dict[str, object], words: list[str], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """rope_scaling and torch_dtype do not change the cost, but a damaged value is a damaged file, not a model."""
    base = json.loads((Path(__file__).parent / "data/model_configs/mistral-7b-v0.1.json").read_text())
    base.pop("sliding_window")
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps({**base, **fields}))
    line = one_line(capsys, ["predict", str(path)])
    assert str(path) in line and all(w in line for w in words), line


def test_published_rope_scalings_still_load() -> None:
    from torchsim.models.config_fields import check_ignored

    for scaling in ({"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},  # Llama-3.1
                    {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
                     "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096},  # DeepSeek-V3
                    {"type": "longrope", "short_factor": [1.0, 1.05], "long_factor": [1.2, 3.4]}, None):
        check_ignored({"rope_scaling": scaling, "torch_dtype": "bfloat16"}, "m")


@pytest.mark.parametrize("size", ["1e30", "8B..1e30", "2TiB"])
def test_collective_sizes_beyond_any_device_are_refused(size: str, capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line(capsys, ["collective", "all-reduce", "--system", "dgx-h100", "--bytes", size])
    assert "limit of 1 TiB per rank" in line, line


def test_small_k_batched_gemm_counts_its_tiles(capsys: pytest.CaptureFixture[str]) -> None:
    """3x10^6 128^3 GEMMs are ~5.4e7 node events (18 per tile, measured 1.8e6 for 10^5): over the default
    limit, refused before building (the K-step term alone estimated 1.8e7 and let it run: ~7 minutes here at the
    measured 10^5 rate)."""
    line = one_line(capsys, ["kernel", "gemm", "--m", "128", "--n", "128", "--k", "128", "--batch", "3000000"])
    assert "54,000,000 node executions" in line and "--max-events" in line, line


def test_sweep_of_a_huge_gemm_is_refused_before_building(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each dimension is within the 2^24 limit, but 1.7e10 output tiles hung the size estimate's graph build."""
    dim = str(1 << 24)
    line = one_line(capsys, ["sweep", "kernel", "gemm", "--m", dim, "--n", dim, "--k", dim, "--vary", "sm_count=66",
                             "--out", str(tmp_path / "s.parquet")])
    assert "17,179,869,184 128x128 output tiles" in line and "2,097,152" in line, line
    assert list(tmp_path.iterdir()) == []


def test_predict_of_an_absurd_token_count_is_refused_before_planning_it(capsys: pytest.CaptureFixture[str]) -> None:
    """--batch 65536 --prompt 8000 (524M tokens) hung listing the work of its 197M-tile QKV GEMM for the estimate."""
    line = one_line(capsys, ["predict", "--batch", "65536", "--prompt", "8000", "--decode", "1", "--no-progress"])
    assert "196,608,000 128x128 output tiles" in line and "16,777,216" in line and "--batch" in line, line


@pytest.mark.parametrize("family", ["qwen2.5-7b", "phi-3-mini-4k"])
def test_hf_family_config_with_an_unknown_dtype_is_refused(family: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """transformers looks `torch_dtype` up on torch: an unknown name was an internal AttributeError."""
    pytest.importorskip("transformers")
    base = json.loads((Path(__file__).parent / f"data/hf_configs/{family}.json").read_text())
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps({**base, "torch_dtype": "float128"}))
    line = one_line(capsys, ["predict", str(path)])
    assert "'float128' is not a torch dtype" in line and "internal error" not in line, line
    path.write_text(json.dumps({**base, "torch_dtype": "torch.bfloat16"}))  # the prefixed spelling some files use
    from torchsim.models.config_fields import check_dtype_fields
    check_dtype_fields(json.loads(path.read_text()), "m")


def test_decode_splits_above_flashattention_limit_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line(capsys, ["kernel", "decode", "--batch", "1", "--heads-q", "32", "--heads-kv", "8", "--seq-kv",
                             "4096", "--head-dim", "128", "--splits", "1000", "--hw", "h100-sxm"])
    assert "--splits" in line and "1000" in line and "128" in line, line


def test_decode_splits_at_the_limit_are_simulated() -> None:
    from torchsim.hwmodels import get_profile
    from torchsim.lowering.templates.attention_config import AttnShape
    from torchsim.lowering.templates.decode import MAX_SPLITS, flash_decode

    hw = get_profile("h100-sxm")
    bn = flash_decode(AttnShape(1, 8, 8, 1, 4096, 128), hw)[0].attrs["bn"]  # K/V block of the decode kernel
    kernels = flash_decode(AttnShape(1, 8, 8, 1, bn * MAX_SPLITS, 128), hw, num_splits=MAX_SPLITS)
    assert kernels[0].attrs["splits"] == MAX_SPLITS and kernels[0].attrs["blocks_per_split"] == 1


def test_sampled_routing_of_absurd_token_counts_is_refused_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    """zipf/dirichlet draw each token's experts: 10^12 tokens ran until killed; balanced is computed, so it is not
    bounded."""
    line = one_line(capsys, ["routing", "show", "zipf", "--tokens", str(10**12)])
    assert "1,000,000,000,000 tokens" in line and "balanced" in line, line
    assert cli.main(["routing", "show", "balanced", "--tokens", str(10**12)]) == 0
    assert "250000000000" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "words"), [
    (["rmsnorm", "--param", "rows=1", "--param", "hiden=4096"],
     ["--param hiden", "it reads hidden, rows", "no parameter 'hidden'"]),
    (["gemm", "--m", "64", "--n", "64", "--k", "64", "--param", "colour=3"], ["--param colour", "reads", "m, n"]),
    (["rmsnorm", "--param", "rows=1", "--param", "hidden=4096", "--param", "fidelity=hifi2", "--hw",
      "wormhole-n150", "--vary", "clock_hz=1e9,1.1e9"], ["--param fidelity", "on wormhole-n150"]),
])
def test_sweep_kernel_params_no_template_reads_are_named(args: list[str], words: list[str], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.parquet"
    vary = [] if "--vary" in args else ["--vary", "sm_count=66,132"]
    line = one_line(capsys, ["sweep", "kernel", *args, *vary, "--out", str(out)])
    assert all(w in line for w in words), line
    assert not out.exists()


def test_sweep_kernel_params_a_template_reads_are_accepted(tmp_path: Path) -> None:
    out = tmp_path / "s.parquet"
    assert cli.main(["sweep", "kernel", "rmsnorm", "--param", "rows=1", "--param", "hidden=4096", "--vary",
                     "dram_bytes_per_s=2e12,3e12", "--out", str(out), "--no-progress"]) == 0
    assert out.exists()


@pytest.mark.parametrize("size", [1000, 0, 2.5, "4", True])
def test_a_cluster_that_cannot_launch_is_named_not_a_deadlock(size: object) -> None:
    """A cluster never spans a GPC: 1000 CTAs was reported as a deadlock at cycle 0."""
    from torchsim.graph import DType, KernelGraph
    from torchsim.hwmodels import get_profile
    from torchsim.lowering.templates.norms import rmsnorm
    from torchsim.sim import simulate

    hw = get_profile("h100-sxm")
    doc = json.loads(rmsnorm(4, 256, DType.BF16, hw).dumps())
    doc["attrs"]["cluster_size"] = size
    with pytest.raises(ValueError, match="cluster_size .* from 1 to 16"):
        simulate(KernelGraph.loads(json.dumps(doc)), hw)


@pytest.mark.parametrize("argv", [["routing", "record", "--checkpoint", "{ckpt}", "-o", "{out}"],
                                  ["predict", "tests/data/hf_configs/qwen2.5-7b.json"]])
def test_commands_that_need_the_hf_extra_say_so_in_one_line(argv: list[str], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Without transformers, `routing record --checkpoint` was an 'internal error' asking for a bug report."""
    import sys

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text('{"model_type": "mixtral"}')
    out = tmp_path / "r.json"
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` -> ModuleNotFoundError
    line = one_line(capsys, [a.format(ckpt=ckpt, out=out) for a in argv])
    assert "pip install 'torchsim[hf]'" in line and "internal error" not in line, line
    assert not out.exists()
