"""`torchsim serve`: the load, scheduler and output flags on the tiny model (each run takes well under a second)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from torchsim import cli

TINY = ["serve", "llama-tiny", "--hw", "h100-sxm", "--num-requests", "8", "--input-len", "32", "--output-len", "4"]


def serve(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main([*TINY, *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_has_the_summary_with_sane_values(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = serve(capsys, "--offline", "--json", "--no-progress")
    assert code == 0
    d = json.loads(out)
    assert d["requests"] == 8 and d["input_tokens"] == 8 * 32 and d["output_tokens"] == 8 * 4
    assert d["output_tokens_per_s"] > 0 and d["requests_per_s"] > 0
    for metric in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        s = d[metric]
        assert set(s) == {"mean", "p50", "p90", "p99"} and all(v > 0 for v in s.values()), metric
        assert s["p50"] <= s["p90"] <= s["p99"]
    assert d["e2e_ms"]["p50"] >= d["ttft_ms"]["p50"] + 3 * d["tpot_ms"]["p50"] * 0.999  # 3 tokens after the first
    # offline: every request takes output_tokens / duration of the run's throughput
    assert math.isclose(d["output_tokens_per_s"], 32 / d["duration_s"], rel_tol=1e-9)
    assert any(a.startswith("load: 8 requests, offline") for a in d["assumptions"])
    assert "e2e_inference" in d["accuracy"]


def test_rate_sweep_gives_one_point_per_rate(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = serve(capsys, "--rate", "50,500", "--json", "--parquet", str(tmp_path / "s.parquet"))
    assert code == 0
    d = json.loads(out)
    assert d["sweep"] == "rate" and [p["rate"] for p in d["points"]] == [50, 500]
    slow, fast = d["points"]
    assert fast["output_tokens_per_s"] >= slow["output_tokens_per_s"] > 0
    assert all(p["output_tokens"] == 32 for p in d["points"])
    assert "wrote requests table" in err  # file lines go to stderr with --json
    import pyarrow.parquet as pq

    req = pq.read_table(tmp_path / "s.parquet")
    its = pq.read_table(tmp_path / "s.iterations.parquet")
    assert req.column_names[0] == "rate" and sorted(set(req.column("rate").to_pylist())) == [50.0, 500.0]
    assert req.num_rows == 16 and its.num_rows == sum(p["iterations"] for p in d["points"])
    assert req.schema.metadata[b"torchsim.sweep"] == b"rate"


def test_concurrency_sweep_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = serve(capsys, "--concurrency", "1,4")
    assert code == 0
    lines = out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("clients"))
    assert "TTFT p99 ms" in lines[head] and "preemptions" in lines[head]
    assert [ln.split()[0] for ln in lines[head + 2: head + 4]] == ["1", "4"]
    assert "  - at 4 clients: load: 8 requests, 4 closed-loop clients" in out


def test_parquet_writes_both_tables(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    import pyarrow.parquet as pq

    path = tmp_path / "run.parquet"
    code, out, _ = serve(capsys, "--offline", "--parquet", str(path), "--perfetto", str(tmp_path / "t.pftrace"),
                         "--plot", str(tmp_path / "t.png"))
    assert code == 0
    n_its = int(next(ln for ln in out.splitlines() if "iterations," in ln).split()[0])
    assert pq.read_table(path).num_rows == 8
    assert pq.read_table(tmp_path / "run.iterations.parquet").num_rows == n_its
    assert (tmp_path / "t.pftrace").stat().st_size > 0
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.iterations.parquet", "run.parquet", "t.pftrace",
                                                          "t.png"]  # no temporary file left


def test_requests_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    f = tmp_path / "r.jsonl"
    f.write_text("\n".join(json.dumps({"arrival_s": i * 1e-3, "input_len": 20 + i, "output_len": 3})
                           for i in range(5)) + "\n")
    code = cli.main(["serve", "llama-tiny", "--requests", str(f), "--json"])
    d = json.loads(capsys.readouterr().out)
    assert code == 0 and d["requests"] == 5 and d["input_tokens"] == sum(range(20, 25)) and d["output_tokens"] == 15


@pytest.mark.parametrize(("argv", "words"), [
    (["--rate", "0"], ["--rate", ">= 0.0001", "'0'"]),
    (["--rate", "nan"], ["--rate", "'nan'"]),
    (["--rate", "1,,2"], ["--rate", "empty item"]),
    (["--concurrency", "0"], ["--concurrency", "between 1"]),
    (["--offline", "--rate", "2"], ["--rate", "not allowed with", "--offline"]),
    ([], ["one of the arguments", "--requests", "--offline", "is required"]),
    (["--offline", "--memory-fraction", "1.5"], ["--memory-fraction", "(0, 1]"]),
    (["--offline", "--input-len", "uniform:9:3"], ["--input-len", "above HI"]),
])
def test_bad_flags_exit_2_naming_the_flag(argv: list[str], words: list[str],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = serve(capsys, *argv)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) <= 2 and lines[0].startswith("usage: torchsim serve"), err  # a one-line usage, then the error
    assert lines[-1].startswith("torchsim serve: error: ") and all(w in lines[-1] for w in words), err


def test_bad_loads_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"input_len": 5, "output_len": 3}) + '\n{"input_len": 5, "output_len": "x"}\n')
    cases = [
        (["serve", "llama-tiny", "--requests", str(bad)], ["bad.jsonl", "line 2", "output_len"]),
        ([*TINY[:6], "--input-len", "600", "--offline"], ["request 0", "context of 512"]),  # llama-tiny: 512
        ([*TINY, "--requests", str(bad)], ["--num-requests, --input-len, --output-len are for synthetic loads"]),
        ([*TINY, "--rate", "1,2", "--perfetto", str(tmp_path / "t.pftrace")], ["--perfetto", "sweep"]),
        ([*TINY, "--offline", "--ep", "2"], ["--ep", "tensor parallelism only"]),
        ([*TINY, "--offline", "--hw", "dgx-h100"], ["--tp"]),
        ([*TINY, "--offline", "--memory-fraction", "0.000001"], ["no room for a KV block", "memory_fraction"]),
    ]
    for argv, words in cases:
        code = cli.main(argv)
        err = capsys.readouterr().err.strip()
        assert code == 2 and all(w in err.splitlines()[-1] for w in words), (argv, err)
        assert len(err.splitlines()) == 1 or err.startswith("usage: torchsim serve"), (argv, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]


def test_iterations_table_clash_is_caught_before_serving(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = serve(capsys, "--offline", "--parquet", str(tmp_path / "a.parquet"), "--perfetto",
                         str(tmp_path / "a.iterations.parquet"), "--force-format")
    assert code == 2 and "iterations table" in err and "same file" in err
    assert list(tmp_path.iterdir()) == []


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["serve", "--help"]) == 0
    out = capsys.readouterr().out
    assert all(f in out for f in ("--rate", "--concurrency", "--scheduler", "--chunked-prefill", ".iterations.parquet"))
