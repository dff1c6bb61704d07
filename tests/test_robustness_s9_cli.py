"""Issue 14 regression corpus (fourth pass, CLI side): what a third hostile probe found.

Valid runs refused (`compare --hw h100-sxm:tp2 --sp`, `--pp 2` on a system), options that did nothing in their
combination (`--policy` on a Tenstorrent chip, `--kv`/`--decode-samples` with `--decode 0`, `--micro-batches`
without `--pp`, `compare --tp` when every item has its own, `collective --eager` on a mesh, `--force-format`
without an output, `routing show --seed` of a file or a computed pattern), request and routing files whose
duplicate or unknown fields were dropped silently, an unwritable cache used without a word, tile graphs with
overlapping warp groups or negative phases, outputs through symbolic links and read-only files, and a signal
after the output was written reported as "no output was changed".
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli_errors import one_line
from torchsim import cli

GEMM = ["kernel", "gemm", "--m", "64", "--n", "64", "--k", "64"]
TINY = ["llama-tiny", "--prompt", "16", "--decode", "2"]


@pytest.mark.parametrize(("argv", "words"), [
    (["predict", "llama-tiny", "--hw", "wormhole-n150", "--policy", "rr"], ["--policy", "Tenstorrent"]),
    (["predict", "llama-tiny", "--decode", "0", "--kv", "20"], ["--kv", "--decode 0"]),
    (["predict", "llama-tiny", "--decode", "0", "--decode-samples", "2"], ["--decode-samples", "--decode 0"]),
    (["predict", "llama-tiny", "--decode", "2", "--decode-samples", "5"], ["--decode-samples 5", "1..2"]),
    (["predict", "llama-tiny", "--batch", "2", "--micro-batches", "2"], ["--micro-batches", "--pp"]),
    (["predict", "llama-tiny", "--force-format"], ["--force-format", "no output path"]),
    ([*GEMM, "--force-format"], ["--force-format"]),
    (["predict", "llama-tiny", "--hw", "t3000"], ["t3000", "8 chips", "--tp N"]),
    (["compare", "llama-tiny", "--hw", "h100-sxm:tp2", "--tp", "4"], ["--tp 4", ":tpN"]),
    (["compare", "llama-tiny", "--hw", "h100-sxm", "--sp"], ["--sp", "NAME:tpN"]),
    (["collective", "all-gather", "--system", "dgx-h100", "--bytes", "3", "--ranks", "8"],
     ["--bytes 3", "8 ranks"]),
    (["collective", "all-reduce", "--system", "t3000", "--eager"], ["--eager", "t3000"]),
    (["routing", "show", "balanced", "--seed", "5"], ["--seed", "balanced"]),
    (["predict", "mixtral-tiny", "--ep", "16", "--batch", "16"], ["16 GPUs", "max(tp, ep) x pp", "has 8"]),
])
def test_fourth_pass_flags_are_one_line_errors(argv: list[str], words: list[str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line(capsys, argv)
    assert line.startswith("torchsim ") and all(w in line for w in words), line


@pytest.mark.parametrize("argv", [
    ["compare", *TINY, "--hw", "h100-sxm:tp2", "--sp"],
    ["predict", *TINY, "--hw", "dgx-h100", "--pp", "2"],
])
def test_runs_that_were_refused_now_run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert "TTFT" in capsys.readouterr().out


def test_a_routing_file_with_an_unknown_field_or_a_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "r.json"
    assert cli.main(["routing", "record", "--batch", "1", "--seq", "8", "-o", str(path)]) == 0
    capsys.readouterr()
    assert "--seed" in one_line(capsys, ["routing", "show", str(path), "--seed", "5"])
    doc = json.loads(path.read_text())
    doc["top-k"] = 2  # a typo of top_k
    path.write_text(json.dumps(doc))
    line = one_line(capsys, ["routing", "show", str(path)])
    assert "unknown field(s) 'top-k'" in line and "top_k" in line, line


def test_an_unwritable_cache_is_reported_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torchsim.prediction import cache

    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    monkeypatch.setattr(cache, "_UNWRITABLE", set())
    disk = cache.DiskCache(afile)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for i in range(3):
            disk.put(f"k{i}", _Entry(1.0))
    messages = [str(w.message) for w in seen if issubclass(w.category, cache.CacheWarning)]
    assert len(messages) == 1 and str(afile) in messages[0] and "not cached" in messages[0], messages


@dataclass
class _Entry:
    t: float


def _graph_doc() -> dict:
    from torchsim.graph import DType
    from torchsim.hwmodels import get_profile
    from torchsim.lowering.templates.norms import rmsnorm

    return json.loads(rmsnorm(4, 256, DType.BF16, get_profile("h100-sxm")).dumps())


def _graph(doc: dict) -> dict:
    return doc["classes"][0]["graph"]


@pytest.mark.parametrize(("change", "words"), [
    (lambda d: _graph(d)["groups"][0].__setitem__("num_warps", 10**6), ["num_warps", "0..63"]),
    (lambda d: _graph(d)["groups"].append({**_graph(d)["groups"][0], "name": "again"}), ["both hold warp"]),
    (lambda d: _graph(d)["nodes"][0].__setitem__("phase", -1), ["phase -1"]),
    (lambda d: _graph(d)["nodes"][0].__setitem__("smem_io", -5.0), ["smem_io -5.0"]),
    (lambda d: _graph(d)["tiles"][0].__setitem__("shape", [10**9, 10**9]), ["elements", "at most"]),
    (lambda d: d.__setitem__("attrs", [1, 2]), ["attrs must be a JSON object"]),
])
def test_graph_json_out_of_range(change: object, words: list[str]) -> None:
    from torchsim.graph import GraphError, KernelGraph

    doc = _graph_doc()
    change(doc)  # type: ignore[operator]
    with pytest.raises(GraphError) as exc:
        KernelGraph.loads(json.dumps(doc))
    assert all(w in str(exc.value) for w in words), str(exc.value)


def test_a_barrier_past_an_mbarrier_count_is_refused() -> None:
    from torchsim.graph import GraphError, KernelGraph

    doc = _graph_doc()
    if not _graph(doc)["barriers"]:
        _graph(doc)["barriers"].append({"name": "b", "expected": 10**9})
    else:
        _graph(doc)["barriers"][0]["expected"] = 10**9
    with pytest.raises(GraphError, match="arrivals"):
        KernelGraph.loads(json.dumps(doc))


def test_outputs_write_through_symbolic_links_and_keep_read_only_files(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    target, link, dangling = tmp_path / "target.parquet", tmp_path / "link.parquet", tmp_path / "dangling.parquet"
    target.write_bytes(b"old")
    link.symlink_to(target.name)
    dangling.symlink_to("nowhere.parquet")
    for path in (link, dangling):
        assert cli.main([*GEMM, "--parquet", str(path)]) == 0
        assert path.is_symlink()
    assert target.read_bytes()[:4] == b"PAR1" and (tmp_path / "nowhere.parquet").read_bytes()[:4] == b"PAR1"
    capsys.readouterr()
    ro = tmp_path / "ro.parquet"
    ro.write_bytes(b"keep")
    os.chmod(ro, 0o444)
    line = one_line(capsys, [*GEMM, "--parquet", str(ro)])
    assert "read-only" in line and str(ro) in line and ro.read_bytes() == b"keep", line


def test_an_interruption_after_an_output_was_written_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A signal landing after the output was replaced must not claim that nothing changed."""
    from torchsim.cli import hw
    from torchsim.exports.atomic import write_bytes_atomic

    out = tmp_path / "done.json"

    def write_then_interrupted(args: object) -> int:
        write_bytes_atomic(out, b"{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(hw, "_list", write_then_interrupted)
    assert cli.main(["hw", "list"]) == 130
    err = capsys.readouterr().err
    assert f"{out} had been written (complete)" in err and "no output was changed" not in err, err
