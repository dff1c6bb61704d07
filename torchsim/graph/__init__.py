"""torchsim.graph: the tile-graph IR, the contract between lowering (which builds graphs) and sim (which runs them).

Imports nothing else of torchsim.
"""

from torchsim.graph.builder import GraphBuilder
from torchsim.graph.graph import Barrier, CtaClass, GraphError, KernelGraph, TileGraph
from torchsim.graph.kinds import DType, Edge, Op, Space, Unit
from torchsim.graph.tile import Affine, ExecGroup, Layout, TileDesc, aff

__all__ = [
    "Affine", "Barrier", "CtaClass", "DType", "Edge", "ExecGroup", "GraphBuilder", "GraphError",
    "KernelGraph", "Layout", "Op", "Space", "TileDesc", "TileGraph", "Unit", "aff",
]
