"""Tenstorrent multi-chip systems: single-chip Tensix profiles (profiles.py, never copied) joined by Ethernet.

    n300     Wormhole n300 card: its 2 Wormhole chips over the on-board Ethernet, a line of 2
    t3000    TT-LoudBox / QuietBox (Wormhole), "T3K": 4 n300 cards = 8 Wormhole chips in a 2x4 mesh; the CCL ops
             run a ring of 8 over it (a line on a submesh of fewer chips)
    galaxy   Wormhole Galaxy ("TG"): 32 Wormhole chips in a 4x8 mesh whose CCL ops run along one axis at a time
             (`cluster_axis`): a ring of the 4 chips of a column over 4 links, a ring of the 8 chips of a row
             over 3 links
    galaxy-dual  two Galaxies joined along the columns (tt-metal's "DUAL", 8x8 = 64 chips): a line of 8 down a
             column (assumed links), a ring of 8 along a row
    p150x4   TT-QuietBox (Blackhole): 4 Blackhole p150 cards, a line of 4 over their QSFP-DD Ethernet
             (p150x4-launch: the same with the cards' launch firmware, 140 Tensix, as mid-2025 measurements ran)

A `TensixSystem` is the chip profile, the mesh, and the Ethernet link model tt-metal's CCL ops (all-gather,
reduce-scatter, all-reduce, all-to-all over TT-Fabric) run on: per-link line rate per direction, the links
the CCL ops use between neighbours, the fabric's per-hop forwarding latency, its packet (ERISC slot) payload and
header, Ethernet framing, and the per-invocation and per-step costs and transfer efficiencies of the ops
(calibrated on tt-metal's published CCL benchmark, TT_CCL below). The cost model is torchsim.sim.ccl.

`get_system("t3000")` (torchsim.hwmodels.systems lists these beside the GPU systems). Every number is a
Quantity with provenance; `quantities()` lists them (the chip's own numbers stay on `device`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields
from typing import Any

from torchsim.hwmodels.quantity import Quantity, assumed, calibrated, doc
from torchsim.hwmodels.tensix import facts as F
from torchsim.hwmodels.tensix.profiles import BlackholeFirmware, TensixProfile, blackhole_p150, wormhole_n300

TT_CCL = "github tenstorrent/tt-metal tech_reports/CCLs/CCL_bandwidth.md @ 1080d1c4a0d96fc1c26ff3d9e81e67baf78fe9df"
TT_CCL_WH = ("github tenstorrent/tt-metal tech_reports/CCLs/results/SUMMARY_wormhole_b0_bfloat16_6144.md @ "
             "3a4ad18f8339803dec5abf8f5654165b5f86e667 (Wormhole LoudBox, traced, 1 link)")
TT_CCL_PY = "github tenstorrent/tt-metal models/tt_transformers/tt/ccl.py @ 013eaee3562e01c1731618baa33e633da43542af"
TT_TOPOLOGY = ("tt-metal models/tt_transformers/tt/model_config.py ModelArgs.ccl_topology: Ring for 8 devices on a "
               "T3K or Galaxy, Linear for every other multi-chip mesh")
GPT_OSS_MESH = ("github tenstorrent/tt-metal models/demos/gpt_oss/config.py (mesh_4x8: decode TP=8 along the "
                "columns, EP=4 along the rows); docs/moe_mlp_quick_reference.md: 'Device Mesh 4x8', all-to-all "
                "along axis 0 and all-reduce along axis 1 as rings")
DEEPSEEK_MESH = ("github tenstorrent/tt-metal models/demos/deepseek_v3/utils/test_utils.py mesh shapes "
                 "('TG': (4, 8), 'DUAL': (8, 8), 'QUAD': (16, 8))")
README_LLM = ("github tenstorrent/tt-metal README.md 'LLMs' table (version marked 'Last Update: June 23, 2025', "
              "code-index file id 3963056081)")

OPS = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all")
TOPOLOGIES = ("line", "ring")


@dataclass(frozen=True)
class TensixSystem:
    """`device_count` Tensix chips of `device` on a `mesh_rows` x `mesh_cols` Ethernet mesh. Rates per direction."""

    name: str
    description: str
    device: TensixProfile
    ring: bool  # the CCL ops close a ring over all the chips (else a line)
    device_count: Quantity
    mesh_rows: Quantity
    mesh_cols: Quantity
    link_bytes_per_s: Quantity  # line rate of one Ethernet link, one direction (as the links run today)
    ccl_links: Quantity  # links per direction between neighbours the CCL ops use (routing planes)
    hop_latency_s: Quantity  # fabric forwarding latency per hop (1D fabric)
    packet_payload_bytes: Quantity  # fabric packet payload = one ERISC channel slot
    fabric_header_bytes: Quantity  # fabric header in front of each packet (1D routing)
    eth_frame_overhead_bytes: Quantity  # Ethernet headers + FEC + CRC per Ethernet packet
    eth_mtu_bytes: Quantity  # largest Ethernet payload; a larger fabric packet is fragmented
    # per op (all-gather, reduce-scatter, all-reduce, all-to-all): fixed cost per call, cost per step (a hop on a
    # line, a half-ring step on a ring) beyond the forwarding latency, and the fraction of the link's payload rate
    # the op's transfer pipeline keeps busy (packet fill, workers per link, credit round trips)
    invoke_s: tuple[Quantity, ...]
    line_step_s: tuple[Quantity, ...]
    ring_step_s: tuple[Quantity, ...]
    line_efficiency: tuple[Quantity, ...]
    ring_efficiency: tuple[Quantity, ...]
    # A 2D mesh whose CCL ops run along one axis at a time (tt-metal's cluster_axis): axis 1 is a row of mesh_cols
    # chips (`ring`, `ccl_links`), axis 0 a column of mesh_rows chips (these two). None: the CCL ops run over the
    # system's chips as one line or ring (a T3000's 2x4 mesh is a ring of 8)
    axis0_links: Quantity | None = None
    axis0_ring: bool = False

    def __post_init__(self) -> None:
        for name, q in self.quantities().items():
            if q.value < 0:
                raise ValueError(f"system {self.name!r}: field {name} is negative ({q.value} {q.unit})")
        for name in ("device_count", "mesh_rows", "mesh_cols", "ccl_links", "axis0_links"):
            if getattr(self, name) is None:
                continue
            v = getattr(self, name).value
            if v < 1 or v != int(v):
                raise ValueError(f"system {self.name!r}: field {name} must be a whole number >= 1, got {v:g}")
        if int(self.mesh_rows.value) * int(self.mesh_cols.value) != self.devices:
            raise ValueError(f"system {self.name!r}: a {int(self.mesh_rows.value)}x{int(self.mesh_cols.value)} mesh "
                             f"does not hold {self.devices} chips")
        for name in ("link_bytes_per_s", "packet_payload_bytes", "eth_mtu_bytes"):
            if getattr(self, name).value <= 0:
                raise ValueError(f"system {self.name!r}: field {name} must be > 0")
        for name in ("invoke_s", "line_step_s", "ring_step_s", "line_efficiency", "ring_efficiency"):
            if len(getattr(self, name)) != len(OPS):
                raise ValueError(f"system {self.name!r}: {name} needs one value per op ({', '.join(OPS)})")
        for q in (*self.line_efficiency, *self.ring_efficiency):
            if not 0 < q.value <= 1:
                raise ValueError(f"system {self.name!r}: a transfer efficiency must be in (0, 1], got {q.value}")

    @property
    def devices(self) -> int:
        return int(self.device_count.value)

    @property
    def arch(self) -> Any:
        return self.device.arch

    @property
    def link(self) -> str:
        return "ethernet"

    @property
    def in_network_reduction(self) -> bool:
        return False  # Ethernet between chips: no switch, no in-network reduction

    @property
    def ll128(self) -> bool:
        return False  # an NCCL protocol; tt-metal's CCL ops run over TT-Fabric packets

    @property
    def fabric(self) -> str:
        return "tt-fabric ring" if self.ring else "tt-fabric line"

    def device_bytes_per_s(self) -> float:
        """A chip's line rate into the CCL axis, per direction of travel: its CCL links, both ways round a ring."""
        return float(self.ccl_links.value) * float(self.link_bytes_per_s.value) * (2 if self.ring else 1)

    @property
    def two_d(self) -> bool:
        """Whether the CCL ops run along one mesh axis at a time (`axis0_links`)."""
        return self.axis0_links is not None

    @property
    def ccl_ranks(self) -> int:
        """The most chips one CCL op spans: a row of a 2D mesh, else every chip."""
        return int(self.mesh_cols.value) if self.two_d else self.devices

    def axis(self, ranks: int, axis: int | None = None) -> tuple[str, bool, int]:
        """(which chips, ring, CCL links) a CCL op over `ranks` chips runs on: every chip of a 1D system (a line
        on fewer); on a 2D mesh a column of mesh_rows chips (cluster axis 0) or a row of mesh_cols (axis 1; a line
        on fewer), `axis` naming which where the count does not (a square mesh). A ring closes only over the whole
        line of chips, of more than 2. A count that is no axis of a 2D mesh is a ValueError naming the axes."""
        rows, cols = int(self.mesh_rows.value), int(self.mesh_cols.value)
        if not 1 <= ranks <= self.devices:
            raise ValueError(f"{ranks} chips on {self.name}, which has {self.devices}")
        if axis not in (None, 0, 1):
            raise ValueError(f"cluster axis {axis!r} on {self.name}: 0 (a column) or 1 (a row)")
        if not self.two_d:
            return "chips", self.ring and ranks == self.devices and ranks > 2, int(self.ccl_links.value)
        if axis is None:
            axis = 0 if ranks == rows and ranks != cols else 1
        if axis == 0 and ranks <= rows:
            assert self.axis0_links is not None
            return "axis 0", self.axis0_ring and ranks == rows and ranks > 2, int(self.axis0_links.value)
        if axis == 1 and ranks <= cols:
            return "axis 1", self.ring and ranks == cols and ranks > 2, int(self.ccl_links.value)
        raise ValueError(f"{ranks} chips on {self.name}'s {rows}x{cols} mesh: its CCL ops run along one axis, a "
                         f"column of {rows} chips (cluster axis 0) or a row of up to {cols} (cluster axis 1)")

    def topology(self, ranks: int, axis: int | None = None) -> str:
        """The topology the CCL ops use over `ranks` chips (`axis`): "ring" or "line"."""
        return "ring" if self.axis(ranks, axis)[1] else "line"

    def links(self, ranks: int, axis: int | None = None) -> int:
        """The links per direction between neighbours a CCL op over `ranks` chips uses (`axis`)."""
        return self.axis(ranks, axis)[2]

    def op_numbers(self, op: str, topology: str) -> tuple[float, float, float]:
        """(fixed cost per call s, cost per step s, transfer efficiency) of CCL op `op` on `topology`."""
        i = OPS.index(op)
        ring = topology == "ring"
        step = (self.ring_step_s if ring else self.line_step_s)[i].value
        eff = (self.ring_efficiency if ring else self.line_efficiency)[i].value
        return float(self.invoke_s[i].value), float(step), float(eff)

    def payload_efficiency(self, payload: float | None = None) -> float:
        """Payload bytes over wire bytes of one fabric packet of `payload` bytes (default: a full slot):
        P / (P + H + frame x ceil((P + H) / MTU)), the framing formula of TT_CCL."""
        p = float(self.packet_payload_bytes.value) if payload is None else float(payload)
        h = float(self.fabric_header_bytes.value)
        frames = -(-(p + h) // float(self.eth_mtu_bytes.value))
        return p / (p + h + float(self.eth_frame_overhead_bytes.value) * frames)

    def quantities(self) -> dict[str, Quantity]:
        out: dict[str, Quantity] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Quantity):
                out[f.name] = v
            elif isinstance(v, tuple) and v and isinstance(v[0], Quantity):
                out.update({f"{f.name}[{op}]": q for op, q in zip(OPS, v, strict=True)})
        return out

    def numbers_hash(self) -> str:
        blob = json.dumps({"device": self.device.numbers_hash(), "ring": self.ring, "axis0_ring": self.axis0_ring,
                           **{k: [q.value, q.unit] for k, q in self.quantities().items()}}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


# -- the CCL ops' costs, calibrated on tt-metal's Wormhole LoudBox benchmark --------------------------------
# The report fits each op's kernel time as  a + b x steps + bottleneck bytes / peak rate  (steps = N-1 on a
# line, N/2 on a ring; peak rate over 1 link, 2 directions on a ring). a and b are taken as they are (b less the
# documented per-hop forwarding latency, which the model adds back per hop); the peak rate over the link's
# payload rate (line rate x packet payload efficiency) is the op's transfer efficiency.
_FITS = {  # op: (a us, b line us, b ring us, peak line GB/s, peak ring GB/s), TT_CCL_WH fit lines under each op
    "all-gather": (4.47, 1.91, 2.50, 11.8, 20.8),
    "reduce-scatter": (3.23, 3.97, 3.06, 11.1, 16.7),
    "all-reduce": (9.07, 5.82, 5.25, 10.9, 18.4),
    "all-to-all": (2.99, 2.14, 3.40, 7.6, 16.5),
}
_WH_HOP = doc(711e-9, "s", TT_CCL + " 'Latency' table: per-hop forwarding latency, Wormhole, 1D fabric")
_BH_HOP = doc(515e-9, "s", TT_CCL + " 'Latency' table: per-hop forwarding latency, Blackhole, 1D fabric")
_PACKET: dict[str, Any] = dict(
    packet_payload_bytes=doc(4352, "B", TT_CCL + " 'Framing overhead': the fabric packet payload defaults to 4352 B "
                             "(four bfloat8_b tiles); one ERISC channel slot"),
    fabric_header_bytes=doc(48, "B", TT_CCL + " 'Framing overhead': 48 B fabric header for 1D routing"),
    eth_frame_overhead_bytes=doc(50, "B", TT_CCL + " 'Framing overhead': upwards of 50 B of headers, FEC and CRC "
                                 "per Ethernet packet"),
    eth_mtu_bytes=doc(1500, "B", TT_CCL + " 'Framing overhead': Ethernet packets run from 16 B to 1500 B"),
)


def _payload_eff() -> float:
    p, h = 4352.0, 48.0
    return p / (p + h + 50.0 * -(-(p + h) // 1500.0))


def _ccl_numbers(hop: Quantity, where: str) -> dict[str, Any]:
    """The per-op tuples of a system on chips of kind `where`: Wormhole's calibrated values (marked assumed when
    transferred to another chip); `hop` is the system's per-hop forwarding latency."""
    eff = _payload_eff()
    wh = where == "wormhole"
    out: dict[str, list[Quantity]] = {k: [] for k in ("invoke_s", "line_step_s", "ring_step_s", "line_efficiency",
                                                     "ring_efficiency")}
    for op in OPS:
        a, bl, br, pl, pr = _FITS[op]
        src = TT_CCL_WH + f" ({op.replace('-', '_')} fit: {a} us + {bl} us x (N-1) line, {br} us x N/2 ring; peak " \
            f"{pl} GB/s line, {pr} GB/s ring over 1 link at 12.5 GB/s)"
        kind = calibrated if wh else assumed
        pre = "" if wh else f"assumed: {where} takes Wormhole's calibration; "
        out["invoke_s"].append(kind(a * 1e-6, "s", pre + src + ": a"))
        out["line_step_s"].append(kind(bl * 1e-6 - hop.value, "s", pre + src + ": b (line) less the per-hop latency"))
        out["ring_step_s"].append(kind(br * 1e-6 - hop.value, "s", pre + src + ": b (ring) less the per-hop latency"))
        out["line_efficiency"].append(kind(min(1.0, pl * 1e9 / (12.5e9 * eff)), "fraction",
                                           pre + src + f": peak line rate / (12.5 GB/s x payload eff. {eff:.3f})"))
        out["ring_efficiency"].append(kind(min(1.0, pr * 1e9 / (2 * 12.5e9 * eff)), "fraction",
                                           pre + src + f": peak ring rate / (2 directions x 12.5 GB/s x {eff:.3f})"))
    return {k: tuple(v) for k, v in out.items()}


_WH_LINK = doc(12.5e9, "B/s", TT_CCL + " 'Line rate' table: Wormhole 100 Gbps = 12.5 GB/s per link per direction; "
               + F.fact(F.WH, "ethernet.eth_tiles") + " (16 x 100 GbE per ASIC)")
_BH_LINK = doc(25e9, "B/s", TT_CCL + " 'Results' NOTE: Blackhole links currently run at half their rated 400 Gbps "
               "= 50 GB/s, so 25 GB/s per link per direction; " + F.fact(F.BH, "ethernet.eth_tiles"))


def _n300() -> TensixSystem:
    chip = wormhole_n300()
    return TensixSystem(
        name="n300", description="Tenstorrent Wormhole n300: its 2 Wormhole B0 chips (64 Tensix, 12 GB GDDR6 each) "
        "over the card's on-board Ethernet, a line of 2", device=chip, ring=False,
        device_count=doc(2, "chips", F.fact(F.WH, "grid.tensix_enabled_by_product") + " (n300 = 2 x 64)"),
        mesh_rows=doc(1, "chips", "a 1x2 mesh (tt-metal's N300 mesh device)"),
        mesh_cols=doc(2, "chips", "a 1x2 mesh (tt-metal's N300 mesh device)"),
        link_bytes_per_s=_WH_LINK,
        ccl_links=doc(1, "links", TT_CCL_PY + " get_num_links: 'N300': (1, 1) (the second chip is reached over an "
                      "Ethernet tunnel; one routing plane is reserved for fast dispatch, " + TT_CCL + ")"),
        hop_latency_s=_WH_HOP, **_PACKET, **_ccl_numbers(_WH_HOP, "wormhole"))


def _t3000() -> TensixSystem:
    chip = wormhole_n300()
    return TensixSystem(
        name="t3000", description="Tenstorrent T3000 (TT-LoudBox / QuietBox Wormhole, 'T3K'): 4 n300 cards = 8 "
        "Wormhole B0 chips in a 2x4 Ethernet mesh; CCL ops run a ring of 8 (a line on fewer chips)",
        device=chip, ring=True,
        device_count=doc(8, "chips", "T3000 = 4 x n300 = 8 Wormhole chips (" + README_LLM + ": 'Llama 3.1 70B "
                         "(TP=8)' on QuietBox (Wormhole); " + F.fact(F.WH, "grid.tensix_enabled_by_product") + ")"),
        mesh_rows=doc(2, "chips", "tt-metal's T3K mesh shape 2x4 (MeshShape(2, 4))"),
        mesh_cols=doc(4, "chips", "tt-metal's T3K mesh shape 2x4 (MeshShape(2, 4))"),
        link_bytes_per_s=_WH_LINK,
        ccl_links=doc(1, "links", TT_CCL_PY + " get_num_links: 'T3K': (1, 1); the benchmark's linkbw = busbw on "
                      "lines (" + TT_CCL_WH + ")"),
        hop_latency_s=_WH_HOP, **_PACKET, **_ccl_numbers(_WH_HOP, "wormhole"))


def _p150x4(firmware: BlackholeFirmware = BlackholeFirmware.FW_19_5) -> TensixSystem:
    launch = firmware is BlackholeFirmware.LAUNCH
    chip = blackhole_p150(firmware)
    tensix = "140 Tensix, launch firmware" if launch else "120 Tensix, FW v19.5.0"
    return TensixSystem(
        name="p150x4-launch" if launch else "p150x4", description=f"Tenstorrent TT-QuietBox (Blackhole): 4 Blackhole "
        f"p150 cards ({tensix}, 32 GB GDDR6 each) over their QSFP-DD Ethernet, a line of 4", device=chip, ring=False,
        device_count=doc(4, "chips", README_LLM + ": 'Llama 3.1 70B (TP=4)' on QuietBox (Blackhole); " + TT_CCL_PY
                         + " device name 'P150x4'"),
        mesh_rows=doc(1, "chips", "a 1x4 mesh (tt-metal's P150x4)"),
        mesh_cols=doc(4, "chips", "a 1x4 mesh (tt-metal's P150x4)"),
        link_bytes_per_s=_BH_LINK,
        ccl_links=doc(2, "links", TT_CCL_PY + " get_num_links: 'P150x4': (2, 2)"),
        hop_latency_s=_BH_HOP, **_PACKET, **_ccl_numbers(_BH_HOP, "Blackhole"))


def _galaxy(galaxies: int = 1) -> TensixSystem:
    """One Wormhole Galaxy (4x8), or `galaxies` of them joined along the columns (tt-metal's DUAL: 8x8)."""
    chip = wormhole_n300()
    rows = 4 * galaxies
    one = galaxies == 1
    rows_q = (doc(4, "chips", GPT_OSS_MESH + ": mesh_4x8() = MeshConfig((4, 8), ...): 4 rows") if one else
              doc(rows, "chips", DEEPSEEK_MESH + f": '{'DUAL' if galaxies == 2 else galaxies}': ({rows}, 8)"))
    return TensixSystem(
        name="galaxy" if one else "galaxy-dual",
        description=("Tenstorrent Wormhole Galaxy ('TG'): 32 Wormhole B0 chips (12 GB GDDR6 each) in a 4x8 Ethernet "
                     "mesh; CCL ops run along one axis: a ring of a column's 4 chips over 4 links, a ring of a row's "
                     "8 over 3 (a line on fewer)" if one else
                     f"{galaxies} Tenstorrent Wormhole Galaxies joined along the columns (tt-metal's 'DUAL'): "
                     f"{32 * galaxies} Wormhole B0 chips in a {rows}x8 mesh; CCL ops run along one axis: a line "
                     f"down a column's {rows} chips over 4 links (assumed: one Galaxy's links, no ring closing "
                     "across the Galaxies), a ring of a row's 8 over 3")
        + ". Each chip is modelled as an n300 chip computing on the 8x8 grid tt_transformers uses on Wormhole "
        "(assumed: Galaxy's chips enable 80 Tensix, which tt-metal's Galaxy-only models use beyond 8x8)",
        device=chip, ring=True,
        device_count=doc(32 * galaxies, "chips", F.fact(F.WH, "grid.tensix_enabled_by_product")
                         + f" (Galaxy = 32 x 80){'' if one else f'; {galaxies} Galaxies'}"),
        mesh_rows=rows_q,
        mesh_cols=doc(8, "chips", GPT_OSS_MESH + ": mesh_4x8() = MeshConfig((4, 8), ...): 8 columns"),
        link_bytes_per_s=_WH_LINK,
        ccl_links=doc(3, "links", TT_CCL_PY + " get_num_links: 'TG': (4, 3): 3 links along cluster axis 1 (a row)"),
        hop_latency_s=_WH_HOP, **_PACKET, **_ccl_numbers(_WH_HOP, "wormhole"),
        axis0_links=(doc(4, "links", TT_CCL_PY + " get_num_links: 'TG': (4, 3): 4 links along cluster axis 0 (a "
                         "column)") if one else
                     assumed(4, "links", "assumed: one Galaxy's 4 links along cluster axis 0 (" + TT_CCL_PY
                             + " get_num_links 'TG': (4, 3)) continue across the joined Galaxies")),
        axis0_ring=one)


n300 = _n300()
t3000 = _t3000()
galaxy = _galaxy()
galaxy_dual = _galaxy(2)
p150x4 = _p150x4()
p150x4_launch = _p150x4(BlackholeFirmware.LAUNCH)  # the chips as mid-2025 measurements ran them
TENSIX_SYSTEMS: dict[str, TensixSystem] = {s.name: s for s in (n300, t3000, galaxy, galaxy_dual, p150x4,
                                                                   p150x4_launch)}

__all__ = ["OPS", "TENSIX_SYSTEMS", "TOPOLOGIES", "TensixSystem", "galaxy", "galaxy_dual", "n300", "p150x4",
           "p150x4_launch", "t3000"]
