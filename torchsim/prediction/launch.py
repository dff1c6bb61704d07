"""When kernels start on the device: the launch model (CUDA graphs or eager, or a device's own dispatch model).

Used by torchsim.prediction.pipeline to place a step's kernels on one stream and by the sweeps to time a point.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from torchsim.hwmodels.quantity import Quantity, assumed
from torchsim.prediction.kernel_sim import KernelSim

EAGER_HOST_S = assumed(4.5e-6, "s", "assumed: host time PyTorch eager spends per kernel (Python dispatch, ATen, "
                       "cudaLaunchKernel): between the raw cuLaunchKernel cost (3.0 us on GB200) and Inductor's "
                       "6.8 us per kernel, github meta-pytorch/tritonbench PR #1017 'Profile inductor launch "
                       "overhead' (description table)")
LAUNCH_MODES = ("cuda-graphs", "eager")


def between_kernel_gap(hw: Any, mode: str) -> Quantity:
    """The device's idle time between two back-to-back kernels launched in `mode` ("eager": a stream fed by a
    tight host loop, as CUDA events around back-to-back launches time it; "cuda-graphs": one graph replay),
    beyond each kernel's own simulated time. For validation rows timed over back-to-back launches.

    >>> from torchsim.hwmodels import get_profile
    >>> h = get_profile("h200")
    >>> float(between_kernel_gap(h, "eager")) > float(between_kernel_gap(h, "cuda-graphs")) > 0
    True
    """
    hook = getattr(hw, "launch_model", None)  # a device with its own dispatch model (Tensix: metal trace)
    if callable(hook):
        return hook(mode, "decode")[2]  # type: ignore[no-any-return]
    if mode == "cuda-graphs":
        return hw.graph_launch_overhead_s  # type: ignore[no-any-return]
    if mode == "eager":
        return hw.launch_overhead_s  # type: ignore[no-any-return]
    raise ValueError(f"unknown launch mode {mode!r}; valid: {', '.join(LAUNCH_MODES)}")


def between_kernel_gap_s(hw: Any, mode: str) -> float:
    """`between_kernel_gap` in seconds."""
    return float(between_kernel_gap(hw, mode))


@dataclass(frozen=True)
class LaunchModel:
    """When kernels start: `start = max(end of previous + device gap, host issue time)`, plus one cost per step."""

    mode: str
    host_per_kernel: Quantity  # host time to issue one kernel (0 when a CUDA graph replays the step)
    device_gap: Quantity  # idle time between dependent kernels on the device
    step_overhead: Quantity  # once per forward step (the graph launch)

    @staticmethod
    def for_mode(mode: str, hw: Any, phase: str = "decode") -> LaunchModel:
        hook = getattr(hw, "launch_model", None)  # a device with its own dispatch model (Tensix: metal trace)
        if callable(hook):
            return LaunchModel(*hook(mode, phase))
        if mode == "cuda-graphs":
            return LaunchModel(mode, assumed(0.0, "s", "CUDA graph replay: no per-kernel host work"),
                               between_kernel_gap(hw, mode), hw.launch_overhead_s)
        if mode == "eager":
            return LaunchModel(mode, EAGER_HOST_S, between_kernel_gap(hw, mode), assumed(0.0, "s", "no graph launch"))
        raise ValueError(f"unknown launch mode {mode!r}; valid: {', '.join(LAUNCH_MODES)}")

    def describe(self) -> str:
        return (f"launch {self.mode}: host {float(self.host_per_kernel) * 1e6:.1f} us/kernel "
                f"({self.host_per_kernel.kind}), device gap {float(self.device_gap) * 1e6:.1f} us "
                f"({self.device_gap.kind}; {self.device_gap.source.removeprefix('assumed: ')}), per step "
                f"{float(self.step_overhead) * 1e6:.1f} us")

    def place(self, sims: Sequence[KernelSim]) -> tuple[list[tuple[float, float]], float]:
        """(start, gap) of each kernel from the step's start, and the step's duration."""
        host = dev = float(self.step_overhead)  # the host issues the step's kernels after its per-step work
        hpk, gap = float(self.host_per_kernel), float(self.device_gap)
        out = []
        for i, s in enumerate(sims):
            host += hpk
            start = max(dev + (gap if i else 0.0), host)
            out.append((start, start - dev))
            dev = start + s.time_s
        return out, dev
