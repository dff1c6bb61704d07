"""NoC physics of the Tensix model: per-hop latency along each NoC's direction, link sharing, multicast, DRAM."""

from __future__ import annotations

import pytest

from torchsim.hwmodels.tensix.dram import InterleavedBuffer, ReadStream, adjacent_readers, run_read_streams
from torchsim.hwmodels.tensix.noc import NocId, NocModel, NocTopology, Rect
from torchsim.hwmodels.tensix.profiles import blackhole_p150, wormhole_n150

PROFILES = [wormhole_n150(), blackhole_p150()]


@pytest.mark.parametrize("hw", PROFILES, ids=lambda p: p.name)
def test_latency_grows_by_documented_hop_cost_along_the_routing_direction(hw):
    noc = NocModel(hw)
    hop, niu = float(hw.noc_hop_cycles), float(hw.noc_niu_cycles)
    src = hw.worker_xy[0]
    nx = int(hw.noc_grid_x)
    lat0 = [noc.latency(src, ((src[0] + k) % nx, src[1]), NocId.NOC0) for k in range(1, 6)]
    assert [b - a for a, b in zip(lat0, lat0[1:])] == [hop] * 4
    assert lat0[0] == 2 * niu + hop
    # NoC1 runs the other way: the same +x neighbours get further away, hop by hop
    lat1 = [noc.latency(src, ((src[0] + k) % nx, src[1]), NocId.NOC1) for k in range(1, 6)]
    assert [a - b for a, b in zip(lat1, lat1[1:])] == [hop] * 4
    assert lat1[0] == 2 * niu + hop * (nx - 1)  # the wrong NoC goes the long way round the ring


def test_routes_turn_once_x_first_on_noc0_and_y_first_on_noc1():
    topo = NocTopology(10, 12)
    r0 = topo.route((1, 1), (3, 4), NocId.NOC0)
    r1 = topo.route((3, 4), (1, 1), NocId.NOC1)
    assert [lid % 2 for lid in r0] == [0, 0, 1, 1, 1]  # two x-links, then three y-links
    assert [lid % 2 for lid in r1] == [1, 1, 1, 0, 0]
    assert len(set(r0) & set(r1)) == 0  # the two NoCs are physically separate


def _stream_bw(noc: NocModel, flows: list[tuple[tuple[int, int], tuple[int, int]]], nbytes: float, count: int):
    """Every flow offers `count` writes at cycle 0, interleaved; returns each flow's bytes/cycle."""
    end = [0.0] * len(flows)
    for _ in range(count):
        for i, (s, d) in enumerate(flows):
            end[i] = max(end[i], noc.write(0.0, s, d, nbytes, NocId.NOC0))
    return [nbytes * count / e for e in end]


@pytest.mark.parametrize("hw", PROFILES, ids=lambda p: p.name)
def test_two_flows_sharing_a_link_each_get_about_half_the_bandwidth(hw):
    y = hw.worker_xy[0][1]
    nbytes = float(hw.noc_max_packet_bytes)
    link = float(hw.noc_flit_bytes) * 256 / 257  # one header flit per 256 data flits
    alone = _stream_bw(NocModel(hw), [((1, y), (4, y))], nbytes, 64)[0]
    assert alone == pytest.approx(min(link, float(hw.noc_niu_bytes_per_clk)), rel=0.05)
    # (2,y)->(3,y) uses the link (2,y)->(3,y) that (1,y)->(4,y) also crosses
    shared = _stream_bw(NocModel(hw), [((1, y), (4, y)), ((2, y), (3, y))], nbytes, 64)
    for bw in shared:
        assert bw == pytest.approx(link / 2, rel=0.1)
    # flows on disjoint links do not slow each other
    disjoint = _stream_bw(NocModel(hw), [((1, y), (2, y)), ((3, y), (4, y))], nbytes, 64)
    assert min(disjoint) == pytest.approx(alone, rel=0.02)


@pytest.mark.parametrize("hw", PROFILES, ids=lambda p: p.name)
def test_multicast_costs_less_than_the_equivalent_unicasts(hw):
    row = [xy for xy in hw.worker_xy if xy[1] == hw.worker_xy[0][1]]
    src, dests = row[0], row[1:]
    rect = Rect(min(x for x, _ in dests), dests[0][1], max(x for x, _ in dests), dests[0][1])
    nbytes = 32 * 2048.0
    mc = NocModel(hw)
    t_mc = mc.multicast(0.0, src, dests, rect, nbytes, NocId.NOC0)
    uc = NocModel(hw)
    t_uc = max(uc.write(0.0, src, d, nbytes, NocId.NOC0) for d in dests)
    assert t_mc < t_uc / 2
    assert mc.link_busy().sum() < uc.link_busy().sum()
    # the multicast still reaches the farthest core no sooner than a unicast to it alone would
    assert t_mc >= NocModel(hw).write(0.0, src, dests[-1], nbytes, NocId.NOC0) - 1e-9


def test_interleaved_pages_round_robin_over_banks():
    buf = InterleavedBuffer("w", pages=100, page_bytes=1088, banks=12, first_bank=3)
    assert [buf.bank_of(p) for p in range(4)] == [3, 4, 5, 6]
    counts = buf.pages_per_bank()
    assert counts.sum() == 100 and counts.max() - counts.min() == 1
    with pytest.raises(IndexError, match="buffer 'w' has pages 0..99"):
        buf.bank_of(100)


@pytest.mark.parametrize("hw", PROFILES, ids=lambda p: p.name)
def test_dram_read_bandwidth_is_bounded_by_the_banks_and_scales_with_readers(hw):
    readers = adjacent_readers(hw)
    banks = int(hw.dram_banks)
    pk = float(hw.noc_max_packet_bytes)

    def bw(n_readers: int) -> float:
        streams = [ReadStream(readers[b], (b,), pk, 24, NocId.NOC0, outstanding=4) for b in range(n_readers)]
        end, _ = run_read_streams(hw, streams)
        return pk * 24 * n_readers / end * hw.clock_hz_value

    full, half = bw(banks), bw(banks // 2)
    assert full <= hw.dram_bytes_per_s_value * 1.001
    assert full > 0.8 * hw.dram_bytes_per_s_value
    assert full == pytest.approx(2 * half, rel=0.1)


def test_a_dram_bank_does_not_idle_for_a_request_held_up_upstream():
    """A read whose request waits behind its core's busy NIU (a multicast sender, say) books its bank slot as if
    on time: a read issued after it (in the engine's order) but reaching the bank first is served at once, not
    after the held-up one's late arrival."""
    hw = wormhole_n150()
    noc = NocModel(hw)
    bank_xy = hw.dram_bank_xy[0]
    a, b = (2, 2), (7, 8)
    noc.write(0, a, (3, 3), 1 << 20, NocId.NOC0)  # A's NIU is busy for ~37k cycles
    held = noc.read(0, a, bank_xy, 16384, NocId.NOC0, bank=0)
    quick = noc.read(0, b, bank_xy, 16384, NocId.NOC1, bank=0)  # the other NoC: only the bank is shared
    service = 16384 / (float(hw.dram_bank_bytes_per_s) / hw.clock_hz_value)
    assert held > (1 << 20) / float(hw.noc_niu_bytes_per_clk)
    assert quick < 2 * service + 4 * noc.latency(b, bank_xy, NocId.NOC1) + float(hw.dram_latency_cycles) + 200
    assert noc.bank_busy()[0] == pytest.approx(2 * service)  # the bank's work is conserved
