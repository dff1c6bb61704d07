"""Charts of serving runs (`torchsim serve --plot`): a latency-throughput curve over a sweep of loads, and one
run's KV-cache use and batch over time. PNG through matplotlib (the `plot` extra), written atomically.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Sequence
from typing import Any

from torchsim.exports.atomic import write_bytes_atomic
from torchsim.exports.report import pyplot
from torchsim.serving.result import ServeResult


def load_label(key: str, value: float) -> str:
    """How a sweep point is named on a chart and in the assumptions of a sweep.

    >>> load_label("rate", 4.0), load_label("concurrency", 1), load_label("concurrency", 8)
    ('4 req/s', '1 client', '8 clients')
    """
    return f"{value:g} req/s" if key == "rate" else f"{int(value)} client{'s' if value != 1 else ''}"


def plot_sweep(path: str | os.PathLike[str], points: Sequence[tuple[str, float, ServeResult]]) -> int:
    """Latency against throughput, one point per load of the sweep (labelled with its rate or concurrency):
    TTFT p50/p99 on the left panel, TPOT p50/p99 on the right, output tokens/s across. `points` are (key,
    value, result), as torchsim.serving.result.write_sweep_parquet takes them. Returns the bytes written."""
    plt = pyplot()
    docs = [(key, value, r.summary_dict()) for key, value, r in points]
    xs = [d["output_tokens_per_s"] for _, _, d in docs]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
    for ax, metric, name in zip(axes, ("ttft_ms", "tpot_ms"), ("TTFT", "TPOT")):
        ys = []
        for p, style in (("p50", "o-"), ("p99", "s--")):
            y = [d[metric][p] for _, _, d in docs]
            ys += [v for v in y if math.isfinite(v)]
            ax.plot(xs, y, style, label=f"{name} {p}")
        for (key, value, d), x in zip(docs, xs):
            if math.isfinite(d[metric]["p50"]):
                ax.annotate(load_label(key, value), (x, d[metric]["p50"]), fontsize=8, xytext=(4, 4),
                            textcoords="offset points")
        if ys and min(ys) > 0 and max(ys) / min(ys) > 30:  # latencies past saturation: a log axis keeps both ends
            ax.set_yscale("log")
        ax.set_xlabel("output tokens/s")
        ax.set_ylabel(f"{name} (ms)")
        ax.set_title(f"{name} against throughput")
        ax.grid(alpha=0.3)
        ax.set_axisbelow(True)
        ax.legend(fontsize=8)
    d0 = docs[0][2]
    fig.suptitle(f"{d0['model']} on {d0['hw']}" + (f" x{d0['tp']}" if d0["tp"] > 1 else "")
                 + f", scheduler {d0['scheduler']}: {len(docs)} loads ({docs[0][0]})", fontsize=11)
    fig.tight_layout()
    return _save(fig, plt, path)


def plot_timeline(path: str | os.PathLike[str], result: ServeResult) -> int:
    """One run over simulated time, from its iteration table: KV-cache use (%) on the top panel, running and
    waiting requests on the bottom one, each as it stands after the latest iteration (a step at every
    iteration's end, from nothing at t = 0). Returns the bytes written."""
    plt = pyplot()
    its = result.engine.iterations
    blocks = max(1, result.engine.kv_blocks)
    span = its[-1].start_s + its[-1].duration_s if its else 0.0
    scale, unit = (1e3, "ms") if span < 1.0 else (1.0, "s")
    t = [0.0] + [(i.start_s + i.duration_s) * scale for i in its]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 5.6), sharex=True)
    kv = [0.0] + [100.0 * i.kv_blocks_used / blocks for i in its]
    ax1.step(t, kv, where="post", color="tab:purple")
    ax1.set_ylabel("KV cache used (%)")
    top = max(kv, default=0.0)
    ax1.set_ylim(0, 100.0 if top > 50 else (top * 1.15 or 1.0))
    ax1.set_title(f"KV cache: {result.engine.kv_blocks:,} blocks of {result.engine.config.block_size} tokens")
    for what, colour in (("running", "tab:blue"), ("waiting", "tab:orange")):
        ax2.step(t, [0] + [getattr(i, what) for i in its], where="post", color=colour, label=f"{what} requests")
    ax2.set_ylabel("requests")
    ax2.set_xlabel(f"simulated time ({unit})")
    ax2.legend(fontsize=8)
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.set_axisbelow(True)
    fig.suptitle(f"{result.model} on {result.hw}" + (f" x{result.tp}" if result.tp > 1 else "")
                 + f", scheduler {result.engine.config.name}: {len(result.engine.requests)} requests, "
                 f"{len(its):,} iterations", fontsize=11)
    fig.tight_layout()
    return _save(fig, plt, path)


def _save(fig: Any, plt: Any, path: str | os.PathLike[str]) -> int:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    return write_bytes_atomic(path, buf.getvalue())
