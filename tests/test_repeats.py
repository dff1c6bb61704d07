"""torchsim.prediction.repeats: kernels extrapolated from truncated instances agree with their full simulation."""

from __future__ import annotations

import pytest

from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.templates import gemm
from torchsim.lowering.templates.attention import attention
from torchsim.lowering.templates.attention_config import AttnShape
from torchsim.prediction import repeats
from torchsim.prediction.kernel_sim import EXACT, simulate_launches
from torchsim.sim import simulate

BOUND = 0.02  # the stated worst-case error of an extrapolated kernel (docs: torchsim.prediction.repeats)


def _boost(g, h):  # noqa: ANN001, ANN202 - the plain engine at the profile clock (no power model)
    return simulate(g, h)


def _plain(run, h, dtype):  # noqa: ANN001, ANN202
    return run(h)


@pytest.mark.parametrize("hw_name,shape", [("h100-sxm", (2048, 4096, 16384)), ("a100-sxm", (2048, 2048, 8192))])
def test_gemm_extrapolated_in_k_matches_the_full_simulation(hw_name: str, shape: tuple[int, int, int]) -> None:
    hw = get_profile(hw_name)
    kg = gemm(*shape, DType.BF16, hw)
    ex = repeats.simulate_kernel(kg, hw, exact_events=1_000, run=_boost, sustained=_plain)
    full = simulate(kg, hw)
    assert ex.attrs["method"].startswith("extrapolated-") and "k" in ex.attrs["method"]
    assert ex.node_events < full.node_events * 3  # the samples ran, not the full kernel
    assert ex.cycles == pytest.approx(full.cycles, rel=BOUND)
    assert ex.dram_bytes == pytest.approx(full.dram_bytes, rel=0.1)


def test_a_cost_alternating_from_wave_to_wave_is_sampled_at_twice_the_spacing() -> None:
    """A persistent FP8 GEMM whose waves alternate in cost: waves 2, 3, 4 disagree, waves 2, 4, 6 agree (it was
    simulated in full when the slides came first and used up the samples' budget)."""
    assert repeats._windows(repeats.Dim("waves", 28, 2, 1))[:2] == [(2, 1), (2, 2)]
    hw = get_profile("h100-sxm")
    call = KernelCall.make(KernelKind.GEMM, DType.FP8_E4M3, m=4096, n=28672, k=4096)
    fam = repeats.gemm_call_family(call, hw)
    assert fam is not None and [d.name for d in fam.dims] == ["waves"]
    ex = repeats.simulate_kernel(fam, hw, exact_events=1_000, run=_boost, sustained=_plain)
    assert ex.attrs["method"] == "extrapolated-waves" and "from 2,4,6" in ex.attrs["extrapolation"]


def test_a_later_window_is_tried_while_all_samples_cost_less_than_the_full_dimension() -> None:
    """An 8192^3 FP8 GEMM on H200 has 16 waves alternating in cost: waves 2, 4, 6 (12 of 16 waves on their own,
    15 with 2, 3, 4 already run) are tried and agree, where a static 70% cap on each window sent it to a full
    simulation on top of its samples; a window past the budget is never run."""
    assert (2, 2) in repeats._windows(repeats.Dim("waves", 16, 2, 1))
    assert all(x + 2 * s < 16 for x, s in repeats._windows(repeats.Dim("waves", 16, 2, 1)))
    hw = get_profile("h200")
    call = KernelCall.make(KernelKind.GEMM, DType.FP8_E4M3, m=8192, n=8192, k=8192)
    fam = repeats.gemm_call_family(call, hw)
    assert fam is not None and [(d.name, d.full) for d in fam.dims] == [("waves", 16)]
    ex = repeats.simulate_kernel(fam, hw, exact_events=1_000, run=_boost, sustained=_plain)
    assert ex.attrs["method"] == "extrapolated-waves" and "from 2,4,6" in ex.attrs["extrapolation"]
    assert ex.attrs["sim_events"] <= fam.events  # the samples cost no more than the full kernel
    assert ex.cycles == pytest.approx(simulate(fam.build({}), hw).cycles, rel=BOUND)


def test_attention_extrapolated_in_kv_matches_the_full_simulation() -> None:
    hw = get_profile("h100-sxm")
    kg = attention(AttnShape(1, 2, 2, 512, 16384, 128, False, DType.BF16), hw)
    ex = repeats.simulate_kernel(kg, hw, exact_events=1_000, run=_boost, sustained=_plain)
    full = simulate(kg, hw)
    assert ex.attrs["method"] == "extrapolated-kv"
    assert ex.cycles == pytest.approx(full.cycles, rel=BOUND)


def test_whole_waves_are_dropped_and_the_last_partial_wave_is_kept() -> None:
    assert repeats.keep_whole_waves(1000, 132, 2) == 132 + (1000 - 7 * 132)
    assert repeats.keep_whole_waves(264, 132, 1) == 132 and repeats.keep_whole_waves(10, 132, 3) == 10


def test_exact_and_small_kernels_are_simulated_in_full() -> None:
    hw = get_profile("h100-sxm")
    kg = gemm(2048, 4096, 16384, DType.BF16, hw)
    assert repeats.simulate_kernel(kg, hw, exact=True, run=_boost, sustained=_plain).attrs["method"] == "exact"
    small = gemm(256, 256, 256, DType.BF16, hw)
    r = repeats.simulate_kernel(small, hw, run=_boost, sustained=_plain)
    assert r.attrs["method"] == "exact" and r.cycles == simulate(small, hw).cycles


def test_no_kernel_falls_back_to_a_roofline_for_its_size() -> None:
    hw = get_profile("h100-sxm")
    call = KernelCall.make(KernelKind.GEMM, m=2048, n=4096, k=16384)
    (s,) = simulate_launches(call, hw, max_events=2_000)
    assert not s.fallback and s.method.startswith("extrapolated-") and s.template.startswith("gemm/")
    (full,) = simulate_launches(call, hw, max_events=EXACT)
    assert full.method == "exact" and s.time_s == pytest.approx(full.time_s, rel=BOUND)


def test_extrapolation_is_deterministic() -> None:
    hw = get_profile("b200")
    kg = gemm(2048, 4096, 8192, DType.BF16, hw)
    a, b = (repeats.simulate_kernel(kg, hw, exact_events=1_000) for _ in range(2))
    assert (a.cycles, a.clock_hz, a.attrs["extrapolation"]) == (b.cycles, b.clock_hz, b.attrs["extrapolation"])


def test_every_large_template_family_is_found_without_simulating() -> None:
    from torchsim.lowering.templates import build_kernels
    from torchsim.models.routing_synthetic import synthetic_routing

    hw = get_profile("h100-sxm")
    tpe = synthetic_routing("balanced", num_layers=1, num_experts=8, top_k=2, tokens=8192).layer(0)
    calls = {"grouped_gemm": KernelCall.make(KernelKind.GROUPED_GEMM, tokens_per_expert=tpe, n=4096, k=8192),
             "decode": KernelCall.make(KernelKind.ATTENTION_DECODE, batch=8, heads_q=32, heads_kv=8, seq_q=1,
                                       seq_kv=65536, head_dim=128),
             "mla": KernelCall.make(KernelKind.MLA_DECODE, batch=16, heads_q=128, seq_q=1, seq_kv=32768),
             "rmsnorm": KernelCall.make(KernelKind.RMSNORM, rows=262144, hidden=4096)}
    dims = {}
    for name, call in calls.items():
        kg = build_kernels(call, hw)[0]
        fam = repeats.call_family(call, hw, 0, kg)
        assert fam is not None, name
        dims[name] = [d.name for d in fam.dims]
        small = fam.build({d.name: d.start for d in fam.dims})
        assert repeats.graph_events(small) < repeats.graph_events(kg)
    assert dims == {"grouped_gemm": ["waves", "k"], "decode": ["kv"], "mla": ["kv"], "rmsnorm": ["waves"]}
    tensix = get_profile("wormhole-n150")
    # ttnn's selection gives this one in0_block_w 2: 512 K blocks; the truncations keep its program config
    call = KernelCall.make(KernelKind.GEMM, m=512, n=4096, k=32768)
    full = build_kernels(call, tensix)[0]
    fam = repeats.call_family(call, tensix, 0, full)
    assert fam is not None and [d.name for d in fam.dims] == ["k"]
    assert fam.build({"k": 4}).attrs["program_config"] == full.attrs["program_config"]


def test_the_power_model_runs_on_the_extrapolated_work() -> None:
    hw = get_profile("h100-sxm")
    r = repeats.simulate_kernel(gemm(2048, 4096, 16384, DType.BF16, hw), hw, exact_events=1_000)
    assert r.attrs["method"].startswith("extrapolated-") and r.clock_reason.startswith("power-limited")
    assert float(hw.clock_min_hz.value) <= r.clock_hz < float(hw.clock_max_hz.value) and r.power_w > 0
    # the first pass at a lower clock reruns the accepted window's two samples of the one linear dimension (k);
    # later refinements interpolate those samples between the first two clocks
    ext = r.attrs["extrapolation"]
    assert "re-extrapolated from 2 samples" in ext or "interpolated between two clocks run" in ext, ext


def test_an_extrapolation_at_a_later_clock_is_the_one_made_at_that_clock() -> None:
    """The sustained-clock pass repeats the first pass's extrapolation (the same accepted windows) at the new
    clock, so it gives what an extrapolation made at that clock from the start gives: the clock changes a repeat's
    cost differently at 3 and at 16 waves, which scaling one reference instance missed (+3.5% on an 8-expert
    grouped GEMM against its full simulation). The outer dimension (waves) is extrapolated again, the inner one
    (K) scaled by its largest sample's change, which costs ~0.5% here."""
    from torchsim.lowering.templates.grouped_gemm import grouped_gemm
    from torchsim.sim.sustained import at_clock

    hw = get_profile("h100-sxm")
    kg = grouped_gemm((2048,) * 8, 4096, 8192, DType.BF16, hw)
    r = repeats.simulate_kernel(kg, hw, exact_events=100_000)
    assert r.attrs["method"] == "extrapolated-waves+k" and r.clock_reason.startswith("power-limited")
    f = r.clock_hz
    direct = repeats.simulate_kernel(kg, hw, exact_events=100_000,
                                     sustained=lambda run_at, h, dt: run_at(at_clock(h, f, "locked for the test")))
    assert direct.attrs["method"] == r.attrs["method"]
    assert r.cycles == pytest.approx(direct.cycles, rel=1e-2)
    assert "re-extrapolated from 2 samples" in r.attrs["extrapolation"] or "interpolated" in r.attrs["extrapolation"]


def test_a_sample_is_interpolated_only_between_two_clocks_it_ran_at() -> None:
    """A sample whose time is a + b/f is reproduced exactly at a clock between two runs; past them (where a knee
    would go unseen: an H200 grouped GEMM interpolated from 1.98 and 1.44 GHz down to 1.26 GHz came out 5% fast)
    the sample is run instead."""
    from torchsim.sim.result import KernelResult

    def sample(f: float) -> tuple[dict[str, float], KernelResult]:
        t = 2e-5 + 3e4 / f  # seconds: a clock-independent part and a part in cycles
        r = KernelResult("s", "h100-sxm", int(round(t * f)), f, 1e9, 1e6, 0.0, {"tensor": 0.5}, {}, "tensor",
                         1.0, 132, 1, 10)
        return repeats._vector(r), r

    ex = repeats.Extrapolator(None)  # type: ignore[arg-type]  # only the clock bookkeeping is exercised
    key = (("waves", 3),)
    ex.clocks = [(1.98e9, {key: sample(1.98e9)}), (1.5e9, {key: sample(1.5e9)})]
    ex._clock = 1.7e9
    got = ex._sample_at(key)
    assert got is not None
    assert got[0]["cycles"] == pytest.approx(sample(1.7e9)[0]["cycles"], rel=1e-6)
    assert got[1].clock_hz == 1.7e9
    ex._clock = 1.3e9  # below both runs
    assert ex._sample_at(key) is None
    ex._clock = 1.7e9
    assert ex._sample_at((("waves", 4),)) is None  # a sample not run at both clocks


def test_a_batch_of_short_causal_prompts_extrapolates_along_the_batch() -> None:
    """A causal prefill with too few query blocks to sample along the sequence (1024 tokens: 8 blocks of 128) but
    many sequences repeats along the batch: its extrapolation from a few sequences matches the full kernel's
    cycles at the same clock."""
    from torchsim.sim.sustained import at_clock

    hw = get_profile("h100-sxm")
    call = KernelCall.make(KernelKind.ATTENTION_PREFILL, batch=48, heads_q=32, heads_kv=8, seq_q=1024, seq_kv=1024,
                           head_dim=128, causal=True)
    fam = repeats.unbuilt_family(call, hw)
    assert fam is not None and [d.name for d in fam.dims] == ["batch"]

    def lock(run_at, h, dt):  # type: ignore[no-untyped-def]
        return run_at(at_clock(h, 1.7e9, "locked for the test"))

    ext = repeats.simulate_kernel(fam, hw, exact_events=20_000, sustained=lock)
    full = repeats.simulate_kernel(fam.build({}), hw, exact=True, sustained=lock)
    assert ext.attrs["method"] == "extrapolated-batch", ext.attrs["extrapolation"]
    assert ext.cycles == pytest.approx(full.cycles, rel=0.01)
    assert ext.attrs["sim_events"] < repeats.graph_events(fam.build({}))


def test_samples_run_on_several_processes_give_the_same_result() -> None:
    """parallel_samples runs each phase's samples on forked processes: the same simulations, read in the same
    order, so every number (and the description of what ran) is the one a single process gives; at the second
    clock of a power-limited kernel too."""
    hw = get_profile("h100-sxm")
    call = KernelCall.make(KernelKind.GEMM, DType.BF16, m=8192, n=8192, k=8192)
    fam = repeats.gemm_call_family(call, hw)
    assert fam is not None and [d.name for d in fam.dims] == ["waves", "k"]
    one = repeats.simulate_kernel(fam, hw, exact_events=1_000)
    with repeats.parallel_samples(2):
        two = repeats.simulate_kernel(repeats.gemm_call_family(call, hw), hw, exact_events=1_000)
    assert one.clock_reason.startswith("power-limited") and "re-extrapolated" in one.attrs["extrapolation"]
    assert (two.cycles, two.clock_hz, two.dram_bytes, two.unit_busy, two.stalls, two.node_events) == \
        (one.cycles, one.clock_hz, one.dram_bytes, one.unit_busy, one.stalls, one.node_events)
    assert two.attrs["extrapolation"] == one.attrs["extrapolation"]


def test_a_window_that_replaces_a_rejected_one_runs_its_samples_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """On several processes, the samples a later window needs (a K loop whose first window is not yet steady)
    are run ahead together, and along the inner dimension so are those the outer window's later samples will
    need; the extrapolation reads the same results in the same order, so it is the one a single process makes."""
    from torchsim.sim.result import KernelResult

    def fake(sizes: dict[str, int]) -> KernelResult:  # per-K cost settles after 12 steps; each wave adds a CTA round
        k, w = sizes.get("k", 64), sizes.get("waves", 16)
        cycles = w * (1000 + 100 * k + (400 * (12 - k) if k < 12 else 0))
        return KernelResult("g", "h100-sxm", cycles, 1.98e9, 1e9, 1e6, 0.0, {"tensor": 0.5}, {}, "tensor",
                            float(w), 132 * w, 1, w * k)

    def family() -> repeats.Family:
        return repeats.Family("gemm", (repeats.Dim("waves", 16, 2, 1), repeats.Dim("k", 64, 6)), lambda sz: sz,
                              16 * 64, 1e9, "g", 132 * 16, DType.BF16)

    def run(g, share):  # type: ignore[no-untyped-def]
        return fake(g)

    one = repeats.Extrapolator(family())(run, 1.98e9)
    groups: list[list[dict[str, int]]] = []

    def in_process(work, gs):  # type: ignore[no-untyped-def]
        groups.append([leaf for g in gs for leaf in g])
        return [[work(x) for x in g] for g in gs]

    monkeypatch.setattr(repeats, "_fork_join", in_process)
    with repeats.parallel_samples(2):
        ex = repeats.Extrapolator(family())
        two = ex(run, 1.98e9)
    assert (two.cycles, two.dram_bytes, two.node_events, two.attrs["extrapolation"]) == \
        (one.cycles, one.dram_bytes, one.node_events, one.attrs["extrapolation"])
    assert "k 64 from 12,18,24" in one.attrs["extrapolation"], one.attrs["extrapolation"]
    ahead = groups[1]  # after the first leaves: K 24 of the window after the rejected (6, 12, 18), at each wave count
    assert sorted((leaf["waves"], leaf["k"]) for leaf in ahead) == [(2, 24), (3, 24), (4, 24)]


def test_a_sample_that_fails_in_a_forked_process_is_run_again_here() -> None:
    import os

    hw = get_profile("h100-sxm")
    kg = gemm(2048, 4096, 16384, DType.BF16, hw)
    parent = os.getpid()

    def flaky(g, h):  # noqa: ANN001, ANN202 - fails in any forked child
        if os.getpid() != parent:
            raise RuntimeError("child")
        return simulate(g, h)

    ref = repeats.simulate_kernel(kg, hw, exact_events=1_000, run=_boost, sustained=_plain)
    with repeats.parallel_samples(3):
        got = repeats.simulate_kernel(kg, hw, exact_events=1_000, run=flaky, sustained=_plain)
    assert got.cycles == ref.cycles and got.attrs["extrapolation"] == ref.attrs["extrapolation"]

    def broken(g, h):  # noqa: ANN001, ANN202
        raise ValueError("bad sample")

    with repeats.parallel_samples(2), pytest.raises(ValueError, match="bad sample"):
        repeats.simulate_kernel(kg, hw, exact_events=1_000, run=broken, sustained=_plain)


def test_rope_is_simulated_in_full() -> None:
    """RoPE's waves on A100 cost more and more (42.2k to 43.5k cycles over 51 waves of 131072 tokens) where waves
    2, 3, 4 agree: no grid family, whether its tokens fill its last CTA (one class) or not (two)."""
    from torchsim.lowering.templates import build_kernels

    hw = get_profile("a100-sxm")
    for tokens in (131070, 131072):
        call = KernelCall.make(KernelKind.ROPE, tokens=tokens, heads_q=32, heads_kv=8, head_dim=128)
        kg = build_kernels(call, hw)[0]
        assert len(kg.classes) == (1 if tokens % 6 == 0 else 2)
        assert repeats.family_of(kg, hw) is None
    (s,) = simulate_launches(call, hw, max_events=1_000)
    assert s.method == "exact"


def test_a_grid_whose_first_waves_fill_the_dram_queue_slides_its_window() -> None:
    """add_rmsnorm over 131072 rows (16 waves): waves 2, 3, 4 disagree while the DRAM queue fills, 3, 4, 5 agree;
    sliding before doubling the spacing keeps its samples under the full kernel."""
    from torchsim.lowering.templates import build_kernels

    hw = get_profile("h100-sxm")
    kg = build_kernels(KernelCall.make(KernelKind.ADD_RMSNORM, rows=131072, hidden=4096), hw)[0]
    ex = repeats.simulate_kernel(kg, hw, exact_events=1_000, run=_boost, sustained=_plain)
    assert ex.attrs["method"] == "extrapolated-waves" and "from 3,4,5" in ex.attrs["extrapolation"]
    assert ex.attrs["sim_events"] < repeats.graph_events(kg)
    assert ex.cycles == pytest.approx(simulate(kg, hw).cycles, rel=BOUND)
