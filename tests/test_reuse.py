"""torchsim.prediction.reuse: calls interpolated along a size their time is affine in match their full simulation."""

from __future__ import annotations

import pytest

from torchsim.hwmodels import get_profile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.prediction import reuse
from torchsim.prediction.kernel_sim import EXACT, KernelSim, clear_memo, merged, simulate_launches, simulate_many

BOUND = 0.02  # the stated worst-case error (torchsim.prediction.repeats), which interpolation must keep


def _decode(kv: int) -> KernelCall:
    return KernelCall.make(KernelKind.ATTENTION_DECODE, batch=8, heads_q=32, heads_kv=8, seq_q=1, seq_kv=kv,
                           head_dim=128)


def _gemm(m: int) -> KernelCall:
    return KernelCall.make(KernelKind.GEMM, m=m, n=4096, k=4096)


def _full(call: KernelCall, hw: object) -> KernelSim:
    clear_memo()
    return merged(simulate_launches(call, hw, max_events=EXACT))


@pytest.mark.parametrize("calls", [[_decode(kv) for kv in (2049, 2400, 2750, 3100, 3450, 3800, 4150, 4500, 5000)],
                                   [_gemm(m) for m in (1, 4, 8, 16, 24, 32, 48, 64)]], ids=["decode-kv", "gemm-m"])
def test_interpolated_calls_match_their_full_simulation(calls: list[KernelCall]) -> None:
    hw = get_profile("h100-sxm")
    clear_memo()
    got = simulate_many(calls, hw)
    interpolated = [(c, s) for c, s in zip(calls, got) if s.method.startswith("interpolated-")]
    assert len(interpolated) >= 2  # few simulations served the group
    assert all(s.events == 0 and "between simulated" in s.extrapolation for _, s in interpolated)
    for c, s in interpolated:
        full = _full(c, hw)
        assert full.method == "exact"
        assert s.time_s == pytest.approx(full.time_s, rel=BOUND), c.params


def test_exact_simulates_every_call() -> None:
    hw = get_profile("h100-sxm")
    clear_memo()
    got = simulate_many([_gemm(m) for m in (1, 8, 16, 32, 64)], hw, max_events=EXACT)
    assert {s.method for s in got} == {"exact"}


def test_calls_of_another_configuration_are_not_grouped() -> None:
    hw = get_profile("h100-sxm")
    small, large = reuse.reuse_key(_gemm(16), hw), reuse.reuse_key(_gemm(4096), hw)
    assert small is not None and small[1] == "m" and large is None  # M above the tile height: not affine
    other_n = reuse.reuse_key(KernelCall.make(KernelKind.GEMM, m=16, n=8192, k=4096), hw)
    assert other_n is not None and other_n[0] != small[0]
    assert reuse.reuse_key(_gemm(16), get_profile("wormhole-n150")) is None


def _sim(t: float) -> KernelSim:
    return KernelSim(template="t", config={}, cycles=int(t * 1e9), time_s=t, flops=1.0, dram_bytes=t, l2_hit_rate=0.5)


def test_a_group_off_its_line_is_simulated_in_full() -> None:
    calls = [_gemm(m) for m in (1, 2, 3, 4, 5)]
    group = [("m", [(int(c.p("m")), c) for c in calls])]
    times = {1: 1.0, 3: 2.5, 5: 3.0}  # the middle anchor is 25% above the line through the ends
    done, again = reuse.derive(group, lambda c: (_sim(times[int(c.p("m"))]),))
    assert not done and sorted(int(c.p("m")) for c in again) == [2, 4]
    times[3] = 2.0  # on the line: the others are interpolated between their neighbours
    done, again = reuse.derive(group, lambda c: (_sim(times[int(c.p("m"))]),))
    assert not again and done[calls[1].key()][0].time_s == pytest.approx(1.5)
    assert done[calls[3].key()][0].method == "interpolated-m"
