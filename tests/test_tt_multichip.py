"""Tenstorrent multi-chip systems: the Ethernet meshes (hwmodels/tensix/mesh.py), tt-metal's CCL ops (sim/ccl.py),
tt_transformers' 1D tensor-parallel layout (templates/tensix/mesh_plan.py) and predict(tp=...) on them."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from torchsim.hwmodels import get_profile
from torchsim.hwmodels.quantity import KINDS
from torchsim.hwmodels.systems import get_system, system_for
from torchsim.hwmodels.tensix.mesh import TENSIX_SYSTEMS
from torchsim.lowering.parallel import ParallelError
from torchsim.models.llama import LlamaConfig
from torchsim.prediction.pipeline import predict
from torchsim.prediction.records import MemoryFitError
from torchsim.sim.ccl import ccl_cost, wire_bytes
from torchsim.sim.collectives import CollectiveError, collective_cost

CCL_ROWS = Path(__file__).resolve().parents[1] / "torchsim" / "validation" / "ccl_published.csv"
STEP = dict(prompt_len=32, decode_steps=1, decode_samples=1, cache=False)
# a cheap decoder whose width lets tt_transformers fuse the all-gather into WO on a ring of 8
# ((hidden / 32 / tp) % tp == 0 at hidden 2048, tp 8)
RING_MODEL = LlamaConfig(name="llama-ring8", hidden_size=2048, intermediate_size=1024, num_hidden_layers=2,
                         num_attention_heads=16, num_key_value_heads=8, vocab_size=1024, max_position_embeddings=512)


@pytest.mark.parametrize("name", sorted(TENSIX_SYSTEMS))
def test_systems_are_composed_and_sourced(name: str) -> None:
    s = get_system(name)
    assert s.device.numbers_hash() == get_profile(s.device.name).numbers_hash()  # the registry's chip, not a copy
    assert int(s.mesh_rows.value) * int(s.mesh_cols.value) == s.devices
    for field, q in s.quantities().items():
        assert q.kind in KINDS and q.source, field
        if q.kind == "assumed":
            assert "assumed" in q.source.lower(), f"{name}.{field}"
    assert 0.9 < s.payload_efficiency() < 1.0  # headers and framing cost a few percent of a full packet


def test_system_for_picks_the_smallest_mesh_with_enough_chips() -> None:
    assert system_for("wormhole-n300", 2).name == "n300"
    assert system_for("wormhole-n300", 4).name == "t3000"
    assert system_for("blackhole-p150", 4).name == "p150x4"
    assert system_for("wormhole-n300", 32).name == "galaxy"
    assert get_system("t3000").topology(8) == "ring" and get_system("t3000").topology(4) == "line"
    assert get_system("n300").topology(2) == "line"


@pytest.mark.parametrize("coll", ["all-gather", "reduce-scatter", "all-reduce", "all-to-all"])
def test_ccl_time_grows_with_size_and_hops(coll: str) -> None:
    t3k = get_system("t3000")
    prev = 0.0
    for size in (2**12, 2**16, 2**20, 2**24, 2**28):
        c = collective_cost(coll, t3k, 8, size)
        assert c.time_s > prev  # more bytes: slower
        assert c.busbw_bytes_per_s <= t3k.device_bytes_per_s()  # never beats the wire
        prev = c.time_s
    # more hops on a line: a longer fixed cost and, at a fixed per-chip shard, more time
    small = [ccl_cost(coll, t3k, n, 4096 * n, algorithm="line") for n in (2, 4, 8)]
    assert small[0].latency_s < small[1].latency_s < small[2].latency_s
    assert small[0].time_s < small[1].time_s < small[2].time_s
    # closing the ring halves the bytes each direction carries: faster for large messages than a line of 8
    assert ccl_cost(coll, t3k, 8, 2**28).time_s < ccl_cost(coll, t3k, 8, 2**28, algorithm="line").time_s


def test_galaxy_ccl_ops_run_along_one_axis_of_its_mesh() -> None:
    """A Galaxy's CCL ops run along a column of 4 chips (cluster axis 0: a ring over 4 links) or a row of 8 (axis
    1: a ring over 3 links; a line on fewer), as tt_transformers' get_num_links 'TG' (4, 3) and the gpt-oss demo's
    rings say; no op spans the 32 chips."""
    g = get_system("galaxy")
    assert g.two_d and (int(g.mesh_rows.value), int(g.mesh_cols.value)) == (4, 8)
    assert g.axis(4) == ("axis 0", True, 4) and g.axis(8) == ("axis 1", True, 3)
    assert g.axis(2) == ("axis 1", False, 3) and g.topology(2) == "line"
    assert not get_system("t3000").two_d and get_system("t3000").links(4) == 1  # 1D systems unchanged
    size = 2**24
    # a column's 4-link ring moves a large all-reduce faster than a row's 3-link ring of 8 chips, and both faster
    # than a T3000's 1-link ring of 8
    col, row = ccl_cost("all-reduce", g, 4, size), ccl_cost("all-reduce", g, 8, size)
    assert col.algorithm == row.algorithm == "ring"
    assert col.time_s < row.time_s < ccl_cost("all-reduce", get_system("t3000"), 8, size).time_s
    with pytest.raises(CollectiveError, match=r"16 chips on galaxy's 4x8 mesh: its CCL ops run along one axis"):
        ccl_cost("all-reduce", g, 16, 4096)
    # two Galaxies (8x8): a square mesh, so the op names its axis; down a column a line (assumed links)
    d = get_system("galaxy-dual")
    assert d.axis(8, 0) == ("axis 0", False, 4) and d.axis(8, 1) == ("axis 1", True, 3)
    assert ccl_cost("all-reduce", d, 8, size, axis=0).algorithm == "line"


def test_packet_granularity() -> None:
    s = get_system("t3000")
    p = int(s.packet_payload_bytes.value)
    assert wire_bytes(s, 1) > 1 + s.fabric_header_bytes.value  # one byte still pays a header and a frame
    assert wire_bytes(s, 2 * p) == pytest.approx(2 * wire_bytes(s, p))
    assert wire_bytes(s, p + 1) > wire_bytes(s, p) + s.fabric_header_bytes.value  # a second packet's header
    # Blackhole's links (2 at 25 GB/s) carry a large all-gather faster than Wormhole's (1 at 12.5 GB/s)
    assert ccl_cost("all-gather", get_system("p150x4"), 4, 2**28).time_s < \
        ccl_cost("all-gather", get_system("t3000"), 4, 2**28).time_s


def test_ccl_errors_name_the_problem() -> None:
    with pytest.raises(CollectiveError, match="8 chips on n300, which has 2"):
        ccl_cost("all-gather", get_system("n300"), 8, 4096)
    with pytest.raises(CollectiveError, match="algorithm 'ring' is not available"):
        ccl_cost("all-gather", get_system("n300"), 2, 4096, algorithm="ring")
    with pytest.raises(CollectiveError, match="protocol 'LL128' is not available"):
        collective_cost("all-reduce", get_system("t3000"), 8, 4096, protocol="LL128")
    with pytest.raises(CollectiveError, match="unknown collective"):
        ccl_cost("broadcast", get_system("t3000"), 8, 4096)


def test_published_ccl_rows_sourced_and_close_in_the_bandwidth_regime() -> None:
    rows = list(csv.DictReader(CCL_ROWS.open()))
    assert rows and all(r["source"].startswith("github tenstorrent/tt-metal") for r in rows)
    for r in rows:
        n, size = int(r["ranks"]), int(r["bytes"])
        c = collective_cost(r["collective"], get_system(r["system"]), n, size, algorithm=r["topology"])
        assert c.algorithm == r["topology"]
        measured = float(r["time_us"]) * 1e-6
        if n >= 4 and size >= 2**22:  # the asymptote (2-chip lines run at about half the rate: not modelled)
            assert c.time_s == pytest.approx(measured, rel=0.2), r["id"]


def test_more_chips_less_compute_per_chip() -> None:
    one = predict("llama-small", "wormhole-n300", **STEP)
    two = predict("llama-small", "wormhole-n300", tp=2, **STEP)
    four = predict("llama-small", "t3000", tp=4, **STEP)
    assert (two.system, four.system) == ("n300", "t3000")
    assert two.stats["weight_bytes"] == pytest.approx(one.stats["weight_bytes"] / 2)
    assert four.stats["weight_bytes"] == pytest.approx(one.stats["weight_bytes"] / 4)
    for p, ranks in ((two, 2), (four, 4)):
        colls = [k for k in p.step_kernels("decode", 0) if k.kind == "collective"]
        assert colls and all(k.template.startswith("ttnn/") and k.duration_us > 0 for k in colls)
        assert {dict(k.params)["ranks"] for k in colls} == {ranks}
        assert any("tensor parallel over" in a and "tt_transformers" in a for a in p.assumptions)
    flops = [sum(k.flops for k in p.step_kernels("decode", 0) if k.kind == "gemm") for p in (one, two, four)]
    assert flops[0] > flops[1] > flops[2]
    # line (2 and 4 chips): row-parallel WO and W2, each followed by a reduce-scatter; an all-gather per norm
    ops = [dict(k.params)["op"] for k in four.step_kernels("decode", 0) if k.kind == "collective"]
    assert ops.count("reduce-scatter") == 2 * 4 and ops.count("all-gather") == 2 * 4 + 1  # 4 layers + final norm


def test_ring_fuses_the_all_gather_into_wo() -> None:
    p = predict(RING_MODEL, "t3000", tp=8, **STEP)
    ks = p.step_kernels("decode", 0)
    wo = [i for i, k in enumerate(ks) if k.name.endswith("o_proj")]
    assert wo and all(ks[i - 1].kind == "collective" and dict(ks[i - 1].params)["op"] == "all-gather" for i in wo)
    assert all(dict(ks[i].params)["n"] == 2048 // 8 and dict(ks[i].params)["k"] == 16 * 128 for i in wo)
    assert all("ring" in k.template for k in ks if k.kind == "collective")
    ops = [dict(k.params)["op"] for k in ks if k.kind == "collective"]
    assert ops.count("reduce-scatter") == 2  # W2 only


def test_llama_70b_fits_t3000_not_n150() -> None:
    with pytest.raises(MemoryFitError, match=r"more than wormhole-n150's 12\.0 GiB.*--tp 8"):
        predict("llama3.1-70b", "wormhole-n150", weights="performance", **STEP)
    p = predict("llama3.1-70b", "t3000", tp=8, weights="performance", **STEP)
    mem = p.stats["memory"]
    assert mem["total_bytes"] < mem["capacity_bytes"] == get_profile("wormhole-n300").dram_bytes.value
    assert p.tpot_s > 0 and p.ttft_s > 0


@pytest.mark.parametrize(("hw", "kw", "match"), [
    ("t3000", dict(tp=6), "tp=6 does not divide the 64 query heads"),
    ("n300", dict(tp=8), r"8 chips \(max\(tp, ep\) x pp\); n300 has 2"),
    ("wormhole-n300", dict(tp=128), r"128 chips \(max\(tp, ep\) x pp\); galaxy-dual \(wormhole-n300\) has 64"),
    ("wormhole-n300", dict(tp=64), r"64 chips on galaxy-dual's 8x8 mesh: its CCL ops run along one axis"),
    ("wormhole-n300", dict(tp=16), r"16 chips on galaxy's 4x8 mesh: its CCL ops run along one axis"),
    ("wormhole-n150", dict(tp=2), "no built-in multi-device system has 'wormhole-n150' devices"),
    ("t3000", dict(tp=2, pp=2), "expert parallelism only on a Galaxy: tt-metal's gpt-oss 2D layout"),
])
def test_bad_input_is_a_clear_error(hw: str, kw: dict[str, int], match: str) -> None:
    with pytest.raises((ValueError, ParallelError), match=match):
        predict("llama3-70b", hw, weights="performance", **STEP, **kw)


def test_mixtral_runs_an_expert_per_chip_as_the_t3000_demo_does() -> None:
    """An MoE model on a Tenstorrent mesh takes tt-metal's Mixtral layout: the residual replicated, the gate
    (padded to 64 columns) and top-k on every chip, the chip's one expert dense over every token, its output
    scaled, all-gathered and summed (a reduce-mask matmul in decode, fast_reduce_nc in prefill), as WO's partial
    sums are; no token dispatch kernel and no roofline kernel."""
    p = predict("mixtral-tiny", "t3000", tp=8, weights="performance", **STEP)
    assert p.stats["fallback_kernels"] == 0
    assert any("Mixtral T3000 layout" in a for a in p.assumptions)
    dec, pre = p.step_kernels("decode", 0), [k for k in p.kernels if k.phase == "prefill"]
    layer0 = [k for k in dec if k.layer == 0]
    gate = [k for k in layer0 if k.name.endswith("mlp.gate")]
    assert [dict(k.params)["n"] for k in gate] == [64]
    experts = {k.name.rsplit(".", 1)[-1]: dict(k.params) for k in layer0 if ".experts." in k.name and k.kind == "gemm"}
    assert experts["gate_proj"]["m"] == experts["up_proj"]["m"] == experts["down_proj"]["m"] == 1  # every token
    assert experts["gate_proj"]["n"] == 512 and experts["down_proj"]["k"] == 512  # the whole expert, not a slice
    assert not any(dict(k.params).get("op") == "moe_align" for k in p.kernels)
    gathers = [dict(k.params) for k in layer0 if k.kind == "collective"]
    assert [g["op"] for g in gathers] == ["all-gather", "all-gather"]  # WO's partials, the experts' outputs
    assert all(g["nbytes"] == 8 * 32 * 256 * 2 and g["ranks"] == 8 for g in gathers)
    sums = [k for k in layer0 if k.name.endswith("reduce_mask_matmul")]
    assert len(sums) == 2 and all(dict(k.params)["k"] == 32 * 8 for k in sums)
    assert sum(k.name.endswith("fast_reduce_nc") for k in pre if k.layer == 0) == 2
    # 8 experts on 4 chips: not an expert per chip but tt-metal's gpt-oss layout, every expert split over the chips
    # (intermediate 512: gate-up 1024 columns, a quarter each); the expert-per-chip layout itself refuses them
    split = predict("mixtral-tiny", "t3000", tp=4, weights="performance", **STEP)
    grouped = [dict(k.params) for k in split.kernels if k.kind == "grouped_gemm" and k.layer == 0]
    assert grouped and {(g["n"], g["k"]) for g in grouped} == {(2 * 512 // 4, 256), (256, 512 // 4)}
    with pytest.raises(ParallelError, match="does not divide the 4 query heads"):  # mixtral-micro: 4 heads
        predict("mixtral-micro", "t3000", tp=8, weights="performance", **STEP)
    from torchsim.lowering.plan import plan_model
    from torchsim.lowering.templates.tensix.mesh_plan import tt_expert_plan
    from torchsim.models.registry import build_model, get_config

    moe = plan_model(build_model(get_config("mixtral-micro")), batch=1, q_len=1, past_len=8)
    with pytest.raises(ParallelError, match="4 experts on tp=8 chips.*one expert per chip, so it needs tp=4"):
        tt_expert_plan(moe, 8, "t3000")
