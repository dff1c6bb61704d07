"""Thread-block clusters: co-scheduling, cluster barriers, the SM-cluster network, and the cluster-fusion study."""

from __future__ import annotations

import numpy as np
import pytest

from torchsim.graph import CtaClass, DType, GraphBuilder, KernelGraph, Op, Space, TileDesc, Unit, aff
from torchsim.hwmodels import get_profile
from torchsim.sim import simulate
from torchsim.sim.noc import ClusterNoc, NocConfig, Placement, Topology
from torchsim.studies.cluster import run_one

H100 = get_profile("h100-sxm")


def test_mesh_matches_crossbar_average_latency_and_total_bandwidth() -> None:
    xbar, mesh = ClusterNoc(NocConfig(Topology.CROSSBAR)), ClusterNoc(NocConfig(Topology.MESH))
    lat = []
    for noc in (xbar, mesh):
        for a in range(16):
            for b in range(16):
                if a != b:
                    noc.transfer(10**7 * (a * 16 + b), a, b, 0.0)  # far apart in time: no queueing
        lat.append(noc.mean_residence_cycles)
    assert lat[0] == pytest.approx(180, abs=1) and lat[1] == pytest.approx(lat[0], rel=0.02)
    total = [sum(link.bytes_per_clk for link in n.links.values()) for n in (xbar, mesh)]
    assert total[1] == pytest.approx(total[0] / 2)  # crossbar counts out + in ports; the mesh one set of links
    assert len(mesh.route(0, 15)) == 6 and mesh.route(0, 1) == [(0, 1)]


def test_topology_aware_placement_is_compact() -> None:
    aware = ClusterNoc(NocConfig(Topology.MESH, Placement.TOPOLOGY_AWARE))
    default = ClusterNoc(NocConfig(Topology.MESH, Placement.DEFAULT))
    free = list(range(16))
    for size, hops in ((2, 2), (4, 16)):  # summed over ordered pairs: 2 neighbours = 2 hops; a 2x2 block = 16
        cells = aware.place(free, size)
        assert cells is not None and len(set(cells)) == size
        assert sum(aware._hops(a, b) for a in cells for b in cells) == hops
        scattered = default.place(free, size)
        assert scattered is not None
        assert sum(default._hops(a, b) for a in scattered for b in scattered) > \
            sum(aware._hops(a, b) for a in cells for b in cells)
    assert aware.place([0, 5], 3) is None


def _pair_kernel(wait_work: float, send_rank: int = 1) -> KernelGraph:
    """Two CTAs of a cluster: rank 1 computes long, then both meet at a cluster barrier; each sends 4 KiB."""
    b = GraphBuilder("pair")
    g = b.group("w", 0, 4)
    bar = b.barrier("cluster:meet", expected=2)
    work = b.node(g, Op.ELEMENTWISE, Unit.FMA, work=wait_work, name="work")
    t = TileDesc(Space.DSMEM, DType.FP32, (1, 1024), "x", (aff(send_rank, peer=1), aff()))
    send = b.node(g, Op.STS, Unit.LDST, work=t.nbytes, tile=t, name="send")
    b.data(work, send)
    arrive = b.node(g, Op.BARRIER_ARRIVE, Unit.NONE, barrier=bar, name="arrive")
    b.data(send, arrive)
    b.node(g, Op.BARRIER_WAIT, Unit.NONE, barrier=bar, name="wait")
    graph = b.build()
    cls = CtaClass(graph, np.array([[0, 1], [1, 0]], dtype=np.int64), ("rank", "peer"), threads=128)
    return KernelGraph("pair", (cls,), attrs={"cluster_size": 2})


def test_cluster_barrier_is_shared_and_dsmem_crosses_the_noc() -> None:
    r = simulate(_pair_kernel(256 * 1000.0, send_rank=0), H100, max_sms=16, record=True)
    recs = {(x.cta, x.name): x for x in r.records or ()}
    assert r.cta_sm is not None and r.cta_sm[0] != r.cta_sm[1]  # co-scheduled on two SMs
    # both CTAs leave the barrier when the later arrival comes: the same cycle
    assert recs[(0, "wait")].issue == recs[(1, "wait")].issue >= recs[(1, "arrive")].issue
    assert r.attrs["noc_requests"] == 2 and r.attrs["noc_mean_residence_cycles"] >= 180
    with pytest.raises(ValueError, match="outside its cluster"):
        simulate(_pair_kernel(10.0, send_rank=1), H100, max_sms=16)  # rank + 1 = 2 is not in a cluster of 2


@pytest.mark.parametrize("cluster", [2, 4])
def test_dsmem_exchange_beats_dram_exchange(cluster: int) -> None:
    dram = run_one(cluster, False, heads=2, kv=1024)
    noc = run_one(cluster, True, heads=2, kv=1024)
    assert noc.cycles < dram.cycles
    assert noc.noc_residence_cycles > 0 and dram.noc_residence_cycles == 0


def test_topology_aware_placement_helps_most_at_small_clusters() -> None:
    ratio = {}
    for c in (2, 16):
        d = run_one(c, True, Topology.MESH, Placement.DEFAULT, heads=2, kv=1024)
        a = run_one(c, True, Topology.MESH, Placement.TOPOLOGY_AWARE, heads=2, kv=1024)
        ratio[c] = d.noc_residence_cycles / a.noc_residence_cycles
    assert ratio[2] > 1.5 and ratio[2] > ratio[16]
    assert ratio[16] == pytest.approx(1.0, abs=0.15)  # the full mesh leaves no freedom
