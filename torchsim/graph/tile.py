"""Tile and execution-group descriptors of the tile-graph IR.

A tile descriptor says where a tile lives (space), what it holds (dtype, shape, layout) and which part of a
parent tensor it is (coordinates). Coordinates are affine in the CTA's parameters, so one CTA template serves
every CTA of the grid: memory traffic and L2 reuse are derived from them, never from per-thread addresses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from torchsim.graph.kinds import DType, Space


class Layout(IntEnum):
    ROW = 0
    COL = 1
    SWIZZLE_128B = 2  # TMA/wgmma shared-memory swizzle
    TILED_32X32 = 3  # Tensix tiles of 32x32 with 16x16 faces


@dataclass(frozen=True, slots=True)
class Affine:
    """`const + sum(coef * param[name])`: one tile coordinate as a function of the CTA's parameters."""

    const: int = 0
    terms: tuple[tuple[str, int], ...] = ()

    def eval(self, params: dict[str, int]) -> int:
        return self.const + sum(c * params[n] for n, c in self.terms)

    def to_json(self) -> list[object]:
        return [self.const, [list(t) for t in self.terms]]

    @classmethod
    def from_json(cls, obj: list[Any]) -> Affine:
        const, terms = obj
        return cls(int(const), tuple((str(n), int(c)) for n, c in terms))


def aff(const: int = 0, **coefs: int) -> Affine:
    """Build an affine coordinate: `aff(2, m=1)` is `2 + params["m"]`."""
    return Affine(const, tuple(sorted(coefs.items())))


@dataclass(frozen=True, slots=True)
class TileDesc:
    """One tile: storage space, element type, shape, layout and logical coordinates in `tensor`.

    `coord` gives the tile's block index per dimension of the parent tensor (in units of `shape`).
    """

    space: Space
    dtype: DType
    shape: tuple[int, ...]
    tensor: str = ""
    coord: tuple[Affine, ...] = ()
    layout: Layout = Layout.ROW

    def __post_init__(self) -> None:
        if not self.shape or any(int(s) <= 0 for s in self.shape):
            raise ValueError(f"tile of {self.tensor or 'tensor'!r} has a non-positive shape {self.shape}")
        if self.coord and len(self.coord) != len(self.shape):
            raise ValueError(
                f"tile of {self.tensor!r}: {len(self.coord)} coordinates for a {len(self.shape)}-d shape")

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> float:
        return self.elements * self.dtype.nbytes

    def to_json(self) -> dict[str, object]:
        return {"space": self.space.name, "dtype": self.dtype.name, "shape": list(self.shape),
                "tensor": self.tensor, "coord": [c.to_json() for c in self.coord], "layout": self.layout.name}

    @classmethod
    def from_json(cls, obj: dict[str, object]) -> TileDesc:
        return cls(Space[str(obj["space"])], DType[str(obj["dtype"])], tuple(obj["shape"]),  # type: ignore[arg-type]
                   str(obj["tensor"]), tuple(Affine.from_json(c) for c in obj["coord"]),  # type: ignore[attr-defined]
                   Layout[str(obj["layout"])])


@dataclass(frozen=True, slots=True)
class ExecGroup:
    """An execution group: a warp, a warp group or a set of cooperating warps (Tensix: one RISC-V thread).

    Its warps `first_warp .. first_warp + num_warps - 1` sit on subpartitions `warp % subpartitions`.
    """

    name: str
    first_warp: int = 0
    num_warps: int = 1
    role: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.num_warps <= 0 or self.first_warp < 0:
            raise ValueError(f"execution group {self.name!r}: needs num_warps > 0 and first_warp >= 0")

    def subpartitions(self, per_sm: int) -> tuple[int, ...]:
        return tuple(sorted({(self.first_warp + i) % per_sm for i in range(self.num_warps)}))
