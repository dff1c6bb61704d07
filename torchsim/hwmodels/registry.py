"""Look up hardware profiles by name: the GPUs of torchsim.hwmodels.gpu and the Tensix devices.

`get_profile("h100-sxm")`; an unknown name is a KeyError that lists the known ones; a path ending in .toml
is a what-if profile (torchsim.hwmodels.whatif).
"""

from __future__ import annotations

import importlib
from typing import Any

from torchsim.hwmodels.gpu import GPU_PROFILES


def _tensix_profiles() -> dict[str, Any]:
    try:
        mod = importlib.import_module("torchsim.hwmodels.tensix.profiles")
    except ModuleNotFoundError:
        return {}
    table = getattr(mod, "TENSIX_PROFILES", {})
    return {name: (make() if callable(make) else make) for name, make in table.items()}


def profile_names() -> list[str]:
    return list(GPU_PROFILES) + list(_tensix_profiles())


def get_profile(name: str) -> Any:
    """Return the profile called `name` (GpuProfile or a Tensix profile), or load a what-if `.toml` file."""
    if str(name).strip().lower().endswith(".toml"):
        from torchsim.hwmodels.whatif import load_whatif

        return load_whatif(str(name).strip(), builtin_profile)
    return builtin_profile(name)


def builtin_profile(name: str) -> Any:
    """The built-in profile called `name`; an unknown name is a KeyError listing the known ones."""
    key = name.strip().lower()
    if key in GPU_PROFILES:
        return GPU_PROFILES[key]
    tensix = _tensix_profiles()
    if key in tensix:
        return tensix[key]
    raise KeyError(f"unknown hardware {name!r}; known: {', '.join(profile_names())}")
