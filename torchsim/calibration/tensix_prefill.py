"""Fit the host time a Tenstorrent prefill spends outside op dispatch (`prefill_host_s` of the Tensix profiles)
to published time-to-first-token rows, with leave-one-source-out figures.

What it stands for: tt_transformers' demos time a user's prefill on the host (prefill_forward_text: the inputs'
preparation and copy, the forward with every op dispatched by the host, the logits read back and sampled on the
host); torchsim models the ops and their host dispatch (host_dispatch_s per op) but not the rest, a cost per
prefill that does not scale with the device (n150 and n300 rows of the same model miss by about the same
milliseconds, not by the same factor). Adding a constant to a prefill's step overhead shifts its whole schedule,
so each row's prediction without it is its prediction less the constant it was made with, and the fit needs no
new simulation: the value is the median over the rows of (measured - predicted without it), robust to the rows
of software tt-metal marks as under development; leave-one-source-out refits on the other sources' rows and
predicts the held-out ones. Run by scripts/calibrate_tensix_prefill.py; the value is recorded, `calibrated`, in
torchsim.hwmodels.tensix.launch.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class TtftRow:
    rid: str
    source: str
    measured_s: float
    predicted_s: float  # without any prefill host time


@dataclass(frozen=True)
class PrefillFit:
    value_s: float
    rows: tuple[TtftRow, ...]
    loso: dict[str, float] = field(default_factory=dict)  # held-out source -> the value fitted without it

    def errors(self, value_s: float | None = None) -> dict[str, float]:
        """Each row's relative error (predicted / measured - 1) with `value_s` (default the fit)."""
        v = self.value_s if value_s is None else value_s
        return {r.rid: (r.predicted_s + v) / r.measured_s - 1.0 for r in self.rows}

    def mape(self, value_s: float | None = None) -> float:
        errs = self.errors(value_s)
        return sum(abs(e) for e in errs.values()) / len(errs)

    def loso_mape(self) -> float:
        """MAPE of every row predicted with the value fitted without its source."""
        errs = [abs((r.predicted_s + self.loso[r.source]) / r.measured_s - 1.0) for r in self.rows]
        return sum(errs) / len(errs)


def fit_prefill_host(rows: Sequence[TtftRow]) -> PrefillFit:
    """The median of (measured - predicted) over `rows`, and the same fitted without each source in turn. A row
    measured faster than predicted counts as it is (a negative residual); no rows is an error."""
    rows = tuple(rows)
    if not rows:
        raise ValueError("no TTFT rows to fit the prefill host time to")
    for r in rows:
        if r.measured_s <= 0:
            raise ValueError(f"row {r.rid}: measured TTFT must be > 0, got {r.measured_s}")

    def fit(rs: Sequence[TtftRow]) -> float:
        return max(0.0, statistics.median(r.measured_s - r.predicted_s for r in rs))

    sources = sorted({r.source for r in rows})
    loso = {s: fit([r for r in rows if r.source != s]) if len(sources) > 1 else fit(rows) for s in sources}
    return PrefillFit(fit(rows), rows, loso)


__all__ = ["PrefillFit", "TtftRow", "fit_prefill_host"]
