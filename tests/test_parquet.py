"""Parquet round trips: schema and metadata as documented, pandas reads it, NULL where not modelled."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

import torchsim
from torchsim.exports.adapt import kernel_detail, kernel_record
from torchsim.exports.parquet import (
    KERNEL_COLUMNS,
    NODE_COLUMNS,
    SCHEMA_VERSION,
    arrow_schema,
    profile_hash,
    read_metadata,
    schema_markdown,
    write_kernels,
    write_nodes,
)
from torchsim.exports.records import PredictionRecords, RunInfo
from torchsim.exports.synthetic import SyntheticProfile, synthetic_prediction, toy_ws_gemm
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.quantity import assumed
from torchsim.sim import simulate

DOCS = Path(__file__).resolve().parents[1] / "docs" / "exports.md"


@pytest.fixture(scope="module")
def toy_run() -> tuple:  # type: ignore[type-arg]
    hw = get_profile("h100-sxm")
    kg = toy_ws_gemm(m_tiles=2, n_tiles=2, k_steps=4)
    return hw, kg, simulate(kg, hw, record=True)


def test_kernels_round_trip_schema_metadata_and_values(tmp_path: Path) -> None:
    pred = synthetic_prediction("h100-sxm", layers=2, decode_steps=2)
    path = tmp_path / "k.parquet"
    profile = SyntheticProfile("h100-sxm")
    assert write_kernels(path, [pred], [profile]) == len(pred.kernels)
    table = pq.read_table(path)
    assert table.schema.remove_metadata() == arrow_schema(KERNEL_COLUMNS)
    meta = read_metadata(path)
    assert meta["schema_version"] == str(SCHEMA_VERSION) and meta["table"] == "kernels"
    assert meta["version"] == torchsim.__version__ and meta["profile"] == "h100-sxm"
    assert json.loads(meta["profile_hash"]) == {"h100-sxm": profile_hash(profile)}
    assert json.loads(meta["runs"])[0]["scenario"] == {"prompt": 2048, "decode": 2, "batch": 1}
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"

    df = pd.read_parquet(path)
    assert len(df) == len(pred.kernels)
    assert df.duration_cycles.tolist() == [k.duration_cycles for k in pred.kernels]
    assert df.start_us.tolist() == [k.start_us for k in pred.kernels]
    assert df.kernel_name.tolist() == [k.kernel_name for k in pred.kernels]
    assert json.loads(df.params_json[1]) == dict(pred.kernels[1].params)


def test_not_modelled_is_null_never_zero(tmp_path: Path) -> None:
    pred = synthetic_prediction("h100-sxm", layers=1, decode_steps=1)
    path = tmp_path / "k.parquet"
    write_kernels(path, [pred], [SyntheticProfile("h100-sxm")])
    df = pd.read_parquet(path)
    fallback = df[df.roofline_fallback]
    assert len(fallback) > 0 and len(fallback) < len(df)
    for col in ("template", "tensor_busy_fraction", "stall_data_cycles", "l2_hit_fraction", "template_config_json"):
        assert fallback[col].isna().all(), col
    simulated = df[~df.roofline_fallback]
    assert simulated.tensor_busy_fraction.notna().all() and simulated.l2_hit_fraction.notna().all()
    # a unit or stall reason the record does not carry is NULL even on simulated rows
    assert simulated.sfu_busy_fraction.isna().all() and simulated.stall_barrier_cycles.isna().all()
    # no GEMM flops on non-GEMM rows: NULL, not 0
    assert df[df.kernel_kind != "gemm"].flops.isna().all() and (df[df.kernel_kind == "gemm"].flops > 0).all()
    assert df[df.phase == "prefill"].decode_step.isna().all()
    assert df[df.phase == "decode"].decode_step.notna().all()


def test_compare_file_holds_every_profile(tmp_path: Path) -> None:
    runs = [synthetic_prediction(hw, layers=1, decode_steps=0) for hw in ("a100-sxm", "h100-sxm")]
    profiles = [SyntheticProfile("a100-sxm"), SyntheticProfile("h100-sxm", clock_hz=assumed(1.83e9, "Hz", "x"))]
    path = tmp_path / "cmp.parquet"
    write_kernels(path, runs, profiles)
    meta = read_metadata(path)
    hashes = json.loads(meta["profile_hash"])
    assert meta["profile"] == "a100-sxm,h100-sxm" and set(hashes) == {"a100-sxm", "h100-sxm"}
    assert hashes["a100-sxm"] != hashes["h100-sxm"]
    assert set(pd.read_parquet(path).hardware) == {"a100-sxm", "h100-sxm"}


def test_missing_profile_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no profile given for hardware \\['b200'\\]"):
        write_kernels(tmp_path / "x.parquet", [synthetic_prediction("b200", layers=1)], [SyntheticProfile("h100")])
    assert not (tmp_path / "x.parquet").exists()


def test_profile_hash_tracks_numbers_not_provenance() -> None:
    base = SyntheticProfile("p")
    assert profile_hash(base) == profile_hash(dataclasses.replace(base, clock_hz=assumed(1.98e9, "Hz", "other")))
    assert profile_hash(base) != profile_hash(dataclasses.replace(base, clock_hz=assumed(1.99e9, "Hz", "synthetic")))
    hw = get_profile("h100-sxm")
    assert profile_hash(hw) == hw.numbers_hash()
    assert profile_hash(hw) != profile_hash(get_profile("h200"))


def test_kernel_row_from_a_simulated_kernel(tmp_path: Path, toy_run: tuple) -> None:  # type: ignore[type-arg]
    hw, _kg, res = toy_run
    rec = kernel_record(res)
    path = tmp_path / "one.parquet"
    write_kernels(path, [PredictionRecords(RunInfo("r", "", hw.name), [rec])], [hw])
    row = pd.read_parquet(path).iloc[0]
    assert row.duration_cycles == res.cycles and row.flops == res.flops and row.dram_bytes == res.dram_bytes
    assert row.l2_hit_fraction == pytest.approx(res.l2_hit_rate)
    assert row.tensor_busy_fraction == pytest.approx(res.unit_busy["tensor"])
    assert row.stall_barrier_cycles == res.stalls["barrier"] and row.bound == res.bound
    assert pd.isna(row.tmem_busy_fraction)  # H100 has no TMEM: not modelled, NULL
    assert json.loads(read_metadata(path)["profile_hash"]) == {hw.name: hw.numbers_hash()}


def test_nodes_table_from_engine_records(tmp_path: Path, toy_run: tuple) -> None:  # type: ignore[type-arg]
    hw, kg, res = toy_run
    detail = kernel_detail(res, kg, RunInfo("r", "", hw.name))
    path = tmp_path / "nodes.parquet"
    assert write_nodes(path, detail, hw) == len(res.records)
    table = pq.read_table(path)
    assert table.schema.remove_metadata() == arrow_schema(NODE_COLUMNS)
    assert read_metadata(path)["table"] == "nodes"
    df = table.to_pandas()
    recs = res.records
    assert df.end_cycle.tolist() == [r.end for r in recs] and df.group.tolist() == [r.group for r in recs]
    no_wait = [r.wait_reason == "none" for r in recs]
    assert df.wait_reason.isna().tolist() == no_wait
    graph = kg.classes[0].graph
    loads = df[df.op == "TMA_LOAD"]
    assert (loads.global_bytes == [graph.work[i] for i in loads.node_index]).all()
    assert df[df.op == "MMA"].global_bytes.isna().all()
    assert df.dram_bytes.isna().all()  # the engine does not attribute DRAM bytes per node (yet)


def test_detail_needs_recorded_events(toy_run: tuple) -> None:  # type: ignore[type-arg]
    hw, kg, _ = toy_run
    res = simulate(kg, hw)
    with pytest.raises(ValueError, match="record=True"):
        kernel_detail(res, kg, RunInfo("r", "", hw.name))


def test_docs_list_the_schema_as_declared() -> None:
    text = DOCS.read_text()
    assert schema_markdown(KERNEL_COLUMNS) in text
    assert schema_markdown(NODE_COLUMNS) in text
    assert f"`{SCHEMA_VERSION}`" in text
