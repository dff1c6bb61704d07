"""Output paths are checked before any work: format by extension, regular files only, no two outputs (or an
output and an input) on one path. Each case fails at once with exit status 2 and a message naming the option."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from torchsim import cli


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(list(argv))
    return code, capsys.readouterr().err


def test_extension_must_match_the_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(capsys, "predict", "llama-tiny", "--parquet", str(tmp_path / "out.csv"))
    assert code == 2 and "--parquet" in err and ".parquet" in err and "--force-format" in err
    code, err = run(capsys, "kernel", "gemm", "--m", "64", "--n", "64", "--k", "64", "--perfetto",
                    str(tmp_path / "t.parquet"))
    assert code == 2 and "--perfetto" in err and ".pftrace" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [
    ["predict", "llama-tiny", "--parquet", "{d}/x.parquet", "--perfetto", "{d}/x.parquet", "--force-format"],
    ["kernel", "gemm", "--m", "64", "--n", "64", "--k", "64", "--parquet", "{d}/k.parquet", "--perfetto",
     "{d}/k.nodes.parquet", "--force-format"],
    ["sweep", "kernel", "gemm", "--m", "64", "--n", "64", "--k", "64", "--vary", "sm_count=66,132", "--out",
     "{d}/s.parquet", "--plot", "{d}/s.parquet", "--force-format"],
])
def test_two_outputs_on_one_path(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, err = run(capsys, *[a.format(d=tmp_path) for a in argv])
    assert code == 2 and "same file" in err, err
    assert list(tmp_path.iterdir()) == []


def test_an_output_never_overwrites_an_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text("{}")
    code, err = run(capsys, "predict", str(cfg), "--parquet", str(cfg), "--force-format")
    assert code == 2 and "same file" in err and "model config" in err
    assert cfg.read_text() == "{}"


def test_only_regular_files_are_replaced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "pipe.parquet"
    os.mkfifo(fifo)
    code, err = run(capsys, "predict", "llama-tiny", "--parquet", str(fifo))
    assert code == 2 and "not a regular file" in err
    assert fifo.is_fifo()
    code, err = run(capsys, "predict", "llama-tiny", "--parquet", os.devnull, "--force-format")
    assert code == 2 and "not a regular file" in err and Path(os.devnull).is_char_device()


def test_missing_directory_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(capsys, "predict", "llama-tiny", "--perfetto", str(tmp_path / "nope" / "t.pftrace"))
    assert code == 2 and "does not exist" in err and "nope" in err
