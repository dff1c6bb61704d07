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


def sweep(target: Any = "llama3-8b", hw: Any = "h100-sxm", *, vary: str | Sequence[str], phase: str = "decode",
          kv: int | None = None, prompt: int | None = None, batch: int = 1, preset: str = "serving",
          executor: str = "local", jobs: int = 0, ray_address: str | None = None, yes: bool = False,
          progress: bool = False) -> list[dict[str, Any]]:
    """One row per point of the cartesian product of `vary` knobs (``"FIELD=A:B:N"`` or ``"FIELD=V1,V2"``; one
    string is one knob).

    `target` is a model name (one `phase` step of it is swept: decode after `kv` tokens, default 4096, or a prefill
    of `prompt` tokens, default 2048) or a KernelCall (that kernel alone); `hw` a profile name, a what-if TOML
    path or a profile. `jobs` worker processes (0: one per core).

    >>> from torchsim.lowering.kernel_call import KernelCall, KernelKind
    >>> rows = sweep(KernelCall.make(KernelKind.GEMM, m=64, n=256, k=256), vary=["sm_count=66,132"], jobs=1)
    >>> [r["sm_count"] for r in rows]
    [66.0, 132.0]
    """
    import os

    from torchsim.hwmodels import get_profile
    from torchsim.hwmodels.gpu import GpuProfile
    from torchsim.hwmodels.tensix.profiles import TensixProfile
    from torchsim.lowering.kernel_call import KernelCall
    from torchsim.sweeps.space import SweepError, check_run, kernel_workload, model_workload, parse_vary, run_sweep

    if isinstance(vary, str):
        vary = [vary]  # one knob, not its characters
    if not isinstance(vary, Sequence) or not vary:
        raise SweepError(f"vary must be a FIELD=START:STOP:COUNT or FIELD=V1,V2,... string, or a list of them; got "
                         f"{type(vary).__name__} {vary!r:.60}")
    check_run(executor, jobs)
    for flag, on in (("yes", yes), ("progress", progress)):
        if not isinstance(on, bool):
            raise SweepError(f"{flag} must be True or False, got {type(on).__name__} {on!r:.60}")
    if isinstance(hw, (str, os.PathLike)):
        base = get_profile(os.fspath(hw))
    elif isinstance(hw, (GpuProfile, TensixProfile)):
        base = hw
    else:
        raise SweepError(f"hw must be a profile name (e.g. 'h100-sxm'), a what-if .toml path or a "
                         f"GpuProfile/TensixProfile; got {type(hw).__name__} {hw!r:.60}")
    knobs = [parse_vary(v, base) for v in vary]
    if isinstance(target, KernelCall):
        for name, value in (("kv", kv), ("prompt", prompt)):
            if value is not None:
                raise SweepError(f"{name}={value!r} sets a model step's length; a kernel sweep ({target.kind.value}) "
                                 "takes the call's own parameters")
        work = kernel_workload(target)
    else:
        if not isinstance(target, str):
            raise SweepError(f"target must be a model name (e.g. 'llama3-8b') or a KernelCall, got "
                             f"{type(target).__name__} {target!r:.60}")
        work = model_workload(target, phase=phase, batch=batch, kv=kv, prompt=prompt, preset=preset)
    return run_sweep(base, knobs, work, executor=executor, jobs=jobs, ray_address=ray_address, yes=yes,
                     progress=progress)
