"""OpGraph: the captured ATen ops of one model segment, with shapes, dtypes, module paths and source lines.

The artifact between capture (which builds it from torch.export) and plan (which matches patterns on it and
lowers each op to kernel calls). Module paths are relative to the segment, so one layer's graph serves all
identical layers; `SegmentCapture` says which layer it stands for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import torch

from torchsim.graph.kinds import DType

# The scalar capture adds to an attention op whose calling module declares a sliding window (an int attribute
# `sliding_window` on the module or an enclosing one, as HF attention modules and torchsim's own carry it): SDPA
# has no window argument, and serving runtimes run it without a materialised mask (lowering.capture).
WINDOW_KEY = "sliding_window"

_TORCH_DTYPES = {
    torch.float32: DType.FP32, torch.bfloat16: DType.BF16, torch.float16: DType.FP16, torch.int64: DType.INT64,
    torch.int32: DType.INT32, torch.int8: DType.INT8, torch.uint8: DType.INT8, torch.bool: DType.INT8,
    torch.float8_e4m3fn: DType.FP8_E4M3, torch.float8_e5m2: DType.FP8_E5M2,
}


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """Shape, dtype and memory layout of one tensor value of the graph."""

    shape: tuple[int, ...]
    dtype: DType
    contiguous: bool = True

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> float:
        return self.numel * self.dtype.nbytes


def spec_of(value: Any) -> TensorSpec:
    """TensorSpec of a (meta) tensor; anything else gives a 0-d INT64 placeholder spec."""
    if not isinstance(value, torch.Tensor):
        return TensorSpec((), DType.INT64)
    dtype = _TORCH_DTYPES.get(value.dtype)
    if dtype is None:
        raise TypeError(f"tensor dtype {value.dtype} has no torchsim DType; known: "
                        f"{sorted(str(d) for d in _TORCH_DTYPES)}")
    return TensorSpec(tuple(int(s) for s in value.shape), dtype, bool(value.is_contiguous()))


@dataclass(frozen=True, slots=True)
class OpNode:
    """One ATen op of the graph: what it is, what it reads and makes, and where in the model it came from."""

    name: str  # fx node name, unique in its graph
    target: Any  # the ATen OpOverload (e.g. torch.ops.aten.linear.default) or operator.getitem
    inputs: tuple[str, ...]  # tensor inputs: producer node names, graph inputs, or parameter names
    in_specs: tuple[TensorSpec, ...]
    out: tuple[TensorSpec, ...]
    scalars: tuple[tuple[Any, Any], ...]  # non-tensor args: (position or keyword, value)
    module_path: str  # relative to the segment root, "" for ops of the root module
    module_type: str  # class name of the innermost module
    source: str  # "llama.py:156": innermost frame of the model's code (outside torch)
    code: str = ""

    @property
    def op_name(self) -> str:
        """Short name: `linear`, `mul`, `scaled_dot_product_attention`."""
        name = getattr(self.target, "__name__", str(self.target))
        return name.split(".")[0]

    def scalar(self, key: Any, default: Any = None) -> Any:
        for k, v in self.scalars:
            if k == key:
                return v
        return default

    def signature(self) -> tuple[Any, ...]:
        return (str(self.target), self.inputs, self.in_specs, self.out, self.scalars, self.module_path,
                self.module_type)


@dataclass(frozen=True, eq=False)
class OpGraph:
    """The ops of one segment in execution (topological) order; `inputs`/`outputs` are the segment's interface."""

    nodes: tuple[OpNode, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    params: frozenset[str] = frozenset()
    label: str = ""
    _index: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        seen: set[str] = set(self.inputs) | set(self.params)
        for i, n in enumerate(self.nodes):
            if n.name in self._index:
                raise ValueError(f"op graph {self.label!r}: node name {n.name!r} appears twice")
            missing = [a for a in n.inputs if a not in seen]
            if missing:
                raise ValueError(f"op graph {self.label!r}: node {n.name} ({n.op_name}) reads {missing} before "
                                 "they are produced")
            self._index[n.name] = i
            seen.add(n.name)

    def node(self, name: str) -> OpNode:
        return self.nodes[self._index[name]]

    def index(self, name: str) -> int:
        return self._index[name]

    def producer(self, name: str) -> OpNode | None:
        i = self._index.get(name)
        return self.nodes[i] if i is not None else None

    @cached_property
    def consumers(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, list[str]] = {}
        for n in self.nodes:
            for a in dict.fromkeys(n.inputs):
                out.setdefault(a, []).append(n.name)
        for o in self.outputs:
            out.setdefault(o, []).append("<output>")
        return {k: tuple(v) for k, v in out.items()}

    def users(self, name: str) -> tuple[str, ...]:
        return self.consumers.get(name, ())

    def signature(self) -> tuple[Any, ...]:
        """Everything that decides the kernels: op targets, data flow, shapes, scalars, module paths."""
        return (self.inputs, self.outputs, tuple(n.signature() for n in self.nodes))

    def ops_histogram(self) -> dict[str, int]:
        hist: dict[str, int] = {}
        for n in self.nodes:
            hist[n.op_name] = hist.get(n.op_name, 0) + 1
        return hist

    def describe(self, limit: int = 0) -> str:
        """One line per op: name, target, output shape, module path, source."""
        rows = [f"{n.name:<28} {str(n.target):<44} {str(n.out[0].shape if n.out else ''):<22} "
                f"{n.module_path or '<root>':<28} {n.source}" for n in self.nodes]
        return "\n".join(rows[:limit] if limit else rows)
