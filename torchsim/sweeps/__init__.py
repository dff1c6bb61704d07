"""torchsim.sweeps: design-space sweeps over hardware-profile knobs.

    space.py    the knobs (`--vary`), the workload (a model step or one kernel call), the plan of distinct
                simulations, the size estimate and the rows
    execute.py  running the distinct (call, profile) jobs on a local process pool or on Ray
    outputs.py  the rows as Parquet (with the sweep's metadata) and a PNG

`sweep()` below is the library entry point (`torchsim.sweep(...)`); `torchsim sweep` is the command.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["sweep"]


def sweep(target: Any = "llama3-8b", hw: Any = "h100-sxm", *, vary: Sequence[str], phase: str = "decode",
          kv: int = 4096, prompt: int = 2048, batch: int = 1, preset: str = "serving", executor: str = "local",
          jobs: int = 0, ray_address: str | None = None, yes: bool = False,
          progress: bool = False) -> list[dict[str, Any]]:
    """One row per point of the cartesian product of `vary` knobs (``"FIELD=A:B:N"`` or ``"FIELD=V1,V2"``).

    `target` is a model name (one `phase` step of it is swept) or a KernelCall (that kernel alone); `hw` a
    profile name, a what-if TOML path or a profile.

    >>> from torchsim.lowering.kernel_call import KernelCall, KernelKind
    >>> rows = sweep(KernelCall.make(KernelKind.GEMM, m=64, n=256, k=256), vary=["sm_count=66,132"], jobs=1)
    >>> [r["sm_count"] for r in rows]
    [66.0, 132.0]
    """
    from torchsim.hwmodels import get_profile
    from torchsim.lowering.kernel_call import KernelCall
    from torchsim.sweeps.space import kernel_workload, model_workload, parse_vary, run_sweep

    base = get_profile(hw) if isinstance(hw, str) else hw
    knobs = [parse_vary(v, base) for v in vary]
    if isinstance(target, KernelCall):
        work = kernel_workload(target)
    else:
        work = model_workload(str(target), phase=phase, batch=batch, kv=kv, prompt=prompt, preset=preset)
    return run_sweep(base, knobs, work, executor=executor, jobs=jobs, ray_address=ray_address, yes=yes,
                     progress=progress)
