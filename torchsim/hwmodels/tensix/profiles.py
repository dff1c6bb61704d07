"""Tensix device profiles: Wormhole n150, n300 (one chip of the pair) and Blackhole p150 (grid set by firmware).

A `TensixProfile` is the chip's numbers (spec.py) plus the hooks the engine calls to build its resource models
(core.py, machine.py, launch.py); registered with the profile registry through `TENSIX_PROFILES`. Every number
is a Quantity whose source names a row of ../shared/hardware/facts.csv ("facts.csv DEVICE parameter") or a
Tenstorrent document and section.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from torchsim.hwmodels.quantity import Quantity
from torchsim.hwmodels.tensix import facts as F
from torchsim.hwmodels.tensix.core import unit_specs
from torchsim.hwmodels.tensix.formats import MathFidelity
from torchsim.hwmodels.tensix.launch import (
    TimingMethod,
    blackhole_dispatch,
    host_visible_s,
    launch_terms,
    wormhole_dispatch,
)
from torchsim.hwmodels.tensix.machine import TensixMemory
from torchsim.hwmodels.tensix.spec import XY, BlackholeFirmware, TensixChip, TensixSpec

__all__ = ["XY", "BlackholeFirmware", "TensixChip", "TensixProfile", "TENSIX_PROFILES", "blackhole_p150",
           "tensix_with_grid", "wormhole_n150", "wormhole_n300"]


@dataclass(frozen=True)
class TensixProfile(TensixSpec):
    """A Tensix chip as the engine sees it: its numbers and the hooks that build its resource models."""

    def unit_specs(self, kernel: Any) -> dict[int, tuple[str, float, int, bool]]:
        return unit_specs(self, MathFidelity.parse(kernel.attrs.get("fidelity", "HiFi2")))

    def launch_model(self, mode: str, phase: str) -> tuple[str, Quantity, Quantity, Quantity]:
        """(label, host per op, device gap, per step) as tt-metal dispatches ops (launch.py)."""
        return launch_terms(self, mode, phase)

    def memory_system(self, kernel: Any) -> Any:
        return TensixMemory(self, kernel)

    def host_visible_times(self, device_s: float) -> dict[str, float]:
        """One op of `device_s` as each timing method sees it (launch.py `TimingMethod`), seconds."""
        return {m.value: host_visible_s(self, device_s, m) for m in TimingMethod}


def _grid_xy(cols: list[int], rows: list[int]) -> tuple[XY, ...]:
    return tuple((x, y) for y in rows for x in cols)


def wormhole_n150() -> TensixProfile:
    """Wormhole n150: one Wormhole B0 ASIC, 72 Tensix enabled, tt-metal computes on 8x8."""
    return TensixProfile(
        name="wormhole-n150", chip=TensixChip.WORMHOLE_B0, firmware="any",
        description="Tenstorrent Wormhole n150 (one Wormhole B0 ASIC, 72 Tensix, 8x8 compute grid, 12 GB GDDR6)",
        worker_xy=_grid_xy(F.WH_WORKER_COLS, F.WH_WORKER_ROWS[:8]), dram_bank_xy=F.WH_DRAM_WORKER_ENDPOINTS,
        placement_source=F.WH_PLACEMENT, **(F.wormhole_numbers() | wormhole_dispatch()))


def wormhole_n300() -> TensixProfile:
    """One chip of a Wormhole n300 board: single-device work only; the second chip and the link are not modelled."""
    return replace(
        wormhole_n150(), name="wormhole-n300",
        description="Tenstorrent Wormhole n300, ONE of its two Wormhole B0 chips (64 Tensix enabled per chip, "
                    "8x8 compute grid, 12 GB GDDR6 per chip); the second chip and the ethernet link between them "
                    "are not modelled, so this is single-device work on one chip",
        tensix_enabled=Quantity(64, "cores", "documented", F.fact(F.WH, "grid.tensix_enabled_by_product") +
                                " (n300 = 2 x 64)"))


def blackhole_p150(firmware: BlackholeFirmware | str = BlackholeFirmware.FW_19_5,
                   name: str | None = None) -> TensixProfile:
    """Blackhole p150; `firmware` decides the enabled Tensix (140 at launch, 120 from v19.5.0) and the grid:
    13x10 before v19.5.0 (what tt-metal's GEMM_FLOPS.md '13x10 grid' tables ran on), 11x10 from v19.5.0.
    `name` overrides the profile name (the registry's firmware- and grid-named aliases)."""
    try:
        fw = BlackholeFirmware(firmware) if isinstance(firmware, str) else firmware
    except ValueError:
        valid = ", ".join(f.value for f in BlackholeFirmware)
        raise ValueError(f"unknown Blackhole firmware {firmware!r}; valid: {valid}") from None
    enabled, gx, note = (140, 13, "launch firmware") if fw is BlackholeFirmware.LAUNCH else (120, 11, "FW v19.5.0")
    grid_src = F.fact(F.BH, "grid.compute_grid_used_by_tt-metal") + f" ({note}: one enabled column does dispatch)"
    name = name or ("blackhole-p150" if fw is BlackholeFirmware.FW_19_5 else "blackhole-p150-launch")
    clock_ratio = F.blackhole_numbers()["clock_hz"].value / F.wormhole_numbers()["clock_hz"].value
    numbers = F.blackhole_numbers() | blackhole_dispatch(clock_ratio) | {
        "tensix_enabled": Quantity(enabled, "cores", "documented", F.fact(F.BH, "grid.tensix_enabled_by_product")),
        "compute_grid_x": Quantity(gx, "cores", "documented", grid_src),
        "compute_grid_y": Quantity(10, "cores", "documented", grid_src),
    }
    return TensixProfile(
        name=name, chip=TensixChip.BLACKHOLE, firmware=fw.value,
        description=f"Tenstorrent Blackhole p150 ({note}: {enabled} Tensix enabled, {gx}x10 compute grid, "
                    "32 GB GDDR6)",
        worker_xy=_grid_xy(F.BH_WORKER_COLS[:gx], F.BH_WORKER_ROWS), dram_bank_xy=F.BH_DRAM_WORKER_ENDPOINTS,
        placement_source=F.BH_PLACEMENT, **numbers)


TENSIX_PROFILES: dict[str, Callable[[], TensixProfile]] = {
    "wormhole-n150": wormhole_n150,
    "wormhole-n300": wormhole_n300,
    "blackhole-p150": blackhole_p150,
    "blackhole-p150-launch": lambda: blackhole_p150(BlackholeFirmware.LAUNCH),
    # the same two firmware states named by their compute grid (tt-metal's perf tables say '13x10' / '11x10')
    "blackhole-p150-13x10": lambda: blackhole_p150(BlackholeFirmware.LAUNCH, "blackhole-p150-13x10"),
    "blackhole-p150-11x10": lambda: blackhole_p150(BlackholeFirmware.FW_19_5, "blackhole-p150-11x10"),
}


def parse_grid(grid: object, hw: TensixSpec) -> tuple[int, int]:
    """'8x8', (8, 8) or None (the profile's compute grid); a grid larger than the chip is a ValueError."""
    if grid is None or grid == "":
        return hw.grid
    if isinstance(grid, str):
        try:
            gx, gy = (int(v) for v in grid.lower().replace(",", "x").split("x"))
        except ValueError:
            raise ValueError(f"grid {grid!r} is not of the form COLSxROWS (e.g. 8x8)") from None
    else:
        gx, gy = (int(v) for v in grid)  # type: ignore[attr-defined]
    hw.with_grid(gx, gy)  # raises, naming the chip's compute grid, when it does not fit
    return gx, gy


def tensix_with_grid(hw: TensixProfile, grid: str | tuple[int, int] | None) -> TensixProfile:
    """`hw` computing on the sub-grid `grid` ('8x8', (8, 8)); None returns `hw`. The profile is renamed
    NAME@COLSxROWS so cached kernel results of one grid never answer for another; a grid larger than the chip's
    compute grid is a ValueError naming it."""
    if grid is None or grid == "":
        return hw
    gx, gy = parse_grid(grid, hw)
    sub = hw.with_grid(gx, gy)
    if (gx, gy) == hw.grid:
        return hw
    return replace(sub, name=f"{hw.name}@{gx}x{gy}")  # type: ignore[return-value]
