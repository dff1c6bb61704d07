"""Template library: (KernelCall, HwProfile) -> KernelGraph, one builder per algorithm, parameterised by the
profile. `build_kernel` dispatches on the call's kind; kinds without a template raise NotImplementedError
(the prediction API then falls back to a roofline estimate and flags the row).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchsim.graph import KernelGraph
from torchsim.hwmodels.gpu import Arch
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.templates import attention_calls, elementwise, grouped_gemm, norms, reductions
from torchsim.lowering.templates.gemm import gemm
from torchsim.lowering.templates.gemm_config import Epilogue, GemmConfig, Pipeline, default_config

Builder = Callable[[KernelCall, Any], KernelGraph]
TEMPLATES: dict[KernelKind, Builder] = {}


def register(kind: KernelKind) -> Callable[[Builder], Builder]:
    """Register the template for a kernel kind; a second registration for the same kind raises."""
    def deco(fn: Builder) -> Builder:
        if kind in TEMPLATES:
            raise ValueError(f"a template for {kind.value} is already registered ({TEMPLATES[kind].__name__})")
        TEMPLATES[kind] = fn
        return fn
    return deco


@register(KernelKind.GEMM)
def _gemm_call(call: KernelCall, hw: Any) -> KernelGraph:
    variant = call.p("variant", "")
    quant = str(call.p("quant", ""))  # a quantised weight format (lowering.quant), "" for none
    cfg = None
    if call.p("tune", False) and quant:
        raise ValueError(f"GEMM call {call.name!r}: tune=True autotunes unquantised GEMMs; quant={quant!r} takes its "
                         "kernels' own tiles")
    if call.p("tune", False):  # simulated autotuning (tune.py), memoised per shape and profile
        if variant:
            raise ValueError(f"GEMM call {call.name!r}: tune=True chooses the variant itself; drop variant={variant!r}")
        from torchsim.lowering.templates.tune import tune_gemm
        cfg = tune_gemm(call.p("m"), call.p("n"), call.p("k"), call.dtype, hw, call.p("batch", 1),
                        epilogue=Epilogue.parse(call.p("epilogue", "none")),
                        shared_b=bool(call.p("shared_b", True))).best
    elif variant:
        pipe = Pipeline.parse(variant)
        cfg = default_config(call.p("m"), call.p("n"), call.p("k"), call.dtype, hw, call.p("batch", 1), pipe,
                             quant=quant)
    return gemm(call.p("m"), call.p("n"), call.p("k"), call.dtype, hw, cfg,
                Epilogue.parse(call.p("epilogue", "none")), batch=call.p("batch", 1),
                shared_b=bool(call.p("shared_b", True)), quant=quant)


for _module in (grouped_gemm, norms, elementwise, reductions, attention_calls):  # MoE, memory-bound, attention
    for _kind, _fn in _module.CALLS.items():
        register(_kind)(_fn)


def build_kernel(call: KernelCall, hw: Any) -> KernelGraph:
    """Build the tile graph of `call` for `hw`; NotImplementedError when no template serves the kind."""
    if getattr(hw, "arch", None) is Arch.TENSIX:
        from torchsim.lowering.templates.tensix import build_tensix_kernel
        return build_tensix_kernel(call, hw)
    fn = TEMPLATES.get(call.kind)
    if fn is None:
        raise NotImplementedError(f"no {hw.arch.value} template for {call.kind.value} yet")
    return fn(call, hw)


def build_kernels(call: KernelCall, hw: Any) -> list[KernelGraph]:
    """Every kernel launch `call` makes, in order: [split kernel, combine kernel] for a Flash-Decoding or
    FlashMLA call whose K/V is split across CTAs; `[build_kernel(call, hw)]` for single-launch kinds."""
    multi = attention_calls.LAUNCHES.get(call.kind)
    if multi is not None and getattr(hw, "arch", None) is not Arch.TENSIX:
        return multi(call, hw)
    return [build_kernel(call, hw)]


__all__ = ["TEMPLATES", "Epilogue", "GemmConfig", "Pipeline", "build_kernel", "build_kernels", "default_config", "gemm",
           "register"]
