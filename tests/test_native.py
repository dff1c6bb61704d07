"""The compiled engine build (torchsim.sim.native, setup.py): the Python source gives the same results as the
compiled modules, a compiled module whose source changed is not used, and TORCHSIM_PURE_PYTHON runs the source."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchsim.sim import native

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **env})


def _hashes() -> dict[str, str]:
    return {n: native.source_hash(n) for n in native.MODULES}


def test_this_process_runs_what_check_decided() -> None:
    import torchsim.sim.loop as loop

    compiled = not loop.__file__.endswith(".py")
    assert native.ENGINE == ("compiled" if compiled else "python"), native.WHY
    if compiled:  # every compiled module is the one built from today's source
        assert native._stale() == [] and all(native._compiled_path(n) for n in native.MODULES)


def test_stale_names_the_modules_whose_source_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = tmp_path / "record.json"
    monkeypatch.setattr(native, "RECORD", record)
    assert native._stale() is None  # no record: nothing is known to match
    record.write_text(json.dumps(_hashes()))
    assert native._stale() == []
    record.write_text(json.dumps({**_hashes(), "loop": "0" * 64}))
    assert native._stale() == ["loop"]
    record.write_text("{not json")
    assert native._stale() is None


def test_the_hash_covers_the_pxd_declarations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A .pxd edit (a field's C type) changes what compiles as much as a .py edit does."""
    for n in native.MODULES:
        (tmp_path / f"{n}.py").write_bytes((native.HERE / f"{n}.py").read_bytes())
        if (native.HERE / f"{n}.pxd").is_file():
            (tmp_path / f"{n}.pxd").write_bytes((native.HERE / f"{n}.pxd").read_bytes())
    monkeypatch.setattr(native, "HERE", tmp_path)
    before = native.source_hash("state")
    assert before == _hashes()["state"]
    (tmp_path / "state.pxd").write_text((tmp_path / "state.pxd").read_text() + "# edited\n")
    assert native.source_hash("state") != before
    assert native.source_hash("loop") == _hashes()["loop"]


def test_pure_python_variable_runs_the_source() -> None:
    out = _run("import torchsim.sim.native as n, torchsim.sim.loop as l, torchsim.sim.state as s\n"
               "print(n.ENGINE, l.__file__.endswith('loop.py'), s.__file__.endswith('state.py'))",
               TORCHSIM_PURE_PYTHON="1")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["python", "True", "True"]


@pytest.mark.skipif(native.ENGINE != "compiled", reason="the engine is not compiled here: the golden tests cover the "
                                                        "Python source")
def test_a_stale_build_warns_and_runs_the_source(tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    record.write_text(json.dumps({**_hashes(), "state": "0" * 64}))
    out = _run("import sys, warnings\n"
               "import torchsim.sim.native as n\n"
               "for m in n.MODULES: del sys.modules[f'torchsim.sim.{m}']\n"
               f"n.RECORD = __import__('pathlib').Path({str(record)!r})\n"
               "with warnings.catch_warnings(record=True) as w:\n"
               "    warnings.simplefilter('always')\n"
               "    n.check()\n"
               "print(n.ENGINE, sys.modules['torchsim.sim.loop'].__file__.endswith('loop.py'), n.WHY)\n"
               "print(str(w[0].message))")
    assert out.returncode == 0, out.stderr
    first, warning = out.stdout.splitlines()
    assert first.startswith("python True the source of state (.py or .pxd) changed since the build")
    assert "stale" in warning and "pip install -e ." in warning


@pytest.mark.skipif(native.ENGINE != "compiled", reason="the engine is not compiled here: the golden tests already "
                                                        "run the Python source")
def test_python_source_matches_the_golden_file_too() -> None:
    """The in-process golden tests check the compiled build; this runs every reference case from the source."""
    out = subprocess.run([sys.executable, "-m", "tests.engine_reference"], cwd=ROOT, capture_output=True, text=True,
                         timeout=900, env={**os.environ, "TORCHSIM_PURE_PYTHON": "1"})
    assert out.stdout.startswith("engine: python (TORCHSIM_PURE_PYTHON is set)"), out.stdout + out.stderr
    assert out.returncode == 0, out.stdout + out.stderr
    assert "DIFFERS" not in out.stdout


HEAP_CHECK = """
import heapq, random
from torchsim.sim import native
from torchsim.sim.resources import CycleHeap
rng = random.Random(7)
values = rng.sample(range(1 << 40), 5000)  # distinct cycles, more than the compiled heap's first buffer holds
h, ref, out, want = CycleHeap(), [], [], []
for i, v in enumerate(values):
    h.push(v)
    heapq.heappush(ref, v)
    if i % 3 == 2:  # pops between pushes, as the event loop does
        out.append(h.pop())
        want.append(heapq.heappop(ref))
assert len(h) == len(ref) and h.n == len(ref)
while ref:
    out.append(h.pop())
    want.append(heapq.heappop(ref))
assert out == want and len(h) == 0
try:
    h.pop()
except IndexError:
    pass
else:
    raise AssertionError("an empty heap popped")
print("ok", native.ENGINE)
"""


@pytest.mark.parametrize("pure", [False, True])
def test_the_calendar_heap_pops_cycles_in_order(pure: bool) -> None:
    """CycleHeap (a C array when compiled, heapq from source) pops what heapq pops, past its first buffer."""
    out = _run(HEAP_CHECK, **({"TORCHSIM_PURE_PYTHON": "1"} if pure else {}))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["ok", "python" if pure else native.ENGINE]
