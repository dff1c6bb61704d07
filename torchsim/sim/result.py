"""KernelResult: what one simulated kernel launch took, where the cycles went, and what bound it.

Produced by `torchsim.sim.simulate`; consumed by the prediction API and the exporters.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


class DeadlockError(RuntimeError):
    """The simulation stopped making progress; the message names the waiting nodes and what they wait on."""


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """One executed node (recorded on request): times in cycles from kernel start."""

    sm: int
    cta: int  # global CTA index in launch order
    cta_class: str
    group: str
    node: int
    name: str
    op: str
    unit: str
    ready: int
    issue: int
    start: int  # service start (after queueing)
    end: int
    wait_reason: str  # what the node waited on before it issued
    wait_cycles: int


@dataclass(frozen=True)
class KernelResult:
    name: str
    hw: str
    cycles: int
    clock_hz: float
    flops: float
    dram_bytes: float  # bytes that crossed the DRAM interface (reads + writes)
    l2_hit_rate: float
    unit_busy: dict[str, float]  # unit -> utilisation in [0, 1] over the kernel, averaged over SMs
    stalls: dict[str, float]  # reason -> warp-group cycles spent waiting
    bound: str
    waves: float
    ctas: int
    ctas_per_sm: int
    node_events: int
    attrs: dict[str, Any] = field(default_factory=dict)
    records: tuple[NodeRecord, ...] | None = None
    cta_sm: tuple[int, ...] | None = None  # SM of each CTA (recorded on request)
    clock_reason: str = ""  # why it ran at clock_hz (set by torchsim.sim.sustained; "" = the profile's clock)
    power_w: float = 0.0  # average board power at clock_hz (set by torchsim.sim.sustained; 0 = not computed)

    @property
    def time_s(self) -> float:
        return self.cycles / self.clock_hz

    @property
    def time_us(self) -> float:
        return self.time_s * 1e6

    @property
    def tflops(self) -> float:
        return self.flops / self.time_s / 1e12 if self.cycles else 0.0

    @property
    def dram_bytes_per_s(self) -> float:
        return self.dram_bytes / self.time_s if self.cycles else 0.0

    def summary(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("records")
        d.pop("cta_sm")
        d.update(time_us=self.time_us, tflops=self.tflops, dram_gb_per_s=self.dram_bytes_per_s / 1e9)
        return d
