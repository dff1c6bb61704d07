"""Simulated GEMM autotuning (torchsim/lowering/templates/tune.py) and `torchsim kernel gemm --tune`."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from torchsim.cli import main
from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.templates import build_kernel
from torchsim.lowering.templates.gemm_config import ARCH_PIPELINES, Pipeline, default_config
from torchsim.lowering.templates.tune import candidates, invalid_reason, tune_gemm
from torchsim.sim import simulate

SMALL = (256, 512, 512)


@pytest.mark.parametrize("hw_name", ["a100-sxm", "h100-sxm", "b200"])
def test_tuned_never_slower_than_default_and_default_is_a_candidate(hw_name: str) -> None:
    hw = get_profile(hw_name)
    r = tune_gemm(*SMALL, DType.BF16, hw, budget=6)
    default = default_config(*SMALL, DType.BF16, hw)
    assert r.default == default and r.trials[0].cfg == default and r.trials[0].is_default
    assert r.best_time_s <= r.default_time_s
    assert r.best_time_s == min(t.time_s for t in r.trials)
    assert r.margin >= 0 and r.speedup >= 1
    # the reported default time is the default configuration's own simulation (at its sustained clock)
    from torchsim.lowering.templates.gemm import gemm
    from torchsim.sim.sustained import simulate_sustained
    assert r.default_time_s == pytest.approx(simulate_sustained(gemm(*SMALL, DType.BF16, hw, default), hw).time_s)


@pytest.mark.parametrize("hw_name", ["a100-sxm", "h100-sxm", "b200"])
def test_candidates_belong_to_the_architecture(hw_name: str) -> None:
    hw = get_profile(hw_name)
    allowed = set(ARCH_PIPELINES[hw.arch])
    for shape in ((16, 4096, 4096), (4096, 4096, 4096)):
        cands = candidates(*shape, DType.BF16, hw)
        assert cands and {c.pipeline for c in cands} <= allowed
    r = tune_gemm(*SMALL, DType.BF16, hw, budget=8)
    assert {t.cfg.pipeline for t in r.trials} <= allowed
    for t in r.trials:
        assert invalid_reason(t.cfg, DType.BF16, hw) is None
        assert t.cfg.smem_bytes(DType.BF16) <= hw.smem_per_cta_bytes.value


def test_a100_gets_no_sm90_variants() -> None:
    hw = get_profile("a100-sxm")
    cands = candidates(4096, 4096, 4096, DType.BF16, hw)
    assert all(c.pipeline is Pipeline.SM80_MULTISTAGE for c in cands)
    sm90 = replace(default_config(4096, 4096, 4096, DType.BF16, get_profile("h100-sxm")))
    assert invalid_reason(sm90, DType.BF16, hw) == "variant not on this architecture"


def test_pruning_counts_configurations_that_cannot_run() -> None:
    hw = get_profile("h100-sxm")
    cands = candidates(4096, 4096, 4096, DType.BF16, hw)
    bad = [c for c in cands if invalid_reason(c, DType.BF16, hw) is not None]
    assert bad  # e.g. a 256x256 tile's accumulators exceed the registers of a thread
    r = tune_gemm(512, 512, 512, DType.BF16, hw, budget=2)
    pruned = [c for c in candidates(512, 512, 512, DType.BF16, hw) if invalid_reason(c, DType.BF16, hw)]
    assert r.pruned == len(pruned) == sum(r.pruned_reasons.values())


@pytest.mark.parametrize("budget", [1, 3, 7])
def test_candidate_count_is_bounded(budget: int) -> None:
    hw = get_profile("h100-sxm")
    r = tune_gemm(*SMALL, DType.BF16, hw, budget=budget)
    valid = [c for c in candidates(*SMALL, DType.BF16, hw) if invalid_reason(c, DType.BF16, hw) is None]
    assert len(r.trials) == min(budget, len(valid) + (0 if r.default in valid else 1))
    assert len(r.trials) + r.dropped >= len(valid)


def test_deterministic() -> None:
    hw = get_profile("h100-sxm")
    a = tune_gemm(128, 1024, 512, DType.BF16, hw, budget=5, sim=simulate)  # sim given: no memo
    b = tune_gemm(128, 1024, 512, DType.BF16, hw, budget=5, sim=simulate)
    assert [(t.cfg, t.time_s) for t in a.trials] == [(t.cfg, t.time_s) for t in b.trials]
    assert a.best == b.best
    assert candidates(128, 1024, 512, DType.BF16, hw) == candidates(128, 1024, 512, DType.BF16, hw)


def test_ties_go_to_the_default() -> None:
    hw = get_profile("h100-sxm")

    class Flat:
        time_s = 1e-5

    r = tune_gemm(*SMALL, DType.BF16, hw, budget=4, sim=lambda kg, h: Flat())
    assert len(r.trials) > 1 and r.default_won and r.best == r.default and r.margin == 0


def test_bad_budget_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="budget"):
        tune_gemm(*SMALL, DType.BF16, get_profile("h100-sxm"), budget=0)


def test_kernel_call_tune_flag_builds_the_winner() -> None:
    hw = get_profile("h100-sxm")
    call = KernelCall.make(KernelKind.GEMM, DType.BF16, name="g", m=64, n=1024, k=1024, tune=True)
    kg = build_kernel(call, hw)
    best = tune_gemm(64, 1024, 1024, DType.BF16, hw, shared_b=True).best
    assert (kg.attrs["bm"], kg.attrs["bn"], kg.attrs["split_k"], kg.attrs["stages"]) == (
        best.bm, best.bn, best.split_k, best.stages)


def test_cli_tune_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kernel", "gemm", "--m", "64", "--n", "1024", "--k", "1024", "--hw", "h100-sxm", "--tune",
                 "--tune-budget", "4"]) == 0
    out = capsys.readouterr().out
    assert "candidates simulated" in out and "(default)" in out and "winner:" in out and "wall time" in out
    assert "TFLOPS" in out


def test_cli_tune_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kernel", "gemm", "--m", "64", "--n", "1024", "--k", "1024", "--hw", "a100-sxm", "--tune",
                 "--tune-budget", "4", "--json"]) == 0
    cap = capsys.readouterr()
    d = json.loads(cap.out)
    t = d["tune"]
    for key in ("winner", "winner_time_us", "default", "default_time_us", "margin_pct", "candidates", "tried",
                "pruned", "wall_s"):
        assert key in t
    assert 1 <= t["tried"] <= 4 and len(t["candidates"]) == t["tried"]
    assert t["winner_time_us"] <= t["default_time_us"]
    assert d["time_us"] == pytest.approx(t["winner_time_us"])
    assert all(c["config"].startswith("sm80-multistage") for c in t["candidates"])
    assert "candidates simulated" in cap.err  # the table goes to stderr under --json


def test_cli_tune_rejects_fixed_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kernel", "gemm", "--m", "64", "--n", "64", "--k", "64", "--hw", "h100-sxm", "--tune",
                 "--tile", "64x64x64"]) == 2
    assert "--tune chooses the configuration itself" in capsys.readouterr().err


def test_predict_tune_gives_every_gemm_the_tuned_configuration() -> None:
    from torchsim.prediction.pipeline import predict

    args = dict(prompt_len=64, decode_steps=1, workers=1, cache=False)
    plain = predict("llama-small", "h100-sxm", **args)
    tuned = predict("llama-small", "h100-sxm", tune=True, **args)
    pairs = [(a, b) for a, b in zip(plain.kernels, tuned.kernels, strict=True) if a.kind == "gemm"]
    assert pairs and all(a.name == b.name for a, b in pairs)
    assert all(b.duration_us <= a.duration_us * 1.001 for a, b in pairs)  # the default is a candidate
    assert any(a.config != b.config for a, b in pairs)
    assert tuned.ttft_s <= plain.ttft_s and any("autotuned" in x for x in tuned.assumptions)
    with pytest.raises(ValueError, match="not a GPU profile"):
        predict("llama-small", "wormhole-n150", tune=True, **args)
