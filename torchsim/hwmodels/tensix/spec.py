"""The numbers of one Tensix chip (`TensixSpec`), read by the Tensix resource models (core.py, noc.py, dram.py,
machine.py) and the Tensix templates.

`profiles.TensixProfile` adds the engine hooks (the unit table, the memory system, the dispatch model) that
build those models, so the models import this module and never the profiles. Every number is a Quantity whose
source names a row of ../shared/hardware/facts.csv or a Tenstorrent document and section.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, fields, replace
from enum import Enum
from typing import Any

from torchsim.graph.kinds import DType, Unit
from torchsim.hwmodels.quantity import Quantity
from torchsim.hwmodels.tensix import facts as F
from torchsim.hwmodels.tensix.formats import TENSIX_FORMATS, default_fidelity

XY = tuple[int, int]


class TensixChip(Enum):
    WORMHOLE_B0 = "wormhole_b0"
    BLACKHOLE = "blackhole"


class BlackholeFirmware(Enum):
    """Which p150 firmware the card runs: it sets how many Tensix are enabled (facts.csv conflict 3)."""

    LAUNCH = "launch"  # 140 Tensix enabled, tt-metal compute grid 13x10 (GEMM_FLOPS.md P150 tables)
    FW_19_5 = "19.5"  # firmware v19.5.0 (Jan 2026): 120 enabled, compute grid 11x10 (BringUp guide)


@dataclass(frozen=True)
class TensixSpec:
    """One Tensix chip's numbers: compute grid, per-core units, NoC, DRAM. Quantities carry units and provenance."""

    name: str
    chip: TensixChip
    description: str
    firmware: str
    clock_hz: Quantity
    noc_grid_x: Quantity
    noc_grid_y: Quantity
    tensix_enabled: Quantity
    compute_grid_x: Quantity
    compute_grid_y: Quantity
    l1_bytes_per_core: Quantity
    l1_reserved_bytes: Quantity  # firmware, mailboxes, kernel binaries below the allocator's base
    dst_bytes: Quantity
    fpu_flop_per_clk_per_phase: Quantity
    fpu_latency_cycles: Quantity
    fpu_eltwise_add_datums_per_clk: Quantity
    fpu_eltwise_mul_datums_per_clk: Quantity
    fpu_reduce_flop_per_clk: Quantity
    sfpu_lanes: Quantity
    sfpu_latency_cycles: Quantity
    unpackers: Quantity
    unpacker_bytes_per_clk: Quantity
    unpack_setup_cycles: Quantity
    unpack_l1_bytes_per_clk: Quantity  # both unpackers together, when both fetch at once (the L1 read arbiter)
    packers: Quantity
    packer_bytes_per_clk: Quantity
    packer_l1_acc_cycles: Quantity  # cycles per 128-bit accumulate into L1 (packer_l1_acc)
    riscv_l1_load_cycles: Quantity
    tensix_push_cycles: Quantity
    llk_call_cycles: Quantity
    noc_flit_bytes: Quantity
    noc_max_packet_bytes: Quantity
    noc_hop_cycles: Quantity
    noc_niu_cycles: Quantity
    noc_niu_bytes_per_clk: Quantity
    noc_transaction_min_cycles: Quantity
    noc_read_endpoint_cycles: Quantity
    dram_banks: Quantity
    dram_bank_bytes_per_s: Quantity
    dram_bytes: Quantity
    dram_latency_cycles: Quantity
    kernel_launch_cycles: Quantity
    launch_overhead_s: Quantity
    program_dispatch_s: Quantity  # dispatcher time to prepare one program (launch.py)
    op_to_op_s: Quantity  # go-signal gap between ops whose dispatch is hidden
    host_dispatch_s: Quantity  # host time per op without metal trace
    host_dispatch_cached_s: Quantity  # host enqueue of one program, eager fast dispatch, program cache hit
    step_overhead_s: Quantity  # host work once per forward step
    prefill_host_s: Quantity  # host work once per prefill outside op dispatch (calibrated on TTFT rows)
    worker_xy: tuple[XY, ...]  # NoC coordinates of the compute grid, row-major (y outer)
    dram_bank_xy: tuple[XY, ...]  # the NoC endpoint workers use for each DRAM bank
    placement_source: str

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Quantity) and v.value < 0:
                raise ValueError(f"profile {self.name!r}: field {f.name} is negative ({v.value} {v.unit})")
        gx, gy = self.grid
        if len(self.worker_xy) != gx * gy:
            raise ValueError(f"profile {self.name!r}: {len(self.worker_xy)} worker coordinates for a {gx}x{gy} grid")
        if gx * gy > int(self.tensix_enabled):
            raise ValueError(f"profile {self.name!r}: compute grid {gx}x{gy} exceeds the "
                             f"{int(self.tensix_enabled)} enabled Tensix cores")
        if len(self.dram_bank_xy) != int(self.dram_banks):
            raise ValueError(f"profile {self.name!r}: {len(self.dram_bank_xy)} DRAM endpoints for "
                             f"{int(self.dram_banks)} banks")
        nx, ny = int(self.noc_grid_x), int(self.noc_grid_y)
        for x, y in self.worker_xy + self.dram_bank_xy:
            if not (0 <= x < nx and 0 <= y < ny):
                raise ValueError(f"profile {self.name!r}: NoC coordinate ({x},{y}) outside the {nx}x{ny} grid")

    # -- the interface the rest of torchsim reads (shared with GpuProfile) ---------------------------------
    @property
    def arch(self) -> Any:
        from torchsim.hwmodels.gpu import Arch  # lazy: the registry imports this module
        return Arch.TENSIX

    @property
    def grid(self) -> XY:
        return int(self.compute_grid_x), int(self.compute_grid_y)

    @property
    def sm_count(self) -> Quantity:
        gx, gy = self.grid
        return Quantity(gx * gy, "cores", "derived", f"compute grid {gx}x{gy} ({self.compute_grid_x.source})")

    @property
    def sms(self) -> int:
        gx, gy = self.grid
        return gx * gy

    @property
    def clock_hz_value(self) -> float:
        return float(self.clock_hz)

    @property
    def dram_peak_bytes_per_s(self) -> Quantity:
        return Quantity(float(self.dram_banks) * float(self.dram_bank_bytes_per_s), "B/s", "derived",
                        f"{int(self.dram_banks)} banks x {self.dram_bank_bytes_per_s.source}")

    @property
    def dram_bytes_per_s(self) -> Quantity:
        """The DRAM bandwidth torchsim.prediction.pipeline quotes for the weight-streaming floor (the banks' peak)."""
        return self.dram_peak_bytes_per_s

    @property
    def dram_bytes_per_s_value(self) -> float:
        return float(self.dram_banks) * float(self.dram_bank_bytes_per_s)

    @property
    def launch_overhead_s_value(self) -> float:
        return float(self.launch_overhead_s)

    @property
    def units(self) -> frozenset[Unit]:
        return frozenset({Unit.NONE, Unit.UNPACKER, Unit.FPU, Unit.SFPU, Unit.PACKER, Unit.NOC})

    def supports(self, dtype: DType) -> bool:
        return dtype in TENSIX_FORMATS

    def peak_tensor_flops_per_s(self, dtype: DType, fidelity: Any = None) -> float:
        """Matrix-unit peak of the compute grid at `fidelity` (default: the format's usual fidelity)."""
        phases = (fidelity or default_fidelity(dtype)).phases
        return float(self.fpu_flop_per_clk_per_phase) / phases * self.sms * self.clock_hz_value

    # -- the SM vocabulary the engine reads (a core is an SM; its 5 RISC-V threads issue independently, one
    # program instance per core, L1 is the CTA's "shared memory"); the engine hooks are TensixProfile's ----
    @property
    def fma_flop_per_clk_per_sm(self) -> Quantity:
        """Vector FLOPs per core per clock (the roofline's non-matmul rate): the SFPU's 32 lanes of SFPMAD."""
        return Quantity(2 * float(self.sfpu_lanes), "FLOP/clk", "derived",
                        F.fact(F.WH, "sfpu.sfpu_fp32_flop_per_clk") + " (32 lanes x 2)")

    def tensor_flop_per_clk_per_sm(self, dtype: DType) -> float:
        return 0.0  # no GPU tensor cores: Tensix matmuls run on Unit.FPU

    @property
    def subpartitions_per_sm(self) -> Quantity:
        return Quantity(5, "RISC-V threads", "documented", F.fact(F.WH, "tensix.baby_riscv_cores"))

    @property
    def max_ctas_per_sm(self) -> Quantity:
        return Quantity(1, "programs", "documented", "tt-metal runs one program's kernels per core at a time "
                        "(Wolfpine paper §II: kernels of a program on the five baby cores)")

    @property
    def max_threads_per_sm(self) -> Quantity:
        return self.subpartitions_per_sm

    @property
    def registers_per_sm(self) -> Quantity:
        return Quantity(1 << 30, "n/a", "assumed", "no register-file limit on Tensix occupancy")

    @property
    def smem_per_sm_bytes(self) -> Quantity:
        return Quantity(float(self.l1_bytes_per_core) - float(self.l1_reserved_bytes), "B", "derived",
                        "L1 per core minus the reserved region")

    @property
    def smem_per_cta_bytes(self) -> Quantity:
        return self.smem_per_sm_bytes

    @property
    def cta_launch_cycles(self) -> Quantity:
        return self.kernel_launch_cycles

    def with_grid(self, gx: int, gy: int) -> TensixSpec:
        """The same chip computing on a `gx` x `gy` sub-grid; larger than the compute grid is a ValueError."""
        mx, my = self.grid
        if gx <= 0 or gy <= 0 or gx > mx or gy > my:
            raise ValueError(f"grid {gx}x{gy} does not fit {self.name}: its compute grid is {mx}x{my} "
                             f"({int(self.tensix_enabled)} Tensix enabled, firmware {self.firmware}); "
                             f"valid grids are 1x1 .. {mx}x{my}")
        xy = tuple(p for p in self.worker_xy if p[0] in self._cols()[:gx] and p[1] in self._rows()[:gy])
        src = f"sub-grid {gx}x{gy} of {self.name}"
        return replace(self, compute_grid_x=Quantity(gx, "cores", "derived", src),
                       compute_grid_y=Quantity(gy, "cores", "derived", src), worker_xy=xy)

    def _cols(self) -> list[int]:
        return sorted({x for x, _ in self.worker_xy})

    def _rows(self) -> list[int]:
        return sorted({y for _, y in self.worker_xy})

    def core_xy(self, core: int) -> XY:
        """NoC coordinate of logical core `core` (row-major over the compute grid)."""
        return self.worker_xy[core]

    def quantities(self) -> dict[str, Quantity]:
        return {f.name: getattr(self, f.name) for f in fields(self) if isinstance(getattr(self, f.name), Quantity)}

    def numbers_hash(self) -> str:
        blob = json.dumps({"q": {k: [q.value, q.unit] for k, q in self.quantities().items()},
                           "xy": [self.worker_xy, self.dram_bank_xy]}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]
