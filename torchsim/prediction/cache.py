"""On-disk cache of simulated kernels, so a second `torchsim predict` in a new process skips the engine.

Used by torchsim.prediction.kernel_sim beside its in-process memo. An entry is keyed by the torchsim version, a
fingerprint of the code that decides a kernel's time (templates, engine, graph IR, profiles), the call, the
profile's numbers and the simulation budget; the template configuration is a function of those, so a change
to any of them misses. Entries are small JSON files written atomically; `--no-cache` turns the cache off.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from dataclasses import asdict, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

import torchsim

_PKG = Path(torchsim.__file__).parent
# Code whose change can change a simulated time (relative to the package).
_FINGERPRINTED = ("sim", "graph", "hwmodels", "lowering/templates", "lowering/fallback.py", "lowering/kernel_call.py",
                  "prediction/kernel_sim.py", "prediction/repeats.py", "prediction/reuse.py")
CACHE_VERSION = 2  # 2: kernels extrapolated by torchsim.prediction.repeats (method, extrapolation fields)


def default_root() -> Path:
    """$TORCHSIM_CACHE_DIR, else $XDG_CACHE_HOME/torchsim, else ~/.cache/torchsim."""
    env = os.environ.get("TORCHSIM_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "torchsim"


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Hash of the source files that decide kernel times (computed once per process)."""
    h = hashlib.sha256()
    for rel in _FINGERPRINTED:
        p = _PKG / rel
        files = sorted(p.rglob("*.py")) if p.is_dir() else [p]
        for f in files:
            h.update(str(f.relative_to(_PKG)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


class CacheWarning(UserWarning):
    """A cache entry was damaged or edited (discarded and recomputed), or the cache cannot be written."""


_UNWRITABLE: set[str] = set()  # cache folders already reported as unwritable (once per process each)


def warn_unwritable(root: Path, exc: OSError) -> None:
    """Say once that results are not being cached (TORCHSIM_CACHE_DIR a file, /dev/null, read-only, full): the
    prediction is still right, but every later run recomputes what a user expects to be cached."""
    where = str(root.parent)
    if where in _UNWRITABLE:
        return
    _UNWRITABLE.add(where)
    reason = exc.strerror or type(exc).__name__
    warnings.warn(f"torchsim cache: cannot write to {where} ({reason}); results are not cached (point "
                  f"TORCHSIM_CACHE_DIR at a writable directory, or pass --no-cache)", CacheWarning, stacklevel=3)


def _checksum(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _verified(doc: Any) -> Any:
    """The entry's data after its checksum matches (an entry edited by hand, or cut short, does not)."""
    if not isinstance(doc, dict) or set(doc) != {"checksum", "data"}:
        raise ValueError("not a torchsim cache entry (no checksum)")
    if doc["checksum"] != _checksum(doc["data"]):
        raise ValueError("checksum does not match the content")
    return doc["data"]


class DiskCache:
    """Kernel results under `root/kernels/<key>.json`.

    >>> import tempfile
    >>> c = DiskCache(Path(tempfile.mkdtemp()))
    >>> c.get("nothing") is None
    True
    """

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or default_root()) / "kernels"
        self.hits = 0
        self.writes = 0
        self.discarded = 0

    def key(self, call_key: Any, hw_name: str, hw_hash: str, max_events: int) -> str:
        blob = json.dumps([torchsim.__version__, CACHE_VERSION, code_fingerprint(), repr(call_key), hw_name, hw_hash,
                           max_events])
        return hashlib.sha256(blob.encode()).hexdigest()[:32]

    def get(self, key: str, cls: type | None = None) -> Any:
        """The cached object (built with `cls(**fields)`), or None on a miss.

        An entry is checked before use: its content checksum, its fields (those of `cls`), and the values
        (`cls.check_entry` where defined, e.g. no negative or NaN time). A damaged or edited entry is reported
        once (a warning naming the file and what was wrong), deleted, and counts as a miss (recomputed).
        """
        path = self.root / f"{key}.json"
        try:
            text = path.read_text()
        except OSError:
            return None
        try:
            doc = json.loads(text)
            data = _verified(doc)
            if cls is None:
                return data
            names = {f.name for f in fields(cls)}
            if set(data) != names:
                raise ValueError(f"fields {sorted(set(data) ^ names)} differ from {cls.__name__}'s")
            obj = cls(**data)
            check = getattr(obj, "check_entry", None)
            if check is not None:
                check()
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            self._discard(path, str(exc))
            return None
        self.hits += 1
        return obj

    def _discard(self, path: Path, why: str) -> None:
        warnings.warn(f"torchsim cache: discarded damaged entry {path} ({why}); it will be recomputed",
                      CacheWarning, stacklevel=3)
        self.discarded += 1
        try:
            path.unlink()
        except OSError:
            pass

    def put(self, key: str, obj: Any) -> None:
        """Write atomically (temporary file + rename); a full or read-only disk only loses the entry."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                data = json.loads(json.dumps(asdict(obj), default=str))  # what a reader will see
                json.dump({"checksum": _checksum(data), "data": data}, f)
            os.replace(tmp, self.root / f"{key}.json")
            self.writes += 1
        except OSError as exc:
            warn_unwritable(self.root, exc)
            try:
                os.unlink(tmp)
            except (OSError, UnboundLocalError):
                pass
