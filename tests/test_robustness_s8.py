"""Issue 14 regression corpus (third pass): what a hostile probe still got through after the second pass.

Unbounded counts that hung (`kernel elementwise --inputs 10**18`, `compare --top 10**12`, recording a 141B
model's routers on CPU), flags that did nothing or fell back to a default without saying so (`--top-k 0`
meant 2, `skewed:0` meant 0.5, `--tokens 0` meant 2048, `--program mcast` on a GPU, `--detail` without
`--perfetto`), a companion output (`k.nodes.parquet`) that is a directory found only after the simulation,
FP8 checkpoints predicted on an A100, request files whose lines hold 10^300-second arrivals or extra cells.
Each is one stderr line naming the input, exit 2, before any simulation.
"""

from __future__ import annotations

import json
import warnings
from functools import partial
from pathlib import Path

import pytest

from tests.cli_errors import one_line as _one_line
from torchsim import cli

one_line = partial(_one_line, usage=True)  # these commands include serve (its own usage line)

GEMM = ["kernel", "gemm", "--m", "64", "--n", "64", "--k", "64"]


@pytest.mark.parametrize(("argv", "words"), [
    (["kernel", "elementwise", "--numel", "16", "--inputs", str(10**18)], ["--inputs", "0 and 16"]),
    (["kernel", "elementwise", "--numel", str(1 << 32)], ["--numel", "2,147,483,648"]),
    (["kernel", "rope", "--tokens", "4", "--heads-q", "8", "--heads-kv", str(10**18), "--head-dim", "64"],
     ["--heads-kv", "limit"]),
    (["kernel", "reduce", "--numel-in", str(1 << 24), "--numel-out", "1"], ["reduced row", "numel_in / numel_out"]),
    (["kernel", "grouped-gemm", "--routing", "balanced", "--tokens", "64", "--top-k", "0", "--n", "256", "--k",
      "256"], ["--top-k", "0"]),
    (["kernel", "grouped-gemm", "--routing", "skewed:0", "--tokens", "64", "--n", "256", "--k", "256"],
     ["hot fraction", "(0, 1)"]),
    (["kernel", "grouped-gemm", "--routing", "balanced", "--tokens", "64", "--n", "256", "--k", "256", "--seed",
      "-1"], ["--seed", "-1"]),
    (["kernel", "grouped-gemm", "--tokens-per-expert", "5,3", "--experts", "4", "--n", "256", "--k", "256"],
     ["--experts", "--tokens-per-expert"]),
    ([*GEMM, "--program", "mcast"], ["--program", "Tenstorrent"]),
    ([*GEMM, "--hw", "wormhole-n150", "--sms", "4"], ["--sms", "GPUs"]),
    ([*GEMM, "--hw", "wormhole-n150", "--policy", "lrr"], ["--policy", "GPUs"]),
    ([*GEMM, "--no-persistent", "--tiles-per-cta", "2"], ["--tiles-per-cta", "--no-persistent"]),
    ([*GEMM, "--tune-budget", "3"], ["--tune-budget", "--tune"]),
    ([*GEMM, "--tile", ""], ["--tile is empty"]),
    ([*GEMM, "--grid", " "], ["--grid is empty"]),
    ([*GEMM, "--parquet", ""], ["--parquet", "empty"]),
    ([*GEMM, "--parquet", "a" * 250 + ".parquet"], ["file name is 258 bytes", "shorter name"]),
    (["kernel", "decode", "--kv-lens", "100", "--heads-q", "8", "--heads-kv", "8", "--head-dim", "64",
      "--page-size", "-3"], ["--page-size", "-3"]),
    (["predict", "llama-tiny", "--sp"], ["--sp", "--tp"]),
    (["predict", "llama-tiny", "--detail", "3"], ["--detail", "--perfetto"]),
    (["predict", ""], ["the model argument is empty"]),
    (["predict", "llama3-8b", "--dtype", "fp8", "--hw", "a100-sxm"], ["a100-sxm", "FP8", "bf16, fp16"]),
    (["serve", "llama3-8b", "--dtype", "fp8", "--hw", "a100-sxm", "--offline", "--num-requests", "2"],
     ["a100-sxm", "FP8"]),
    (["serve", "llama-tiny", "--rate", "1e-300", "--num-requests", "3"], ["--rate", "0.0001"]),
    (["serve", "llama-tiny", "--rate", "0.001", "--num-requests", "100000"], ["116 days", "raise the rate"]),
    (["collective", "all-reduce", "--system", "dgx-h100", "--factor", "4"], ["--factor", "LOW..HIGH"]),
    (["routing", "show", "balanced", "--tokens", "0"], ["--tokens", "0"]),
    (["routing", "record", "--model", "mixtral-8x22b", "-o", "x.json"], ["140.6B", "GiB", "mixtral-tiny"]),
    (["routing", "record", "--model", "mixtral-tiny", "--seq", "100000", "-o", "x.json"],
     ["--seq 100000", "4096", "max_position_embeddings"]),
    (["routing", "record", "--seed=-1", "-o", "x.json"], ["--seed", "-1"]),
])
def test_third_pass_inputs_are_one_line_errors(argv: list[str], words: list[str], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    line = one_line(capsys, argv)
    assert line.startswith("torchsim ") and all(w in line for w in words), line
    assert not (tmp_path / "x.json").exists()


def test_a_routing_file_with_a_pattern_only_option_is_refused(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.json"
    assert cli.main(["routing", "record", "--batch", "1", "--seq", "8", "-o", str(path)]) == 0
    capsys.readouterr()
    line = one_line(capsys, ["routing", "show", str(path), "--model", "mixtral-8x7b"])
    assert "--model" in line and str(path) in line, line
    assert cli.main(["routing", "show", str(path)]) == 0  # the file alone is still shown


@pytest.mark.parametrize("table", ["nodes", "iterations"])
def test_a_companion_table_that_is_a_directory_fails_before_work(table: str, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """`--parquet k.parquet` also writes k.nodes.parquet (kernel) / k.iterations.parquet (serve): a directory
    there used to be found after the simulation, with k.parquet already replaced."""
    (tmp_path / f"k.{table}.parquet").mkdir()
    kept = tmp_path / "k.parquet"
    kept.write_bytes(b"the old table")
    argv = [*GEMM] if table == "nodes" else ["serve", "llama-tiny", "--offline", "--num-requests", "2"]
    line = one_line(capsys, [*argv, "--parquet", str(kept)])
    assert f"k.{table}.parquet" in line and "directory" in line, line
    assert kept.read_bytes() == b"the old table"


@pytest.mark.parametrize(("name", "content", "words"), [
    ("r.csv", "arrival_s,input_len,output_len\n0,10,10,5\n", ["line 2 has 4 cells", "3 columns"]),
    ("r.jsonl", json.dumps({"arrival_s": 1e300, "input_len": 10, "output_len": 3}) + "\n",
     ["line 1", "arrival_s", "116 days"]),
    ("r.jsonl", "[" * 100_000 + "]" * 100_000 + "\n", ["line 1", "nested too deeply"]),
    ("r.jsonl", '{"arrival_s": 0, "input_len": ' + "9" * 5000 + ', "output_len": 3}\n', ["line 1"]),
    # ambiguous rows (fourth pass)
    ("a.jsonl", '{"arrival_s": 0, "input_len": 16, "output_len": 4, "input_len": 8}\n', ["input_len", "twice"]),
    ("a.csv", "arrival_s,input_len,input_len,output_len\n0,16,300,4\n", ["input_len twice"]),
    ("b.jsonl", '{"arrival_s": 0, "input_len": 16, "prompt_len": 4, "output_len": 4}\n',
     ["input_len and prompt_len"]),
    ("c.jsonl", '{"arrival_s": 0, "input_len": "16", "output_len": 4}\n', ["input_len", "string"]),
    ("b.csv", "arrival_s,input_len,output_len\n,16,4\n", ["line 2", "arrival_s is empty"]),
])
def test_bad_request_files_name_the_file_and_the_fault(name: str, content: str, words: list[str], tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / name
    path.write_text(content)
    line = one_line(capsys, ["serve", "llama-tiny", "--requests", str(path)])
    assert str(path) in line and all(w in line for w in words), line


def test_a_request_csv_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    from torchsim.serving.load import read_requests

    path = tmp_path / "r.csv"
    path.write_text("\ufeffarrival_s,input_len,output_len\n0.5,10,4\n", encoding="utf-8")
    (req,) = read_requests(path)
    assert (req.arrival_s, req.input_len, req.output_len) == (0.5, 10, 4)


def test_compare_with_a_huge_top_lists_what_there_is() -> None:
    from torchsim.exports.report import RunSummary, comparison_table

    fields = dict(ttft_s=1e-3, tpot_s=1e-4, tokens_per_s=10.0, total_s=2e-3, bound=[("DRAM", 1.0)],
                  fallback_share=0.0)
    runs = [RunSummary(hardware=h, top=[("a", 0.6), ("b", 0.4)], **fields) for h in ("h100-sxm", "h200")]
    table = comparison_table(runs, top=10**12)  # looped 10^12 times before
    assert "top kernel 2" in table and "top kernel 3" not in table


def test_a_damaged_cache_entry_is_one_warning_line(capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI prints a discarded cache entry as one line, not Python's warning with its source line."""
    from torchsim.prediction.cache import CacheWarning

    show = cli._one_line_cache_warnings(lambda *a, **k: pytest.fail("other warnings go to the previous hook"))
    show(CacheWarning("torchsim cache: discarded damaged entry x.json (bad); it will be recomputed"), CacheWarning,
         "kernel_sim.py", 271)
    err = capsys.readouterr().err
    assert err == "warning: torchsim cache: discarded damaged entry x.json (bad); it will be recomputed\n"
    seen: list[object] = []
    other = cli._one_line_cache_warnings(lambda *a, **k: seen.append(a[1]))
    other(UserWarning("x"), UserWarning, "f.py", 1)
    assert seen == [UserWarning]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the hook itself warns nothing
        show(CacheWarning("y"), CacheWarning, "f.py", 1)
