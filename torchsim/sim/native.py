"""Which build of the engine's hot modules runs: compiled (Cython) or the Python source.

torchsim.sim.resources, .state and .loop may be compiled at install time (setup.py). A compiled module is used
only when its source (.py and .pxd) is the one it was compiled from (the SHA-256 recorded by the build in
`_native_build.json`): after an edit to any of them, or with TORCHSIM_PURE_PYTHON=1, all three run from their
Python source (the compiled loop needs the compiled state classes), with a warning for an edit. Results are the
same either way; the compiled build is faster. `check()` runs when torchsim.sim imports this module, first,
before anything imports the three.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from pathlib import Path

from torchsim.sim.native_sources import MODULES
from torchsim.sim.native_sources import RECORD as _RECORD_NAME
from torchsim.sim.native_sources import source_hash as _hash

HERE = Path(__file__).resolve().parent
RECORD = HERE / _RECORD_NAME

ENGINE = "python"  # "compiled" | "python", set by check()
WHY = "not checked"


def _compiled_path(name: str) -> Path | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        p = HERE / f"{name}{suffix}"
        if p.is_file():
            return p
    return None


def source_hash(name: str) -> str:
    """SHA-256 of what module `name` here compiles from (torchsim.sim.native_sources: setup.py records the same)."""
    return _hash(HERE, name)


def _stale() -> list[str] | None:
    """The compiled modules whose sources differ from the ones they were compiled from; None without a record."""
    try:
        recorded = json.loads(RECORD.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(recorded, dict):
        return None
    return [n for n in MODULES if recorded.get(n) != source_hash(n)]


def _load_source(name: str) -> None:
    full = f"{__package__}.{name}"
    spec = importlib.util.spec_from_file_location(full, HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[full] = mod
    spec.loader.exec_module(mod)


def check() -> str:
    """Decide, once per process, which build runs; returns "compiled" or "python" (also in `ENGINE`, the reason in
    `WHY`)."""
    global ENGINE, WHY
    if any(f"{__package__}.{n}" in sys.modules for n in MODULES):
        return ENGINE  # decided already
    found = [n for n in MODULES if _compiled_path(n) is not None]
    if not found:
        ENGINE, WHY = "python", "not compiled at install (no Cython or no C compiler)"
        return ENGINE
    stale: list[str] | None = []
    if os.environ.get("TORCHSIM_PURE_PYTHON"):
        WHY = "TORCHSIM_PURE_PYTHON is set"
    elif len(found) < len(MODULES):
        WHY = f"only {', '.join(found)} compiled"
    elif (stale := _stale()) is None or stale:
        WHY = ("no record of the sources they were built from" if stale is None else
               f"the source of {', '.join(stale)} (.py or .pxd) changed since the build")
        warnings.warn(f"torchsim: the compiled engine is stale ({WHY}); running its Python source. Rebuild with "
                      f"`pip install -e .` (or `python setup.py build_ext --inplace`)", stacklevel=2)
    else:
        ENGINE, WHY = "compiled", "Cython build of " + ", ".join(f"{n}.py" for n in MODULES)
        return ENGINE
    for n in MODULES:
        _load_source(n)
    ENGINE = "python"
    return ENGINE


check()
