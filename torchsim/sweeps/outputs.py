"""Sweep outputs: one Parquet row per point (written atomically) and a PNG of the total against the knobs.

Reads the rows of torchsim.sweeps.space.run_sweep. Files go through torchsim.exports.atomic, so an interrupted sweep
never leaves a partial file. The Parquet bytes depend only on the rows and the sweep's description.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from torchsim.exports.atomic import write_bytes_atomic


def to_table(rows: Sequence[Mapping[str, Any]], meta: Mapping[str, str]) -> pa.Table:
    if not rows:
        raise ValueError("a sweep with no points has nothing to write")
    names = list(rows[0])
    table = pa.Table.from_pylist([dict(r) for r in rows])
    table = table.select(names)
    return table.replace_schema_metadata({**(table.schema.metadata or {}), **{k: v for k, v in meta.items()}})


def parquet_bytes(rows: Sequence[Mapping[str, Any]], meta: Mapping[str, str]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(to_table(rows, meta), buf, compression="zstd")
    return buf.getvalue()


def write_parquet(rows: Sequence[Mapping[str, Any]], path: str, meta: Mapping[str, str]) -> int:
    """Write the sweep table to `path` atomically; returns the bytes written."""
    return write_bytes_atomic(path, parquet_bytes(rows, meta))


def plot(rows: Sequence[Mapping[str, Any]], knobs: Sequence[Any], path: str, title: str = "") -> int:
    """Total time against the first knob, one line per value of the second (the rest at their first value)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    y_col = "total_us" if "total_us" in rows[0] else "kernels_us"
    x = knobs[0]
    fixed = {k.field: k.values[0] for k in knobs[2:]}
    series: dict[float | None, list[tuple[float, float]]] = {}
    for r in rows:
        if any(r[f] != v for f, v in fixed.items()):
            continue
        key = r[knobs[1].field] if len(knobs) > 1 else None
        series.setdefault(key, []).append((r[x.field], r[y_col]))
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for key, pts in series.items():
        pts.sort()
        label = f"{knobs[1].field} = {key:g} {knobs[1].unit}" if key is not None else None
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ax.set_xlabel(f"{x.field} [{x.unit}]")
    ax.set_ylabel("step time [us]" if y_col == "total_us" else "kernel time [us]")
    note = ", ".join(f"{f}={v:g}" for f, v in fixed.items())
    ax.set_title((title + (f" ({note})" if note else "")).strip())
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return write_bytes_atomic(path, buf.getvalue())
