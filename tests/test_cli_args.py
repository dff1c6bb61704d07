"""Numbers and names on the command line are checked before any work: one line naming the option, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchsim import cli


@pytest.mark.parametrize(("argv", "words"), [
    (["predict", "--top", "-1"], ["--top", ">= 0"]),
    (["predict", "--workers", "-2"], ["--workers", "between 1 and 256"]),
    (["predict", "--batch", "5000000"], ["--batch", "65536"]),
    (["predict", "--decode", "1000000000"], ["--decode", "1048576"]),
    (["predict", "--detail", "-1"], ["--detail"]),
    (["compare", "--top", "-3"], ["--top"]),
    (["kernel", "gemm", "--m", "64", "--n", "64", "--k", "64", "--stages", "0"], ["--stages", "between 1 and 32"]),
    (["kernel", "gemm", "--m", "64", "--n", "64", "--k", "64", "--tiles-per-cta", "0"], ["--tiles-per-cta"]),
])
def test_argparse_ranges(argv: list[str], words: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words), err


@pytest.mark.parametrize(("argv", "words"), [
    (["compare", "--hw", "h100-sxm,,b200"], ["empty item"]),
    (["kernel", "gemm", "--m", "2147483000", "--n", "64", "--k", "64"], ["--m", "limit"]),
    (["kernel", "gemm", "--m", "16000000", "--n", "4096", "--k", "4096"], ["node executions", "--max-events"]),
    (["kernel", "rmsnorm", "--rows", "1", "--hidden", "100000000000"], ["--hidden", "limit"]),
    (["kernel", "elementwise", "--numel", "1024", "--op", "frobnicate"], ["frobnicate", "known: add"]),
])
def test_semantic_checks(argv: list[str], words: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and all(w in err for w in words), err


def test_checkpoint_that_is_not_a_directory_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-such-checkpoint"
    assert cli.main(["routing", "record", "--checkpoint", str(missing), "-o", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert "no such directory" in err and "no-such-checkpoint" in err and "repo" not in err.lower()
    missing.mkdir()
    assert cli.main(["routing", "record", "--checkpoint", str(missing), "-o", str(tmp_path / "r.json")]) == 2
    assert "no config.json" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()
