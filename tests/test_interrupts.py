"""Ctrl-C, SIGTERM and a closed stdout: one line, the right exit status, outputs unchanged, no worker left."""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from torchsim import cli
from torchsim.exports.atomic import atomic_output
from torchsim.prediction.workers import worker_pool


def _run_with(monkeypatch: pytest.MonkeyPatch, func: Any, *flags: str) -> int:
    """cli.main on `hw list` with the command's function replaced by `func`."""
    from torchsim.cli import hw

    monkeypatch.setattr(hw, "_list", func)
    return cli.main([*flags, "hw", "list"])


@pytest.mark.parametrize(("how", "code", "word"), [("sigint", 130, "interrupted"), ("sigterm", 143, "terminated")])
def test_a_signal_while_writing_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str], how: str, code: int,
                                                     word: str) -> None:
    out = tmp_path / "existing.parquet"
    out.write_bytes(b"the good file")

    def func(args: argparse.Namespace) -> int:
        with atomic_output(out) as f:
            f.write(b"half of a new file")
            os.kill(os.getpid(), signal.SIGINT if how == "sigint" else signal.SIGTERM)
            time.sleep(5)  # the signal arrives first
        return 0

    assert _run_with(monkeypatch, func) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and word in err[0]
    assert out.read_bytes() == b"the good file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing.parquet"]  # no temporary file left


def test_sigterm_handler_is_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    before = signal.getsignal(signal.SIGTERM)
    assert _run_with(monkeypatch, lambda args: 0) == 0
    assert signal.getsignal(signal.SIGTERM) is before


def test_closed_stdout_ends_quietly(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def func(args: argparse.Namespace) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    assert _run_with(monkeypatch, func) == 0
    assert capsys.readouterr().err == ""


def test_internal_error_is_one_line_and_debug_shows_it(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    def func(args: argparse.Namespace) -> int:
        raise ZeroDivisionError("a bug")

    assert _run_with(monkeypatch, func) == 70
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "internal error (ZeroDivisionError: a bug)" in err[0] and "--debug" in err[0]
    with pytest.raises(ZeroDivisionError):
        _run_with(monkeypatch, func, "--debug")


def _sleep(s: float) -> float:
    time.sleep(s)
    return s


def test_workers_are_stopped_at_once_when_the_block_fails() -> None:
    with pytest.raises(KeyboardInterrupt), worker_pool(2) as pool:
        futures = [pool.submit(_sleep, 60.0) for _ in range(4)]
        deadline = time.perf_counter() + 30.0
        while not any(f.running() for f in futures) and time.perf_counter() < deadline:
            time.sleep(0.05)  # until a worker runs its first job (slow to start on a loaded machine)
        procs = list(pool._processes.values())
        assert procs and any(p.is_alive() for p in procs)
        t0 = time.perf_counter()
        raise KeyboardInterrupt
    deadline = time.perf_counter() + 5.0
    while any(p.is_alive() for p in procs) and time.perf_counter() < deadline:
        time.sleep(0.05)  # reaped by the pool's manager thread
    assert not any(p.is_alive() for p in procs)
    assert time.perf_counter() - t0 < 15.0  # far below the 60 s the jobs would take


@pytest.mark.parametrize(("exc", "code"), [(KeyboardInterrupt, 130), (cli.Terminated, 143)])
def test_a_signal_raised_inside_a_finalizer_is_not_lost(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str], exc: type, code: int
                                                       ) -> None:
    """A signal handler's exception raised while Python runs a __del__ or weakref callback is only printed as
    "Exception ignored"; a SIGINT landing in a worker pool's WeakValueDictionary callback let `predict` finish and
    write its outputs. The command must still stop with the signal's status."""
    class Finalized:
        def __del__(self) -> None:
            raise exc()

    def func(args: argparse.Namespace) -> int:
        Finalized()  # dropped at once: the exception goes to sys.unraisablehook, not to this frame
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            time.sleep(0.01)
        return 0

    assert _run_with(monkeypatch, func) == code
    assert "Exception ignored" not in capsys.readouterr().err


def test_ctrl_c_during_torch_export_is_held_until_it_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    """A KeyboardInterrupt inside torch.export can abort the process from its C++ dispatcher (SIGABRT seen in
    CI); capture holds the signal until the export returns, then the command's handler raises it."""
    import os
    import signal

    import torch

    from torchsim.lowering import capture

    delivered: list[int] = []

    def handler(signum: int, frame: object) -> None:
        delivered.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    export = torch.export.export

    def interrupted_export(*args: object, **kwargs: object) -> object:
        os.kill(os.getpid(), signal.SIGINT)
        result = export(*args, **kwargs)  # type: ignore[arg-type]
        assert delivered == [], "the signal reached the handler inside torch.export"
        return result

    monkeypatch.setattr(torch.export, "export", interrupted_export)
    try:
        with pytest.raises(KeyboardInterrupt):
            capture.capture_module(torch.nn.Linear(8, 4, device="meta"), (torch.empty(2, 8, device="meta"),))
        assert delivered == [signal.SIGINT]
        assert signal.getsignal(signal.SIGINT) is handler  # the command's handler is back in place
    finally:
        signal.signal(signal.SIGINT, previous)
