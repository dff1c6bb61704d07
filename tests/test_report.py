"""Reports and CLI output helpers: headline numbers from kernel records, tables, charts, files per option."""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import pytest

from torchsim.cli.outputs import nodes_path, slowest_distinct, write_kernel_outputs, write_prediction_outputs
from torchsim.exports.adapt import kernel_detail
from torchsim.exports.check import check_trace
from torchsim.exports.records import PredictionRecords
from torchsim.exports.report import comparison_table, kernel_group, kernel_table, summarize, time_per_kind
from torchsim.exports.synthetic import SyntheticProfile, synthetic_prediction, toy_ws_gemm
from torchsim.hwmodels import get_profile
from torchsim.sim import simulate

PNG = b"\x89PNG\r\n\x1a\n"


def test_summary_numbers_follow_the_records() -> None:
    pred = synthetic_prediction(layers=2, decode_steps=4)
    s = summarize(pred)
    prefill_end = max(k.start_us + k.duration_us for k in pred.kernels if k.phase == "prefill")
    decode_end = max(k.start_us + k.duration_us for k in pred.kernels)
    assert s.ttft_s == pytest.approx(prefill_end * 1e-6)
    assert s.tpot_s == pytest.approx((decode_end - prefill_end) / 4 * 1e-6)
    assert s.tokens_per_s == pytest.approx(1 / s.tpot_s)
    assert sum(share for _, share in s.bound) == pytest.approx(1.0)
    assert s.top[0][1] >= s.top[-1][1] and s.top[0][0] == "layers.*.gate_up"
    fallback = sum(k.duration_us for k in pred.kernels if k.roofline_fallback)
    assert s.fallback_share == pytest.approx(fallback / sum(k.duration_us for k in pred.kernels))
    assert summarize(pred, ttft_s=1.0).ttft_s == 1.0  # the prediction's own figure wins


def test_layer_index_is_folded() -> None:
    pred = synthetic_prediction(layers=3, decode_steps=0)
    assert {kernel_group(k) for k in pred.kernels if k.layer is not None} == \
        {f"layers.*.{n}" for n in ("input_norm", "qkv_proj", "rope", "attn", "o_proj", "post_norm", "gate_up",
                                   "silu_mul", "down")}


def test_tables_show_every_hardware_and_the_fallback_marker() -> None:
    preds = [synthetic_prediction(hw, layers=2, decode_steps=2, speed=sp) for hw, sp in (("a100-sxm", 0.5),
                                                                                       ("h100-sxm", 1.0))]
    text = comparison_table([summarize(p) for p in preds])
    header = text.splitlines()[0]
    assert "a100-sxm" in header and "h100-sxm" in header
    ttft = next(line for line in text.splitlines() if line.startswith("TTFT"))
    a100, h100 = (float(x) for x in ttft.split()[-2:])
    assert a100 == pytest.approx(2 * h100, rel=0.05)  # half the speed, about twice the time
    kt = kernel_table(preds[0])
    assert "roofline fallback" in kt and "rope" in kt


def test_time_per_kind_splits_phases_and_normalises_decode_per_step() -> None:
    pred = synthetic_prediction(layers=1, decode_steps=4)
    t = time_per_kind(pred)
    decode_gemm = sum(k.duration_us for k in pred.kernels if k.phase == "decode" and k.kernel_kind == "gemm")
    assert t["decode"]["gemm"] == pytest.approx(decode_gemm * 1e-6 / 4)
    assert set(t) == {"prefill", "decode"}


def test_kernel_outputs_write_every_requested_file(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    hw = get_profile("h100-sxm")
    kg = toy_ws_gemm(m_tiles=2, n_tiles=2, k_steps=4)
    res = simulate(kg, hw, record=True)
    args = argparse.Namespace(parquet=str(tmp_path / "k.parquet"), perfetto=str(tmp_path / "k.pftrace"),
                              plot=str(tmp_path / "k.png"))
    lines = write_kernel_outputs(args, [(kg, res)], hw)
    assert len(lines) == 4 and all(line.startswith("wrote ") for line in lines)
    assert nodes_path(args.parquet) == str(tmp_path / "k.nodes.parquet")
    assert len(pd.read_parquet(nodes_path(args.parquet))) == len(res.records)
    row = pd.read_parquet(args.parquet).iloc[0]
    assert pd.isna(row.model) and row.duration_cycles == res.cycles
    assert check_trace(args.perfetto).slices == len(res.records) + 1
    assert Path(args.plot).read_bytes()[:8] == PNG


def test_prediction_outputs_with_detail_views(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    preds = [synthetic_prediction(hw, layers=2, decode_steps=1) for hw in ("a100-sxm", "h100-sxm")]
    hw = get_profile("h100-sxm")
    kg = toy_ws_gemm(m_tiles=1, n_tiles=2, k_steps=3)
    res = simulate(kg, hw, record=True)
    asked: list[str] = []

    def detail_for(pred: PredictionRecords, k):  # type: ignore[no-untyped-def]
        asked.append(k.kernel_name)
        return kernel_detail(res, kg, pred.run, k)

    args = argparse.Namespace(parquet=str(tmp_path / "c.parquet"), perfetto=str(tmp_path / "c.pftrace"),
                              plot=str(tmp_path / "c.png"), detail=2)
    lines = write_prediction_outputs(args, preds, [SyntheticProfile("a100-sxm"), SyntheticProfile("h100-sxm")],
                                     detail_for)
    assert len(lines) == 3 and len(asked) == 2  # --detail 2 over two runs: the slowest of each
    stats = check_trace(args.perfetto)
    assert stats.processes == 2 + 2 * (1 + len({r.sm for r in res.records}))
    assert len(pd.read_parquet(args.parquet)) == sum(len(p.kernels) for p in preds)
    assert Path(args.plot).read_bytes()[:8] == PNG


def test_slowest_distinct_skips_repeats_and_fallbacks() -> None:
    pred = synthetic_prediction(layers=4, decode_steps=1)
    picked = slowest_distinct(pred.kernels, 3)
    keys = [(k.kernel_kind, k.params) for k in picked]
    assert len(set(keys)) == 3 and not any(k.roofline_fallback for k in picked)
    assert picked[0].duration_cycles == max(k.duration_cycles for k in pred.kernels if not k.roofline_fallback)


def test_back_to_back_launches_share_one_set_of_files(tmp_path: Path) -> None:
    """Split-KV decoding runs two kernels; their outputs go to one table, one trace, one chart."""
    pytest.importorskip("matplotlib")
    hw = get_profile("h100-sxm")
    launches = []
    for k_steps in (3, 5):
        kg = toy_ws_gemm(m_tiles=1, n_tiles=2, k_steps=k_steps)
        launches.append((kg, simulate(kg, hw, record=True)))
    args = argparse.Namespace(parquet=str(tmp_path / "d.parquet"), perfetto=str(tmp_path / "d.pftrace"),
                              plot=str(tmp_path / "d.png"))
    write_kernel_outputs(args, launches, hw)
    rows = pd.read_parquet(args.parquet)
    assert rows.kernel_index.tolist() == [0, 1]
    assert rows.start_cycles.tolist() == [0, launches[0][1].cycles]
    assert len(pd.read_parquet(nodes_path(args.parquet))) == sum(len(r.records) for _, r in launches)
    stats = check_trace(args.perfetto)
    assert stats.slices == sum(len(r.records) + 1 for _, r in launches)
    assert Path(args.plot).read_bytes()[:8] == PNG
