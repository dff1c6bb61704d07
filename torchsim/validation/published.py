"""Read published measurements and score predictions against them (MAPE per group).

Hardware names in the file are mapped to torchsim profiles; each mapping that is a proxy says so (an H800 is
an H100 SXM for single-GPU kernels; an A100 PCIe 40GB runs on the A100 SXM profile, a faster part).
"""

from __future__ import annotations

import csv
import json
import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchsim.graph import DType

HW_MAP = (  # (substring of the row's hardware, profile, note)
    ("H800", "h100-sxm", "H800 = H100 SXM for single-GPU kernels"),
    ("H100", "h100-sxm", ""),
    ("Hopper", "h100-sxm", "Hopper SKU not stated; H100 SXM assumed"),
    ("H200", "h200", ""),
    ("B200", "b200", ""),
    ("A100 PCIe", "a100-sxm", "PCIe 250 W part on the SXM profile (proxy: faster clocks under load, more bandwidth)"),
    ("A100", "a100-sxm", ""),
)


def default_csv() -> Path:
    env = os.environ.get("TORCHSIM_PUBLISHED_CSV")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for parent in here.parents:
        cand = parent.parent / "shared" / "validation" / "published_dev.csv"
        if cand.exists():
            return cand
    raise FileNotFoundError("published_dev.csv not found; set TORCHSIM_PUBLISHED_CSV or put ../shared beside the "
                            "checkout")


@dataclass(frozen=True)
class Row:
    id: str
    category: str
    hardware: str
    workload: str
    dtype: str
    params: dict[str, Any]
    metric: str
    value: float
    unit: str
    notes: str

    @property
    def profile(self) -> tuple[str, str] | None:
        for key, prof, note in HW_MAP:
            if key in self.hardware:
                return prof, note
        return None


def rows(category: str, path: Path | None = None) -> list[Row]:
    out = []
    with (path or default_csv()).open() as f:
        for r in csv.DictReader(f):
            if r["category"] != category:
                continue
            try:
                value = float(r["value"])
            except ValueError:
                continue
            out.append(Row(r["id"], r["category"], r["hardware"], r["workload"], r["dtype"],
                           json.loads(r["params_json"] or "{}"), r["metric"], value, r["unit"], r["notes"]))
    return out


def dtype_of(text: str) -> DType | None:
    """The GEMM input dtype a row's dtype text names (None for formats torchsim does not model, e.g. fp4)."""
    t = text.lower()
    if "fp4" in t:
        return None
    if "f8" in t or "fp8" in t or "e4m3" in t:
        return DType.FP8_E4M3
    if "fp16" in t and "bf16" not in t:
        return DType.FP16
    return DType.BF16


def mape(pairs: Iterable[tuple[float, float]]) -> float:
    errs = [abs(p - m) / abs(m) for p, m in pairs if m]
    return 100.0 * sum(errs) / len(errs) if errs else float("nan")


def grouped_mape(results: list[tuple[str, float, float]]) -> dict[str, tuple[int, float]]:
    groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for g, pred, meas in results:
        groups[g].append((pred, meas))
        groups["all"].append((pred, meas))
    return {g: (len(v), mape(v)) for g, v in groups.items()}
