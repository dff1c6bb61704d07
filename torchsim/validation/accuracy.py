"""How accurate a number is: the validation error of its kernel kind x profile x dtype, shown beside it.

`accuracy.json` (beside this module) is written by `benchmarks/accuracy_report.py` from the same predictors as
the `benchmarks/validate_*.py` reports: per (kind, profile, dtype) the MAPE over the published rows of
../shared/validation/published_dev.csv, their count and ids, and, where computed, the leave-one-source-out MAPE.
`predict`, `kernel` and `compare` print `note(...)` and carry `entry(...)` in `--json`; a kernel kind, profile
or dtype with no rows says so ("outside anything validated"), never a borrowed figure.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

PATH = Path(__file__).with_name("accuracy.json")
KIND_NAMES = {"gemm": "GEMM", "attention": "attention", "moe_grouped_gemm": "MoE grouped GEMM",
              "e2e_inference": "end-to-end", "tensix_gemm": "Tensix GEMM"}


@lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    """The shipped report ({"entries": {"kind/profile/dtype": {...}}, "generated": ...}); empty if absent."""
    try:
        return dict(json.loads(PATH.read_text()))
    except (OSError, ValueError):
        return {"entries": {}}


def key(kind: str, profile: str, dtype: str) -> str:
    return f"{kind}/{profile}/{dtype}".lower()


def base_profile(name: str) -> str:
    """A what-if or sub-grid profile ('h100-sxm+fast_hbm', 'wormhole-n150@8x8') is validated as its base."""
    return name.split("+")[0].split("@")[0]


def entry(kind: str, profile: str, dtype: str) -> dict[str, Any] | None:
    """The validation figures for this kind x profile x dtype, or None when no published row covers it."""
    got = table().get("entries", {}).get(key(kind, base_profile(profile), dtype))
    return dict(got) if got else None


def note(kind: str, profile: str, dtype: str) -> str:
    """One line: "GEMM on h100-sxm bf16: 7.1% MAPE over 14 published rows (leave-one-source-out 9.0%)"."""
    name = KIND_NAMES.get(kind, kind)
    base = base_profile(profile)
    e = entry(kind, profile, dtype)
    if e is None:
        return (f"{name} on {base} {dtype}: outside anything validated (no published measurement of this kind, "
                f"profile and dtype; see docs/validation.md)")
    loso = f" (leave-one-source-out {e['loso_mape_pct']:.1f}%)" if e.get("loso_mape_pct") is not None else ""
    derived = f"; this profile is derived from {base}" if base != profile else ""
    return (f"{name} on {base} {dtype}: {e['mape_pct']:.1f}% MAPE over {e['rows']} published "
            f"row{'s' if e['rows'] != 1 else ''}{loso}{derived}")


def kind_of_template(template: str) -> str:
    """The validation kind a kernel template's numbers are judged by ('gemm/sm90-ws-cooperative' -> 'gemm')."""
    head = template.split("/")[0]
    if head in ("gemm",):
        return "gemm"
    if head in ("attention", "flash_decode", "flash_mla"):
        return "attention"
    if head == "grouped_gemm":
        return "moe_grouped_gemm"
    if head.startswith("tensix_matmul"):
        return "tensix_gemm"
    return head


def notes_for(profile: str, dtype: str) -> dict[str, str]:
    """The validation error of an end-to-end prediction and of its main kernel kinds on this profile."""
    return {kind: note(kind, profile, dtype) for kind in ("e2e_inference", "gemm", "attention")}
