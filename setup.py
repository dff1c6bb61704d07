"""Build hook: the engine's hot modules compiled by Cython where Cython and a C compiler are available.

torchsim.sim.resources, .state and .loop are plain Python annotated for Cython's pure-Python mode (the .pxd files
beside them and `cython.locals` in loop.py). Compiled, they run the same code, the same arithmetic, 1.4-1.9x
faster (docs/architecture.md, "Compiled engine"); where compiling fails the install goes on and the same modules
run as Python. TORCHSIM_PURE_PYTHON=1 skips compiling. Each build records the SHA-256 of the sources it compiled
(.py and .pxd; torchsim/sim/_native_build.json): torchsim.sim.native runs the Python source instead of a compiled
module whose source changed since.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

COMPILED = ("torchsim/sim/resources.py", "torchsim/sim/state.py", "torchsim/sim/loop.py")
RECORD = "torchsim/sim/_native_build.json"
HERE = Path(__file__).resolve().parent


def _source_hash(path: str) -> str:
    """SHA-256 of a compiled module's .py and its .pxd (torchsim.sim.native.source_hash checks the same)."""
    h = hashlib.sha256((HERE / path).read_bytes())
    pxd = HERE / (path[:-3] + ".pxd")
    if pxd.is_file():
        h.update(pxd.read_bytes())
    return h.hexdigest()


def _extensions() -> list:
    if os.environ.get("TORCHSIM_PURE_PYTHON"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("torchsim: Cython is not installed; the engine runs as Python")
        return []
    try:
        return cythonize(list(COMPILED), language_level=3, quiet=True)
    except Exception as e:  # a Cython error: build nothing, run the Python source
        print(f"torchsim: Cython could not translate the engine ({e}); it runs as Python")
        return []


class OptionalBuildExt(build_ext):
    """build_ext that never fails the install: a module that does not compile stays Python. Only a build of every
    module records the sources' hashes (in the build folder, and in the source tree for an in-place build): after
    a failed one, compiled modules left from an earlier build no longer match the record, and the source runs."""

    def run(self) -> None:
        self.failed: list[str] = []
        if not self.extensions:
            return
        try:
            super().run()
        except Exception as e:
            print(f"torchsim: compiling the engine failed ({e}); it runs as Python")
            return
        if self.failed:
            return
        record = json.dumps({p.rsplit("/", 1)[1][:-3]: _source_hash(p) for p in COMPILED}, indent=1,
                            sort_keys=True) + "\n"
        targets = {HERE / RECORD} if self.inplace else set()
        if self.build_lib:
            targets.add(Path(self.build_lib) / RECORD)
        for target in targets:
            if target.parent.is_dir():
                target.write_text(record)

    def build_extension(self, ext) -> None:  # type: ignore[no-untyped-def]
        try:
            super().build_extension(ext)
        except Exception as e:
            self.failed.append(ext.name)
            print(f"torchsim: {ext.name} did not compile ({e}); it runs as Python")


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
