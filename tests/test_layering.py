"""Imports run one way, stage by stage:

    graph <- hwmodels <- sim                 the IR, the profiles, the engine (no torch)
    lowering                                 never imports models, prediction, sweeps, exports or cli
    models                                   registers its fusion patterns with lowering
    prediction, sweeps                       on top of lowering, models and sim
    exports                                  results only: never lowering (beyond the KernelCall type), models,
                                             the prediction pipeline, sweeps, cli, or torch
    cli                                      the only place that parses arguments

and no module imports another that (directly or through others) imports it back.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "torchsim"

# subpackage -> the torchsim packages/modules it may import (a name allows itself and everything below it)
ALLOWED = {
    "graph": {"torchsim.graph"},
    "hwmodels": {"torchsim.hwmodels", "torchsim.graph"},
    "sim": {"torchsim.sim", "torchsim.graph", "torchsim.hwmodels"},
    # exporters read results; the KernelCall and Prediction imports are the result types
    "exports": {"torchsim.exports", "torchsim.graph", "torchsim.hwmodels", "torchsim.sim",
                "torchsim.lowering.kernel_call", "torchsim.prediction.records", "torchsim"},
}
FORBIDDEN = {
    "lowering": {"torchsim.models", "torchsim.prediction", "torchsim.sweeps", "torchsim.exports", "torchsim.cli"},
    "models": {"torchsim.prediction", "torchsim.sweeps", "torchsim.exports", "torchsim.cli"},
    "prediction": {"torchsim.sweeps", "torchsim.cli"},
    "sweeps": {"torchsim.cli"},
    "serving": {"torchsim.sweeps", "torchsim.cli"},
}
NO_TORCH = ("graph", "hwmodels", "sim", "exports")


def imports(path: Path, package: str | None = None) -> set[str]:
    """Every module `path` imports, anywhere in the file (lazy imports inside functions count); relative imports
    are resolved against `package` (default: where `path` sits in torchsim)."""
    out = set()
    if package is None:
        package = ".".join(path.relative_to(PKG.parent).with_suffix("").parts)
        if path.name != "__init__.py":
            package = package.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def _within(mod: str, prefixes: set[str]) -> bool:
    # "torchsim" itself (the version) is allowed exactly, never as a prefix
    return any(mod == a or (a != "torchsim" and mod.startswith(a + ".")) for a in prefixes)


def _modules() -> dict[str, Path]:
    out = {}
    for f in PKG.rglob("*.py"):
        name = ".".join(f.relative_to(PKG.parent).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = f
    return out


@pytest.mark.parametrize("sub", sorted(ALLOWED))
def test_allowed_imports(sub: str) -> None:
    for f in (PKG / sub).rglob("*.py"):
        for mod in imports(f):
            if mod.startswith("torchsim"):
                assert _within(mod, ALLOWED[sub]), f"{f.relative_to(PKG)} imports {mod}"
            if sub in NO_TORCH:
                assert not mod.startswith("torch.") and mod != "torch", f"{f.relative_to(PKG)} imports torch"


@pytest.mark.parametrize("sub", sorted(FORBIDDEN))
def test_forbidden_imports(sub: str) -> None:
    for f in (PKG / sub).rglob("*.py"):
        for mod in imports(f):
            assert not _within(mod, FORBIDDEN[sub]), f"{f.relative_to(PKG)} imports {mod}"


def test_only_cli_parses_arguments() -> None:
    for f in PKG.rglob("*.py"):
        if f.is_relative_to(PKG / "cli") or f.name == "__main__.py":
            continue
        found = imports(f) & {"argparse", "optparse", "click", "typer", "getopt"}
        assert not found, f"{f.relative_to(PKG)} imports {sorted(found)}: argument parsing belongs in torchsim/cli"
        assert "sys.argv" not in f.read_text(), f"{f.relative_to(PKG)} reads sys.argv"


def test_no_import_cycles() -> None:
    mods = _modules()

    def owner(name: str) -> str | None:  # the module a dotted import name lands in (a package's __init__, a file)
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {m: {o for i in imports(f) if i.startswith("torchsim") and (o := owner(i)) not in (None, m)}
             for m, f in mods.items()}
    # the package itself (torchsim/__init__.py) imports lazily by name; its edges never close a cycle
    graph["torchsim"] = set()
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycle = path[path.index(n):] + [n]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        path.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_relative_imports_are_resolved(tmp_path: Path) -> None:
    """A cycle written with relative imports is not missed: they resolve to the absolute module names."""
    f = tmp_path / "probe.py"
    f.write_text("from .loop import event_loop\nfrom .. import graph\nimport numpy\n")
    assert imports(f, package="torchsim.sim") == {"torchsim.sim.loop", "torchsim.sim.loop.event_loop", "torchsim",
                                                  "torchsim.graph", "numpy"}
