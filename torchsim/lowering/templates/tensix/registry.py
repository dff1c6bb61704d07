"""KernelCall -> Tensix KernelGraph: one builder per KernelKind, reading Tensix-only call parameters.

Call parameters beyond the kind's own: `grid` ("8x8"), `fidelity` ("LoFi".."HiFi4"), `in1_dtype` (weight
format, e.g. DType.BFP8_B or "bfp8_b"), `out_dtype`. Kinds without a Tensix template raise NotImplementedError
(the prediction API falls back to a roofline estimate and flags the row).
"""

from __future__ import annotations

from collections.abc import Callable

from torchsim.graph import DType, KernelGraph
from torchsim.hwmodels.tensix.profiles import TensixProfile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.templates.tensix.matmul import matmul

Builder = Callable[[KernelCall, TensixProfile], KernelGraph]


def _dtype(v: object, default: DType) -> DType:
    if v is None or v == "":
        return default
    return v if isinstance(v, DType) else DType.parse(str(v))


def _gemm(call: KernelCall, hw: TensixProfile) -> KernelGraph:
    batch = int(call.p("batch", 1))
    return matmul(call.p("m") * batch, call.p("n"), call.p("k"), call.dtype, hw,
                  in1=_dtype(call.p("in1_dtype", ""), call.dtype), out=_dtype(call.p("out_dtype", ""), call.dtype),
                  fidelity=call.p("fidelity", "") or None, grid=call.p("grid", "") or None,
                  name=call.name or "gemm")


TENSIX_TEMPLATES: dict[KernelKind, Builder] = {
    KernelKind.GEMM: _gemm,
}


def build_tensix_kernel(call: KernelCall, hw: TensixProfile) -> KernelGraph:
    fn = TENSIX_TEMPLATES.get(call.kind)
    if fn is None:
        raise NotImplementedError(f"no tensix template for {call.kind.value} yet")
    return fn(call, hw)
