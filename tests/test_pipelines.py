"""The GPU-Tile-Sim pipelining study (persistent GEMM + SiLU, one SM, K=1024, ten tiles)."""

from __future__ import annotations

import pytest

from torchsim.lowering.templates.gemm_config import Pipeline
from torchsim.studies.pipelines import ORGANISATIONS, TILES, run

SMALL, LARGE = TILES


@pytest.fixture(scope="module")
def cycles() -> dict[tuple[tuple[int, int, int], Pipeline], int]:
    return {(t, p): run(t, p).cycles for t in TILES for p in ORGANISATIONS}


def test_cooperative_beats_naive_at_every_tile(cycles) -> None:  # type: ignore[no-untyped-def]
    for t in TILES:
        assert cycles[(t, Pipeline.WS_COOPERATIVE)] < cycles[(t, Pipeline.NAIVE_2STAGE)]


def test_pingpong_is_best_of_first_three_at_large_tiles(cycles) -> None:  # type: ignore[no-untyped-def]
    first_three = [cycles[(LARGE, p)] for p in (Pipeline.NAIVE_2STAGE, Pipeline.WS_COOPERATIVE, Pipeline.WS_PINGPONG)]
    assert cycles[(LARGE, Pipeline.WS_PINGPONG)] == min(first_three)


def test_pingpong_pays_for_extra_tma_traffic_at_small_tiles(cycles) -> None:  # type: ignore[no-untyped-def]
    small = cycles[(SMALL, Pipeline.WS_PINGPONG)] / cycles[(SMALL, Pipeline.WS_COOPERATIVE)]
    large = cycles[(LARGE, Pipeline.WS_PINGPONG)] / cycles[(LARGE, Pipeline.WS_COOPERATIVE)]
    assert small > 1.0 > large
    # the paper: ping-pong falls below even naive 2-stage at the small tile
    assert cycles[(SMALL, Pipeline.WS_PINGPONG)] >= cycles[(SMALL, Pipeline.NAIVE_2STAGE)]


def test_three_stage_is_near_the_best_everywhere(cycles) -> None:  # type: ignore[no-untyped-def]
    for t in TILES:
        best = min(cycles[(t, p)] for p in ORGANISATIONS)
        assert cycles[(t, Pipeline.WS_3STAGE)] <= best * 1.10
