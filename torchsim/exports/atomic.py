"""Atomic output files: every export (Parquet, Perfetto, PNG) is written through `atomic_output`.

Data go to a temporary file in the destination's directory, are flushed and fsynced, and only then renamed
over the destination. A failed, interrupted or out-of-space write leaves no partial file and never replaces
a good file with a bad one.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


class OutputError(OSError):
    """An output file could not be written; the message names the path and the reason."""


WRITTEN: list[str] = []  # outputs this process has replaced, in order (the CLI names them if interrupted after)


def resolved(path: str | os.PathLike[str]) -> Path:
    """Where an output path writes: through a symbolic link (also a dangling one) to its target, as a shell's `>`
    does, so that the link stays a link and its target gets the new content."""
    p = Path(path)
    try:
        return Path(os.path.realpath(p)) if p.is_symlink() else p
    except OSError:  # a name too long to look up: check_destination names it
        return p


def check_destination(path: Path) -> Path:
    """The directory that will hold `path`, after checking that a file can be created there (and that an
    existing `path` is a regular file: a device, FIFO or socket is never replaced by one)."""
    if str(path) == "" or path.name in ("", ".", ".."):
        raise OutputError(f"output path {str(path)!r} names no file")
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.exists():
        raise OutputError(f"cannot write {path}: directory {directory} does not exist")
    if not directory.is_dir():
        raise OutputError(f"cannot write {path}: {directory} is not a directory")
    limit = _name_max(directory) - _TEMP_EXTRA
    if len(os.fsencode(path.name)) > limit:
        raise OutputError(f"cannot write {path}: the file name is {len(os.fsencode(path.name))} bytes, above the "
                          f"{limit} this filesystem allows torchsim (its limit less the temporary file's prefix and "
                          f"suffix); give a shorter name")
    if path.is_dir():
        raise OutputError(f"cannot write {path}: it is a directory; give a file name")
    if path.exists() and not path.is_file():
        raise OutputError(f"cannot write {path}: it exists and is not a regular file (a device, FIFO or socket); "
                          f"torchsim replaces only regular files")
    if path.is_file() and not path.stat().st_mode & 0o222:  # checked by mode: root passes os.access on any file
        raise OutputError(f"cannot write {path}: the existing file is read-only (mode "
                          f"{stat.S_IMODE(path.stat().st_mode):o}); make it writable or give another name")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {path}: directory {directory} is not writable")
    return directory


_TEMP_EXTRA = len(".") + len(".") + 8 + len(".partial")  # mkstemp(prefix=f".{name}.", suffix=".partial"): 8 random


def _name_max(directory: Path) -> int:
    try:
        return int(os.pathconf(directory, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):  # no pathconf (Windows) or no such limit reported
        return 255


def _final_mode(path: Path) -> int:
    """Keep an existing file's permissions; a new file gets 0o666 less the umask, as open() would."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _fsync_directory(directory: Path) -> None:
    """Make the rename durable; some filesystems refuse to open directories, which is harmless."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """Yield a binary file; on a clean exit it replaces `path` whole, on any error `path` is untouched.

    Example:
        >>> import tempfile, pathlib
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "a.bin"
        >>> with atomic_output(out) as f:
        ...     _ = f.write(b"hello")
        >>> out.read_bytes()
        b'hello'
    """
    target = resolved(path)
    directory = check_destination(target)
    mode = _final_mode(target)
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=directory)
    except OSError as exc:
        err = OutputError(f"cannot write {target}: cannot create a temporary file in {directory}: "
                          f"{exc.strerror or exc}")
        err.errno = exc.errno
        raise err from exc
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
        WRITTEN.append(str(path))
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OutputError):
            raise
        if isinstance(exc, OSError):
            kept = "the existing file was left unchanged" if target.exists() else "no file was written"
            err = OutputError(f"cannot write {target}: {exc.strerror or exc}; {kept}")
            err.errno = exc.errno
            raise err from exc
        raise
    _fsync_directory(directory)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> int:
    """Write `data` to `path` atomically; returns the number of bytes written."""
    with atomic_output(path) as f:
        f.write(data)
    return len(data)
