"""The links between GPUs of one system: NVLink 3/4/5 through NVSwitch, and PCIe Gen5 through host switches.

Each figure is a Quantity with provenance. Bandwidths are per direction (a "900 GB/s" NVLink4 GPU moves
450 GB/s each way). The NCCL figures below are read from NVIDIA's NCCL sources (github NVIDIA/nccl, named by
file and commit): they are the link rates and per-step latencies NCCL's own tuner assumes, which torchsim uses
as the effective (post-protocol-overhead) figures of the link; torchsim's model around them is its own
(torchsim.sim.collectives, docs/collectives.md).

`LinkSpec` is one kind of link; `LINKS` the built-in ones. A system (torchsim.hwmodels.systems) combines a
device profile, a LinkSpec and the switch's capabilities.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchsim.hwmodels.gpu import A100, B200, H100, H200, fact
from torchsim.hwmodels.quantity import Quantity, assumed, derived, doc

NCCL = "github NVIDIA/nccl @ 5067397c2676d5aed50042fc39e5c8ee96eb0027"
NCCL_TOPO = NCCL + " src/graph/topo.h"
NCCL_TUNING = NCCL + " src/graph/tuning.cc"
NCCL_NVLS = NCCL + " src/transport/nvls.cc"
# NVIDIA's NCCL maintainer on DGX H100 (nccl-tests issue #212, 2024-05-06): 450 GB/s line rate, ~20% protocol
# overhead, ~370 GB/s effective NVLink bandwidth seen as ring busBw; NVLS all-reduce peaks at ~480 GB/s busBw
NCCL_212 = "github NVIDIA/nccl-tests issue #212 (sjeaugey, 2024-05-06)"
H100_PCIE_BRIEF = ("NVIDIA H100 PCIe GPU Product Brief PB-11133-001_v02 (Nov 2022), as reproduced by manuals.plus; "
                   "spec table reproduced by archive-lib.hpctech.co.jp/gpuproduct/nvidia-h100.html")
PCIE5 = ("PCI Express Base Specification 5.0: 32 GT/s per lane, 128b/130b encoding; x16 = 16 x 32e9 x 128/130 / 8 "
         "= 63.0 GB/s per direction")


@dataclass(frozen=True)
class LinkSpec:
    """One kind of GPU-to-GPU link. Per-direction figures; latencies are NCCL's per-step costs per protocol."""

    name: str
    generation: str
    links_per_device: Quantity  # lanes/links from one GPU into the fabric (1 for a PCIe slot)
    link_bytes_per_s: Quantity  # raw rate of one link, one direction
    link_effective_bytes_per_s: Quantity  # what a copy sustains on one link after protocol overhead
    # per-step latency of a ring step, by protocol (what NCCL charges each of a ring's steps)
    ring_step_ll_s: Quantity
    ring_step_ll128_s: Quantity
    ring_step_simple_s: Quantity
    # per-step latency of a tree (chain) step, by protocol
    tree_step_ll_s: Quantity
    tree_step_ll128_s: Quantity
    tree_step_simple_s: Quantity
    ll128: bool  # NCCL enables LL128 on this path (NVLink: yes; through a PCIe host bridge: no)

    def quantities(self) -> dict[str, Quantity]:
        return {k: v for k, v in vars(self).items() if isinstance(v, Quantity)}


_NVL_LAT = dict(
    ring_step_ll_s=doc(0.6e-6, "s", NCCL_TUNING + " hwLatencies[NVLINK][Ring][LL]"),
    ring_step_ll128_s=doc(1.9e-6, "s", NCCL_TUNING + " hwLatencies[NVLINK][Ring][LL128]"),
    ring_step_simple_s=doc(3.4e-6, "s", NCCL_TUNING + " hwLatencies[NVLINK][Ring][Simple]"),
    tree_step_ll_s=doc(0.6e-6, "s", NCCL_TUNING + " hwLatencies[NVLINK][Tree][LL]"),
    tree_step_ll128_s=doc(1.25e-6, "s", NCCL_TUNING + " hwLatencies[NVLINK][Tree][LL128]"),
    tree_step_simple_s=doc(4.0e-6, "s", NCCL_TUNING + " hwLatencies[NVLINK][Tree][Simple]"),
)

NVLINK3 = LinkSpec(
    name="nvlink3", generation="NVLink3 + NVSwitch gen2",
    links_per_device=doc(12, "links", fact(A100, "interconnect.nvlink")),
    link_bytes_per_s=derived(25e9, "B/s", fact(A100, "interconnect.nvlink") + ": 600 GB/s / 12 links / 2 directions"),
    link_effective_bytes_per_s=doc(20e9, "B/s", NCCL_TOPO + " SM80_NVLINK_BW (NCCL's per-link rate on sm80)"),
    ll128=True, **_NVL_LAT)

NVLINK4 = LinkSpec(
    name="nvlink4", generation="NVLink4 + NVSwitch gen3",
    links_per_device=doc(18, "links", fact(H100, "interconnect.nvlink")),
    link_bytes_per_s=derived(25e9, "B/s", fact(H100, "interconnect.nvlink") + ": 900 GB/s / 18 links / 2 directions"),
    link_effective_bytes_per_s=doc(20.6e9, "B/s", NCCL_TOPO + " SM90_NVLINK_BW (NCCL's per-link rate on sm90); "
                                   "18 x 20.6 = 371 GB/s matches the ~370 GB/s effective of " + NCCL_212),
    ll128=True, **_NVL_LAT)

NVLINK5 = LinkSpec(
    name="nvlink5", generation="NVLink5 + NVSwitch gen4",
    links_per_device=doc(18, "links", fact(B200, "interconnect.nvlink")),
    link_bytes_per_s=derived(50e9, "B/s", fact(B200, "interconnect.nvlink") + ": 1.8 TB/s / 18 links / 2 directions"),
    link_effective_bytes_per_s=doc(40.1e9, "B/s", NCCL_TOPO + " SM100_NVLINK_BW (NCCL's per-link rate on sm100)"),
    ll128=True, **_NVL_LAT)

PCIE5_HOST = LinkSpec(
    name="pcie5", generation="PCIe Gen5 x16 through host PCIe switches (no NVLink bridges)",
    links_per_device=doc(1, "links", H100_PCIE_BRIEF + ": one PCIe Gen5 x16 interface, 128 GB/s bidirectional"),
    link_bytes_per_s=derived(63.0e9, "B/s", PCIE5),
    link_effective_bytes_per_s=assumed(50.4e9, "B/s", "assumed: 0.8 x the 63.0 GB/s raw rate (TLP header and "
                                       "flow-control overhead at 256 B max payload; NCCL's own PCIe Gen5 figure "
                                       "depends on the topology it detects, no measurement of this box found)"),
    ring_step_ll_s=doc(1.0e-6, "s", NCCL_TUNING + " hwLatencies[PCI][Ring][LL]"),
    ring_step_ll128_s=doc(2.5e-6, "s", NCCL_TUNING + " hwLatencies[PCI][Ring][LL128]"),
    ring_step_simple_s=doc(5.7e-6, "s", NCCL_TUNING + " hwLatencies[PCI][Ring][Simple]"),
    tree_step_ll_s=doc(1.0e-6, "s", NCCL_TUNING + " hwLatencies[PCI][Tree][LL]"),
    tree_step_ll128_s=doc(1.9e-6, "s", NCCL_TUNING + " hwLatencies[PCI][Tree][LL128]"),
    tree_step_simple_s=doc(4.0e-6, "s", NCCL_TUNING + " hwLatencies[PCI][Tree][Simple]"),
    ll128=False)

LINKS: dict[str, LinkSpec] = {s.name: s for s in (NVLINK3, NVLINK4, NVLINK5, PCIE5_HOST)}

__all__ = ["LINKS", "NCCL", "NCCL_212", "NCCL_NVLS", "NCCL_TUNING", "NVLINK3", "NVLINK4", "NVLINK5",
           "PCIE5_HOST", "H100_PCIE_BRIEF", "LinkSpec", "H200"]
