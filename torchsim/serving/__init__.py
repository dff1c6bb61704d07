"""Serving under a request load: continuous batching on simulated iterations (`torchsim serve`).

`serve()` (run.py) runs a load (load.py) through an engine's scheduler (engine.py) whose iteration times come
from simulated kernels (cost.py), and returns a ServeResult (result.py).
"""

from __future__ import annotations

from typing import Any

__all__ = ["serve"]


def serve(*args: Any, **kwargs: Any) -> Any:
    """torchsim.serving.run.serve (imported on first use)."""
    from torchsim.serving.run import serve as _serve

    return _serve(*args, **kwargs)
