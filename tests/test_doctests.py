"""The examples in torchsim's docstrings run and print what they show (`>>>` lines are documentation users copy)."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "torchsim"
MODULES = sorted(".".join(f.relative_to(PKG.parent).with_suffix("").parts).removesuffix(".__init__")
                 for f in PKG.rglob("*.py") if ">>>" in f.read_text())


def test_there_are_examples() -> None:
    assert len(MODULES) >= 10


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"


def test_the_runner_sees_a_failing_example() -> None:
    """A wrong example fails (the test above is not vacuous)."""
    def wrong() -> None:
        """
        >>> 1 + 1
        3
        """
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(verbose=False)
    for t in finder.find(wrong, "wrong", globs={}):
        runner.run(t, out=lambda _: None)
    assert runner.failures == 1
