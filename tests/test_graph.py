"""The tile-graph IR: builder, validation errors naming the node, JSON round trip, template sharing."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from torchsim.graph import CtaClass, DType, Edge, GraphBuilder, GraphError, KernelGraph, Op, Space, TileDesc, Unit, aff
from torchsim.hwmodels import get_profile
from torchsim.lowering.templates import gemm


def small_graph() -> GraphBuilder:
    b = GraphBuilder("small")
    w0 = b.group("producer")
    w1 = b.group("consumer", num_warps=4)
    t = TileDesc(Space.GLOBAL, DType.BF16, (64, 64), "A", (aff(m=1), aff(1)))
    ld = b.node(w0, Op.TMA_LOAD, Unit.TMA, work=t.nbytes, tile=t, name="load")
    mm = b.node(w1, Op.MMA, Unit.TENSOR, work=2 * 64 * 64 * 64, name="mma")
    b.data(ld, mm)
    return b


def test_builder_records_program_order_and_data_edges() -> None:
    g = small_graph().build()
    assert g.num_nodes == 2
    kinds = sorted(zip(g.edge_src.tolist(), g.edge_dst.tolist(), g.edge_kind.tolist()))
    assert kinds == [(0, 1, int(Edge.DATA))]
    b = GraphBuilder("po")
    w = b.group("w")
    a = b.node(w, Op.ELEMENTWISE, Unit.FMA, 10)
    c = b.node(w, Op.ELEMENTWISE, Unit.FMA, 10)
    g2 = b.build()
    assert (int(g2.edge_src[0]), int(g2.edge_dst[0]), int(g2.edge_kind[0])) == (a, c, int(Edge.ORDER))


def test_cycle_is_reported_with_node_names() -> None:
    b = GraphBuilder("loop", program_order=False)
    w = b.group("w")
    x = b.node(w, Op.ELEMENTWISE, Unit.FMA, 1, name="x")
    y = b.node(w, Op.ELEMENTWISE, Unit.FMA, 1, name="y")
    b.data(x, y)
    b.data(y, x)
    with pytest.raises(GraphError, match=r"cycle: .*x.*y|cycle: .*y.*x"):
        b.build()


def test_edge_to_missing_node_names_it() -> None:
    b = GraphBuilder("dangling")
    w = b.group("w")
    x = b.node(w, Op.ELEMENTWISE, Unit.FMA, 1, name="lonely")
    with pytest.raises(GraphError, match="lonely.*missing destination node 7"):
        b.data(x, 7)


def test_memory_node_without_tile_is_rejected() -> None:
    b = GraphBuilder("notile")
    w = b.group("w")
    b.node(w, Op.TMA_LOAD, Unit.TMA, 128, name="ld")
    with pytest.raises(GraphError, match="'ld'.*no tile descriptor"):
        b.build()


def test_tile_coordinates_must_use_declared_params() -> None:
    g = small_graph().build()
    kg = KernelGraph("k", (CtaClass(g, np.zeros((2, 1), dtype=np.int64), ("n",), 160),))
    with pytest.raises(GraphError, match=r"\['m'\]"):
        kg.validate()


def test_json_round_trip_is_identical() -> None:
    kg = gemm(512, 512, 512, DType.BF16, get_profile("h100-sxm"))
    text = kg.dumps()
    back = KernelGraph.loads(text)
    assert back.dumps() == text
    assert back.num_ctas == kg.num_ctas


def test_template_sharing_keeps_nodes_independent_of_cta_count() -> None:
    hw = get_profile("h100-sxm")
    from torchsim.lowering.templates.gemm_config import GemmConfig, Pipeline
    cfg = GemmConfig(128, 128, 64, 4, Pipeline.WS_COOPERATIVE, persistent=False)
    small = gemm(1024, 1024, 1024, DType.BF16, hw, cfg)
    big = gemm(8192, 8192, 1024, DType.BF16, hw, cfg)
    assert big.num_ctas == 64 * small.num_ctas
    nodes = lambda kg: sum(c.graph.num_nodes for c in kg.classes)  # noqa: E731
    assert nodes(big) == nodes(small)


def _mutated(mutate: Any) -> str:
    import json

    obj = json.loads(gemm(256, 256, 256, DType.BF16, get_profile("h100-sxm")).dumps())
    mutate(obj)
    return json.dumps(obj)


def _cls(o: dict[str, Any]) -> dict[str, Any]:
    return o["classes"][0]


@pytest.mark.parametrize(("mutate", "words"), [
    (lambda o: o.__setitem__("flopz", 1), ["unknown field 'flopz'", "did you mean 'flops'"]),
    (lambda o: _cls(o).__setitem__("thread", 1), ["CTA class 0", "unknown field 'thread'", "'threads'"]),
    (lambda o: _cls(o)["graph"]["nodes"][0].__setitem__("wrk", 1), ["node 0", "unknown field 'wrk'", "'work'"]),
    (lambda o: o.__setitem__("flops", float("nan")), ["flops must be a finite number >= 0", "nan"]),
    (lambda o: o.__setitem__("dram_bytes", -1), ["dram_bytes must be a finite number >= 0"]),
    (lambda o: o.__setitem__("flops", True), ["flops must be", "True"]),
    (lambda o: o.__setitem__("name", 5), ["name must be a string"]),
    (lambda o: _cls(o).__setitem__("params", []), ["CTA class 0", "params lists no CTA"]),
    (lambda o: _cls(o).__setitem__("smem_bytes", -5), ["smem_bytes must be null or a whole number >= 0"]),
    (lambda o: _cls(o).__setitem__("regs_per_thread", 0), ["regs_per_thread must be a whole number > 0"]),
], ids=["kernel-field", "class-field", "node-field", "nan-flops", "negative-bytes", "bool-flops", "name",
        "no-ctas", "negative-smem", "zero-regs"])
def test_loaded_kernel_graphs_are_checked_field_by_field(mutate: Any, words: list[str]) -> None:
    with pytest.raises(GraphError) as err:
        KernelGraph.loads(_mutated(mutate))
    assert all(w in str(err.value) for w in words), str(err.value)
