"""Imports point one way: graph and hwmodels import nothing else of torchsim; sim never imports lowering or torch;
exports never import lowering (beyond the KernelCall type), models, the API or torch."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "torchsim"
ALLOWED = {
    "graph": {"torchsim.graph"},
    "hwmodels": {"torchsim.hwmodels", "torchsim.graph"},
    "sim": {"torchsim.sim", "torchsim.graph", "torchsim.hwmodels"},
    # exporters read results; the KernelCall import is for type annotations only
    "exports": {"torchsim.exports", "torchsim.graph", "torchsim.hwmodels", "torchsim.sim",
                "torchsim.lowering.kernel_call", "torchsim"},
}


def imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


@pytest.mark.parametrize("sub", sorted(ALLOWED))
def test_layering(sub: str) -> None:
    for f in (PKG / sub).rglob("*.py"):
        for mod in imports(f):
            if mod.startswith("torchsim"):
                # "torchsim" itself (the version) is allowed exactly, never as a prefix
                assert any(mod == a or (a != "torchsim" and mod.startswith(a + ".")) for a in ALLOWED[sub]), \
                    f"{f.relative_to(PKG)} imports {mod}"
            assert not mod.startswith("torch.") and mod != "torch", f"{f.relative_to(PKG)} imports torch"
