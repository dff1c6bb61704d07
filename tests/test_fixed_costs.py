"""Fixed costs every kernel pays: the TMA prologue (tensor-map fetch, mbarrier init) in the templates, the
launch gaps between kernels (eager vs CUDA graph), DRAM bandwidth by traffic kind, and that physics holds."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from torchsim.exports.perfetto import GAP_SLICE, write_trace
from torchsim.exports.synthetic import synthetic_prediction
from torchsim.graph import DType, KernelGraph, Op
from torchsim.hwmodels import GPU_PROFILES, get_profile
from torchsim.hwmodels.whatif import WhatIfError, derive_profile
from torchsim.lowering.templates.attention import attention
from torchsim.lowering.templates.attention_config import AttnShape
from torchsim.lowering.templates.decode import flash_decode, flash_mla
from torchsim.lowering.templates.elementwise import elementwise
from torchsim.lowering.templates.gemm import gemm
from torchsim.lowering.templates.gemm_config import Pipeline, default_config
from torchsim.lowering.templates.prologue import PROLOGUE
from torchsim.prediction.launch import LAUNCH_MODES, LaunchModel, between_kernel_gap, between_kernel_gap_s
from torchsim.sim import simulate

GPUS = sorted(GPU_PROFILES)
TMA_GPUS = [n for n in GPUS if get_profile(n).tensormap_bytes.value > 0]


def prologue_nodes(k: KernelGraph) -> list[tuple[int, int]]:
    """(class index, node index) of every prologue node."""
    return [(ci, j) for ci, c in enumerate(k.classes) for j, nm in enumerate(c.graph.node_names)
            if nm.startswith(PROLOGUE)]


def tma_kernels(name: str) -> list[KernelGraph]:
    hw = get_profile(name)
    out = [gemm(256, 256, 512, DType.BF16, hw)]
    if hw.arch.value == "sm90":
        out += [gemm(256, 256, 512, DType.BF16, hw, dataclasses.replace(default_config(256, 256, 512, DType.BF16, hw),
                                                                     pipeline=p))
                for p in (Pipeline.WS_PINGPONG, Pipeline.NAIVE_2STAGE)]
        out.append(flash_mla(1, 16, 1, 512, hw)[0])
    shape = AttnShape(batch=1, heads_q=2, heads_kv=2, seq_q=256, seq_kv=256, head_dim=128, dtype=DType.BF16)
    out.append(attention(shape, hw))
    out.append(flash_decode(AttnShape(batch=2, heads_q=8, heads_kv=2, seq_q=1, seq_kv=1024, head_dim=128,
                                      dtype=DType.BF16), hw)[0])
    return out


@pytest.mark.parametrize("name", TMA_GPUS)
def test_tma_kernels_start_with_a_prologue_that_the_first_loads_wait_for(name: str) -> None:
    hw = get_profile(name)
    for k in tma_kernels(name):
        found = prologue_nodes(k)
        assert {ci for ci, _ in found} == set(range(len(k.classes))), f"{k.name}: a CTA class has no prologue"
        ops = {Op(int(k.classes[ci].graph.op[j])) for ci, j in found}
        assert Op.TMA_LOAD in ops and Op.STS in ops, k.name
        res = simulate(k, hw, record=True)
        recs = res.records or []
        pro = [r for r in recs if r.name.startswith(PROLOGUE)]
        per_class = [sum(1 for ci, _ in found if ci == i) for i in range(len(k.classes))]
        assert len(pro) == sum(int(c.params.shape[0]) * n for c, n in zip(k.classes, per_class))  # every CTA
        end = {r.cta: 0 for r in pro}
        for r in pro:
            end[r.cta] = max(end[r.cta], r.end)
        for r in recs:  # nothing else of a CTA issues before its prologue completed
            if not r.name.startswith(PROLOGUE):
                assert r.issue >= end[r.cta], f"{k.name}: {r.name} issued at {r.issue} < prologue end {end[r.cta]}"
        fetch = min(r.end - r.start for r in pro if r.op == Op.TMA_LOAD.name)
        assert fetch >= hw.l2_latency_cycles.value + hw.tma_latency_cycles.value  # one L2 round trip at least


def test_sm80_and_simt_kernels_have_no_tma_prologue() -> None:
    a100 = get_profile("a100-sxm")
    assert not prologue_nodes(gemm(256, 256, 512, DType.BF16, a100))
    assert not prologue_nodes(elementwise(1 << 16, 1, 1, "mul", DType.BF16, get_profile("h100-sxm")))


@pytest.mark.parametrize("name", GPUS)
def test_a_tiny_kernel_takes_at_least_its_fixed_costs(name: str) -> None:
    hw = get_profile(name)
    k = gemm(64, 64, 64, DType.BF16, hw)
    res = simulate(k, hw)
    floor = hw.cta_launch_cycles.value + hw.l2_latency_cycles.value  # CTA launch, then at least one L2 trip
    if hw.tensormap_bytes.value > 0:  # the descriptor fetch, then the first operand load behind it
        floor += 2 * (hw.l2_latency_cycles.value + hw.tma_latency_cycles.value)
    assert res.cycles >= floor


@pytest.mark.parametrize("name", TMA_GPUS)
@pytest.mark.parametrize("field,factor", [("l2_latency_cycles", 3), ("tma_latency_cycles", 4),
                                          ("cta_launch_cycles", 5), ("tensormap_bytes", 64)])
def test_a_bigger_fixed_cost_never_makes_a_kernel_faster(name: str, field: str, factor: int) -> None:
    hw = get_profile(name)
    slow = derive_profile(hw, {field: getattr(hw, field).value * factor}, where="test")
    for k_of in (lambda p: gemm(128, 256, 256, DType.BF16, p), lambda p: gemm(1024, 1024, 1024, DType.BF16, p)):
        assert simulate(k_of(slow), slow).cycles >= simulate(k_of(hw), hw).cycles


@pytest.mark.parametrize("name", GPUS)
@pytest.mark.parametrize("mnk", [(64, 64, 64), (1024, 1024, 1024), (4096, 512, 512), (16, 4096, 4096)])
def test_the_roofline_is_never_beaten(name: str, mnk: tuple[int, int, int]) -> None:
    hw = get_profile(name)
    m, n, k = mnk
    res = simulate(gemm(m, n, k, DType.BF16, hw), hw)
    t = res.cycles / hw.clock_hz_value
    assert t >= 2.0 * m * n * k / hw.peak_tensor_flops_per_s(DType.BF16)
    assert t >= (m * k + k * n + m * n) * 2 / float(hw.dram_peak_bytes_per_s.value)


@pytest.mark.parametrize("name", GPUS)
def test_eager_gap_exceeds_the_cuda_graph_gap(name: str) -> None:
    hw = get_profile(name)
    eager, graph = between_kernel_gap_s(hw, "eager"), between_kernel_gap_s(hw, "cuda-graphs")
    assert eager > graph > 0
    for mode in LAUNCH_MODES:  # the launch model places kernels with the same gap validation uses
        assert LaunchModel.for_mode(mode, hw).device_gap == between_kernel_gap(hw, mode)
    with pytest.raises(ValueError, match="unknown launch mode 'graphs'"):
        between_kernel_gap(hw, "graphs")


@pytest.mark.parametrize("name,eager_us,graph_us", [("a100-sxm", 2.62, 1.34), ("h200", 2.48, 1.27)])
def test_gap_plus_the_simulated_small_kernel_is_the_published_period(name: str, eager_us: float,
                                                                       graph_us: float) -> None:
    """gpu-benches gpu-small-kernels (A[i] = 0.25 B[i], 64 KB): back-to-back period per kernel, eager and graph.
    The profiles' gaps were derived from these periods less the simulated kernel, so the two must agree."""
    hw = get_profile(name)
    kernel_s = simulate(elementwise(8192, 1, 1, "mul", DType.FP32, hw), hw).time_us * 1e-6
    for mode, period_us in (("eager", eager_us), ("cuda-graphs", graph_us)):
        predicted = (between_kernel_gap_s(hw, mode) + kernel_s) * 1e6
        assert predicted == pytest.approx(period_us, rel=0.05), mode


@pytest.mark.parametrize("name,mnk,floor_us", [("h100-sxm", (512, 256, 256), 5.856), ("b200", (256, 256, 256), 4.96)])
def test_trace_overhead_plus_the_simulated_tiny_gemm_is_the_tracers_floor(name: str, mnk: tuple[int, int, int],
                                                                          floor_us: float) -> None:
    """XLA's perf tables (CUPTI kernel tracing that serialises kernels) record 5.86 / 4.96 us for their smallest
    bf16 GEMMs on sm_90 / sm_100. The profiles' kernel_trace_overhead_s was derived from that floor less the
    simulated GEMM, so the two must still agree; and the tracer's method adds it, the plain profiler does not."""
    from torchsim.validation import timing
    from torchsim.validation.predict_row import simulate_kernel

    hw = get_profile(name)
    kernel_s = simulate_kernel(gemm(*mnk, DType.BF16, hw), hw).time_s
    traced = timing.METHODS["cupti-serialised"]
    assert timing.observed_time_s(kernel_s, traced, hw) * 1e6 == pytest.approx(floor_us, rel=0.05)
    assert timing.observed_time_s(kernel_s, timing.METHODS["device-profiler"], hw) == kernel_s
    assert float(hw.kernel_trace_overhead_s.value) > 0


def test_launch_gaps_are_their_own_slices_in_the_timeline(tmp_path: Path) -> None:
    from tests.test_perfetto import parse, slices_by_track

    pred = synthetic_prediction("h100-sxm", layers=1, decode_steps=1, launch_gap_us=2.0)
    pred = dataclasses.replace(pred, kernels=[dataclasses.replace(k, gap_us=0.0 if i == 0 else 2.0)
                                              for i, k in enumerate(pred.kernels)])
    report = write_trace(tmp_path / "gaps.pftrace", [pred])
    slices = [s for (track, _), ss in slices_by_track(parse(Path(report.path))).items()
              if track.startswith("stream") for s in ss]
    gaps = [s for s in slices if s[0] == GAP_SLICE]
    ks = pred.kernels  # a gap stays inside its phase / decode-step slice: none before a step's first kernel
    inside = sum(1 for a, b in zip(ks, ks[1:]) if (a.phase, a.decode_step) == (b.phase, b.decode_step))
    assert 0 < inside == len(gaps)
    assert all(end - begin == 2000 for _, begin, end in gaps)


@pytest.mark.parametrize("name", GPUS)
def test_dram_figures_by_traffic_kind_stay_under_the_peak_and_scale_in_what_ifs(name: str) -> None:
    hw = get_profile(name)
    streams = ("dram_read_bytes_per_s", "dram_write_bytes_per_s", "dram_copy_bytes_per_s")
    for f in streams:
        assert 0 < getattr(hw, f).value <= hw.dram_peak_bytes_per_s.value
    half = derive_profile(hw, {"dram_bytes_per_s": hw.dram_bytes_per_s.value / 2}, where="test")
    for f in streams:
        assert getattr(half, f).value == pytest.approx(getattr(hw, f).value / 2)
    fast = derive_profile(hw, {"dram_read_bytes_per_s": "1 TB/s", "dram_write_bytes_per_s": "0.5 TB/s"},
                          where="test.toml")
    assert fast.dram_read_bytes_per_s.value == 1e12 and fast.dram_write_bytes_per_s.kind == "assumed"
    with pytest.raises(WhatIfError, match="dram_copy_bytes_per_s"):
        derive_profile(hw, {"dram_copy_bytes_per_s": "0 B/s"}, where="test.toml")


def test_the_kernel_tail_is_added_once_per_launch() -> None:
    """kernel_tail_cycles (calibrated on the H200 from profiler records of one-CTA kernels) lengthens every
    launch by the same cycles, however many CTAs; profiles that have not measured it add nothing."""
    hw = get_profile("h200")
    tail = int(hw.kernel_tail_cycles.value)
    assert tail > 0 and hw.kernel_tail_cycles.kind == "calibrated"
    none = dataclasses.replace(hw, kernel_tail_cycles=dataclasses.replace(hw.kernel_tail_cycles, value=0.0))
    for numel in (4096, 1 << 22):
        k = elementwise(numel, 2, 1, "add", DType.BF16, hw)
        assert simulate(k, hw).cycles - simulate(k, none).cycles == tail
    assert all(get_profile(n).kernel_tail_cycles.value == 0 for n in GPUS if n != "h200")
