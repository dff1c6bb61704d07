"""torchsim microbench: the measuring pipeline on the CPU device with tiny shapes (no GPU here), the rows it
writes (published_dev.csv schema, timing methods, profile), the file `torchsim calibrate` reads, and the
command line (a clear error without CUDA, atomic output)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torchsim.calibration import microbench as mb  # noqa: E402
from torchsim.calibration.params import CalibrationError  # noqa: E402
from torchsim.calibration.run import calibrate  # noqa: E402
from torchsim.cli import main  # noqa: E402
from torchsim.validation.published import COLUMNS, read_rows  # noqa: E402
from torchsim.validation.timing import method_for  # noqa: E402

FAST = mb.Timing(warmup=1, iters=2, repeats=2)


@pytest.fixture(scope="module")
def measurements() -> list[mb.Measurement]:
    return mb.run_suite("cpu", mb.TINY, FAST)


@pytest.fixture(scope="module")
def rows(measurements: list[mb.Measurement]) -> list[dict[str, str]]:
    return mb.to_rows(measurements, "h100-sxm", mb.environment("cpu"), FAST)


def test_every_kind_of_measurement_is_there_and_positive(measurements: list[mb.Measurement]) -> None:
    kinds = {(m.category, m.params.get("op") or m.params.get("mode") or m.dtype) for m in measurements}
    assert {("microbenchmark", "eager"), ("microbenchmark", "read"), ("microbenchmark", "write"),
            ("microbenchmark", "copy"), ("gemm", "bf16"), ("attention", "bf16")} <= kinds
    n_gemm = len([m for m in measurements if m.category == "gemm" and m.dtype == "bf16"])
    assert n_gemm == len(mb.TINY.gemm)
    assert len([m for m in measurements if m.category == "attention"]) == len(mb.TINY.prefill) + len(mb.TINY.decode)
    assert all(m.value > 0 for m in measurements)


def test_rows_are_in_the_published_schema(rows: list[dict[str, str]]) -> None:
    assert all(tuple(r) == COLUMNS for r in rows)
    assert len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        assert float(r["value"]) > 0
        assert isinstance(json.loads(r["params_json"]), dict)
        assert r["source"].startswith("torchsim microbench ")
        assert "warm-up" in r["notes"] and "L2 not flushed" in r["notes"] and "torch " in r["notes"]
        assert "not a GPU measurement" in r["notes"]  # the CPU device says it is a pipeline test
    gemms = [r for r in rows if r["category"] == "gemm"]
    assert all({"M", "N", "K"} <= set(json.loads(r["params_json"])) for r in gemms)


def test_rows_map_to_the_profile_and_the_timing_method(tmp_path: Path, rows: list[dict[str, str]]) -> None:
    path = tmp_path / "mb.csv"
    mb.write_rows(rows, path)
    read = read_rows(path, strict=True)
    assert len(read) == len(rows)
    assert {r.profile for r in read} == {("h100-sxm", "")}
    assert {method_for(r)[0].name for r in read} == {"cuda-events-loop"}
    # a CUDA-graph row (made here by hand, CUDA-graph capture needs a GPU) maps to the graph's method
    graph = mb.Measurement("microbenchmark", "kernel launch interval, CUDA graph replay", "n/a",
                           {"kernels": 10, "mode": "cuda-graph"}, "time_us", 1.5, "us", "cuda-graph")
    env = mb.Environment("cuda", "NVIDIA H100 80GB HBM3", "2.x", "12.x", "550", 50 * mb.MiB)
    g = mb.to_rows([graph], "h100-sxm", env, FAST)
    mb.write_rows(g, path)
    (row,) = read_rows(path, strict=True)
    assert method_for(row)[0].name == "cuda-graph"
    assert "NVIDIA H100 80GB HBM3" in row.notes and "driver 550" in row.notes


def test_calibrate_reads_the_file(tmp_path: Path, rows: list[dict[str, str]]) -> None:
    path = tmp_path / "mb.csv"
    mb.write_rows(rows, path)
    c = calibrate("h100-sxm", path, ["launch_overhead_s"], min_rows=1)
    assert [p.field for p in c.fit.params] == ["launch_overhead_s"]
    assert c.fit.rows and all(r.startswith("MB-") for r in c.fit.rows)
    kept = calibrate("h100-sxm", path, ["launch_overhead_s"], min_rows=10_000)  # too few rows: kept, said so
    (p,) = kept.fit.params
    assert p.value == p.source_value and not p.fitted
    with pytest.raises(CalibrationError, match="no row .* maps to profile 'a100-sxm'"):
        calibrate("a100-sxm", path, ["launch_overhead_s"])


def test_profile_for_maps_gpu_names_and_checks_hw() -> None:
    assert mb.profile_for("NVIDIA H100 80GB HBM3", None) == ("h100-sxm", "")
    assert "proxy" in mb.profile_for("NVIDIA H100 PCIe", None)[1]
    assert mb.profile_for("NVIDIA H100 80GB HBM3", "h200")[0] == "h200"
    assert "would map to h100-sxm" in mb.profile_for("NVIDIA H100 80GB HBM3", "h200")[1]
    with pytest.raises(ValueError, match="maps to no torchsim profile; pass --hw"):
        mb.profile_for("NVIDIA GeForce RTX 4090", None)
    with pytest.raises(ValueError, match="unknown profile 'h999'"):
        mb.profile_for("NVIDIA H100", "h999")


def test_bad_parameters_are_errors() -> None:
    with pytest.raises(ValueError, match="iters must be >= 1"):
        mb.Timing(iters=0)
    with pytest.raises(ValueError, match="non-positive dimension"):
        mb.gemm("cpu", [(0, 4, 4)], timing=FAST)
    with pytest.raises(ValueError, match="gemm dtype"):
        mb.gemm("cpu", [(4, 4, 4)], dtype="fp16", timing=FAST)
    with pytest.raises(ValueError, match="device must be"):
        mb.check_device("mps")
    with pytest.raises(ValueError, match="no measurement"):
        mb.to_rows([], "h100-sxm", mb.environment("cpu"), FAST)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA error")
def test_without_cuda_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "gpu.csv"
    assert main(["microbench", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "needs a CUDA GPU" in err and "nothing was written" in err
    assert not out.exists()


def test_cpu_device_writes_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cpu.csv"
    assert main(["microbench", "--out", str(out), "--device", "cpu", "--hw", "h100-sxm"]) == 0
    cap = capsys.readouterr()
    assert "microbench: gemm bf16" in cap.err  # progress on stderr
    assert f"wrote {len(read_rows(out, strict=True))} rows to {out}" in cap.out
    with out.open() as f:
        assert tuple(next(csv.reader(f))) == COLUMNS


@pytest.mark.parametrize(("argv", "msg"), [
    (["--device", "cpu"], "--device cpu needs --hw"),
    (["--device", "cpu", "--hw", "h999"], "unknown profile 'h999'"),
])
def test_cli_input_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], msg: str) -> None:
    out = tmp_path / "x.csv"
    assert main(["microbench", "--out", str(out), *argv]) == 2
    assert msg in capsys.readouterr().err
    assert not out.exists()


def test_wrong_extension_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["microbench", "--out", str(tmp_path / "x.toml"), "--device", "cpu", "--hw", "h100-sxm"]) == 2
    assert "should end in .csv" in capsys.readouterr().err


def test_a_failed_run_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "keep.csv"
    out.write_text("old\n")

    def broken(*args: object, **kw: object) -> list[mb.Measurement]:
        raise ValueError("attention failed")
    monkeypatch.setattr(mb, "attention", broken)
    assert main(["microbench", "--out", str(out), "--device", "cpu", "--hw", "h100-sxm"]) == 2
    assert out.read_text() == "old\n"
    assert list(tmp_path.iterdir()) == [out]  # no temporary file left


def test_graph_gemm_rows_constrain_the_graph_gap(tmp_path: Path) -> None:
    """GEMMs timed in a CUDA graph (made by hand: capture needs a GPU) are what `graph_launch_overhead_s` is
    fitted to, the eager ones `launch_overhead_s`."""
    env = mb.Environment("cuda", "NVIDIA H100 80GB HBM3", "2.x", "12.x", "550", 50 * mb.MiB)
    ms = [mb.Measurement("gemm", f"torch.matmul{', in one CUDA graph' if method == 'cuda-graph' else ''}", "bf16",
                         {"M": s, "N": s, "K": s, "layout": "NN"}, "time_us", 8.0, "us", method)
          for method in ("cuda-events-loop", "cuda-graph") for s in (128, 256, 512)]
    path = tmp_path / "mb.csv"
    mb.write_rows(mb.to_rows(ms, "h100-sxm", env, FAST), path)
    c = calibrate("h100-sxm", path, ["launch_overhead_s", "graph_launch_overhead_s"], min_rows=1)
    sensitive = {p.field: set(p.sensitive_rows) for p in c.fit.params}
    assert sensitive["launch_overhead_s"] == {"MB-001", "MB-002", "MB-003"}
    assert sensitive["graph_launch_overhead_s"] == {"MB-004", "MB-005", "MB-006"}


def test_only_some_parts_are_measured(tmp_path: Path) -> None:
    ms = mb.run_suite("cpu", mb.TINY, FAST, parts=("launch",))
    assert ms and {m.category for m in ms} == {"microbenchmark"} and all("launch" in m.workload for m in ms)
    with pytest.raises(ValueError, match="parts"):
        mb.run_suite("cpu", mb.TINY, FAST, parts=("gpu",))
    assert main(["microbench", "--device", "cpu", "--hw", "h200", "--out", str(tmp_path / "a.csv"),
                 "--only", "attention"]) == 0
    rows = read_rows(tmp_path / "a.csv")
    assert rows and {r.category for r in rows} == {"attention"}
