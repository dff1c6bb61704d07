"""torchsim: performance prediction for PyTorch models on GPUs and Tensix accelerators, without the hardware."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["Prediction", "__version__", "predict"]

_LAZY = {"predict": "torchsim.api", "Prediction": "torchsim.prediction"}  # imported on first use (torch is slow)


def __getattr__(name: str) -> Any:
    """`torchsim.predict(...)` without importing torch at `import torchsim`.

    >>> import torchsim
    >>> torchsim.predict.__module__
    'torchsim.api'
    """
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'torchsim' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
