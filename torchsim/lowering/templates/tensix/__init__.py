"""Tensix templates: tt-metal's reader/compute/writer kernels as tile graphs, for the same KernelKinds as the GPU
templates. `TENSIX_TEMPLATES` maps a KernelKind to its builder `(call, hw) -> KernelGraph`; the template
registry dispatches to it when `hw.arch is Arch.TENSIX`.
"""

from __future__ import annotations

from torchsim.lowering.templates.tensix.registry import TENSIX_TEMPLATES, build_tensix_kernel

__all__ = ["TENSIX_TEMPLATES", "build_tensix_kernel"]
