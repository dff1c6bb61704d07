"""Small builders shared by the core tests."""

from __future__ import annotations

import numpy as np

from torchsim.graph import CtaClass, KernelGraph, TileGraph


def one_cta(graph: TileGraph, threads: int = 128, count: int = 1, smem: int = 0) -> KernelGraph:
    params = np.arange(count, dtype=np.int64).reshape(count, 1)
    return KernelGraph(graph.name, (CtaClass(graph, params, ("c",), threads, 32, smem),))
