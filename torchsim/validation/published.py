"""Read published measurements and score predictions against them (MAPE per group).

Hardware names in the file are mapped to torchsim profiles; each mapping that is a proxy says so (an H800 is
an H100 SXM for single-GPU kernels; an A100 PCIe 40GB has its own profile, a100-pcie).
"""

from __future__ import annotations

import csv
import io
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
    ("A100 PCIe", "a100-pcie", ""),
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
    source: str = ""

    @property
    def profile(self) -> tuple[str, str] | None:
        for key, prof, note in HW_MAP:
            if key in self.hardware:
                return prof, note
        if self.hardware.strip() in _profile_names():  # a measurement file may name a torchsim profile directly
            return self.hardware.strip(), ""
        return None

    @property
    def source_key(self) -> str:
        """The source a row comes from, for leave-one-source-out: its source text up to the first ' @ ', ' ('
        or ',' (the repository file, issue or paper, without commit or section)."""
        return source_key(self.source)


COLUMNS = ("id", "category", "hardware", "workload", "dtype", "params_json", "metric", "value", "unit", "source",
           "notes")


def source_key(text: str) -> str:
    cut = len(text)
    for sep in (" @ ", " (", ","):
        i = text.find(sep)
        if 0 < i < cut:
            cut = i
    return text[:cut].strip()


def _profile_names() -> frozenset[str]:
    from torchsim.hwmodels import profile_names
    return frozenset(profile_names())


def read_rows(path: Path | None = None, *, strict: bool = False) -> list[Row]:
    """Every row of a measurement file in the published_dev.csv schema.

    `strict`: a file whose header lacks a column or has one the schema does not know, a row whose value is not a
    number or whose params_json is not JSON, is an error naming it (the calibration input); otherwise such rows
    are skipped (the published file has a few non-numeric values)."""
    p = path or default_csv()
    if not Path(p).is_file():
        raise FileNotFoundError(f"measurement file {str(p)!r} does not exist")
    out = []
    try:
        text = Path(p).read_bytes().decode("utf-8-sig")  # a spreadsheet's byte-order mark is not a column name
    except UnicodeDecodeError as exc:  # a binary file given as the measurements: name it, not the codec
        raise ValueError(f"{p}: not a text file (byte {exc.start} is not UTF-8); measurements are a CSV in the "
                         f"published_dev.csv schema") from None
    with io.StringIO(text, newline="") as f:
        reader = csv.DictReader(f)
        try:
            header = list(reader.fieldnames or [])
        except csv.Error as exc:
            raise ValueError(f"{p}: not a readable CSV file ({exc})") from None
        missing = [c for c in COLUMNS if c not in header]
        unknown = [c for c in header if c not in COLUMNS]
        if missing or unknown:
            raise ValueError(f"{p}: not in the published_dev.csv schema: "
                             + "; ".join(x for x in (f"missing column(s) {', '.join(missing)}" if missing else "",
                                                     f"unknown column(s) {', '.join(unknown)}" if unknown else "")
                                         if x) + f" (expected: {', '.join(COLUMNS)})")
        try:
            records = list(enumerate(reader, start=2))
        except csv.Error as exc:  # a field over csv's size limit, a NUL byte
            raise ValueError(f"{p}: not a readable CSV file after line {reader.line_num} ({exc})") from None
        for line, r in records:
            try:
                value = float(r["value"])
            except (TypeError, ValueError):
                if strict:
                    raise ValueError(f"{p}:{line}: row {r['id']}: value {r['value']!r} is not a number") from None
                continue
            try:
                params = json.loads(r["params_json"] or "{}")
            except json.JSONDecodeError as exc:
                if strict:
                    raise ValueError(f"{p}:{line}: row {r['id']}: params_json is not JSON: {exc}") from None
                continue
            out.append(Row(r["id"], r["category"], r["hardware"], r["workload"], r["dtype"], params, r["metric"],
                           value, r["unit"], r["notes"] or "", r["source"] or ""))
    return out


def rows(category: str, path: Path | None = None) -> list[Row]:
    return [r for r in read_rows(path) if r.category == category]


def quant_of(text: str) -> str:
    """The quantised format (torchsim.lowering.quant) a row's dtype text names ("" for none): nvfp4, mxfp4."""
    t = text.lower()
    return "nvfp4" if "nvfp4" in t else "mxfp4" if "mxfp4" in t else ""


def dtype_of(text: str) -> DType | None:
    """The GEMM input dtype a row's dtype text names (None for formats torchsim does not model, e.g. fp4; the
    block-scaled FP4 formats are `quant_of`'s)."""
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
