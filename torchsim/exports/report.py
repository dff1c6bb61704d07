"""Reports people read: terminal tables of a prediction or a comparison, and a PNG chart of time per kernel
kind per hardware (matplotlib, the `plot` extra).

Reads `PredictionRecords`; the chart is written atomically like every other export.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from torchsim.exports.atomic import atomic_output
from torchsim.exports.records import KernelRecord, PredictionRecords

_LAYER = re.compile(r"(^|\.)(layers|h|blocks)\.\d+\.")
_FOLDED = re.compile(r"(^|\.)(?:layers|h|blocks)\.\*\.")


def kernel_group(k: KernelRecord) -> str:
    """A kernel's name with its layer index folded (`layers.*.mlp.down`), so repeated layers add up."""
    return _LAYER.sub(lambda m: f"{m.group(1)}{m.group(2)}.*.", k.kernel_name)


@dataclass(frozen=True, slots=True)
class RunSummary:
    """The headline numbers of one run, as the comparison table shows them."""

    hardware: str
    ttft_s: float | None  # prefill: first token
    tpot_s: float | None  # mean time per decode step
    tokens_per_s: float | None  # decode tokens per second over the batch
    total_s: float
    top: list[tuple[str, float]]  # (kernel group, share of total kernel time)
    bound: list[tuple[str, float]]  # (bound, share of total kernel time)
    fallback_share: float  # share of kernel time estimated by roofline fallback


def summarize(pred: PredictionRecords, top: int = 5, ttft_s: float | None = None,
              tpot_s: float | None = None) -> RunSummary:
    """Headline numbers from the kernel records; `ttft_s`/`tpot_s` from the prediction override the estimate."""
    ks = pred.kernels
    busy = sum(k.duration_us for k in ks) or 1.0
    prefill_end = max((k.start_us + k.duration_us for k in ks if k.phase == "prefill"), default=None)
    steps = sorted({k.decode_step for k in ks if k.phase == "decode" and k.decode_step is not None})
    if ttft_s is None and prefill_end is not None:
        ttft_s = (prefill_end - min(k.start_us for k in ks)) * 1e-6
    if tpot_s is None and steps:
        decode = [k for k in ks if k.phase == "decode"]
        span = max(k.start_us + k.duration_us for k in decode) - (prefill_end or min(k.start_us for k in decode))
        tpot_s = span / len(steps) * 1e-6
    batch = int(pred.run.scenario.get("batch", 1))
    by_group: dict[str, float] = defaultdict(float)
    by_bound: dict[str, float] = defaultdict(float)
    for k in ks:
        by_group[kernel_group(k)] += k.duration_us
        by_bound[k.bound or "not modelled"] += k.duration_us
    ranked = sorted(by_group.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    bounds = sorted(by_bound.items(), key=lambda kv: (-kv[1], kv[0]))
    fallback = sum(k.duration_us for k in ks if k.roofline_fallback)
    return RunSummary(pred.run.hardware, ttft_s, tpot_s, batch / tpot_s if tpot_s else None, pred.end_us * 1e-6,
                      [(g, t / busy) for g, t in ranked], [(b, t / busy) for b, t in bounds], fallback / busy)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool] | None = None) -> str:
    """A plain aligned text table: first column left-aligned, the rest right-aligned unless `right` says."""
    right = right if right is not None else [i > 0 for i in range(len(headers))]
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(str(c).rjust(w) if r else str(c).ljust(w) for c, w, r in zip(cells, widths, right)).rstrip()

    return "\n".join([line(headers), "  ".join("-" * w for w in widths), *[line(r) for r in rows]])


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.3f}"


def _short(group: str) -> str:
    """`layers.*.mlp.down_proj` -> `mlp.down_proj` for narrow columns (every layer is folded anyway)."""
    return _FOLDED.sub(lambda m: m.group(1), group).lstrip(".")


def comparison_table(summaries: Sequence[RunSummary], top: int = 5) -> str:
    """Metrics down, hardware across: TTFT, TPOT, tokens/s, the top kernels (summed over layers) and their
    share, the bound."""
    headers = ["", *[s.hardware for s in summaries]]
    rows: list[list[str]] = [
        ["TTFT (ms)", *[_ms(s.ttft_s) for s in summaries]],
        ["TPOT (ms)", *[_ms(s.tpot_s) for s in summaries]],
        ["decode tokens/s", *["-" if s.tokens_per_s is None else f"{s.tokens_per_s:,.1f}" for s in summaries]],
        ["total (ms)", *[_ms(s.total_s) for s in summaries]],
    ]
    for i in range(min(top, max((len(s.top) for s in summaries), default=0))):
        rows.append([f"top kernel {i + 1}", *[f"{_short(s.top[i][0])} {s.top[i][1]:.0%}" if i < len(s.top) else ""
                                             for s in summaries]])
    rows.append(["bound (by time)", *[f"{s.bound[0][0]} {s.bound[0][1]:.0%}" if s.bound else "-" for s in summaries]])
    rows.append(["roofline fallback", *[f"{s.fallback_share:.0%} of time" for s in summaries]])
    return format_table(headers, rows, right=[False] + [True] * len(summaries))


def kernel_table(pred: PredictionRecords, top: int = 15) -> str:
    """Kernel groups of one run by total time: calls, time, share, mean duration and the usual bound."""
    total = sum(k.duration_us for k in pred.kernels) or 1.0
    groups: dict[str, list[KernelRecord]] = defaultdict(list)
    for k in pred.kernels:
        groups[kernel_group(k)].append(k)
    ranked = sorted(groups.items(), key=lambda kv: (-sum(k.duration_us for k in kv[1]), kv[0]))[:top]
    rows = []
    for name, ks in ranked:
        t = sum(k.duration_us for k in ks)
        bounds: dict[str, float] = defaultdict(float)
        for k in ks:
            bounds[k.bound or "-"] += k.duration_us
        rows.append([name, ks[0].kernel_kind, str(len(ks)), f"{t:,.1f}", f"{t / total:.1%}", f"{t / len(ks):,.2f}",
                     max(bounds.items(), key=lambda kv: kv[1])[0] + (" *" if ks[0].roofline_fallback else "")])
    table = format_table(["kernel", "kind", "calls", "time (us)", "share", "mean (us)", "bound"], rows,
                         right=[False, False, True, True, True, True, False])
    note = "\n* roofline fallback (no template simulated it)" if any(k.roofline_fallback for k in pred.kernels) else ""
    return table + note


def time_per_kind(pred: PredictionRecords) -> dict[str, dict[str, float]]:
    """phase -> kernel kind -> seconds; decode is per step (its total divided by the number of steps)."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    steps = len({k.decode_step for k in pred.kernels if k.phase == "decode"}) or 1
    for k in pred.kernels:
        phase = k.phase or "kernel"
        out[phase][k.kernel_kind] += k.duration_us * 1e-6 / (steps if phase == "decode" else 1)
    return {p: dict(v) for p, v in out.items()}


def pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ValueError("--plot needs matplotlib: pip install 'torchsim[plot]' (or pip install matplotlib)") from exc
    return plt


def plot_kernel(path: str | os.PathLike[str], launches: KernelRecord | Sequence[KernelRecord], hardware: str) -> None:
    """PNG of one kernel (or launches run back to back): unit utilisation and where the waiting went, a bar
    per launch; what is not modelled is left out."""
    plt = pyplot()
    ks = [launches] if isinstance(launches, KernelRecord) else list(launches)
    units = sorted({u for k in ks for u in (k.unit_busy or {})}, key=lambda u: -max((k.unit_busy or {}).get(u, 0)
                                                                                     for k in ks))
    reasons = sorted({r for k in ks for r, c in (k.stalls_cycles or {}).items() if c > 0},
                     key=lambda r: -max((k.stalls_cycles or {}).get(r, 0) for k in ks))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    height = 0.8 / len(ks)
    for i, k in enumerate(ks):
        label = k.kernel_name if len(ks) > 1 else None
        ys = [j + i * height for j in range(len(units))][::-1]
        ax1.barh(ys, [100 * (k.unit_busy or {}).get(u, 0.0) for u in units], height=height, label=label)
        total = sum((k.stalls_cycles or {}).values()) or 1.0
        ys = [j + i * height for j in range(len(reasons))][::-1]
        ax2.barh(ys, [100 * (k.stalls_cycles or {}).get(r, 0.0) / total for r in reasons], height=height)
    offset = height * (len(ks) - 1) / 2
    ax1.set_yticks([j + offset for j in range(len(units))][::-1], units)
    ax2.set_yticks([j + offset for j in range(len(reasons))][::-1], reasons)
    ax1.set_xlabel("busy (% of kernel time, averaged over SMs)")
    ax1.set_title("unit utilisation")
    ax2.set_xlabel("share of waiting cycles (%)")
    ax2.set_title("waits by reason")
    for ax in (ax1, ax2):
        ax.set_xlim(0, 100)
        ax.grid(axis="x", alpha=0.3)
        ax.set_axisbelow(True)
    if len(ks) > 1:
        ax1.legend(fontsize=8, loc="lower right")
    total_us = sum(k.duration_us for k in ks)
    fig.suptitle(f"{' + '.join(k.kernel_name for k in ks)} on {hardware}: {total_us:.2f} us, "
                 f"{sum(k.duration_cycles for k in ks):,} cycles, bound: {', '.join(k.bound or '-' for k in ks)}",
                 fontsize=11)
    fig.tight_layout()
    with atomic_output(path) as f:
        fig.savefig(f, format="png", dpi=130)
    plt.close(fig)


def plot_time_per_kind(path: str | os.PathLike[str], preds: Sequence[PredictionRecords], title: str = "") -> None:
    """PNG stacked bars: one bar per hardware, one colour per kernel kind; a panel per phase (decode per step)."""
    plt = pyplot()
    data = [time_per_kind(p) for p in preds]
    phases = [ph for ph in ("prefill", "decode", "kernel") if any(ph in d for d in data)]
    totals: dict[str, float] = defaultdict(float)
    for d in data:
        for per_kind in d.values():
            for kind, s in per_kind.items():
                totals[kind] += s
    kinds = sorted(totals, key=lambda kd: -totals[kd])
    colours = plt.get_cmap("tab20")(range(len(kinds)))
    fig, axes = plt.subplots(1, len(phases), figsize=(5.5 * len(phases) + 2.5, 5.0), squeeze=False)
    labels = [p.run.hardware for p in preds]
    for ax, phase in zip(axes[0], phases):
        bottom = [0.0] * len(preds)
        for kind, colour in zip(kinds, colours):
            ms = [d.get(phase, {}).get(kind, 0.0) * 1e3 for d in data]
            ax.bar(labels, ms, bottom=bottom, color=colour, label=kind, edgecolor="white", linewidth=0.5)
            bottom = [b + v for b, v in zip(bottom, ms)]
        for x, total in enumerate(bottom):
            ax.annotate(f"{total:.2f} ms", (x, total), ha="center", va="bottom", fontsize=9,
                        xytext=(0, 3), textcoords="offset points")
        ax.set_title({"prefill": "prefill", "decode": "decode, per step", "kernel": "kernel"}[phase])
        ax.set_ylabel("kernel time (ms)")
        ax.set_ylim(0, max(bottom) * 1.12 if max(bottom) > 0 else 1)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles[::-1], names[::-1], loc="center right", title="kernel kind", frameon=False)
    fig.suptitle(title or f"time per kernel kind: {preds[0].run.model}", fontsize=12)
    fig.tight_layout(rect=(0, 0, 1 - 2.3 / (5.5 * len(phases) + 2.5), 1))
    with atomic_output(path) as f:
        fig.savefig(f, format="png", dpi=130)
    plt.close(fig)
