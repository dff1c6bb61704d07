"""The command line answers --help, argument errors and `hw` without importing torch (torch takes seconds)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
from torchsim.cli import main
try:
    code = main({argv!r})
except SystemExit as exc:
    code = exc.code
print("torch imported" if "torch" in sys.modules else "no torch", code)
"""


@pytest.mark.parametrize(("argv", "code"), [
    (["--help"], 0),
    (["predict", "--help"], 0),
    (["kernel", "gemm", "--help"], 0),
    (["routing", "--help"], 0),
    (["microbench", "--help"], 0),
    (["serve", "--help"], 0),
    (["serve", "--rate", "0"], 2),
    (["serve", "--offline", "--input-len", "uniform:9:3"], 2),
    (["predict", "--batch", "lots"], 2),
    (["kernel", "gemm", "--m", "x"], 2),
    (["hw", "list"], 0),
    (["hw", "show", "h100-sxm"], 0),
    (["hw", "show", "no-such-gpu"], 2),
])
def test_no_torch_before_it_is_needed(argv: list[str], code: int) -> None:
    out = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.split()[-3:] == ["no", "torch", str(code)], out.stdout[-500:] + out.stderr[-2000:]


def test_the_probe_sees_torch_when_a_model_is_captured() -> None:
    """The check above can fail: a command that needs torch shows up as 'torch imported'."""
    code = "import sys; import torchsim.models.registry; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "True", out.stderr[-2000:]


def test_a_checkout_folder_named_torchsim_does_not_shadow_the_package(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Python run from the folder above a clone named torchsim/ (no __init__.py at the clone's top) imports the
    package, not the clone as an empty namespace package (scripts/dev installs in setuptools' compat mode)."""
    (tmp_path / "torchsim").mkdir()
    code = "import torchsim; print(torchsim.__file__); print(callable(torchsim.predict))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "True"


RUN = "import sys; sys.argv = ['torchsim', *{argv!r}]; from torchsim.cli import run; run()"


@pytest.mark.parametrize(("argv", "code"), [
    (["hw", "show", "h100-sxm", "--json"], 0),
    (["kernel", "gemm", "--m", "256", "--n", "256", "--k", "256", "--json"], 0),
    (["hw", "show", "no-such-gpu"], 2),
])
def test_the_command_ends_without_teardown_and_loses_no_output(argv: list[str], code: int) -> None:
    """`torchsim` ends with os._exit once the command is done (the interpreter's teardown takes ~1 s after a
    capture): the status is the command's and everything it printed arrives whole, a JSON object included."""
    import json

    out = subprocess.run([sys.executable, "-c", RUN.format(argv=argv)], capture_output=True, text=True, timeout=300)
    assert out.returncode == code, out.stderr[-2000:]
    if code == 0:
        assert isinstance(json.loads(out.stdout), dict)
    else:
        assert "no-such-gpu" in out.stderr


def test_teardown_is_kept_where_it_does_something(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's exit hook disconnects a driver from its cluster: with ray loaded the normal exit runs."""
    import types

    from torchsim import cli

    assert cli._skip_teardown() is True
    monkeypatch.setitem(sys.modules, "ray", types.ModuleType("ray"))
    assert cli._skip_teardown() is False


LIGHT = """
import sys
from torchsim.cli import main
try:
    code = main({argv!r})
except SystemExit as exc:
    code = exc.code
heavy = sorted(m for m in ("pyarrow", "torchsim.exports.parquet", "torchsim.exports.perfetto",
                           "torchsim.sim.engine", "torchsim.lowering.templates") if m in sys.modules)
print(",".join(heavy) or "light", code)
"""


@pytest.mark.parametrize(("argv", "code"), [
    (["--help"], 0),
    (["predict", "--batch", "lots"], 2),
    (["predict", "--help"], 0),
    (["no-such-command"], 2),
])
def test_help_and_argument_errors_build_only_the_command_named(argv: list[str], code: int) -> None:
    """`torchsim --help` lists the commands from their help lines alone, and `predict`'s argument errors import
    neither pyarrow nor the exporters nor the engine (with the other commands' parsers they took ~0.5 s of every
    such answer)."""
    out = subprocess.run([sys.executable, "-c", LIGHT.format(argv=argv)], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.split()[-2:] == ["light", str(code)], out.stdout[-500:] + out.stderr[-2000:]


def test_the_light_parser_lists_every_command_with_its_own_help_line() -> None:
    """The commands listed without their options carry the help line each command's parser has in full."""
    import argparse

    from torchsim.cli import COMMANDS, build_parser, command_of

    def lines(parser: argparse.ArgumentParser) -> dict[str, str]:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return {c.dest: str(c.help) for c in sub._choices_actions}

    full = lines(build_parser())
    assert list(full) == list(COMMANDS)
    assert lines(build_parser(None)) == full
    assert lines(build_parser("predict")) == full
    assert command_of(["--debug", "predict", "--batch", "2"]) == "predict"
    assert command_of(["--deb", "hw", "list"]) == "hw"
    assert command_of(["--help"]) is None and command_of(["nope"]) is None


def test_an_abbreviated_root_option_before_the_command_gets_its_parser(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse takes `--deb` for --debug; the command after it is parsed with its own options either way."""
    from torchsim.cli import main

    assert main(["--deb", "hw", "show", "h100-sxm", "--json"]) == 0
    assert '"name"' in capsys.readouterr().out


def test_a_command_runs_older_collections_less_often_and_restores_the_collector(monkeypatch: pytest.MonkeyPatch
                                                                                ) -> None:
    """While a command runs, the collector's middle-generation passes are MIDDLE_COLLECTION_EVERY young passes
    apart and its full passes FULL_COLLECTION_EVERY middle ones apart (torch's ~1M long-lived objects made each pass
    cost up to 0.25 s and free nothing); the young generation keeps Python's threshold, and an in-process caller gets
    its own thresholds back, after an error too."""
    import gc

    from torchsim import cli
    from torchsim.cli import hw as hw_cli

    seen: list[tuple[int, int, int]] = []

    def record(args: object) -> int:
        seen.append(gc.get_threshold())
        if getattr(args, "hw_command", "") == "show":
            raise ValueError("a command that fails")
        return 0

    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        monkeypatch.setattr(hw_cli, "_list", record)
        monkeypatch.setattr(hw_cli, "_show", record)
        assert cli.main(["hw", "list"]) == 0
        assert gc.get_threshold() == (700, 10, 10)
        assert cli.main(["hw", "show", "h100-sxm"]) == 2
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.set_threshold(*before)
    assert seen == [(700, cli.MIDDLE_COLLECTION_EVERY, cli.FULL_COLLECTION_EVERY)] * 2
