"""MoE grouped GEMM: the tile schedule, equivalence with the dense GEMM, rooflines, routing skew, load balance,
bad routing counts, the registry, K-extrapolation and the CLI."""

from __future__ import annotations

import json
import math

import pytest

from torchsim.cli import main
from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.templates import build_kernel
from torchsim.lowering.templates.gemm import gemm
from torchsim.lowering.templates.grouped_gemm import grouped_config, grouped_gemm, load_balance
from torchsim.models.routing_synthetic import synthetic_routing
from torchsim.prediction.kernel_sim import simulate_call
from torchsim.sim import simulate

GPUS = ("a100-sxm", "h100-sxm", "h200", "b200")


def routing(pattern: str, tokens: int, experts: int = 8, top_k: int = 2) -> tuple[int, ...]:
    return synthetic_routing(pattern, num_layers=1, num_experts=experts, top_k=top_k, tokens=tokens).layer(0)


def test_schedule_lists_every_experts_tiles_once() -> None:
    hw = get_profile("h100-sxm")
    counts = (300, 0, 1, 129)
    kg = grouped_gemm(counts, 1000, 512, DType.BF16, hw)
    a = kg.attrs
    assert a["m_tiles"] == tuple(math.ceil(c / a["bm"]) for c in counts)
    assert a["tiles"] == sum(a["m_tiles"]) * math.ceil(1000 / a["bn"])
    assert sum(c.count * (len(c.param_names) // 5) for c in kg.classes) == a["tiles"]
    assert a["active_experts"] == 3 and a["padded_rows"] == sum(a["m_tiles"]) * a["bm"]
    assert kg.flops == 2.0 * sum(counts) * 1000 * 512
    assert kg.dram_bytes == (sum(counts) * 512 + 3 * 512 * 1000 + sum(counts) * 1000) * 2
    lo, hi = a["tiles_per_cta"]
    assert hi - lo <= 1 and a["grid"] <= hw.sms  # persistent CTAs stride over the list


@pytest.mark.parametrize("gpu", ("a100-sxm", "h100-sxm", "b200"))
def test_one_expert_is_the_dense_gemm(gpu: str) -> None:
    hw = get_profile(gpu)
    cfg = grouped_config((384,), 1024, 512, DType.BF16, hw)
    grouped = simulate(grouped_gemm((384,), 1024, 512, DType.BF16, hw, cfg), hw)
    dense = simulate(gemm(384, 1024, 512, DType.BF16, hw, cfg), hw)
    assert grouped.cycles == dense.cycles and grouped.dram_bytes == dense.dram_bytes


@pytest.mark.parametrize("gpu", GPUS)
def test_nothing_beats_its_roofline(gpu: str) -> None:
    hw = get_profile(gpu)
    for counts, n, k in (((37, 0, 200, 19), 2048, 1024), ((1, 1, 1, 1, 1, 1, 1, 1), 1024, 2048)):
        kg = grouped_gemm(counts, n, k, DType.BF16, hw)
        res = simulate(kg, hw)
        floor = max(kg.flops / hw.peak_tensor_flops_per_s(DType.BF16), kg.dram_bytes / hw.dram_bytes_per_s_value)
        assert res.time_s >= floor


def test_experts_without_tokens_cost_nothing() -> None:
    hw = get_profile("h100-sxm")
    with_idle = simulate(grouped_gemm((128, 0, 0, 128), 2048, 1024, DType.BF16, hw), hw)
    two = simulate(grouped_gemm((128, 128), 2048, 1024, DType.BF16, hw), hw)
    assert with_idle.cycles == two.cycles and with_idle.dram_bytes == two.dram_bytes


def test_skewed_routing_is_slower_and_shows_why() -> None:
    """50% of the assignments on one expert: the others' rows no longer fill whole M tiles, so the launch has more
    (padded) tiles than persistent CTAs can take in the same number of rounds."""
    hw = get_profile("h100-sxm")
    runs = {}
    for pattern in ("balanced", "skewed"):
        kg = grouped_gemm(routing(pattern, 1024), 4096, 1024, DType.BF16, hw, tokens=1024, top_k=2)
        runs[pattern] = (kg, simulate(kg, hw))
    (kb, rb), (ks, rs) = runs["balanced"], runs["skewed"]
    assert kb.flops == ks.flops
    assert ks.attrs["tiles"] > kb.attrs["tiles"] and ks.attrs["tile_efficiency"] < kb.attrs["tile_efficiency"]
    assert rs.cycles > 1.15 * rb.cycles
    assert ks.attrs["tiles_per_cta"][1] > kb.attrs["tiles_per_cta"][1]


def test_load_imbalance_across_sms_is_visible() -> None:
    hw = get_profile("h100-sxm")
    # 8 tiles per expert x 17 N tiles = 136 tiles on 132 CTAs: four CTAs take a second tile
    res = simulate(grouped_gemm((128,) * 8, 17 * 256, 512, DType.BF16, hw), hw)
    lb = load_balance(res)
    assert lb["tensor_busy_max_over_mean"] > 1.8 and lb["idle_sms"] == 0
    assert lb["tail_idle_share"] > 0.3 and lb["sm_end_max_cycles"] <= res.cycles


def test_fp8_uses_the_fp8_pipe_and_is_faster_when_compute_bound() -> None:
    hw = get_profile("h100-sxm")
    counts = (1024, 1024)
    bf16 = simulate(grouped_gemm(counts, 4096, 4096, DType.BF16, hw), hw)
    kg8 = grouped_gemm(counts, 4096, 4096, DType.FP8_E4M3, hw)
    fp8 = simulate(kg8, hw)
    assert kg8.attrs["bk"] == 128 and fp8.cycles < 0.8 * bf16.cycles


@pytest.mark.parametrize("kwargs, message", [
    ({"tokens_per_expert": (3, 1), "tokens": 4, "top_k": 2}, r"sums to 4, but tokens x top_k = 4 x 2 = 8"),
    ({"tokens_per_expert": (3, -1)}, r"tokens_per_expert\[1\] = -1 is negative; valid counts are >= 0"),
    ({"tokens_per_expert": (0, 0)}, "routes no token"),
    ({"tokens_per_expert": (5, 1), "tokens": 3, "top_k": 2}, r"tokens_per_expert\[0\] = 5 exceeds tokens=3"),
    ({"tokens_per_expert": (2, 2), "tokens": 1, "top_k": 4}, r"top_k=4 exceeds the 2 experts.*valid: 1..2"),
    ({"tokens_per_expert": "96,40"}, "must list one token count per expert"),
    ({"tokens_per_expert": (1.5, 2)}, r"tokens_per_expert\[0\] = 1.5 is not an integer"),
    ({"tokens_per_expert": (4, 4), "n": 0}, "GEMM dimension n must be a positive integer, got 0"),
    ({"tokens_per_expert": (4, 4), "k": -8}, "GEMM dimension k must be a positive integer, got -8"),
])
def test_bad_routing_and_dims_name_the_parameter(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"n": 256, "k": 256, "dtype": DType.BF16, "hw": get_profile("h100-sxm"), **kwargs}
    with pytest.raises(ValueError, match=message):
        grouped_gemm(**args)  # type: ignore[arg-type]


def test_fp8_on_a100_names_the_valid_dtypes() -> None:
    with pytest.raises(ValueError, match="a100-sxm has no FP8_E4M3 tensor cores; valid dtypes here: bf16, fp16"):
        grouped_gemm((4, 4), 256, 256, DType.FP8_E4M3, get_profile("a100-sxm"))


def test_kernel_call_is_registered_and_checks_tokens_times_top_k() -> None:
    hw = get_profile("b200")
    call = KernelCall.make(KernelKind.GROUPED_GEMM, tokens_per_expert=(96, 40, 45, 75), n=1024, k=512,
                           epilogue="silu", tokens=128, top_k=2)
    kg = build_kernel(call, hw)
    assert kg.attrs["template"] == "grouped_gemm/sm100-tcgen05" and kg.attrs["epilogue"] == "silu"
    bad = KernelCall.make(KernelKind.GROUPED_GEMM, tokens_per_expert=(96, 40), n=1024, k=512, tokens=128, top_k=2)
    with pytest.raises(ValueError, match="tokens x top_k"):
        build_kernel(bad, hw)


def test_large_calls_are_extrapolated_within_the_stated_bound() -> None:
    hw = get_profile("h100-sxm")
    call = KernelCall.make(KernelKind.GROUPED_GEMM, tokens_per_expert=routing("balanced", 256, 4), n=2048, k=8192)
    full = simulate_call(call, hw, max_events=10_000_000)
    approx = simulate_call(call, hw, max_events=8_000)
    # extrapolated in K where the samples reach a steady state, else (here: 2 waves, K 128 steps) simulated in full
    assert full.method == "exact" and approx.method in ("exact", "extrapolated-k") and "k 128" in approx.extrapolation
    assert approx.time_s == pytest.approx(full.time_s, rel=0.02) and not approx.fallback


def test_cli_grouped_gemm(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kernel", "grouped-gemm", "--tokens-per-expert", "96,40,45,75", "--n", "1024", "--k", "512",
                 "--tokens", "128", "--top-k", "2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["tokens_per_expert"] == [96, 40, 45, 75] and "tail_idle_share" in d["load_balance"]
    assert main(["kernel", "grouped-gemm", "--routing", "skewed", "--tokens", "64", "--n", "512", "--k", "256"]) == 0
    out = capsys.readouterr().out
    assert "schedule" in out and "SM load" in out
    assert main(["kernel", "grouped-gemm", "--tokens-per-expert", "96,40", "--n", "64", "--k", "64", "--tokens",
                 "128", "--top-k", "2"]) == 2
    assert "tokens x top_k = 128 x 2 = 256" in capsys.readouterr().err
    assert main(["kernel", "grouped-gemm", "--tokens-per-expert", "9,x", "--n", "64", "--k", "64"]) == 2
    assert "comma-separated integers" in capsys.readouterr().err


def test_a_large_grouped_gemm_call_is_extrapolated_without_its_full_kernel() -> None:
    """The family of a grouped-GEMM call (from its plan: schedule and header, no CTA written) is the family of the
    fully written kernel: the same dimensions, events, CTAs and attrs, and the same truncated instances."""
    from torchsim.prediction.repeats import grouped_call_family, grouped_family, unbuilt_family

    hw = get_profile("h100-sxm")
    call = KernelCall.make(KernelKind.GROUPED_GEMM, DType.BF16, tokens_per_expert=(2048,) * 8, n=4096, k=4096)
    lazy = grouped_call_family(call, hw)
    built = grouped_family(build_kernel(call, hw), hw)
    assert lazy is not None and built is not None and lazy.dims
    assert unbuilt_family(call, hw) is not None  # the event budget and the simulation take this one
    assert (lazy.dims, lazy.events, lazy.ctas, lazy.flops, lazy.name) == \
        (built.dims, built.events, built.ctas, built.flops, built.name)
    assert lazy.attrs == built.attrs
    sizes = {d.name: d.start for d in lazy.dims}
    a, b = lazy.build(sizes), built.build(sizes)
    assert [(c.count, c.graph.num_nodes) for c in a.classes] == [(c.count, c.graph.num_nodes) for c in b.classes]
