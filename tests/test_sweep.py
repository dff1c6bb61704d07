"""Sweeps: knob parsing and errors, cartesian rows, shared simulations, executors giving identical Parquet."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from torchsim.cli import main
from torchsim.hwmodels import get_profile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.sweeps.execute import ExecutorError, check_ray_address, run_jobs
from torchsim.sweeps.outputs import parquet_bytes
from torchsim.sweeps.space import (
    SweepError,
    kernel_workload,
    metadata,
    model_workload,
    parse_vary,
    plan_sweep,
    run_sweep,
)

H100 = get_profile("h100-sxm")
GEMV = KernelCall.make(KernelKind.GEMM, m=1, n=2048, k=2048)


def test_parse_ranges_and_lists() -> None:
    k = parse_vary("dram_bytes_per_s=2e12:6e12:9", H100)
    assert k.field == "dram_bytes_per_s" and k.unit == "B/s" and len(k.values) == 9
    assert k.values[0] == 2e12 and k.values[-1] == 6e12 and k.values[1] == pytest.approx(2.5e12)
    assert parse_vary("sm_count=66,132", H100).values == (66.0, 132.0)
    assert parse_vary("hbm_bandwidth=3e12", H100).field == "dram_bytes_per_s"  # the spelling


@pytest.mark.parametrize("text, words", [
    ("warp_speed=1,2", ["unknown knob", "warp_speed", "dram_bytes_per_s"]),
    ("sm_count=", ["empty range"]),
    ("sm_count=10:20:0", ["empty range"]),
    ("sm_count", ["FIELD="]),
    ("sm_count=1:2", ["START:STOP:COUNT"]),
    ("sm_count=a,b", ["not a number"]),
    ("sm_count=0,66", ["sm_count", ">= 1"]),
    ("dram_bytes_per_s=-1e12,1e12", ["negative"]),
    ("sm_count=66,66", ["repeated"]),
])
def test_bad_knobs_are_clear_errors(text: str, words: list[str]) -> None:
    with pytest.raises(SweepError) as err:
        parse_vary(text, H100)
    for w in words:
        assert w in str(err.value), str(err.value)


def test_cartesian_rows_and_monotone_bandwidth() -> None:
    knobs = [parse_vary("dram_bytes_per_s=1.5e12:4.5e12:3", H100), parse_vary("sm_count=66,132", H100)]
    rows = run_sweep(H100, knobs, kernel_workload(GEMV), jobs=1)
    assert [(r["dram_bytes_per_s"], r["sm_count"]) for r in rows] == \
        [(a, b) for a in (1.5e12, 3e12, 4.5e12) for b in (66.0, 132.0)]  # last knob fastest
    for sms in (66.0, 132.0):
        times = [r["kernels_us"] for r in rows if r["sm_count"] == sms]
        assert times == sorted(times, reverse=True) and times[0] > times[-1]  # a GEMV speeds up with HBM
    assert all(r["gemm_bound"] for r in rows) and all(r["cycles"] > 0 for r in rows)


def test_library_entry_point_gives_the_cli_rows() -> None:
    """`torchsim.sweep(...)` (profile by name, knobs as the CLI writes them) gives run_sweep's rows."""
    import torchsim

    knobs = ["dram_bytes_per_s=1.5e12:4.5e12:3"]
    rows = torchsim.sweep(GEMV, "h100-sxm", vary=knobs, jobs=1)
    assert rows == run_sweep(H100, [parse_vary(knobs[0], H100)], kernel_workload(GEMV), jobs=1)
    assert [r["dram_bytes_per_s"] for r in rows] == [1.5e12, 3e12, 4.5e12]
    with pytest.raises(SweepError, match="nope"):
        torchsim.sweep(GEMV, "h100-sxm", vary=["nope=1,2"], jobs=1)


def test_identical_simulations_are_shared_across_points() -> None:
    knobs = [parse_vary("launch_overhead_s=1e-6,2e-6,4e-6", H100), parse_vary("sm_count=66,132", H100)]
    plan = plan_sweep(H100, knobs, kernel_workload(GEMV))
    assert len(plan.points) == 6 and len(plan.jobs) == 2  # the launch gap never changes a kernel simulation
    work = model_workload("llama-tiny", phase="decode", kv=64)
    distinct = len({c.key() for c in work.calls})
    plan = plan_sweep(H100, knobs, work)
    assert len(plan.jobs) == 2 * distinct < len(plan.points) * len(work.calls)
    rows = run_sweep(H100, knobs, work, jobs=1)
    by_sms = {r["sm_count"]: [] for r in rows}
    for r in rows:
        by_sms[r["sm_count"]].append(r)
    for rs in by_sms.values():  # same kernels, longer launch gaps: only the step total grows
        assert len({r["kernels_us"] for r in rs}) == 1
        assert [r["total_us"] for r in rs] == sorted(r["total_us"] for r in rs)


def _model_sweep_bytes(executor: str, jobs: int) -> bytes:
    knobs = [parse_vary("dram_bytes_per_s=2e12,4e12", H100), parse_vary("sm_count=66,132", H100)]
    work = model_workload("llama-tiny", phase="decode", kv=128)
    rows = run_sweep(H100, knobs, work, executor=executor, jobs=jobs)
    return parquet_bytes(rows, metadata(H100, knobs, work))


def test_process_pool_gives_the_same_parquet_as_one_process() -> None:
    assert _model_sweep_bytes("local", 2) == _model_sweep_bytes("local", 1)


def test_ray_gives_the_same_parquet_as_the_process_pool() -> None:
    try:
        import ray  # noqa: F401
    except ImportError:
        print("skipping: ray cannot be imported (pip install 'torchsim[ray]')")
        pytest.skip("ray cannot be imported (install the `ray` extra)")
    assert _model_sweep_bytes("ray", 2) == _model_sweep_bytes("local", 2)


def test_unreachable_ray_address_fails_fast() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.perf_counter()
    with pytest.raises(ExecutorError, match="does not answer"):
        check_ray_address(f"127.0.0.1:{port}", timeout_s=2.0)
    assert time.perf_counter() - t0 < 10
    with pytest.raises(ExecutorError, match="HOST:PORT"):
        check_ray_address("not-an-address")
    with pytest.raises(ExecutorError, match="unknown executor"):
        run_jobs([], executor="dask")


def test_cli_writes_parquet_and_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, png = tmp_path / "s.parquet", tmp_path / "s.png"
    assert main(["sweep", "llama-tiny", "--hw", "h100-sxm", "--vary", "dram_bytes_per_s=2e12:4e12:3",
                 "--vary", "sm_count=66,132", "--phase", "decode", "--kv", "64", "--out", str(out),
                 "--plot", str(png), "--jobs", "1"]) == 0
    t = pq.read_table(out)
    cols = {"dram_bytes_per_s", "sm_count", "total_us", "gemm_us", "gemm_bound"}
    assert t.num_rows == 6 and cols <= set(t.column_names)
    assert b"torchsim.sweep" in t.schema.metadata and png.read_bytes()[:4] == b"\x89PNG"
    assert "6 rows" in capsys.readouterr().out


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "x.parquet")
    assert main(["sweep", "kernel", "gemm", "--m", "64", "--n", "64", "--k", "64", "--vary", "bogus=1,2",
                 "--out", out]) == 2
    assert "unknown knob 'bogus'" in capsys.readouterr().err
    assert main(["sweep", "kernel", "gemm", "--m", "64", "--n", "64", "--k", "64", "--vary", "sm_count=1:2:0",
                 "--out", out]) == 2
    assert "empty range" in capsys.readouterr().err
    # 400 x 400 points of a large GEMM: hours of simulation; refused without --yes, nothing written
    assert main(["sweep", "kernel", "gemm", "--m", "8192", "--n", "8192", "--k", "8192", "--vary",
                 "dram_bytes_per_s=1e12:5e12:400", "--vary", "l2_bytes_per_s=5e12:2e13:400", "--out", out,
                 "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert "hours" in err and "--yes" in err and not Path(out).exists()
    assert main(["sweep", "kernel", "gemm", "--m", "64", "--n", "64", "--k", "64", "--vary", "sm_count=66",
                 "--out", out, "--executor", "ray", "--ray-address", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "does not answer" in err or "needs Ray" in err, err  # without ray installed it says how to get it


def test_a_model_sweep_point_at_the_base_profile_matches_predict() -> None:
    """The sweep places every kernel launch (Flash-Decoding's split kernel and its combine apart) on the
    stream as predict does, so a point at the base profile's own values has predict's step time."""
    from torchsim.prediction.kernel_sim import simulate_launches
    from torchsim.prediction.pipeline import predict

    work = model_workload("llama-small", phase="decode", kv=1500)
    assert any(c.kind is KernelKind.ATTENTION_DECODE and len(simulate_launches(c, H100)) == 2 for c in work.calls)
    row = run_sweep(H100, [parse_vary("sm_count=132", H100)], work, jobs=1)[0]
    p = predict("llama-small", H100, prompt_len=1500, decode_steps=1, cache=False)
    assert row["total_us"] == pytest.approx(p.decode_step_s[0] * 1e6, rel=1e-9)


def test_many_points_need_yes_and_huge_counts_are_refused() -> None:
    knobs = [parse_vary("dram_bytes_per_s=1e12:4e12:100", H100), parse_vary("sm_count=33:132:100", H100)]
    with pytest.raises(SweepError, match="--yes"):
        run_sweep(H100, knobs, kernel_workload(GEMV), jobs=1)
    with pytest.raises(SweepError, match="above 10000 values"):
        parse_vary("sm_count=1:132:1000000000", H100)
    with pytest.raises(SweepError, match="not a finite number"):
        parse_vary("sm_count=nan,66", H100)
