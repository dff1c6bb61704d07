"""The options benchmarks/validate_{gemm,attention,moe}.py share (imported from the scripts' own folder)."""

from __future__ import annotations

import argparse
from pathlib import Path


def kernel_parser(doc: str | None) -> argparse.ArgumentParser:
    """--csv, --quick, --loso, --loso-params: the kernel-level validation scripts' common options."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", type=Path, default=None)
    ap.add_argument("--quick", action="store_true", help="skip rows above 2e12 FLOPs")
    ap.add_argument("--loso", action="store_true", help="add the fitted and leave-one-source-out MAPE")
    ap.add_argument("--loso-params", default="launch_overhead_s,graph_launch_overhead_s",
                    help="parameters --loso fits per profile (default: the launch gaps, which cost no simulation; "
                    "add dram_bytes_per_s to fit the DRAM efficiency too, a few simulations per row)")
    return ap
