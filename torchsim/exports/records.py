"""What the exporters read: per-kernel rows of a prediction and per-node events of one simulated kernel.

`torchsim.prediction.pipeline.predict` and `torchsim.sim.simulate` results are turned into these records (see
`torchsim.exports.adapt`); Parquet, Perfetto and the reports read only these, so they never reach back into
the engine. A quantity that was not modelled is None, never 0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# Canonical names of the per-unit busy fractions and the wait reasons, as exported.
UNITS = ("tensor", "fma", "sfu", "ldst", "tma", "tmem", "l2", "dram")
STALL_REASONS = ("data", "order", "barrier", "unit_busy", "issue", "memory_queue")


@dataclass(frozen=True, slots=True)
class KernelRecord:
    """One kernel launch of a prediction (or the one kernel of a single-kernel run)."""

    kernel_index: int  # launch order within the run
    kernel_name: str  # e.g. "layers.3.mlp.gate_up"
    kernel_kind: str  # KernelKind value, e.g. "gemm"
    phase: str  # "prefill" | "decode" | "" for a standalone kernel
    start_cycles: int  # from the start of the run, in the hardware clock
    duration_cycles: int
    clock_hz: float
    start_us: float
    duration_us: float
    dtype: str = ""
    params: tuple[tuple[str, Any], ...] = ()  # the KernelCall params (shapes), sorted
    decode_step: int | None = None
    layer: int | None = None
    stream: int = 0
    template: str | None = None  # None: no template (roofline fallback)
    template_config: Mapping[str, Any] | None = None
    flops: float | None = None
    dram_bytes: float | None = None
    l2_hit_rate: float | None = None  # fraction 0..1
    unit_busy: Mapping[str, float] | None = None  # keys in UNITS; a missing key is "not modelled"
    stalls_cycles: Mapping[str, float] | None = None  # keys in STALL_REASONS
    bound: str | None = None
    module_path: str = ""
    source_line: str = ""
    roofline_fallback: bool = False
    kv_len: int | None = None  # KV-cache length a decode kernel attends over
    gap_us: float | None = None  # idle time on the stream before this kernel (launch/host model)
    method: str | None = None  # "exact", "extrapolated-<dims>", "roofline: <why>", "interpolated from ..."
    simulated_step: int | None = None  # the decode step whose simulation this row shows (interpolated rows)

    def shapes_text(self) -> str:
        """The params as `m=2048 n=4096 k=4096`, for tables and trace args."""
        return " ".join(f"{k}={_short(v)}" for k, v in self.params)

    def params_json(self) -> str:
        return json.dumps({k: list(v) if isinstance(v, tuple) else v for k, v in self.params}, sort_keys=True)


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What a set of kernel records is a run of: model, hardware, preset, scenario."""

    run_id: str
    model: str
    hardware: str
    preset: str = ""
    device_label: str = ""  # shown as the trace process name; defaults to the hardware name
    scenario: Mapping[str, Any] = field(default_factory=dict)  # e.g. {"prompt": 2048, "decode": 128, "batch": 1}
    ranks: int = 1  # tensor-parallel GPUs: the kernels are one rank's, standing for every (symmetric) rank


@dataclass(frozen=True, slots=True)
class PredictionRecords:
    """A run and its kernel launches in launch order."""

    run: RunInfo
    kernels: Sequence[KernelRecord]

    @property
    def end_us(self) -> float:
        return max((k.start_us + k.duration_us for k in self.kernels), default=0.0)


@dataclass(frozen=True, slots=True)
class NodeEvent:
    """One tile-graph node of one CTA as the engine ran it (recording on)."""

    sm: int
    cta: int
    group: str  # execution group name, e.g. "producer", "consumer0"
    node: str  # node name within the CTA template
    op: str  # Op name, e.g. "MMA"
    unit: str  # Unit name, e.g. "TENSOR"
    issue_cycle: int
    start_cycle: int
    end_cycle: int
    wait_reason: str | None = None  # why it waited before issue: one of STALL_REASONS, None when it did not
    wait_cycles: int = 0
    node_index: int = -1  # index in the CTA template, -1 unknown
    global_bytes: float | None = None  # bytes this node moved to/from global memory (L2 or DRAM)
    dram_bytes: float | None = None  # of which DRAM served


@dataclass(frozen=True, slots=True)
class Dependency:
    """A cross-group dependency between two recorded events (indices into the event list)."""

    src: int
    dst: int
    kind: str  # "data" | "order" | "barrier"


@dataclass(frozen=True, slots=True)
class KernelDetail:
    """A single simulated kernel with its node events: the input of the kernel detail view and nodes table."""

    kernel: KernelRecord
    run: RunInfo
    num_sms: int
    events: Sequence[NodeEvent]
    dependencies: Sequence[Dependency] = ()


def _short(v: Any) -> str:
    if isinstance(v, (tuple, list)):
        return "[" + ",".join(str(x) for x in v) + "]" if len(v) <= 8 else f"[{len(v)} values]"
    return str(v)
