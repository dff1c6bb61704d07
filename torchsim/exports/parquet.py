"""Parquet export: a kernels table (one row per kernel launch) and a nodes table (one row per node event).

Reads the records of `torchsim.exports.records`; the schema is declared once below (`KERNEL_COLUMNS`,
`NODE_COLUMNS`) and drives the pyarrow schema, the row conversion and the docs table in docs/exports.md.
Units are in column names; a quantity that was not modelled is NULL, never 0.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import torchsim
from torchsim.exports.atomic import atomic_output
from torchsim.exports.records import KernelDetail, KernelRecord, PredictionRecords, RunInfo

SCHEMA_VERSION = 1
META_PREFIX = "torchsim."


@dataclass(frozen=True, slots=True)
class Column:
    """One column: its name (with unit), arrow type, meaning, and how a record fills it."""

    name: str
    type: pa.DataType
    description: str
    get: Callable[[Any, Any], Any]  # (context, record) -> value; None is NULL
    nullable: bool = True


def _busy(unit: str) -> Callable[[RunInfo, KernelRecord], float | None]:
    return lambda run, k: None if k.unit_busy is None else k.unit_busy.get(unit)


def _stall(reason: str) -> Callable[[RunInfo, KernelRecord], float | None]:
    return lambda run, k: None if k.stalls_cycles is None else k.stalls_cycles.get(reason)


def _collective(k: KernelRecord, what: str) -> float | None:
    if k.kernel_kind != "collective":
        return None
    if what == "nbytes":
        return float(dict(k.params).get("nbytes", 0))
    value = (k.template_config or {}).get(what)
    return None if value is None else float(value)


KERNEL_COLUMNS: tuple[Column, ...] = (
    Column("run_id", pa.string(), "identifies the run (model, hardware, preset, scenario)",
           lambda r, k: r.run_id, False),
    Column("model", pa.string(), "model name; NULL for a standalone kernel", lambda r, k: r.model or None),
    Column("hardware", pa.string(), "hardware profile name", lambda r, k: r.hardware, False),
    Column("preset", pa.string(), "fusion preset (eager, serving); NULL for a standalone kernel",
           lambda r, k: r.preset or None),
    Column("phase", pa.string(), "prefill or decode; NULL for a standalone kernel", lambda r, k: k.phase or None),
    Column("decode_step", pa.int32(), "decode step (0-based); NULL in prefill", lambda r, k: k.decode_step),
    Column("simulated_step", pa.int32(), "decode step whose simulation the row shows (differs from decode_step "
           "on interpolated rows); NULL in prefill", lambda r, k: k.simulated_step),
    Column("kv_len", pa.int32(), "KV-cache length a decode kernel attends over", lambda r, k: k.kv_len),
    Column("layer", pa.int32(), "transformer layer; NULL outside layers", lambda r, k: k.layer),
    Column("kernel_index", pa.int32(), "launch order within the run", lambda r, k: k.kernel_index, False),
    Column("stream", pa.int32(), "stream the kernel ran on", lambda r, k: k.stream, False),
    Column("kernel_name", pa.string(), "kernel name (module path and role)", lambda r, k: k.kernel_name, False),
    Column("kernel_kind", pa.string(), "KernelKind value: gemm, attention_prefill, rmsnorm, ...",
           lambda r, k: k.kernel_kind, False),
    Column("template", pa.string(), "tile-graph template; NULL for roofline-fallback rows", lambda r, k: k.template),
    Column("template_config_json", pa.string(), "template configuration (tile shape, stages...) as JSON",
           lambda r, k: None if k.template_config is None else json.dumps(k.template_config, sort_keys=True)),
    Column("shapes", pa.string(), "kernel parameters as text, e.g. 'k=4096 m=2048 n=14336'",
           lambda r, k: k.shapes_text()),
    Column("params_json", pa.string(), "kernel parameters as JSON (DuckDB: json_extract)",
           lambda r, k: k.params_json()),
    Column("dtype", pa.string(), "input dtype", lambda r, k: k.dtype or None),
    Column("start_cycles", pa.int64(), "start from the run's start, hardware clock cycles",
           lambda r, k: k.start_cycles, False),
    Column("duration_cycles", pa.int64(), "duration in hardware clock cycles", lambda r, k: k.duration_cycles, False),
    Column("start_us", pa.float64(), "start from the run's start, microseconds", lambda r, k: k.start_us, False),
    Column("duration_us", pa.float64(), "duration, microseconds", lambda r, k: k.duration_us, False),
    Column("gap_us", pa.float64(), "idle time on the stream before the kernel (launch/host model), microseconds",
           lambda r, k: k.gap_us),
    Column("clock_hz", pa.float64(), "clock the cycles count", lambda r, k: k.clock_hz, False),
    Column("flops", pa.float64(), "useful floating-point operations", lambda r, k: k.flops),
    Column("dram_bytes", pa.float64(), "DRAM (HBM) traffic, bytes", lambda r, k: k.dram_bytes),
    Column("l2_hit_fraction", pa.float64(), "L2 hit rate, 0..1", lambda r, k: k.l2_hit_rate),
    Column("tensor_busy_fraction", pa.float64(), "tensor-core pipe busy, 0..1", _busy("tensor")),
    Column("fma_busy_fraction", pa.float64(), "CUDA-core (FP32 FMA) pipe busy, 0..1", _busy("fma")),
    Column("sfu_busy_fraction", pa.float64(), "special-function unit busy, 0..1", _busy("sfu")),
    Column("ldst_busy_fraction", pa.float64(), "load/store unit busy, 0..1", _busy("ldst")),
    Column("tma_busy_fraction", pa.float64(), "TMA engine busy, 0..1 (NULL where the hardware has none)",
           _busy("tma")),
    Column("tmem_busy_fraction", pa.float64(), "tensor-memory port busy, 0..1 (sm100 only)", _busy("tmem")),
    Column("l2_busy_fraction", pa.float64(), "L2 bandwidth busy, 0..1", _busy("l2")),
    Column("dram_busy_fraction", pa.float64(), "DRAM bandwidth busy, 0..1", _busy("dram")),
    Column("stall_data_cycles", pa.float64(), "cycles nodes waited on a data dependence", _stall("data")),
    Column("stall_order_cycles", pa.float64(), "cycles nodes waited on an order edge (program order, buffer reuse)",
           _stall("order")),
    Column("stall_barrier_cycles", pa.float64(), "cycles nodes waited on a barrier (synchronisation)",
           _stall("barrier")),
    Column("stall_unit_busy_cycles", pa.float64(), "cycles ready nodes waited for a busy unit", _stall("unit_busy")),
    Column("stall_issue_cycles", pa.float64(), "cycles ready nodes waited for an issue slot", _stall("issue")),
    Column("stall_memory_queue_cycles", pa.float64(), "cycles requests waited in a memory queue",
           _stall("memory_queue")),
    Column("bound", pa.string(), "what bounds the kernel (compute, memory, latency, ...)", lambda r, k: k.bound),
    Column("module_path", pa.string(), "nn.Module path the kernel came from", lambda r, k: k.module_path or None),
    Column("source_line", pa.string(), "model source line, file.py:123", lambda r, k: k.source_line or None),
    Column("roofline_fallback", pa.bool_(), "true when no template simulated it and a roofline estimate stands in",
           lambda r, k: k.roofline_fallback, False),
    Column("method", pa.string(), "how the duration was obtained: exact (simulated in full), extrapolated-<dims> "
           "(truncated instances of the repeating dimensions waves, k, kv or seq (a causal prefill, quadratic), "
           "torchsim.prediction.repeats), "
           "roofline: <why>, interpolated-<dim> (a call between simulated calls that differ only in that size: "
           "kv_blocks, m; torchsim.prediction.reuse), interpolated from decode steps A and B", lambda r, k: k.method),
    Column("tp_ranks", pa.int32(), "tensor-parallel GPUs the run spans (1: one GPU)", lambda r, k: r.ranks, False),
    Column("rank", pa.int32(), "the rank the row is the kernel of: 0, the simulated rank, standing for every "
           "symmetric rank (expert-parallel MoE rows are the slowest rank's)", lambda r, k: 0, False),
    Column("collective_bytes", pa.float64(), "a collective's message, bytes per rank as nccl-tests counts them; "
           "NULL for other kernels", lambda r, k: _collective(k, "nbytes")),
    Column("busbw_GBps", pa.float64(), "a collective's bus bandwidth (nccl-tests' busbw), GB/s; NULL for other "
           "kernels", lambda r, k: _collective(k, "busbw_GBps")),
)

NODE_COLUMNS: tuple[Column, ...] = (
    Column("run_id", pa.string(), "identifies the run", lambda d, e: d.run.run_id, False),
    Column("hardware", pa.string(), "hardware profile name", lambda d, e: d.run.hardware, False),
    Column("kernel_name", pa.string(), "kernel name", lambda d, e: d.kernel.kernel_name, False),
    Column("sm", pa.int32(), "SM (Tensix: core) the CTA ran on", lambda d, e: e.sm, False),
    Column("cta", pa.int32(), "logical CTA index", lambda d, e: e.cta, False),
    Column("group", pa.string(), "execution group (warp, warp group, Tensix thread)", lambda d, e: e.group, False),
    Column("node", pa.string(), "node name in the CTA template", lambda d, e: e.node, False),
    Column("node_index", pa.int32(), "node index in the CTA template",
           lambda d, e: None if e.node_index < 0 else e.node_index),
    Column("op", pa.string(), "operation (Op name)", lambda d, e: e.op, False),
    Column("unit", pa.string(), "hardware unit (Unit name)", lambda d, e: e.unit, False),
    Column("issue_cycle", pa.int64(), "cycle the node issued", lambda d, e: e.issue_cycle, False),
    Column("start_cycle", pa.int64(), "cycle its unit started serving it", lambda d, e: e.start_cycle, False),
    Column("end_cycle", pa.int64(), "cycle it completed", lambda d, e: e.end_cycle, False),
    Column("wait_reason", pa.string(), "why it waited before issue (data, order, unit_busy, memory_queue); "
           "NULL when it did not wait", lambda d, e: e.wait_reason),
    Column("wait_cycles", pa.int64(), "cycles it waited before issue", lambda d, e: e.wait_cycles, False),
    Column("global_bytes", pa.float64(), "bytes moved to/from global memory", lambda d, e: e.global_bytes),
    Column("dram_bytes", pa.float64(), "of those, bytes DRAM served", lambda d, e: e.dram_bytes),
)


def arrow_schema(columns: Sequence[Column], metadata: Mapping[str, str] | None = None) -> pa.Schema:
    fields = [pa.field(c.name, c.type, nullable=c.nullable) for c in columns]
    return pa.schema(fields, metadata={k.encode(): v.encode() for k, v in (metadata or {}).items()})


def profile_hash(profile: Any) -> str:
    """Hash of a profile's numbers (values and units); provenance text does not count.

    Uses the profile's own `numbers_hash()` where it has one (the same key memoisation uses), else a SHA-256
    over every number reachable through its dataclass fields.
    """
    own = getattr(profile, "numbers_hash", None)
    if callable(own):
        return str(own())
    items: list[tuple[str, Any]] = []
    _collect_numbers(profile, "", items)
    blob = json.dumps(sorted(items, key=lambda kv: kv[0]), separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def _collect_numbers(obj: Any, path: str, out: list[tuple[str, Any]]) -> None:
    if isinstance(obj, bool):
        out.append((path, obj))
    elif isinstance(obj, (int, float)):
        out.append((path, repr(float(obj))))
    elif isinstance(obj, enum.Enum):
        out.append((path, obj.name))
    elif hasattr(obj, "value") and hasattr(obj, "unit") and hasattr(obj, "source"):  # Quantity
        out.append((path, [repr(float(obj.value)), obj.unit]))
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            if f.name not in ("name", "source", "note", "description"):
                _collect_numbers(getattr(obj, f.name), f"{path}.{f.name}", out)
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            _collect_numbers(v, f"{path}[{k}]", out)
    elif isinstance(obj, (tuple, list)):
        for i, v in enumerate(obj):
            _collect_numbers(v, f"{path}[{i}]", out)


def file_metadata(table: str, profiles: Sequence[Any], extra: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Key-value metadata of every torchsim Parquet file."""
    meta = {
        "schema_version": str(SCHEMA_VERSION),
        "table": table,
        "version": torchsim.__version__,
        "profile": ",".join(p.name for p in profiles),
        "profile_hash": json.dumps({p.name: profile_hash(p) for p in profiles}, sort_keys=True),
    }
    for k, v in (extra or {}).items():
        meta[k] = v if isinstance(v, str) else json.dumps(v, sort_keys=True)
    return {META_PREFIX + k: v for k, v in meta.items()}


def _profiles_for(names: Sequence[str], profiles: Sequence[Any]) -> list[Any]:
    by_name = {p.name: p for p in profiles}
    missing = [n for n in dict.fromkeys(names) if n not in by_name]
    if missing:
        raise ValueError(f"no profile given for hardware {missing}; profiles given: {sorted(by_name)}")
    return [by_name[n] for n in dict.fromkeys(names)]


def kernels_table(runs: Sequence[PredictionRecords], profiles: Sequence[Any]) -> pa.Table:
    """The kernels table of one or more runs (compare writes one file over all its hardware)."""
    used = _profiles_for([r.run.hardware for r in runs], profiles)
    runs_meta = [{"run_id": r.run.run_id, "model": r.run.model, "hardware": r.run.hardware,
                  "preset": r.run.preset, "scenario": dict(r.run.scenario)} for r in runs]
    schema = arrow_schema(KERNEL_COLUMNS, file_metadata("kernels", used, {"runs": runs_meta}))
    pairs = [(r.run, k) for r in runs for k in r.kernels]
    arrays = [pa.array([c.get(run, k) for run, k in pairs], type=c.type) for c in KERNEL_COLUMNS]
    return pa.Table.from_arrays(arrays, schema=schema)


def nodes_table(details: KernelDetail | Sequence[KernelDetail], profile: Any) -> pa.Table:
    """The nodes table of a single-kernel run (or of launches run back to back): one row per node event."""
    ds = [details] if isinstance(details, KernelDetail) else list(details)
    if not ds:
        raise ValueError("nodes table: no kernel details given")
    used = _profiles_for([d.run.hardware for d in ds], [profile])
    meta = file_metadata("nodes", used, {"kernel": ",".join(d.kernel.kernel_name for d in ds)})
    schema = arrow_schema(NODE_COLUMNS, meta)
    pairs = [(d, e) for d in ds for e in d.events]
    arrays = [pa.array([c.get(d, e) for d, e in pairs], type=c.type) for c in NODE_COLUMNS]
    return pa.Table.from_arrays(arrays, schema=schema)


def write_table(path: str | os.PathLike[str], table: pa.Table) -> None:
    """Write atomically with zstd; the schema's key-value metadata travels in the file footer."""
    with atomic_output(path) as f:
        pq.write_table(table, f, compression="zstd")


def write_kernels(path: str | os.PathLike[str], runs: Sequence[PredictionRecords], profiles: Sequence[Any]) -> int:
    """Write the kernels table; returns the number of rows."""
    table = kernels_table(runs, profiles)
    write_table(path, table)
    return table.num_rows


def write_nodes(path: str | os.PathLike[str], detail: KernelDetail | Sequence[KernelDetail], profile: Any) -> int:
    table = nodes_table(detail, profile)
    write_table(path, table)
    return table.num_rows


def read_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The torchsim key-value metadata of a Parquet file, without the `torchsim.` prefix."""
    raw = pq.read_schema(path).metadata or {}
    out = {k.decode()[len(META_PREFIX):]: v.decode() for k, v in raw.items() if k.startswith(META_PREFIX.encode())}
    if "schema_version" not in out:
        raise ValueError(f"{path} is not a torchsim Parquet file (no {META_PREFIX}schema_version metadata)")
    return out


def schema_markdown(columns: Sequence[Column]) -> str:
    """The docs table for a column list (docs/exports.md embeds these; a test keeps them equal)."""
    lines = ["| column | type | null | meaning |", "|---|---|---|---|"]
    for c in columns:
        lines.append(f"| `{c.name}` | {c.type} | {'yes' if c.nullable else 'no'} | {c.description} |")
    return "\n".join(lines)
