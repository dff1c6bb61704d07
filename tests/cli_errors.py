"""The assertion the issue 14 regression corpora share: a bad command line is one stderr line, exit 2."""

from __future__ import annotations

import pytest

from torchsim import cli


def one_line(capsys: pytest.CaptureFixture[str], argv: list[str], *, usage: bool = False) -> str:
    """Run the CLI in-process; assert exit 2, nothing on stdout, no traceback and a single stderr line, and return
    it. `usage`: a parser with its own one-line usage (serve) may print that line above the error."""
    assert cli.main(argv) == 2, argv
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and "Traceback" not in err, (argv, err)
    if usage:
        assert 1 <= len(lines) <= 2 and (len(lines) == 1 or lines[0].startswith("usage: ")), (argv, err)
    else:
        assert len(lines) == 1, (argv, err)
    return lines[-1]
