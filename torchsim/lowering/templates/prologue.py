"""The prologue a TMA kernel's CTA runs before its first load: tensor-map fetch and mbarrier initialisation.

Called by the GEMM and attention writers once a CTA's program is written; the nodes it adds are roots that
every earlier root waits for, so they show as their own `prologue:` slices in the kernel-detail timeline.
"""

from __future__ import annotations

from torchsim.graph import DType, GraphBuilder, Op, Space, TileDesc, Unit
from torchsim.hwmodels.gpu import GpuProfile

PROLOGUE = "prologue:"  # name prefix of every prologue node (exports and tests find them by it)


def add_prologue(b: GraphBuilder, hw: GpuProfile, group: int, tensormaps: int, barriers: int | None = None
                 ) -> list[int]:
    """Add the prologue of a CTA to `b` (whose program is otherwise complete) in execution group `group`.

    - `prologue: tensormap fetch`: one TMA read of the `tensormaps` descriptors (`hw.tensormap_bytes` each)
      from global memory (CUTLASS and FlashAttention-3/4 issue `prefetch.tensormap`; the first TMA load cannot
      start before its descriptor is on the SM). Every CTA reads the same descriptors, so after the first CTA
      they hit in L2: the cost is one L2 (or DRAM) round trip plus the TMA overhead, from the memory model.
    - `prologue: mbarrier init`: `barriers` (default: the barriers `b` declares) x `hw.mbarrier_bytes`
      written to shared memory by mbarrier.init, fenced before the async proxy uses them.
    Both run in parallel and every node that was a root waits for both. Returns the nodes added.

    >>> from torchsim.hwmodels import get_profile
    >>> b = GraphBuilder("k"); g = b.group("w"); _ = b.node(g, Op.ELEMENTWISE, Unit.FMA, 1.0)
    >>> len(add_prologue(b, get_profile("h100-sxm"), g, tensormaps=3, barriers=4))
    2
    """
    if barriers is None:
        barriers = b.num_barriers
    if tensormaps < 0 or barriers < 0:
        raise ValueError(f"template {b.name!r}: prologue needs tensormaps, barriers >= 0, got {tensormaps}, "
                         f"{barriers}")
    roots = b.roots()
    nodes = []
    desc = int(hw.tensormap_bytes.value)
    if tensormaps and desc > 0 and Unit.TMA in hw.units:
        tile = TileDesc(Space.GLOBAL, DType.INT8, (tensormaps, desc), f"{b.name}.tensormaps")
        nodes.append(b.node(group, Op.TMA_LOAD, Unit.TMA, work=tile.nbytes, tile=tile,
                            name=f"{PROLOGUE} tensormap fetch", ordered=False))
    mbar = int(hw.mbarrier_bytes.value)
    if barriers and mbar > 0:
        tile = TileDesc(Space.SHARED, DType.INT8, (barriers, mbar), "mbarriers")
        nodes.append(b.node(group, Op.STS, Unit.LDST, work=tile.nbytes, tile=tile,
                            name=f"{PROLOGUE} mbarrier init", ordered=False))
    for p in nodes:
        for r in roots:
            b.data(p, r)
    return nodes
