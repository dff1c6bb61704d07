"""Golden cases with cycle counts derived by hand from the profile's numbers, and an exact event log."""

from __future__ import annotations

import math

import pytest

from tests.helpers import one_cta
from torchsim.graph import DType, GraphBuilder, Op, Space, TileDesc, Unit, aff
from torchsim.hwmodels import get_profile
from torchsim.sim import DeadlockError, simulate

H100 = get_profile("h100-sxm")
LAUNCH = int(H100.cta_launch_cycles.value)


@pytest.mark.parametrize("n", [1, 5, 17])
def test_chain_of_dependent_nodes_on_one_unit(n: int) -> None:
    b = GraphBuilder("chain")
    w = b.group("w")
    work = 2560.0  # FLOPs: 10 cycles on 256 FLOP/clk
    prev = None
    for _ in range(n):
        node = b.node(w, Op.ELEMENTWISE, Unit.FMA, work)
        if prev is not None:
            b.data(prev, node)
        prev = node
    res = simulate(one_cta(b.build()), H100)
    occ = math.ceil(work / H100.fma_flop_per_clk_per_sm.value)
    assert res.cycles == LAUNCH + n * (occ + int(H100.fma_latency_cycles.value))


def test_bandwidth_bound_bulk_copy() -> None:
    """132 CTAs each TMA-load 1 MiB of distinct data: DRAM streams it all, then the last byte's latency."""
    nbytes = 1 << 20
    b = GraphBuilder("copy")
    w = b.group("w")
    t = TileDesc(Space.GLOBAL, DType.BF16, (512, 1024), "X", (aff(c=1), aff()))
    b.node(w, Op.TMA_LOAD, Unit.TMA, t.nbytes, tile=t)
    ctas = H100.sms
    res = simulate(one_cta(b.build(), count=ctas), H100)
    dram_bytes_per_cycle = H100.dram_bytes_per_s_value / H100.clock_hz_value
    stream = ctas * nbytes / dram_bytes_per_cycle
    latency = H100.dram_latency_cycles.value + H100.tma_latency_cycles.value
    assert res.cycles == math.ceil(LAUNCH + stream + latency)
    assert res.bound == "DRAM bandwidth"
    assert res.dram_bytes == ctas * nbytes


def test_single_sm_gemm_bound_by_tensor_pipe() -> None:
    """Two small TMA loads feed eight back-to-back 128x256x64 MMAs on one SM."""
    b = GraphBuilder("gemm1", program_order=True)
    pa, pb, mw = b.group("tma_a", 0), b.group("tma_b", 1), b.group("mma", 4, 4)
    ta = TileDesc(Space.GLOBAL, DType.BF16, (64, 64), "A")
    tb = TileDesc(Space.GLOBAL, DType.BF16, (64, 64), "B")
    la = b.node(pa, Op.TMA_LOAD, Unit.TMA, ta.nbytes, tile=ta)
    lb = b.node(pb, Op.TMA_LOAD, Unit.TMA, tb.nbytes, tile=tb)
    flops = 2.0 * 128 * 256 * 64
    for _ in range(8):
        m = b.node(mw, Op.MMA, Unit.TENSOR, flops)
        b.data(la, m)
        b.data(lb, m)
    res = simulate(one_cta(b.build(), threads=192), H100, max_sms=1)
    tma = H100.tma_bytes_per_clk_per_sm.value
    # both loads issue at LAUNCH on their own subpartitions; the TMA engine serialises them: 8192 B each
    loads_done = LAUNCH + 2 * math.ceil(8192 / tma) + H100.dram_latency_cycles.value + H100.tma_latency_cycles.value
    occ = math.ceil(flops / H100.tensor_bf16_flop_per_clk_per_sm.value)
    assert res.cycles == loads_done + 8 * occ + H100.tensor_latency_cycles.value
    assert res.bound == "tensor pipe"


def test_exact_event_log() -> None:
    b = GraphBuilder("log", program_order=False)
    w0, w1 = b.group("w0", 0), b.group("w1", 1)
    a = b.node(w0, Op.ELEMENTWISE, Unit.FMA, 2560, name="a")
    bb = b.node(w0, Op.ELEMENTWISE, Unit.FMA, 2560, name="b")
    c = b.node(w1, Op.ELEMENTWISE, Unit.FMA, 2560, name="c")
    b.data(a, bb)
    b.order(a, c)
    res = simulate(one_cta(b.build()), H100, record=True)
    assert res.records is not None
    log = [(r.name, r.issue, r.end) for r in sorted(res.records, key=lambda r: (r.issue, r.name))]
    # a issues at launch (10-cycle occupancy, 4-cycle latency); c's ORDER edge releases when a issues, but the
    # FMA pipe is busy until 210; b's DATA edge releases when a completes at 214, the pipe is busy until 220.
    assert log == [("a", 200, 214), ("c", 210, 224), ("b", 220, 234)]
    assert res.cycles == 234
    waits = {r.name: r.wait_reason for r in res.records}
    assert waits["b"] == "data" and waits["c"] == "order"


def test_same_input_same_output() -> None:
    from torchsim.lowering.templates import gemm
    kg = gemm(1024, 2048, 512, DType.BF16, H100)
    r1, r2 = simulate(kg, H100, record=True), simulate(kg, H100, record=True)
    assert r1.cycles == r2.cycles and r1.records == r2.records and r1.stalls == r2.stalls


def test_deadlock_names_the_waiting_barrier() -> None:
    b = GraphBuilder("stuck")
    w = b.group("consumer")
    bar = b.barrier("full", expected=1)
    b.node(w, Op.ELEMENTWISE, Unit.FMA, 256, name="work")
    b.node(w, Op.BARRIER_WAIT, Unit.NONE, barrier=bar, name="wait_full")
    b.node(w, Op.ELEMENTWISE, Unit.FMA, 256, name="after")
    with pytest.raises(DeadlockError) as err:
        simulate(one_cta(b.build()), H100)
    msg = str(err.value)
    assert "wait_full" in msg and "barrier 'full' has 0 of 1 arrivals" in msg
    assert "after" in msg and "order edge from node 1 'wait_full'" in msg


def test_barrier_arrive_releases_wait() -> None:
    b = GraphBuilder("handshake")
    p, c = b.group("producer", 0), b.group("consumer", 1)
    bar = b.barrier("full", expected=1)
    b.node(p, Op.ELEMENTWISE, Unit.FMA, 2560, name="produce")
    b.node(p, Op.BARRIER_ARRIVE, Unit.NONE, barrier=bar, name="arrive")
    b.node(c, Op.BARRIER_WAIT, Unit.NONE, barrier=bar, name="wait")
    b.node(c, Op.ELEMENTWISE, Unit.FMA, 2560, name="consume")
    res = simulate(one_cta(b.build()), H100, record=True)
    assert res.records is not None
    t = {r.name: r.issue for r in res.records}
    # arrive issues once produce issued (program order) and the FMA pipe took it; consume waits for the pipe
    assert t["wait"] == t["arrive"] and t["consume"] >= t["wait"]


def test_unit_missing_on_profile_names_node() -> None:
    b = GraphBuilder("tma_on_a100")
    w = b.group("w")
    t = TileDesc(Space.GLOBAL, DType.BF16, (64, 64), "A")
    b.node(w, Op.TMA_LOAD, Unit.TMA, t.nbytes, tile=t, name="tma_load_A")
    with pytest.raises(ValueError, match="tma_load_A.*needs unit TMA.*a100-sxm"):
        simulate(one_cta(b.build()), get_profile("a100-sxm"))


def test_tile_larger_than_shared_memory_names_node() -> None:
    b = GraphBuilder("huge")
    w = b.group("w")
    t = TileDesc(Space.SHARED, DType.BF16, (512, 512), "buf")
    b.node(w, Op.STS, Unit.LDST, t.nbytes, tile=t, name="sts_huge")
    with pytest.raises(ValueError, match="sts_huge.*shared-memory tile of 524288 B"):
        simulate(one_cta(b.build()), H100)


def test_dirty_l2_lines_are_written_back_as_the_kernel_evicts_them() -> None:
    """A launch that finds L2 full of dirty lines (a benchmark's zeroing flush) writes one back for every byte its
    own traffic brings through DRAM: a bandwidth-bound copy moves up to twice its bytes, never more than the L2
    holds extra, and never finishes sooner."""
    b = GraphBuilder("copy")
    w = b.group("w")
    t = TileDesc(Space.GLOBAL, DType.BF16, (512, 1024), "X", (aff(c=1), aff()))
    b.node(w, Op.TMA_LOAD, Unit.TMA, t.nbytes, tile=t)
    kg = one_cta(b.build(), count=H100.sms)
    clean = simulate(kg, H100)
    l2 = float(H100.l2_bytes.value)
    small = simulate(kg, H100, l2_dirty_bytes=clean.dram_bytes / 4)
    full = simulate(kg, H100, l2_dirty_bytes=10 * l2)  # capped at the L2's size
    assert clean.cycles < small.cycles < full.cycles
    assert small.dram_bytes == pytest.approx(clean.dram_bytes * 1.25)
    assert full.dram_bytes == pytest.approx(clean.dram_bytes + min(l2, clean.dram_bytes))
    with pytest.raises(ValueError, match="l2_dirty_bytes"):
        simulate(kg, H100, l2_dirty_bytes=-1.0)
