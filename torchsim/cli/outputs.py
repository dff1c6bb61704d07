"""The `--parquet`, `--perfetto`, `--plot` options of `torchsim kernel`, `predict` and `compare`, in one place.

CLIs call `add_output_options(parser)` when they build their parser and `write_kernel_outputs` /
`write_prediction_outputs` after they have results; each returns one line per file written (path, size,
seconds). All files are written atomically.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from torchsim.cli import int_in
from torchsim.cli.paths import nodes_path as nodes_path  # re-exported for callers of the writers

if TYPE_CHECKING:  # the writers import the exporters (pyarrow, Perfetto's protos) when they write: `--help` and an
    # argument error do not wait for them
    from torchsim.exports.records import KernelDetail, KernelRecord, PredictionRecords


def add_output_options(p: argparse.ArgumentParser, detail: bool = False) -> None:
    """Add --parquet/--perfetto/--plot (and, for predictions, --detail N: the N slowest kernels node by node)."""
    g = p.add_argument_group("outputs (written atomically)")
    g.add_argument("--parquet", metavar="PATH", default=None,
                   help="Parquet kernels table (single kernels also write PATH's .nodes.parquet sibling)")
    g.add_argument("--perfetto", metavar="PATH", default=None, help="Perfetto trace (open at ui.perfetto.dev)")
    g.add_argument("--plot", metavar="PATH", default=None, help="PNG chart (needs matplotlib: the plot extra)")
    g.add_argument("--force-format", action="store_true",
                   help="write the formats above even when a path's extension names another format")
    if detail:
        g.add_argument("--detail", metavar="N", type=int_in(0, 1000), default=0,
                       help="with --perfetto: add kernel detail views of the N slowest distinct kernels")


def wants_records(args: argparse.Namespace) -> bool:
    """Whether the simulation must record node events (the kernel CLI passes this to simulate(record=...))."""
    return bool(getattr(args, "perfetto", None) or getattr(args, "parquet", None))


def file_line(what: str, path: str | os.PathLike[str], seconds: float, extra: str = "") -> str:
    """`wrote WHAT PATH (SIZE, EXTRA, SECONDS s)`: the line a command prints for each file it wrote."""
    size = os.path.getsize(path)
    shown = f"{size / 1e6:.1f} MB" if size >= 1e6 else f"{size / 1e3:.1f} kB"
    return f"wrote {what} {path} ({shown}{', ' + extra if extra else ''}, {seconds:.2f} s)"


def write_kernel_outputs(args: argparse.Namespace, launches: Sequence[tuple[Any, Any]], hw: Any) -> list[str]:
    """Outputs of `torchsim kernel`: `launches` are (KernelGraph, KernelResult) pairs run back to back (one, or
    e.g. split-KV decoding and its combine): kernels rows + nodes table, the detail trace, a breakdown chart."""
    lines: list[str] = []
    if not launches:
        return lines
    from torchsim.exports.adapt import kernel_detail, kernel_record
    from torchsim.exports.parquet import write_kernels, write_nodes
    from torchsim.exports.perfetto import write_trace
    from torchsim.exports.records import PredictionRecords, RunInfo

    run = RunInfo(f"{launches[0][1].name}-{hw.name}", model="", hardware=hw.name)
    records: list[KernelRecord] = []
    t_cycles, t_us = 0, 0.0
    for i, (_, res) in enumerate(launches):
        records.append(kernel_record(res, index=i, start_cycles=t_cycles, start_us=t_us))
        t_cycles += int(res.cycles)
        t_us += res.time_us
    details: list[KernelDetail] = []
    if getattr(args, "parquet", None) or getattr(args, "perfetto", None):
        details = [kernel_detail(res, kg, run, rec) for (kg, res), rec in zip(launches, records)]
    if getattr(args, "parquet", None):
        t = time.perf_counter()
        write_kernels(args.parquet, [PredictionRecords(run, records)], [hw])
        lines.append(file_line("kernels table", args.parquet, time.perf_counter() - t, f"{len(records)} rows"))
        t = time.perf_counter()
        rows = write_nodes(nodes_path(args.parquet), details, hw)
        lines.append(file_line("nodes table", nodes_path(args.parquet), time.perf_counter() - t, f"{rows:,} rows"))
    if getattr(args, "perfetto", None):
        rep = write_trace(args.perfetto, details=details)
        lines.append(file_line("kernel detail trace", args.perfetto, rep.write_s,
                           f"{rep.stats.slices:,} slices, {rep.stats.flows:,} flows"))
    if getattr(args, "plot", None):
        from torchsim.exports.report import plot_kernel

        t = time.perf_counter()
        plot_kernel(args.plot, records, hw.name)
        lines.append(file_line("chart", args.plot, time.perf_counter() - t))
    return lines


def slowest_distinct(records: Sequence[KernelRecord], n: int,
                     eligible: Callable[[KernelRecord], bool] | None = None) -> list[KernelRecord]:
    """The n slowest kernels, one per distinct (kind, shapes, dtype): repeated layers show once."""
    seen: set[tuple[Any, ...]] = set()
    out: list[KernelRecord] = []
    for k in sorted(records, key=lambda k: (-k.duration_cycles, k.kernel_index)):
        key = (k.kernel_kind, k.params, k.dtype)
        if key not in seen and not k.roofline_fallback and (eligible is None or eligible(k)):
            seen.add(key)
            out.append(k)
        if len(out) >= n:
            break
    return out


def write_prediction_outputs(args: argparse.Namespace, preds: Sequence[PredictionRecords], profiles: Sequence[Any],
                             detail_for: Callable[[PredictionRecords, KernelRecord], KernelDetail] | None = None,
                             title: str = "", eligible: Callable[[KernelRecord], bool] | None = None) -> list[str]:
    """Outputs of `predict` / `compare`: kernels table, end-to-end trace (+ detail views), time-per-kind chart.

    `detail_for(pred, kernel)` re-simulates one kernel with node recording (the API knows how); it is called
    for the `--detail N` slowest distinct kernels of each prediction (among those `eligible` accepts).
    """
    from torchsim.exports.parquet import write_kernels
    from torchsim.exports.perfetto import write_trace

    lines: list[str] = []
    if getattr(args, "parquet", None):
        t = time.perf_counter()
        rows = write_kernels(args.parquet, preds, profiles)
        lines.append(file_line("kernels table", args.parquet, time.perf_counter() - t, f"{rows:,} rows"))
    if getattr(args, "perfetto", None):
        n = int(getattr(args, "detail", 0) or 0)
        details: list[KernelDetail] = []
        if n > 0:
            if detail_for is None:
                raise ValueError("--detail needs node records, which this command cannot produce")
            if n > 1 and len(preds) > 1:
                n = max(1, n // len(preds))
            for pred in preds:
                details.extend(detail_for(pred, k) for k in slowest_distinct(pred.kernels, n, eligible))
        rep = write_trace(args.perfetto, preds, details)
        lines.append(file_line("trace", args.perfetto, rep.write_s, f"{rep.stats.slices:,} slices"
                           + (f", {len(details)} kernel detail views" if details else "")))
    if getattr(args, "plot", None):
        from torchsim.exports.report import plot_time_per_kind

        t = time.perf_counter()
        plot_time_per_kind(args.plot, preds, title)
        lines.append(file_line("chart", args.plot, time.perf_counter() - t))
    return lines
