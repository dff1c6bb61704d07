"""Look up hardware profiles by name: the GPUs of torchsim.hwmodels.gpu and the Tensix devices.

`get_profile("h100-sxm")`; an unknown name is an UnknownProfileError (a ValueError, and a KeyError for older
callers) that lists the known ones; a path ending in .toml is a what-if profile (torchsim.hwmodels.whatif).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from torchsim.hwmodels.gpu import GPU_PROFILES


class UnknownProfileError(ValueError, KeyError):
    """No hardware profile has the name given; the message lists the known ones. A ValueError like torchsim's other
    errors, and a KeyError so that callers written against the old KeyError keep working."""

    __str__ = BaseException.__str__  # the message as written (KeyError's str() would quote it)


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
    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    _check_name(name)
    if str(name).strip().lower().endswith(".toml"):
        from torchsim.hwmodels.whatif import load_whatif

        return load_whatif(str(name).strip(), builtin_profile)
    return builtin_profile(name)


def builtin_profile(name: str) -> Any:
    """The built-in profile called `name`; an unknown name is an UnknownProfileError listing the known ones."""
    _check_name(name)
    key = name.strip().lower()
    if key in GPU_PROFILES:
        return GPU_PROFILES[key]
    tensix = _tensix_profiles()
    if key in tensix:
        return tensix[key]
    shown = repr(name) if len(name) <= 60 else f"{name[:60]!r}... ({len(name):,} characters)"
    raise UnknownProfileError(f"unknown hardware {shown}; known: {', '.join(profile_names())}, or a what-if .toml "
                              "file")


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not name.strip():
        shown = "an empty name" if isinstance(name, str) else f"{type(name).__name__} {name!r:.60}"
        raise UnknownProfileError(f"a hardware profile is a name (known: {', '.join(profile_names())}) or a what-if "
                                  f".toml path; got {shown}")
