"""A number with its unit and provenance: every hardware figure in torchsim is one of these.

Provenance is data a test can read (kind, source), never a comment. `kind` is one of documented, measured,
derived, calibrated, assumed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

KINDS = ("documented", "measured", "derived", "calibrated", "assumed")


@dataclass(frozen=True, slots=True)
class Quantity:
    """`value` in `unit`, of provenance `kind`, from `source` (a facts.csv row, a document and section...)."""

    value: float
    unit: str
    kind: str
    source: str
    note: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"provenance kind {self.kind!r} is not one of {KINDS}")
        if not self.source:
            raise ValueError(f"quantity {self.value} {self.unit} has no source")
        if not isinstance(self.value, (int, float)) or math.isnan(float(self.value)):
            raise ValueError(f"quantity from {self.source!r} has a non-numeric value {self.value!r}")

    def __float__(self) -> float:
        return float(self.value)

    def __int__(self) -> int:
        return int(self.value)


def doc(value: float, unit: str, source: str, note: str = "") -> Quantity:
    return Quantity(value, unit, "documented", source, note)


def measured(value: float, unit: str, source: str, note: str = "") -> Quantity:
    return Quantity(value, unit, "measured", source, note)


def derived(value: float, unit: str, source: str, note: str = "") -> Quantity:
    return Quantity(value, unit, "derived", source, note)


def calibrated(value: float, unit: str, source: str, note: str = "") -> Quantity:
    return Quantity(value, unit, "calibrated", source, note)


def assumed(value: float, unit: str, source: str, note: str = "") -> Quantity:
    return Quantity(value, unit, "assumed", source, note)
