"""`torchsim kernel rmsnorm --rows R --hidden H` and `torchsim kernel add-rmsnorm ...` (fused residual add).

Front end of lowering.templates.norms.rmsnorm; the report adds the effective bandwidth against HBM peak.
"""

from __future__ import annotations

import argparse
from typing import Any

from torchsim.cli.kernel import add_common, positive
from torchsim.cli.kernels.memory_bound import check_dtype, run_memory_kernel
from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.lowering.templates.norms import rmsnorm


def register(sub: Any) -> None:
    for name, text in (("rmsnorm", "y = x / rms(x) * w per row (vLLM rms_norm)"),
                       ("add-rmsnorm", "x += residual; residual = x; y = rmsnorm(x) (vLLM fused_add_rms_norm)")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--rows", type=int, required=True, help="rows (tokens)")
        p.add_argument("--hidden", type=int, required=True, help="hidden size (row length)")
        add_common(p)
        p.set_defaults(func=_run, residual=name == "add-rmsnorm")


def _run(args: argparse.Namespace) -> int:
    rows, hidden = positive("rows", args.rows), positive("hidden", args.hidden)
    hw = get_profile(args.hw)
    kind = "add-rmsnorm" if args.residual else "rmsnorm"
    dtype = check_dtype(kind, DType.parse(args.dtype), hw)
    run_memory_kernel(rmsnorm(rows, hidden, dtype, hw, residual=args.residual), args)
    return 0
