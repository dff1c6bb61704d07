"""The GPU-Tile-Sim software-pipelining study: a persistent GEMM + SiLU on one Hopper SM, K = 1024, ten
waves of one output tile each, under four pipeline organisations and two tile sizes.

The paper idealises shared memory (a (256, 256, 128) tile needs 256 KiB for two stages), so the study runs on
an H100 profile whose shared memory is raised to fit; that override is marked `assumed` with this module as
its source. Tensor-pipe utilisations the paper reports are printed beside ours.
"""

from __future__ import annotations

from dataclasses import replace

from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.gpu import GpuProfile
from torchsim.hwmodels.quantity import assumed
from torchsim.lowering.templates.gemm import gemm
from torchsim.lowering.templates.gemm_config import Epilogue, GemmConfig, Pipeline
from torchsim.sim import KernelResult, simulate

TILES = ((128, 128, 64), (256, 256, 128))
ORGANISATIONS = (Pipeline.NAIVE_2STAGE, Pipeline.WS_COOPERATIVE, Pipeline.WS_PINGPONG, Pipeline.WS_3STAGE)
# GPU-Tile-Sim §6 'Software pipelining', tensor-core utilisation (Fig. 12 b/c)
PAPER_TENSOR_UTIL = {
    ((128, 128, 64), Pipeline.NAIVE_2STAGE): 0.577, ((128, 128, 64), Pipeline.WS_PINGPONG): 0.524,
    ((256, 256, 128), Pipeline.WS_COOPERATIVE): 0.845, ((256, 256, 128), Pipeline.WS_PINGPONG): 0.947,
    ((128, 128, 64), Pipeline.WS_3STAGE): 0.650, ((256, 256, 128), Pipeline.WS_3STAGE): 0.937,
}
WAVES = 10
K = 1024


def study_profile() -> GpuProfile:
    hw = get_profile("h100-sxm")
    big = assumed(1 << 20, "B", "torchsim.studies.pipelines: the paper's study idealises shared memory capacity")
    return replace(hw, smem_per_sm_bytes=big, smem_per_cta_bytes=big)


def stages_for(pipe: Pipeline) -> int:
    """Naive 2-stage has two buffers by definition; the warp-specialised kernels use three (with wgmma.wait<1>
    releasing a buffer only after the next MMA issued, two buffers would leave one load in flight)."""
    return 2 if pipe is Pipeline.NAIVE_2STAGE else 3


def run(tile: tuple[int, int, int], pipe: Pipeline, stages: int | None = None) -> KernelResult:
    hw = study_profile()
    stages = stages or stages_for(pipe)
    bm, bn, bk = tile
    cfg = GemmConfig(bm, bn, bk, stages, pipe, persistent=True, b_split=1)
    kg = gemm(bm * WAVES, bn, K, DType.BF16, hw, cfg, Epilogue.SILU, tiles_per_cta=WAVES)
    return simulate(kg, hw, max_sms=1)


def table() -> dict[tuple[tuple[int, int, int], Pipeline], KernelResult]:
    return {(tile, pipe): run(tile, pipe) for tile in TILES for pipe in ORGANISATIONS}
