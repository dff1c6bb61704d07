"""Tensor-pipe sensitivity: total and stall cycles vs tensor latency (32-128) and in-flight width (2-16).

    python benchmarks/tensor_pipe_study.py [--png /tmp/tensor_pipe.png] [--warps 4 --chains 2]

An sm80-style multistage GEMM at mma.sync granularity on one A100 SM (torchsim.studies.tensor_pipe): W warps x
I chained accumulators put at most W x I MMAs in flight, so width stops helping past W x I (the knee).
"""

from __future__ import annotations

import argparse
import io

from torchsim.exports.atomic import write_bytes_atomic
from torchsim.studies.tensor_pipe import LATENCIES, WIDTHS, knee, run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--png", default="/tmp/tensor_pipe.png")
    ap.add_argument("--warps", type=int, default=4)
    ap.add_argument("--chains", type=int, default=2)
    args = ap.parse_args()
    pts = run(LATENCIES, WIDTHS, args.warps, args.chains)
    n = args.warps * args.chains
    print(f"{args.warps} warps x {args.chains} independent MMA chains = {n} MMAs in flight at most")
    print("total cycles (stall cycles) by width:")
    print(f"{'latency':>8} " + " ".join(f"{w:>15}" for w in WIDTHS) + "   knee")
    for lat in LATENCIES:
        row = sorted((p for p in pts if p.latency == lat), key=lambda p: p.width)
        print(f"{lat:>8} " + " ".join(f"{p.cycles:>7} ({p.stall_cycles / 1e3:>4.0f}k)" for p in row) +
              f"   {knee(pts, lat)}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=110)
    for lat in LATENCIES:
        row = sorted((p for p in pts if p.latency == lat), key=lambda p: p.width)
        axes[0].plot([p.width for p in row], [p.cycles for p in row], marker="o", label=f"latency {lat}")
        axes[1].plot([p.width for p in row], [p.stall_cycles for p in row], marker="o", label=f"latency {lat}")
    for ax, what in zip(axes, ("total cycles", "stall cycles (warp-cycles waiting)")):
        ax.axvline(n, color="grey", ls="--", lw=1)
        ax.text(n, ax.get_ylim()[1] * 0.95, f" warps x chains = {n}", fontsize=8, va="top")
        ax.set_xlabel("tensor in-flight width (sub-operations)")
        ax.set_ylabel(what)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("sm80-style GEMM on one A100 SM: tensor-pipe latency x width")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    write_bytes_atomic(args.png, buf.getvalue())
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
