"""The simulation limit of `predict` (torchsim.prediction.limits): estimated before simulating, refused above it."""

from __future__ import annotations

from typing import Any

import pytest

import torchsim.prediction.pipeline as pipeline
from torchsim.cli import main
from torchsim.hwmodels import get_profile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.prediction import kernel_sim
from torchsim.prediction.kernel_sim import DEFAULT_MAX_SIM_EVENTS, clear_memo, simulate_launches
from torchsim.prediction.limits import DEFAULT_MAX_TOTAL_EVENTS, EventBudget, SimulationLimitError, call_events

SMALL = {"prompt_len": 128, "decode_steps": 4, "batch": 2, "cache": False, "workers": 1}
FACTOR = 4  # the estimate is within this factor of the node events really simulated (docs/predict.md)


def _budgets(monkeypatch: pytest.MonkeyPatch) -> list[EventBudget]:
    seen: list[EventBudget] = []

    class Recording(EventBudget):
        def __init__(self, *a: Any, **k: Any) -> None:
            super().__init__(*a, **k)
            seen.append(self)

    monkeypatch.setattr(pipeline, "EventBudget", Recording)
    return seen


def test_over_the_limit_is_refused_before_anything_is_simulated(monkeypatch: pytest.MonkeyPatch) -> None:
    budgets = _budgets(monkeypatch)
    clear_memo()
    p = pipeline.predict("llama-small", "h100-sxm", max_total_events=None, **SMALL)
    estimate = p.stats["events"]["estimated"]
    assert p.stats["events"]["limit"] is None and estimate > 0
    # the largest kernel by the events its simulation really took (the memo holds them now)
    prof = get_profile("h100-sxm")
    real = {c.key(): (c, sum(s.events for s in simulate_launches(c, prof))) for c, _ in budgets[0].events.values()}
    largest = max(real.values(), key=lambda ce: ce[1])[0]

    clear_memo()
    limit = estimate // 2
    with pytest.raises(SimulationLimitError) as info:
        pipeline.predict("llama-small", "h100-sxm", max_total_events=limit, **SMALL)
    msg = str(info.value)
    assert f"limit of {limit:,}" in msg and "--max-events" in msg and "--yes" in msg
    assert msg.split("the largest kernels: ")[1].startswith(largest.name + " (")
    assert not kernel_sim._MEMO  # nothing simulated before the refusal
    assert isinstance(info.value, ValueError)

    # a limit at the estimate proceeds, with the same result
    q = pipeline.predict("llama-small", "h100-sxm", max_total_events=estimate, **SMALL)
    assert q.stats["events"]["estimated"] == estimate and q.ttft_s == p.ttft_s


def test_estimate_matches_the_events_simulated_for_a_small_prediction() -> None:
    clear_memo()
    p = pipeline.predict("llama-small", "h100-sxm", **SMALL)
    ev = p.stats["events"]
    assert ev["limit"] == DEFAULT_MAX_TOTAL_EVENTS
    assert ev["estimated"] / FACTOR <= ev["simulated"] <= ev["estimated"] * FACTOR


@pytest.mark.parametrize("call", [
    KernelCall.make(KernelKind.GEMM, m=4096, n=4096, k=16384),  # extrapolated in K
    KernelCall.make(KernelKind.ATTENTION_PREFILL, batch=1, heads_q=32, heads_kv=8, seq_q=2048, seq_kv=2048,
                    head_dim=128),
    KernelCall.make(KernelKind.RMSNORM, rows=2048, hidden=4096),
], ids=["gemm-extrapolated", "attention-prefill", "rmsnorm"])
def test_call_estimate_within_factor_of_simulated(call: KernelCall) -> None:
    hw = get_profile("h100-sxm")
    estimate = call_events(call, hw, DEFAULT_MAX_SIM_EVENTS)
    simulated = sum(s.events for s in simulate_launches(call, hw))
    assert estimate > 0 and estimate / FACTOR <= simulated <= estimate * FACTOR


def test_large_gemm_is_estimated_without_building_its_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    import torchsim.lowering.templates as templates

    def no_build(*a: Any, **k: Any) -> Any:
        raise AssertionError("build_kernels called for a GEMM estimate")

    monkeypatch.setattr(templates, "build_kernels", no_build)
    call = KernelCall.make(KernelKind.GEMM, m=1 << 20, n=8192, k=8192)
    full = call_events(call, get_profile("h100-sxm"), kernel_sim.EXACT)
    sampled = call_events(call, get_profile("h100-sxm"), DEFAULT_MAX_SIM_EVENTS)
    assert full > 100 * sampled > 0  # extrapolated: its samples, not its full size


def test_cli_max_events_and_yes(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["predict", "llama-tiny", "--prompt", "32", "--decode", "2", "--no-cache", "--workers", "1"]
    assert main([*args, "--max-events", "10"]) == 2
    err = capsys.readouterr().err
    assert "over the limit of 10;" in err and "node events" in err and len(err.strip().splitlines()) == 1
    assert main([*args, "--max-events", "10", "--yes"]) == 0
    assert main([*args, "--max-events", "100000000"]) == 0
    assert main([*args, "--max-events", "0"]) == 2  # must be >= 1


def test_a_workers_estimate_is_call_events_or_none_where_that_refuses_the_call() -> None:
    """`limits.estimate` (what a worker counts for a speculated call) is `call_events`, and None, not an error in the
    worker, for a GEMM too large to lay out: the capturing process then counts, and refuses, the call itself."""
    from torchsim.prediction.limits import estimate

    h100 = get_profile("h100-sxm")
    ok = KernelCall.make(KernelKind.GEMM, epilogue="none", m=4096, n=4096, k=4096)
    assert estimate(ok, h100, DEFAULT_MAX_SIM_EVENTS) == call_events(ok, h100, DEFAULT_MAX_SIM_EVENTS) > 0
    huge = KernelCall.make(KernelKind.GEMM, epilogue="none", m=65536 * 8000, n=4096, k=4096)
    with pytest.raises(SimulationLimitError, match="output tiles"):
        call_events(huge, h100, DEFAULT_MAX_SIM_EVENTS)
    assert estimate(huge, h100, DEFAULT_MAX_SIM_EVENTS) is None
