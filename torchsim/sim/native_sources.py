"""What the compiled engine is built from: the modules setup.py compiles and the hash of each one's sources.

Imports nothing from torchsim, so setup.py loads this file by path at build time and torchsim.sim.native at run
time: the record a build writes and the check an import makes use the one definition.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

MODULES = ("resources", "state", "loop")  # in import order: each needs only the ones before it
RECORD = "_native_build.json"  # beside them: module -> source_hash at the last full build


def source_hash(folder: Path, name: str) -> str:
    """SHA-256 of what module `name` in `folder` compiles from: its .py and, where there is one, its .pxd."""
    h = hashlib.sha256((folder / f"{name}.py").read_bytes())
    pxd = folder / f"{name}.pxd"
    if pxd.is_file():
        h.update(pxd.read_bytes())
    return h.hexdigest()
