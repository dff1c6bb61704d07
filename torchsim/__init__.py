"""torchsim: performance prediction for PyTorch models on GPUs and Tensix accelerators, without the hardware.

The pipeline, one folder a stage: `lowering` (capture, plan, the template library) -> `graph` (tile graphs) ->
`sim` (the engine, on `hwmodels` profiles) -> `prediction` (kernel calls timed and placed on a stream) ->
`exports` (Parquet, Perfetto, reports); `models` defines the built-in models, `sweeps` runs design-space sweeps,
`cli` is the command line.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["MissingExtraError", "Prediction", "__version__", "predict", "sweep"]


class MissingExtraError(ImportError):
    """An optional dependency of the command is not installed (or fails to import); the message names the extra
    and the pip command that installs it."""

# imported on first use (torch is slow to import)
_LAZY = {"predict": "torchsim.prediction.pipeline", "Prediction": "torchsim.prediction.records",
         "sweep": "torchsim.sweeps"}


def __getattr__(name: str) -> Any:
    """`torchsim.predict(...)` and `torchsim.sweep(...)` without importing torch at `import torchsim`.

    >>> import torchsim
    >>> torchsim.predict.__module__
    'torchsim.prediction.pipeline'
    """
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'torchsim' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
