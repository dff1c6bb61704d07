"""The engine gives bit-identical results on a fixed reference set (tests/engine_reference.py) to the stored golden
file: cycles, unit busy, stalls, L2/L1 statistics, attrs, node events and a digest of the NodeRecords.

A failure here means a change altered simulation results; if that was intended, regenerate the golden file with
`python -m tests.engine_reference --write` and say so in the commit.
"""

from __future__ import annotations

import json

import pytest

from tests.engine_reference import CASES, GOLDEN, run_case

STORED = json.loads(GOLDEN.read_text())


def test_golden_file_covers_every_case() -> None:
    assert sorted(STORED) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_results_match_the_golden_file(name: str) -> None:
    got = json.loads(json.dumps(run_case(name)))  # the same normalisation the golden file went through
    want = STORED[name]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        for field in sorted(w):  # field by field, so a failure names what moved
            assert g[field] == w[field], f"{name}: {field} differs"
        assert g == w
