"""torchsim.prediction: the stage that turns kernel calls into a timed prediction.

    pipeline.py    `predict()`: capture -> plan -> simulate each distinct kernel call once -> place on a stream
    kernel_sim.py  simulating one kernel call (its launches), the in-process memo and the process pool
    cache.py       the on-disk cache of kernel-call results
    launch.py      the launch model: when each kernel starts (CUDA graphs, eager, a device's own dispatch)
    records.py     `Prediction` and `KernelRecord`, what the stage returns and the exporters read

`predict` and `Prediction` are imported on first use: the pipeline imports torch, the records do not.
"""

from __future__ import annotations

from typing import Any

__all__ = ["KernelRecord", "LaunchModel", "Prediction", "predict"]

_LAZY = {"predict": "torchsim.prediction.pipeline", "Prediction": "torchsim.prediction.records",
         "KernelRecord": "torchsim.prediction.records", "LaunchModel": "torchsim.prediction.launch"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'torchsim.prediction' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(module), name)
