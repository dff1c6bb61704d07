"""Routing counts: recorded by a router hook on real inputs, read from files, synthetic patterns, validation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torchsim.models.mixtral import MixtralForCausalLM, build_mixtral
from torchsim.models.routing import RoutingCounts, allocate, resolve_routing
from torchsim.models.routing_hook import RoutingRecorder, find_routers, record_routing
from torchsim.models.routing_io import load_routing, save_routing
from torchsim.models.routing_synthetic import synthetic_routing


@pytest.fixture(scope="module")
def tiny_model() -> MixtralForCausalLM:
    return build_mixtral("mixtral-tiny", device="cpu", dtype=torch.float32, seed=0)


@pytest.fixture(scope="module")
def tokens() -> torch.Tensor:
    return torch.randint(0, 1000, (4, 64), generator=torch.Generator().manual_seed(1))


# --- hook on real hidden states -------------------------------------------------------------------------------

def test_hook_records_the_routers_choices_on_real_inputs(tiny_model: MixtralForCausalLM, tokens: torch.Tensor) -> None:
    seen_inputs: list[torch.Tensor] = []
    routers = find_routers(tiny_model)
    handles = [r.module.register_forward_hook(lambda m, a, o: seen_inputs.append(a[0].detach())) for r in routers]
    counts = record_routing(tiny_model, [tokens])
    for handle in handles:
        handle.remove()
    print("\n" + counts.describe())
    assert counts.tokens == tokens.numel()
    assert counts.num_layers == tiny_model.config.num_hidden_layers
    assert all(sum(row) == counts.tokens * counts.top_k for row in counts.counts)
    # independently: softmax(h W^T) top-2 on the hidden states each router saw
    for layer, (site, hidden) in enumerate(zip(routers, seen_inputs, strict=True)):
        weight = site.module.weight
        assert isinstance(weight, torch.Tensor)
        top = (hidden @ weight.T).softmax(-1).topk(2, dim=-1).indices
        assert counts.layer(layer) == tuple(torch.bincount(top.flatten(), minlength=8).tolist())


def test_hook_accumulates_over_batches_and_detaches(tiny_model: MixtralForCausalLM, tokens: torch.Tensor) -> None:
    whole = record_routing(tiny_model, [tokens])
    split = record_routing(tiny_model, list(tokens.split(1)))
    assert split.counts == whole.counts and split.tokens == whole.tokens
    assert all(not r.module._forward_hooks for r in find_routers(tiny_model))


def test_recorder_refuses_dense_models_and_empty_runs(tiny_model: MixtralForCausalLM) -> None:
    with pytest.raises(ValueError, match="no MoE router"):
        RoutingRecorder(torch.nn.Linear(4, 4))
    with RoutingRecorder(tiny_model) as rec:
        pass
    with pytest.raises(ValueError, match="no tokens were routed"):
        rec.counts()


# --- validation -----------------------------------------------------------------------------------------------

def test_counts_must_sum_to_tokens_times_top_k() -> None:
    with pytest.raises(ValueError, match=r"sum to 7, expected tokens x top_k = 4 x 2 = 8"):
        RoutingCounts(((4, 2, 1, 0),), num_experts=4, top_k=2, tokens=4)


@pytest.mark.parametrize(("row", "message"), [
    ((4, 4, 1, -1), "negative"),
    ((5, 3, 0, 0), "exceeds tokens=4"),
    ((4, 2, 2), "lists 3 experts"),
    ((4.0, 2, 2, 0), "not an integer"),
])
def test_bad_counts_are_named(row: tuple[int, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RoutingCounts((row,), num_experts=4, top_k=2, tokens=4)


def test_model_mismatch_names_each_field() -> None:
    rc = synthetic_routing("balanced", num_layers=2, num_experts=8, top_k=2, tokens=16)
    with pytest.raises(ValueError, match=r"layers: routing has 2, model has 32; experts: routing has 8, model has 4"):
        rc.check_model(num_layers=32, num_experts=4, top_k=2)


# --- files ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("suffix", [".json", ".parquet"])
def test_file_round_trip(tmp_path: Path, suffix: str, tiny_model: MixtralForCausalLM, tokens: torch.Tensor) -> None:
    recorded = record_routing(tiny_model, [tokens])
    path = save_routing(recorded, tmp_path / f"r{suffix}", model="mixtral-tiny")
    loaded = load_routing(path)
    print(f"\nloaded from {path.name}:\n{loaded.describe()}")
    assert loaded.counts == recorded.counts
    assert (loaded.num_experts, loaded.top_k, loaded.tokens) == (8, 2, 256)
    assert loaded.source == f"file:{path}"


def _write(tmp_path: Path, **fields: object) -> Path:
    obj = {"format": "torchsim.routing", "version": 1, "top_k": 2, "tokens": 4,
           "tokens_per_expert": [[4, 2, 2, 0], [2, 2, 2, 2]]}
    obj.update(fields)
    path = tmp_path / "r.json"
    path.write_text(json.dumps({k: v for k, v in obj.items() if v is not None}))
    return path


@pytest.mark.parametrize(("fields", "message"), [
    ({"tokens": None}, r"missing field\(s\) \['tokens'\]"),
    ({"tokens_per_expert": [[4, 2, 2, 0], [2, 2, 2]]}, "different numbers of experts"),
    ({"tokens_per_expert": [[4, 2, 2, 1]]}, "sum to 9"),
    ({"tokens_per_expert": [[4, 4, 2, -2]]}, "negative"),
    ({"num_experts": 8}, "'num_experts' is 8 but each layer lists 4"),
    ({"version": 9}, "'version' is 9"),
])
def test_bad_files_name_the_file_and_field(tmp_path: Path, fields: dict[str, object], message: str) -> None:
    path = _write(tmp_path, **fields)
    with pytest.raises(ValueError, match=message) as err:
        load_routing(path)
    assert str(path) in str(err.value)


def test_file_that_does_not_match_the_model(tmp_path: Path) -> None:
    path = _write(tmp_path)
    with pytest.raises(ValueError, match=r"layers: routing has 2, model has 32; experts: routing has 4, model has 8"):
        resolve_routing(path, num_layers=32, num_experts=8, top_k=2, tokens=128)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_routing(tmp_path / "nope.json", num_layers=2, num_experts=4, top_k=2, tokens=4)


def test_parquet_with_a_missing_expert_row(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    balanced = synthetic_routing("balanced", num_layers=2, num_experts=4, top_k=2, tokens=4)
    path = save_routing(balanced, tmp_path / "r.parquet")
    table = pq.read_table(path)
    pq.write_table(table.slice(0, table.num_rows - 1).replace_schema_metadata(table.schema.metadata), path)
    with pytest.raises(ValueError, match=r"no row for \(layer, expert\) \[\(1, 3\)\]"):
        load_routing(path)
    assert isinstance(table, pa.Table)


# --- synthetic patterns ---------------------------------------------------------------------------------------

def test_balanced_and_skewed() -> None:
    balanced = synthetic_routing("balanced", num_layers=32, num_experts=8, top_k=2, tokens=2048)
    skewed = synthetic_routing("skewed", num_layers=32, num_experts=8, top_k=2, tokens=2048)
    print(f"\n{balanced.describe().splitlines()[1]}\n{skewed.describe().splitlines()[1]}")
    assert set(balanced.counts) == {(512,) * 8}
    hot = skewed.layer(0)[0]
    assert hot == sum(skewed.layer(0)) // 2  # 50% of all assignments go to one expert
    assert skewed.imbalance(0) == pytest.approx(4.0) and balanced.imbalance(0) == 1.0


@pytest.mark.parametrize("name", ["zipf", "dirichlet", "zipf:2", "dirichlet:0.1"])
def test_random_patterns_are_seeded(name: str) -> None:
    kw = {"num_layers": 4, "num_experts": 8, "top_k": 2, "tokens": 512}
    a, b, c = (synthetic_routing(name, seed=s, **kw) for s in (3, 3, 4))
    assert a.counts == b.counts and a.counts != c.counts
    assert max(a.imbalance(i) for i in range(4)) > 1.2  # skewed, unlike balanced


def test_unknown_pattern_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="balanced, skewed, zipf, dirichlet"):
        resolve_routing("lopsided", num_layers=1, num_experts=8, top_k=2, tokens=4)


# --- scaling to a scenario's token count ----------------------------------------------------------------------

def test_resolve_scales_recorded_counts_to_the_scenario(tmp_path: Path) -> None:
    rc = RoutingCounts(((8, 4, 4, 0),), num_experts=4, top_k=2, tokens=8, source="test")
    assert resolve_routing(rc, num_layers=1, num_experts=4, top_k=2, tokens=16).layer(0) == (16, 8, 8, 0)
    decode = resolve_routing(rc, num_layers=1, num_experts=4, top_k=2, tokens=1).layer(0)
    assert decode == (1, 1, 0, 0)  # one token: the two most popular experts


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 100), min_size=2, max_size=16), st.integers(1, 5000), st.integers(1, 4))
def test_allocate_is_exact_and_capped(weights: list[float], tokens: int, top_k: int) -> None:
    top_k = min(top_k, len(weights))
    row = allocate(np.asarray(weights), tokens, top_k)
    assert sum(row) == tokens * top_k
    assert all(0 <= c <= tokens for c in row)


# --- docs and command line ------------------------------------------------------------------------------------

def test_the_documented_json_example_loads(tmp_path: Path) -> None:
    doc = (Path(__file__).parents[1] / "docs" / "routing.md").read_text()
    example = doc.split("```json\n", 1)[1].split("```", 1)[0]
    (tmp_path / "example.json").write_text(example)
    counts = load_routing(tmp_path / "example.json")
    assert (counts.num_layers, counts.num_experts, counts.top_k, counts.tokens) == (2, 8, 2, 256)


def test_cli_records_then_shows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from torchsim.cli import routing as cli

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command"))
    out = tmp_path / "r.parquet"
    args = parser.parse_args(["routing", "record", "--model", "mixtral-micro", "--batch", "2", "--seq", "8", "-o",
                              str(out)])
    assert args.func(args) == 0
    recorded = load_routing(out)
    assert (recorded.tokens, recorded.num_experts, recorded.num_layers) == (16, 4, 2)
    args = parser.parse_args(["routing", "show", str(out), "--tokens", "32"])
    assert args.func(args) == 0
    shown = capsys.readouterr().out
    assert "tokens=32" in shown and f"layer   1: {list(recorded.scaled(32).layer(1))}" in shown


def test_hostile_routing_files_are_named(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from torchsim.models.routing_io import load_routing

    empty = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"layer": pa.array([], pa.int32()), "expert": pa.array([], pa.int32()),
                             "tokens": pa.array([], pa.int64())}, metadata={b"torchsim.routing": b"{}"}), empty)
    binary = tmp_path / "pickle.json"
    binary.write_bytes(b"\x80\x04\x95 not json")
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"PAR1 not really")
    for path, words in ((empty, "no rows"), (binary, "not a text file"), (junk, "not a readable Parquet")):
        with pytest.raises(ValueError) as err:
            load_routing(path)
        assert path.name in str(err.value) and words in str(err.value), str(err.value)


def test_a_failed_save_leaves_the_old_file(tmp_path: Path) -> None:
    from torchsim.exports.atomic import write_bytes_atomic
    from torchsim.models.routing_io import save_routing

    good = tmp_path / "good.json"
    good.write_text("the good file")
    counts = RoutingCounts(((3, 1),), 2, 1, 4, "test")

    def disk_full(path: Path, data: bytes) -> None:
        raise OSError(f"{path}: No space left on device")

    with pytest.raises(OSError):
        save_routing(counts, good, write=disk_full)
    assert good.read_text() == "the good file"
    with pytest.raises(ValueError, match="suffix"):
        save_routing(counts, tmp_path / "x.csv", write=write_bytes_atomic)
