"""Issue policies as plug-ins: two-level and cache-conscious (CCWS) beside GTO/RR; the L1 model of the LDG path."""

from __future__ import annotations

import pytest

from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.lowering.templates import gemm
from torchsim.sim import POLICIES, CacheConscious, get_policy, simulate
from torchsim.sim.l1 import L1Cache, tile_lines
from torchsim.studies.policies import loop_kernel, one_sm_profile, run_loop, run_tma_gemm


def test_registry_and_cli_names() -> None:
    for name in ("gto", "rr", "lrr", "two-level", "ccws"):
        assert name in POLICIES
    assert get_policy("ccws") is CacheConscious
    with pytest.raises(ValueError, match="unknown issue policy 'fifo'.*ccws"):
        get_policy("fifo")
    with pytest.raises(ValueError, match="no parameter"):
        CacheConscious.configure(k=1)


def test_tile_lines_follow_coordinates() -> None:
    a = tile_lines(("X", 3, 0), (8, 64), 2.0)  # bf16 rows of 128 B: one line per row
    assert len(a) == 8 and a[0] == ("X", 24, 0)
    wide = tile_lines(("X", 0, 1), (2, 128), 2.0)  # 256 B rows starting at byte 256
    assert wide == (("X", 0, 2), ("X", 0, 3), ("X", 1, 2), ("X", 1, 3))
    # a tile of another shape over the same rows shares lines
    assert set(tile_lines(("X", 1, 0), (16, 64), 2.0)) >= set(a)


def test_l1_lru_evicts_and_reports_owner() -> None:
    seen: list[tuple[str, int, object]] = []

    class Obs:
        def l1_miss(self, owner: int, line: object, t: int) -> None:
            seen.append(("miss", owner, line))

        def l1_evict(self, owner: int, line: object) -> None:
            seen.append(("evict", owner, line))

    c = L1Cache(2 * 128, observer=Obs())
    assert c.access(("a", "b"), 7, 0) == 2
    assert c.access(("a",), 7, 1) == 0  # hit refreshes a
    assert c.access(("c",), 9, 2) == 1  # evicts b, the least recently used
    assert seen[-2:] == [("miss", 9, "c"), ("evict", 7, "b")]
    assert (c.hits, c.misses) == (1, 3)
    with pytest.raises(ValueError, match="l1_bytes_per_sm"):
        L1Cache(64)


def test_l1_hits_make_repeated_loads_faster() -> None:
    hw = one_sm_profile()
    kg = loop_kernel(True, warps=1, iters=8)  # one warp: its 2 KiB working set stays in L1
    on, off = simulate(kg, hw, max_sms=1), simulate(kg, hw, max_sms=1, l1=False)
    assert on.attrs["l1_hit_rate"] > 0.5 and "l1_hit_rate" not in off.attrs
    assert on.cycles < off.cycles


def test_ccws_cuts_misses_where_warps_reuse_their_data() -> None:
    rows = {p: run_loop(True, p) for p in ("gto", "rr", "two-level", "ccws")}
    ccws = rows["ccws"]
    assert ccws.vta_hits > 0
    for p in ("gto", "rr", "two-level"):
        assert ccws.misses_per_kop < 0.6 * rows[p].misses_per_kop, (p, rows[p], ccws)
        assert ccws.cycles < rows[p].cycles  # bandwidth-bound at L2: fewer misses is also faster here


def test_ccws_costs_little_on_a_stream() -> None:
    gto, ccws = run_loop(False, "gto"), run_loop(False, "ccws")
    assert ccws.vta_hits == 0  # no lost locality, so no throttling
    assert ccws.cycles <= 1.05 * gto.cycles
    assert ccws.misses_per_kop == pytest.approx(gto.misses_per_kop)


def test_tma_gemm_barely_depends_on_the_policy() -> None:
    rows = [run_tma_gemm(p, size=1024) for p in ("gto", "rr", "two-level", "ccws")]
    cycles = [r.cycles for r in rows]
    assert max(cycles) <= 1.05 * min(cycles)
    assert all(r.l1_misses == 0 for r in rows)  # TMA bypasses L1


def test_two_level_is_deterministic() -> None:
    hw = get_profile("a100-sxm")
    kg = gemm(512, 512, 512, DType.BF16, hw)
    a = simulate(kg, hw, policy="two-level")
    b = simulate(kg, hw, policy="two-level")
    assert a.cycles == b.cycles and a.stalls == b.stalls
    assert a.attrs["policy"] == "two-level"


def test_default_policy_scope_and_predict_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from torchsim.cli import main
    from torchsim.sim.policy import current_default, default_policy, policy_profile

    kg = loop_kernel(True, iters=4)
    hw = one_sm_profile()
    with default_policy("ccws") as pol:
        assert current_default() is pol and policy_profile("h100-sxm", pol).name == "h100-sxm+ccws"
        assert simulate(kg, hw, max_sms=1).attrs["policy"] == "ccws"
    assert simulate(kg, hw, max_sms=1).attrs["policy"] == "gto"
    assert main(["predict", "llama-tiny", "--prompt", "16", "--decode", "1", "--policy", "two-level",
                 "--no-progress", "--no-cache"]) == 0
    assert "h100-sxm+two-level" in capsys.readouterr().out
    assert main(["predict", "llama-tiny", "--policy", "fifo"]) == 2
    assert "unknown issue policy 'fifo'" in capsys.readouterr().err
