"""Multi-GPU systems: a single-GPU profile (torchsim.hwmodels.gpu, never copied) times a device count, joined by
an interconnect (torchsim.hwmodels.interconnect) and a switch with or without in-network reduction.

    dgx-h100    8 x H100 SXM, NVLink4 + NVSwitch gen3 (NVLS in-network reduction)
    dgx-h200    8 x H200,     NVLink4 + NVSwitch gen3 (NVLS)
    dgx-b200    8 x B200,     NVLink5 + NVSwitch gen4 (NVLS)
    hgx-a100    8 x A100 SXM, NVLink3 + NVSwitch gen2 (no in-network reduction)
    h100-pcie-8 8 x H100 PCIe, PCIe Gen5 x16 through two host PCIe trees (4 GPUs a CPU socket), no NVLink

and the Tenstorrent meshes of torchsim.hwmodels.tensix.mesh (n300, t3000, p150x4: Tensix chips over Ethernet,
costed as tt-metal's CCL ops), registered here beside them (`AnySystem` is either kind).

`get_system("dgx-h100")`; a `.toml` name is a what-if whose `base` is a system (torchsim.hwmodels.whatif), e.g.
`link_effective_bytes_per_s = "30 GB/s"` or `links_per_device = 12`. Every number is a Quantity with
provenance; `quantities()` lists them (the device's own numbers stay on `device`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields, replace
from typing import Any

from torchsim.hwmodels.gpu import H100, H200, GpuProfile, a100_sxm, b200, fact, h100_sxm, h200
from torchsim.hwmodels.interconnect import (
    H100_PCIE_BRIEF,
    NCCL,
    NCCL_212,
    NCCL_NVLS,
    NCCL_TUNING,
    NVLINK3,
    NVLINK4,
    NVLINK5,
    PCIE5_HOST,
    LinkSpec,
)
from torchsim.hwmodels.quantity import Quantity, assumed, calibrated, derived, doc
from torchsim.hwmodels.tensix.mesh import TENSIX_SYSTEMS, TensixSystem

COUNT_FIELDS = ("device_count", "links_per_device", "ring_channels", "nvls_channels", "devices_per_host_bridge")


@dataclass(frozen=True)
class SystemProfile:
    """`device_count` copies of `device` joined by one interconnect. Bandwidths per direction, per GPU."""

    name: str
    description: str
    device: GpuProfile
    link: str  # the LinkSpec's name (nvlink3/4/5, pcie5)
    fabric: str  # "nvswitch" or "pcie"
    in_network_reduction: bool  # NVLS: the switch reduces (multimem.ld_reduce) and multicasts
    ll128: bool  # NCCL enables the LL128 protocol on this path
    device_count: Quantity
    links_per_device: Quantity
    link_bytes_per_s: Quantity
    link_effective_bytes_per_s: Quantity
    ring_step_ll_s: Quantity
    ring_step_ll128_s: Quantity
    ring_step_simple_s: Quantity
    tree_step_ll_s: Quantity
    tree_step_ll128_s: Quantity
    tree_step_simple_s: Quantity
    nvls_step_s: Quantity  # latency of one NVLS operation through the switch
    nvls_efficiency: Quantity  # fraction of the link rate NVLS traffic sustains
    nvls_channels: Quantity  # CTAs (SMs) an NVLS collective runs on
    ring_channels: Quantity  # CTAs (SMs) a ring/tree collective runs on
    # per-CTA limits of NCCL's kernels on this GPU generation (LL packs 4 B of data with a 4 B flag; one CTA
    # of LL128 or tree code moves at most this much)
    ll_max_bytes_per_s: Quantity
    ring_ll128_channel_bytes_per_s: Quantity
    tree_channel_bytes_per_s: Quantity
    tree_ll128_channel_bytes_per_s: Quantity
    # PCIe systems: GPUs under one CPU socket and the socket-to-socket link a ring or all-to-all crosses
    devices_per_host_bridge: Quantity
    host_bridge_bytes_per_s: Quantity
    # host-side time to enqueue one collective without CUDA graphs (NCCL's enqueue + the kernel launch): back-to-
    # back eager collectives run no faster than one per this (nccl-tests' default, graph: 0)
    host_enqueue_s: Quantity

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Quantity) and v.value < 0:
                raise ValueError(f"system {self.name!r}: field {f.name} is negative ({v.value} {v.unit})")
        for name in COUNT_FIELDS:
            v = getattr(self, name).value
            if v < 1 or v != int(v):
                raise ValueError(f"system {self.name!r}: field {name} must be a whole number >= 1, got {v:g}")
        for name in ("link_bytes_per_s", "link_effective_bytes_per_s", "ll_max_bytes_per_s", "host_enqueue_s",
                     "ring_ll128_channel_bytes_per_s", "tree_channel_bytes_per_s", "tree_ll128_channel_bytes_per_s",
                     "host_bridge_bytes_per_s"):
            if getattr(self, name).value <= 0:
                raise ValueError(f"system {self.name!r}: field {name} must be > 0")
        if self.link_effective_bytes_per_s.value > self.link_bytes_per_s.value:
            raise ValueError(f"system {self.name!r}: link_effective_bytes_per_s exceeds link_bytes_per_s")
        if not 0 <= self.nvls_efficiency.value <= 1:
            raise ValueError(f"system {self.name!r}: nvls_efficiency must be in [0, 1]")
        if self.fabric not in ("nvswitch", "pcie"):
            raise ValueError(f"system {self.name!r}: fabric must be nvswitch or pcie, got {self.fabric!r}")

    @property
    def devices(self) -> int:
        return int(self.device_count.value)

    @property
    def arch(self) -> Any:
        return self.device.arch

    def device_bytes_per_s(self) -> float:
        """Effective per-direction bandwidth from one GPU into the fabric (all its links)."""
        return float(self.links_per_device.value) * float(self.link_effective_bytes_per_s.value)

    def quantities(self) -> dict[str, Quantity]:
        return {f.name: getattr(self, f.name) for f in fields(self) if isinstance(getattr(self, f.name), Quantity)}

    def numbers_hash(self) -> str:
        blob = json.dumps({"device": self.device.numbers_hash(), "flags": [self.fabric, self.in_network_reduction,
                           self.ll128], **{k: [q.value, q.unit] for k, q in self.quantities().items()}},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


# -- NCCL kernel limits per GPU generation (tuning.cc tables, single-node column) -----------------------------
def _kernel_limits(gen: str, index: int) -> dict[str, Quantity]:
    table = {  # llMaxBws (N1 row by compcap), perChMaxRingLL128Bws, perChMaxTreeBws, perChMaxTreeLL128Bws, GB/s
        "Ampere": (87.7, 20.0, 24.0, 20.0), "Hopper": (141.0, 36.7, 38.7, 36.7), "Blackwell": (282.0, 40.0, 70.0, 55.6)}
    ll, r128, tree, t128 = table[gen]
    src = NCCL_TUNING + f" ncclTunerConstantsDefaults, {gen} single-node entries"
    return dict(
        ll_max_bytes_per_s=doc(ll * 1e9, "B/s", src + " (llMaxBws[" + str(index) + "][0])"),
        ring_ll128_channel_bytes_per_s=doc(r128 * 1e9, "B/s", src + " (perChMaxRingLL128Bws)"),
        tree_channel_bytes_per_s=doc(tree * 1e9, "B/s", src + " (perChMaxTreeBws)"),
        tree_ll128_channel_bytes_per_s=doc(t128 * 1e9, "B/s", src + " (perChMaxTreeLL128Bws)"))


_RING_CH = ("assumed: one CTA per channel and 16 channels (the NVLS count of " + NCCL_NVLS + " NVLS_NCHANNELS_SM90; "
            "NCCL's ring search picks its own count per topology, not modelled)")
_NVSWITCH_BRIDGE = dict(
    devices_per_host_bridge=doc(8, "GPUs", "NVSwitch systems: GPU-to-GPU traffic never crosses a host bridge "
                                "(all 8 GPUs on one NVSwitch fabric)"),
    host_bridge_bytes_per_s=doc(1e15, "B/s", "NVSwitch systems: no host bridge on the GPU-to-GPU path (a bound "
                                "that never binds)"))


def _nvswitch_system(name: str, description: str, device: GpuProfile, link: LinkSpec, *, nvls: bool, gen: str,
                     gen_index: int, count_source: str, **extra: Quantity) -> SystemProfile:
    fields_: dict[str, Any] = dict(
        name=name, description=description, device=device, link=link.name, fabric="nvswitch",
        in_network_reduction=nvls, ll128=link.ll128,
        device_count=doc(8, "GPUs", count_source), **link.quantities(),
        nvls_step_s=doc(25e-6, "s", NCCL_TUNING + " hwLatencies[NVLINK][NVLS][Simple] (NVLS has no base latency)"),
        nvls_channels=doc(16, "CTAs", NCCL_NVLS + " NVLS_NCHANNELS_SM90"),
        ring_channels=assumed(16, "CTAs", _RING_CH),
        **_kernel_limits(gen, gen_index), **_NVSWITCH_BRIDGE,
        host_enqueue_s=_ENQUEUE_H100 if name == "dgx-h100" else _enqueue_transfer(name))
    if nvls:
        fields_["nvls_efficiency"] = doc(0.85 if gen == "Hopper" else 0.74, "fraction",
                                         NCCL_TUNING + f" nvlsEfficiency[{gen}]; on H100 this gives ~480 GB/s NVLS "
                                         "all-reduce busBw at 8 GPUs, the peak quoted in " + NCCL_212)
    else:
        fields_["nvls_efficiency"] = doc(0.0, "fraction", NCCL_TUNING + f" nvlsEfficiency[{gen}] = 0: NVSwitch gen2 "
                                         "has no in-network reduction")
    fields_.update(extra)
    return SystemProfile(**fields_)


WAYNE = ("github waynehacking8/nccl-collectives-bench @ 207ff7554708070b28cf999aa103162ea1fe537f "
         "results/symmetric/report.md")
_ENQUEUE_H100 = calibrated(
    23.1e-6, "s", WAYNE + ": 4 x H100 SXM on one NVSwitch host (x86), one process driving 4 GPUs, the report's 'NCCL "
    "2.18.3' run (nccl-tests 2.18.3; results/all_reduce.txt, published rows COLL-H100x4-AR-01..09), all_reduce_perf "
    "eager latency floor 23.1 us (median over sizes <= 2 KB) against 13.7 us under CUDA graphs; the report "
    "attributes the floor to host-side launch overhead (the eager time stays at the floor while the CUDA-graph "
    "time is below it)")


def _enqueue_transfer(what: str) -> Quantity:
    return assumed(_ENQUEUE_H100.value, "s", f"assumed: {what} takes the host enqueue time calibrated on a 4 x H100 "
                   f"x86 host ({_ENQUEUE_H100.source}); it depends on the CPU, the NCCL version and the number of "
                   "GPUs one process drives")


_DGX = "NVIDIA DGX/HGX 8-GPU baseboard: 8 GPUs on one NVSwitch fabric"

dgx_h100 = _nvswitch_system(
    "dgx-h100", "NVIDIA DGX H100: 8 x H100 SXM5 80GB, NVLink4 (18 links, 450 GB/s each way) + NVSwitch gen3 (NVLS)",
    h100_sxm, NVLINK4, nvls=True, gen="Hopper", gen_index=2,
    count_source=_DGX + "; " + fact(H100, "interconnect.nvlink"))

dgx_h200 = _nvswitch_system(
    "dgx-h200", "NVIDIA DGX H200: 8 x H200 SXM 141GB, NVLink4 + NVSwitch gen3 (NVLS)",
    h200, replace(NVLINK4, links_per_device=derived(18, "links", fact(H200, "interconnect.nvlink") +
                                                    " (900 GB/s total = 18 NVLink4 links of 50 GB/s)")),
    nvls=True, gen="Hopper", gen_index=2, count_source=_DGX + "; " + fact(H200, "interconnect.nvlink"))

dgx_b200 = _nvswitch_system(
    "dgx-b200", "NVIDIA DGX B200: 8 x B200 180GB, NVLink5 (18 links, 900 GB/s each way) + NVSwitch gen4 (NVLS)",
    b200, NVLINK5, nvls=True, gen="Blackwell", gen_index=3,
    count_source=_DGX + "; 14.4 TB/s aggregate over 8 GPUs in " + fact("B200 (HGX/DGX, SXM, 180GB)",
                                                                        "interconnect.nvlink"),
    nvls_channels=doc(24, "CTAs", NCCL_NVLS + " NVLS_NCHANNELS_SM100_NVL (single NVLink domain)"))

hgx_a100 = _nvswitch_system(
    "hgx-a100", "NVIDIA HGX A100 8-GPU: 8 x A100 SXM4 80GB, NVLink3 (12 links, 300 GB/s each way) + NVSwitch gen2",
    a100_sxm, NVLINK3, nvls=False, gen="Ampere", gen_index=1, count_source=_DGX + " (DGX A100 / HGX A100 8-GPU)",
    nvls_channels=doc(16, "CTAs", "unused: no NVLS on NVSwitch gen2"))


def _h100_pcie() -> GpuProfile:
    """H100 PCIe: H100 SXM's silicon (GH100, sm90) with 114 SMs, HBM2e at 2.0 TB/s, 350 W, a 1755 MHz max clock."""
    from torchsim.hwmodels.whatif import derive_profile

    ratio = 2.0e12 / h100_sxm.dram_peak_bytes_per_s.value
    overrides = {"sm_count": 114, "dram_peak_bytes_per_s": 2.0e12,
                 "dram_bytes_per_s": h100_sxm.dram_bytes_per_s.value * ratio, "power_limit_w": 350,
                 "clock_max_hz": 1.755e9, "clock_hz": min(h100_sxm.clock_hz.value, 1.755e9)}
    prov = {"sm_count": {"kind": "documented", "source": H100_PCIE_BRIEF + " (114 SMs)"},
            "dram_peak_bytes_per_s": {"kind": "documented", "source": H100_PCIE_BRIEF + " (HBM2e, 2,000 GB/s)"},
            "dram_bytes_per_s": {"kind": "derived", "source": "H100 SXM's sustained/peak ratio (" +
                                 h100_sxm.dram_bytes_per_s.source + ") applied to the 2.0 TB/s peak"},
            "power_limit_w": {"kind": "documented", "source": H100_PCIE_BRIEF + " (TDP 350 W)"},
            "clock_max_hz": {"kind": "documented", "source": fact(H100, "memory.l1_bandwidth_measured") +
                             " (H100 PCIe at 1.755 GHz, gpu-benches' nominal clock)"},
            "clock_hz": {"kind": "assumed", "source": "assumed: H100 SXM's sustained clock, at most the PCIe "
                         "card's 1.755 GHz max"}}
    return derive_profile(h100_sxm, overrides, where="torchsim.hwmodels.systems h100-pcie", name="h100-pcie",
                          description="NVIDIA H100 PCIe 80GB (GH100, sm90, HBM2e): derived from h100-sxm",
                          provenance=prov)


h100_pcie = _h100_pcie()

h100_pcie_8 = SystemProfile(
    name="h100-pcie-8", description="8 x H100 PCIe 80GB in a 2-socket server: PCIe Gen5 x16, 4 GPUs per socket "
    "behind PCIe switches, no NVLink bridges", device=h100_pcie, link=PCIE5_HOST.name, fabric="pcie",
    in_network_reduction=False, ll128=PCIE5_HOST.ll128,
    device_count=assumed(8, "GPUs", "assumed: a common 8-GPU PCIe server layout (2 CPU sockets x 4 GPUs)"),
    **PCIE5_HOST.quantities(),
    nvls_step_s=doc(0.0, "s", "unused: no NVSwitch"),
    nvls_efficiency=doc(0.0, "fraction", "no NVSwitch: no in-network reduction"),
    nvls_channels=doc(1, "CTAs", "unused: no NVSwitch"),
    ring_channels=assumed(4, "CTAs", "assumed: NCCL opens few channels on a PCIe ring (one path per GPU); "
                          "not modelled from NCCL's search"),
    **_kernel_limits("Hopper", 2),
    devices_per_host_bridge=assumed(4, "GPUs", "assumed: 4 GPUs under each of the 2 CPU sockets"),
    host_bridge_bytes_per_s=doc(22e9, "B/s", NCCL + " src/graph/topo.h SRP_QPI_BW (NCCL's figure for the "
                                "Sapphire Rapids socket-to-socket link, the path a ring takes between sockets)"),
    host_enqueue_s=_enqueue_transfer("h100-pcie-8"),
)

# device profiles derived here for a system (not in the single-device registry: predict does not take them yet)
SYSTEM_DEVICES: dict[str, GpuProfile] = {h100_pcie.name: h100_pcie}

AnySystem = SystemProfile | TensixSystem
SYSTEMS: dict[str, AnySystem] = {**{s.name: s for s in (dgx_h100, dgx_h200, dgx_b200, hgx_a100, h100_pcie_8)},
                                 **TENSIX_SYSTEMS}


def system_names() -> list[str]:
    return list(SYSTEMS)


def builtin_system(name: str) -> AnySystem:
    key = str(name).strip().lower()
    if key in SYSTEMS:
        return SYSTEMS[key]
    raise KeyError(f"unknown system {name!r}; known: {', '.join(SYSTEMS)}")


def get_system(name: str) -> AnySystem:
    """The system called `name`, or a what-if `.toml` whose `base` is a system (its fields overridden)."""
    if str(name).strip().lower().endswith(".toml"):
        from torchsim.hwmodels.whatif import load_whatif

        system = load_whatif(str(name).strip(), builtin_system)
        assert isinstance(system, (SystemProfile, TensixSystem))
        return system
    return builtin_system(name)


def system_for(device: str, ranks: int = 1) -> AnySystem:
    """The built-in system a tensor-parallel run of profile `device` over `ranks` devices takes: the smallest with
    at least that many (a GPU's 8-GPU box; a Wormhole n300 chip's n300 card, else the T3000)."""
    fits = sorted((s for s in SYSTEMS.values() if s.device.name == device), key=lambda s: s.devices)
    for system in fits:
        if system.devices >= ranks:
            return system
    if fits:
        return fits[-1]  # the caller names the shortfall
    raise KeyError(f"no built-in multi-device system has {device!r} devices; systems: "
                   + ", ".join(f"{s.name} ({s.devices} x {s.device.name})" for s in SYSTEMS.values()))


def is_system(name: str) -> bool:
    """Whether `name` names a built-in system or a what-if file based on one (a cheap check for the CLI)."""
    key = str(name).strip().lower()
    if key in SYSTEMS:
        return True
    if key.endswith(".toml"):
        try:
            get_system(name)
        except (KeyError, ValueError, OSError):
            return False
        return True
    return False


__all__ = ["SYSTEMS", "SYSTEM_DEVICES", "AnySystem", "SystemProfile", "TensixSystem", "builtin_system", "get_system",
           "h100_pcie", "is_system", "system_for", "system_names"]
