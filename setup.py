"""Build hook: the engine's hot modules compiled by Cython where Cython and a C compiler are available.

torchsim.sim.resources, .state and .loop are plain Python annotated for Cython's pure-Python mode (the .pxd files
beside them and `cython.locals` in loop.py). Compiled, they run the same code, the same arithmetic, 1.4-1.9x
faster (docs/architecture.md, "Compiled engine"); where compiling fails the install goes on and the same modules
run as Python. TORCHSIM_PURE_PYTHON=1 skips compiling. Each build records the SHA-256 of the sources it compiled
(.py and .pxd; torchsim/sim/_native_build.json): torchsim.sim.native runs the Python source instead of a compiled
module whose source changed since.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
SIM = HERE / "torchsim" / "sim"


def _sources() -> Any:
    """torchsim/sim/native_sources.py, loaded by path (importing torchsim here would need its dependencies)."""
    spec = importlib.util.spec_from_file_location("torchsim_native_sources", SIM / "native_sources.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SOURCES = _sources()
COMPILED = tuple(f"torchsim/sim/{n}.py" for n in SOURCES.MODULES)


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
        names = SOURCES.MODULES
        record = json.dumps({n: SOURCES.source_hash(SIM, n) for n in names},
                            indent=1, sort_keys=True) + "\n"
        rel = Path("torchsim", "sim", SOURCES.RECORD)
        targets = {HERE / rel} if self.inplace else set()
        if self.build_lib:
            targets.add(Path(self.build_lib) / rel)
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
