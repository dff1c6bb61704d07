"""Memory-bound templates: rooflines on every profile, achieved HBM bandwidth, launch shapes, registry, errors, CLI."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchsim.cli import main
from torchsim.graph import DType, KernelGraph
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.gpu import GpuProfile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.templates import build_kernel
from torchsim.lowering.templates import memory_bound as mb
from torchsim.lowering.templates.elementwise import elementwise, embedding, rope, silu_mul
from torchsim.lowering.templates.norms import rmsnorm, softmax
from torchsim.lowering.templates.reductions import argmax, reduce, router_topk
from torchsim.sim import simulate

GPUS = ("a100-sxm", "h100-sxm", "h200", "b200")
Build = Callable[[GpuProfile], KernelGraph]
SMALL: dict[str, Build] = {
    "rmsnorm": lambda hw: rmsnorm(300, 4096, DType.BF16, hw),
    "add_rmsnorm": lambda hw: rmsnorm(300, 4096, DType.BF16, hw, residual=True),
    "softmax": lambda hw: softmax(64, 32000, DType.FP32, hw),
    "silu_mul": lambda hw: silu_mul(200, 14336, DType.BF16, hw),
    "elementwise": lambda hw: elementwise(3_000_001, 2, 1, "add", DType.BF16, hw),
    "rope": lambda hw: rope(257, 32, 8, 128, DType.BF16, hw),
    "embedding": lambda hw: embedding(300, 4096, 128256, DType.BF16, hw),
    "argmax": lambda hw: argmax(3, 128256, DType.FP32, hw),
    "router_topk": lambda hw: router_topk(1000, 8, 2, DType.BF16, hw),
    "reduce_split": lambda hw: reduce(1 << 20, 1, DType.FP32, hw),
    "reduce_strided": lambda hw: reduce(2 * 300 * 4096, 300 * 4096, DType.BF16, hw),
}


@pytest.mark.parametrize("gpu", GPUS)
def test_nothing_beats_its_roofline(gpu: str) -> None:
    hw = get_profile(gpu)
    for name, build in SMALL.items():
        kg = build(hw)
        res = simulate(kg, hw)
        floor = kg.dram_bytes / hw.dram_bytes_per_s_value
        assert res.time_s >= floor, f"{name} on {gpu}: {res.time_us:.2f} us beats its DRAM floor {floor * 1e6:.2f} us"
        assert res.dram_bytes >= 0.99 * kg.dram_bytes, f"{name}: moved fewer bytes than compulsory"


@pytest.mark.parametrize("gpu", GPUS)
def test_large_rmsnorm_and_silu_mul_stream_near_the_measured_copy_rate(gpu: str) -> None:
    """Read + write streams: at least ~90% of the profile's measured copy figure (H200's gpu-stream copy is 66% of
    its peak), never above the sustained figure."""
    hw = get_profile(gpu)
    copy = float(hw.dram_copy_bytes_per_s.value) * hw.dram_bytes_per_s_value / max(
        float(hw.dram_read_bytes_per_s.value), float(hw.dram_write_bytes_per_s.value))
    for kg in (rmsnorm(8192, 4096, DType.BF16, hw), silu_mul(4096, 14336, DType.BF16, hw)):
        res = simulate(kg, hw)
        rate = kg.dram_bytes / res.time_s
        assert 0.88 * copy <= rate <= hw.dram_bytes_per_s_value * 1.0001, f"{kg.name} on {gpu}: {rate / 1e12:.2f} TB/s"
        assert res.bound == "DRAM bandwidth"


def test_one_row_is_latency_bound_and_more_rows_never_take_less_time() -> None:
    hw = get_profile("h100-sxm")
    one = simulate(rmsnorm(1, 4096, DType.BF16, hw), hw)
    assert one.cycles > int(hw.dram_latency_cycles.value)  # at least one DRAM round trip
    assert one.bound == "latency/synchronisation"
    times = [simulate(rmsnorm(r, 4096, DType.BF16, hw), hw).cycles for r in (1, 64, 512, 2048)]
    assert times == sorted(times)


def test_more_bandwidth_is_faster_for_large_tensors() -> None:
    times = [simulate(silu_mul(2048, 14336, DType.BF16, get_profile(g)), get_profile(g)).time_s for g in GPUS]
    # A100 < H100 < H200 < B200 in sustained HBM bandwidth
    assert times == sorted(times, reverse=True)


def test_launch_shapes_follow_the_reference_kernels() -> None:
    hw = get_profile("h100-sxm")
    assert rmsnorm(16, 4096, DType.BF16, hw).attrs["threads"] == 512  # one 16 B vector per thread, one row
    assert rmsnorm(4096, 4096, DType.BF16, hw).attrs["threads"] == 256  # vLLM's smaller blocks from 256 tokens
    assert silu_mul(8, 14336, DType.BF16, hw).attrs["threads"] == 1024
    small_rows = softmax(64, 128, DType.FP32, hw)  # 512 B rows: a warp per row, four rows per CTA
    assert (small_rows.attrs["rows_per_cta"], small_rows.attrs["threads"]) == (4, 128)
    assert argmax(1, 128256, DType.FP32, hw).attrs["segments"] > 1  # a lone row is split over CTAs
    assert argmax(4096, 128256, DType.FP32, hw).attrs["segments"] == 1
    assert router_topk(1000, 8, 2, DType.BF16, hw).attrs["rows_per_cta"] == 128  # 8 bf16 experts = one lane
    assert reduce(2 * 1000, 1000, DType.BF16, hw).attrs["template"] == "reduce/strided-vectorized"
    sort_like = reduce(1000, 2000, DType.BF16, hw)  # values + indices: streams its input, writes both
    assert sort_like.attrs["template"] == "reduce/streaming" and sort_like.dram_bytes == 3000 * 2


@settings(max_examples=12, deadline=None)
@given(rows=st.integers(1, 3000), hidden=st.sampled_from([128, 1000, 4096, 8192]), waves=st.integers(1, 6))
def test_bytes_and_flops_do_not_depend_on_the_launch_shape(rows: int, hidden: int, waves: int) -> None:
    hw = get_profile("a100-sxm")
    old = mb.MAX_WAVES
    try:
        mb.MAX_WAVES = waves
        kg = rmsnorm(rows, hidden, DType.BF16, hw)
    finally:
        mb.MAX_WAVES = old
    assert kg.flops == 4.0 * rows * hidden
    assert kg.dram_bytes == (2 * rows * hidden + hidden) * 2
    covered = sum(c.count * c.graph.tiles[0].shape[0] for c in kg.classes)
    assert covered == rows  # every row belongs to exactly one CTA


def test_deterministic() -> None:
    hw = get_profile("b200")
    a, b = (simulate(rope(300, 32, 8, 128, DType.BF16, hw), hw) for _ in range(2))
    assert (a.cycles, a.dram_bytes, a.stalls) == (b.cycles, b.dram_bytes, b.stalls)


CALLS = [
    KernelCall.make(KernelKind.RMSNORM, rows=8, hidden=4096),
    KernelCall.make(KernelKind.ADD_RMSNORM, rows=8, hidden=4096),
    KernelCall.make(KernelKind.ROPE, tokens=8, heads_q=32, heads_kv=8, head_dim=128),
    KernelCall.make(KernelKind.SILU_MUL, rows=8, hidden=14336),
    KernelCall.make(KernelKind.ELEMENTWISE, numel=4096, inputs=2, outputs=1, op="add"),
    KernelCall.make(KernelKind.SOFTMAX, rows=8, cols=1000),
    KernelCall.make(KernelKind.EMBEDDING, tokens=8, hidden=4096, vocab=32000),
    KernelCall.make(KernelKind.ROUTER_TOPK, tokens=8, experts=8, top_k=2),
    KernelCall.make(KernelKind.ARGMAX, DType.FP32, rows=2, vocab=32000),
    KernelCall.make(KernelKind.REDUCE, numel_in=8192, numel_out=4096),
]


@pytest.mark.parametrize("call", CALLS, ids=lambda c: c.kind.value)
def test_every_kind_is_registered_and_simulates(call: KernelCall) -> None:
    hw = get_profile("h100-sxm")
    res = simulate(build_kernel(call, hw), hw)
    assert res.cycles > 0 and res.dram_bytes > 0


def test_roofline_stand_in_calls_are_not_simulated() -> None:
    call = KernelCall.make(KernelKind.ELEMENTWISE, numel=10, inputs=1, outputs=1, op="unsupported:x", roofline=True)
    with pytest.raises(NotImplementedError, match="roofline"):
        build_kernel(call, get_profile("h100-sxm"))


@pytest.mark.parametrize("build, message", [
    (lambda hw: rmsnorm(0, 4096, DType.BF16, hw), "rmsnorm: parameter rows must be a positive integer, got 0"),
    (lambda hw: rmsnorm(8, -4, DType.BF16, hw, residual=True), "add_rmsnorm: parameter hidden"),
    (lambda hw: silu_mul(8, 0, DType.BF16, hw), "silu_mul: parameter hidden"),
    (lambda hw: rope(8, 32, 8, 127, DType.BF16, hw), "head_dim must be even"),
    (lambda hw: rope(8, 32, -1, 128, DType.BF16, hw), "heads_kv must be an integer >= 0"),
    (lambda hw: elementwise(16, -1, 1, "add", DType.BF16, hw), "inputs must be an integer >= 0"),
    (lambda hw: elementwise(16, 0, 0, "add", DType.BF16, hw), "inputs + outputs must be >= 1"),
    (lambda hw: router_topk(8, 8, 9, DType.BF16, hw), "top_k=9 exceeds experts=8; valid: 1..8"),
    (lambda hw: reduce(8, 0, DType.BF16, hw), "reduce: parameter numel_out"),
    (lambda hw: argmax(1, 0, DType.FP32, hw), "argmax: parameter vocab"),
    (lambda hw: softmax(2.5, 8, DType.FP32, hw), "softmax: parameter rows"),  # type: ignore[arg-type]
])
def test_bad_input_names_the_parameter(build: Build, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("+", r"\+")):
        build(get_profile("h100-sxm"))


def test_tensix_profile_is_refused_with_the_valid_architectures() -> None:
    with pytest.raises(ValueError, match="valid: sm80, sm90, sm100"):
        rmsnorm(8, 4096, DType.BF16, get_profile("wormhole-n150"))  # type: ignore[arg-type]


def test_cli_rmsnorm_json_reports_effective_bandwidth(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kernel", "rmsnorm", "--rows", "2048", "--hidden", "4096", "--hw", "h200", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["template"] == "rmsnorm/vllm-row" and d["bound"] == "DRAM bandwidth"
    assert 0 < d["pct_of_hbm_peak"] < 100 and d["effective_gb_per_s"] > 0


def test_cli_other_kinds_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kernel", "silu-mul", "--rows", "16", "--hidden", "14336", "--hw", "a100-sxm"]) == 0
    assert "effective" in capsys.readouterr().out
    assert main(["kernel", "elementwise", "--numel", "100000", "--op", "silu", "--inputs", "1"]) == 0
    assert main(["kernel", "argmax", "--rows", "1", "--vocab", "128256", "--dtype", "fp32", "--json"]) == 0
    capsys.readouterr()
    assert main(["kernel", "rope", "--tokens", "4", "--heads-q", "0", "--heads-kv", "8", "--head-dim", "128"]) == 2
    assert "--heads-q must be a positive integer" in capsys.readouterr().err
    assert main(["kernel", "router-topk", "--tokens", "4", "--experts", "8", "--top-k", "9"]) == 2
    assert "top_k=9 exceeds experts=8" in capsys.readouterr().err


def test_layernorm_costs_more_than_rmsnorm_and_reads_its_bias() -> None:
    from torchsim.lowering.templates.norms import rmsnorm

    hw = get_profile("h100-sxm")
    rms = rmsnorm(4096, 4096, DType.BF16, hw)
    ln = rmsnorm(4096, 4096, DType.BF16, hw, centered=True, bias=True)
    assert ln.dram_bytes == rms.dram_bytes + 4096 * 2  # the bias vector
    assert ln.flops > rms.flops
    # DRAM-bound: the extra reduction hides behind the row reads; never materially faster than RMSNorm
    assert simulate(ln, hw).cycles >= 0.995 * simulate(rms, hw).cycles


def test_the_remainder_cta_reads_rows_no_other_cta_reads() -> None:
    """The last, shorter CTA of a row kernel read rows [full x rest, ...): rows of earlier CTAs again."""
    from torchsim.graph import DType
    from torchsim.hwmodels import get_profile
    from torchsim.lowering.templates.elementwise import rope

    kg = rope(16384, 32, 8, 128, DType.BF16, get_profile("h100-sxm"))
    main, tail = kg.classes
    per, rest = main.graph.tiles[0].shape[0], tail.graph.tiles[0].shape[0]
    assert rest < per and main.count * per + rest <= 16384 + rest
    assert int(tail.params[0, 0]) * rest >= main.count * per  # past every full block's rows
