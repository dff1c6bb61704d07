"""Atomic output: a failed or interrupted write never leaves a partial file or replaces a good one."""

from __future__ import annotations

import dataclasses
import errno
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from torchsim.exports import atomic
from torchsim.exports.atomic import OutputError, atomic_output, write_bytes_atomic
from torchsim.exports.parquet import write_kernels
from torchsim.exports.perfetto import write_trace
from torchsim.exports.records import PredictionRecords
from torchsim.exports.synthetic import SyntheticProfile, synthetic_prediction

GOOD = b"a good file that must survive\n"


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".partial"))


@pytest.fixture
def good(tmp_path: Path) -> Path:
    path = tmp_path / "out.bin"
    path.write_bytes(GOOD)
    return path


def test_replaces_whole_file_and_leaves_no_temporary(good: Path) -> None:
    assert write_bytes_atomic(good, b"new contents") == 12
    assert good.read_bytes() == b"new contents"
    assert leftovers(good.parent) == []


def test_exception_mid_write_keeps_old_file(good: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"), atomic_output(good) as f:
        f.write(b"half of a new file")
        raise RuntimeError("boom")
    assert good.read_bytes() == GOOD
    assert leftovers(good.parent) == []


def test_interrupt_mid_write_keeps_old_file(good: Path) -> None:
    with pytest.raises(KeyboardInterrupt), atomic_output(good) as f:
        f.write(b"partial")
        raise KeyboardInterrupt
    assert good.read_bytes() == GOOD
    assert leftovers(good.parent) == []


def test_disk_full_on_fsync_gives_clear_error_and_keeps_old_file(good: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises(OutputError) as info:
        write_bytes_atomic(good, b"x" * 1000)
    assert str(good) in str(info.value) and "No space left on device" in str(info.value)
    assert "left unchanged" in str(info.value)
    assert info.value.errno == errno.ENOSPC
    assert good.read_bytes() == GOOD
    assert leftovers(good.parent) == []


def test_new_file_not_created_when_write_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic.os, "fsync", full)
    target = tmp_path / "new.bin"
    with pytest.raises(OutputError, match="no file was written"):
        write_bytes_atomic(target, b"data")
    assert not target.exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize("make_path, reason", [
    (lambda d: d / "missing" / "out.parquet", "does not exist"),
    (lambda d: d / "afile" / "out.parquet", "is not a directory"),
    (lambda d: d, "is a directory"),
])
def test_unusable_paths_name_the_path(tmp_path: Path, make_path, reason: str) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "afile").write_text("x")
    path = make_path(tmp_path)
    with pytest.raises(OutputError, match=reason) as info:
        write_bytes_atomic(path, b"data")
    assert str(path) in str(info.value)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc (a directory nobody can write)")
def test_unwritable_directory_gives_clear_error() -> None:
    with pytest.raises(OutputError, match="cannot write /proc/torchsim-test.parquet"):
        write_bytes_atomic("/proc/torchsim-test.parquet", b"data")


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_directory_gives_clear_error(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(OutputError, match="not writable"):
            write_bytes_atomic(ro / "out.bin", b"data")
    finally:
        ro.chmod(0o755)


def test_existing_permissions_are_kept(good: Path) -> None:
    good.chmod(0o640)
    write_bytes_atomic(good, b"new")
    assert good.stat().st_mode & 0o777 == 0o640


def test_real_write_failure_past_file_size_limit_keeps_old_parquet(tmp_path: Path) -> None:
    """A child process whose file-size limit is hit mid-write (EFBIG, a real failing write(2))."""
    target = tmp_path / "kernels.parquet"
    write_kernels(target, [synthetic_prediction(layers=1, decode_steps=0)], [SyntheticProfile("h100-sxm")])
    before = target.read_bytes()
    script = textwrap.dedent(f"""
        import resource, signal, sys
        from torchsim.exports.atomic import OutputError
        from torchsim.exports.parquet import write_kernels
        from torchsim.exports.synthetic import SyntheticProfile, synthetic_prediction
        pred = synthetic_prediction(layers=32, decode_steps=20)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
        try:
            write_kernels({str(target)!r}, [pred], [SyntheticProfile("h100-sxm")])
        except OutputError as exc:
            print("ERROR:", exc)
            sys.exit(3)
        sys.exit(0)
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 3, out.stdout + out.stderr
    assert str(target) in out.stdout and "too large" in out.stdout
    assert target.read_bytes() == before
    assert leftovers(tmp_path) == []


def test_trace_error_mid_write_keeps_old_trace(good: Path) -> None:
    """A trace that fails half-way (two overlapping kernels on one stream) leaves the old file in place."""
    pred = synthetic_prediction(layers=32, decode_steps=25)  # > 8192 packets: batches reach the file first
    kernels = list(pred.kernels)
    kernels[-1] = dataclasses.replace(kernels[-1], start_us=kernels[-2].start_us)
    with pytest.raises(ValueError, match="before kernel"):
        write_trace(good, [PredictionRecords(pred.run, kernels)])
    assert good.read_bytes() == GOOD
    assert leftovers(good.parent) == []


def test_really_full_disk_keeps_old_file(tmp_path: Path) -> None:
    """A 64 kB tmpfs fills up mid-write. Needs mount rights (root in a container); skips elsewhere."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], check=False,
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({mounted.stderr.strip() or 'mount failed'})")
    try:
        target = mnt / "kernels.parquet"
        write_kernels(target, [synthetic_prediction(layers=1, decode_steps=0)], [SyntheticProfile("h100-sxm")])
        before = target.read_bytes()
        with pytest.raises(OutputError, match="No space left on device; the existing file was left unchanged"):
            write_kernels(target, [synthetic_prediction(layers=32, decode_steps=30)], [SyntheticProfile("h100-sxm")])
        assert target.read_bytes() == before
        assert leftovers(mnt) == []
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
