"""predict(): timeline, interpolation, memoisation, presets, launch model, fallbacks, errors, CLI JSON."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from torchsim.cli import main
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.quantity import assumed
from torchsim.lowering.fallback import roofline
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.models.llama import LlamaConfig
from torchsim.prediction.kernel_sim import simulate_call
from torchsim.prediction.launch import LaunchModel
from torchsim.prediction.pipeline import predict

TINY: dict[str, Any] = dict(prompt_len=32, decode_steps=6, workers=1)


@pytest.fixture(autouse=True, scope="module")
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Keep this module's on-disk kernel cache out of the user's cache directory."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TORCHSIM_CACHE_DIR", str(tmp_path_factory.mktemp("kcache")))
    yield
    mp.undo()


@pytest.fixture(scope="module")
def serving() -> Any:
    return predict("llama-tiny", "h100-sxm", **TINY)


def test_totals_are_consistent(serving: Any) -> None:
    p = serving
    assert p.ttft_s > 0 and len(p.decode_step_s) == 6
    assert p.total_s == pytest.approx(p.ttft_s + sum(p.decode_step_s))
    assert p.tpot_s == pytest.approx(sum(p.decode_step_s) / 6)
    assert p.tokens_per_s == pytest.approx(p.batch * 7 / p.total_s)
    n_pre, n_dec = len(p.step_kernels("prefill")), len(p.step_kernels("decode"))
    assert len(p.kernels) == n_pre + len(p.sampled_steps) * n_dec
    assert sum(k.weight for k in p.kernels if k.phase == "decode") == pytest.approx(6 * n_dec)


def test_kernels_do_not_overlap_on_the_stream(serving: Any) -> None:
    for phase, step in [("prefill", None), *[("decode", s) for s in serving.sampled_steps]]:
        rows = serving.step_kernels(phase, step)
        for a, b in zip(rows, rows[1:], strict=False):
            assert b.start_us >= a.start_us + a.duration_us - 1e-9
            assert b.gap_us >= 0
    first_decode = serving.step_kernels("decode", serving.sampled_steps[0])[0]
    assert first_decode.start_us >= serving.ttft_s * 1e6 - 1e-6


def test_decode_steps_grow_with_kv_and_interpolate_between_samples() -> None:
    p = predict("llama-small", "h100-sxm", prompt_len=256, decode_steps=400, decode_samples=3, workers=1)
    steps = p.decode_step_s
    assert p.sampled_steps == (0, 200, 399)
    assert all(b >= a - 1e-15 for a, b in zip(steps, steps[1:], strict=False))
    assert steps[100] == pytest.approx((steps[0] + steps[200]) / 2)
    kvs = sorted({k.kv_len for k in p.kernels if k.phase == "decode"})
    assert kvs == [257, 457, 656]


def test_second_run_is_memoised(serving: Any) -> None:
    again = predict("llama-tiny", "h100-sxm", **TINY)
    assert again.stats["simulated_now"] == 0
    assert again.ttft_s == serving.ttft_s and again.decode_step_s == serving.decode_step_s
    assert again.timings_s["total"] < serving.timings_s["total"] or serving.timings_s["total"] < 0.5


def test_eager_launches_more_kernels_and_takes_longer(serving: Any) -> None:
    eager = predict("llama-tiny", "h100-sxm", preset="eager", **TINY)
    assert eager.launch == "eager"
    assert len(eager.step_kernels("prefill")) > 3 * len(serving.step_kernels("prefill"))
    assert eager.ttft_s > serving.ttft_s and eager.tpot_s > serving.tpot_s
    gaps = sum(k.gap_us for k in eager.step_kernels("decode"))
    assert gaps > sum(k.gap_us for k in serving.step_kernels("decode"))


def test_launch_model_places_kernels_after_host_and_device_gaps() -> None:
    hw = get_profile("h100-sxm")
    sims = [simulate_call(KernelCall.make(KernelKind.RMSNORM, rows=1, hidden=64), hw)] * 3
    t = sims[0].time_s
    lm = LaunchModel("eager", assumed(10e-6, "s", "test"), assumed(1e-6, "s", "test"), assumed(0.0, "s", "test"))
    placed, end = lm.place(sims)
    assert [s for s, _ in placed] == pytest.approx([10e-6, 20e-6, 30e-6])  # host-bound: t < 10 us
    assert end == pytest.approx(30e-6 + t)
    graphs = LaunchModel.for_mode("cuda-graphs", hw)
    placed, end = graphs.place(sims)
    gap = float(hw.graph_launch_overhead_s.value)
    assert end == pytest.approx(float(hw.launch_overhead_s.value) + 3 * t + 2 * gap)


def test_roofline_rows_are_flagged_and_simulated_rows_are_not(serving: Any) -> None:
    from torchsim.lowering.templates import TEMPLATES

    for k in serving.kernels:
        assert k.fallback == (KernelKind(k.kind) not in TEMPLATES or k.method.startswith("roofline"))
        assert k.fallback == (k.template == "roofline")
        assert k.duration_us > 0 and k.module_path and k.source


def test_a_kernel_never_beats_its_roofline() -> None:
    hw = get_profile("h100-sxm")
    call = KernelCall.make(KernelKind.GEMM, m=256, n=2048, k=4096)
    for budget in (1_000_000, 3_000):
        sim = simulate_call(call, hw, max_events=budget)
        floor = roofline(call, hw)
        assert sim.time_s >= floor.time_s - float(floor.latency.value) and not sim.fallback
    # (a 4-step split-K GEMM has no main loop long enough to truncate: it is simulated in full at any budget)
    assert simulate_call(call, hw, max_events=3_000).method == "exact"


def test_memory_fit_is_an_error_naming_the_numbers_and_what_fits() -> None:
    from torchsim.prediction.records import MemoryFitError

    small = dataclasses.replace(get_profile("h100-sxm"), dram_bytes=assumed(1e5, "B", "test: a tiny device"))
    with pytest.raises(MemoryFitError, match=r"GiB of weights .* more than h100-sxm's .*--allow-oversubscribe"):
        predict("llama-tiny", small, prompt_len=16, decode_steps=1, workers=1)
    with pytest.warns(UserWarning, match="GiB of weights"):
        p = predict("llama-tiny", small, prompt_len=16, decode_steps=1, workers=1, allow_oversubscribe=True)
    assert p.warnings and "predicted anyway" in p.warnings[0]
    # KV-bound: a device with room for the weights and a few sequences names the largest batch that fits
    w = predict("llama-tiny", "h100-sxm", prompt_len=16, decode_steps=1, workers=1).stats["memory"]
    per_seq = w["kv_bytes"] + w["activation_bytes"]
    roomy = dataclasses.replace(small, dram_bytes=assumed(w["weight_bytes"] + 3.5 * per_seq, "B", "test"))
    with pytest.raises(MemoryFitError, match=r"it would fit with .*--batch 3 \(the largest"):
        predict("llama-tiny", roomy, prompt_len=16, decode_steps=1, batch=8, workers=1)
    ok = predict("llama-tiny", roomy, prompt_len=16, decode_steps=1, batch=3, workers=1)
    assert ok.stats["memory"]["max_batch"] == 3 and "largest batch that fits" in ok.summary()


@pytest.mark.parametrize("kwargs, match", [
    (dict(model="llama9-1t"), "unknown model 'llama9-1t'; known: .*llama3-8b"),
    (dict(hw="tpu-v9"), "unknown hardware 'tpu-v9'; known: .*h100-sxm"),
    (dict(prompt_len=600), "exceeds llama-tiny's context of 512"),
    (dict(kv_len=500, decode_steps=20), "kv_len \\(500\\)"),
    (dict(batch=0), "batch must be an integer >= 1"),
    (dict(prompt_len=-3), "prompt_len must be"),
    (dict(kv_len=0), "kv_len must be"),
    (dict(decode_steps=-1), "decode_steps must be"),
    (dict(preset="turbo"), "unknown preset"),
    (dict(launch="warp-drive"), "unknown launch mode"),
    (dict(routing="skewed"), "has no MoE layers"),
])
def test_bad_input_is_a_clear_error(kwargs: dict[str, Any], match: str) -> None:
    args = {"model": "llama-tiny", "hw": "h100-sxm", "prompt_len": 16, "decode_steps": 2, **kwargs}
    with pytest.raises((ValueError, KeyError), match=match):
        predict(args.pop("model"), args.pop("hw"), **args)


def test_hf_config_file_and_missing_fields(tmp_path: Path) -> None:
    cfg = dict(model_type="llama", hidden_size=64, intermediate_size=160, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, vocab_size=256, max_position_embeddings=512)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    p = predict(str(path), "h100-sxm", prompt_len=16, decode_steps=1, workers=1)
    tiny = predict("llama-tiny", "h100-sxm", prompt_len=16, decode_steps=1, workers=1)
    assert [k.shapes for k in p.kernels] == [k.shapes for k in tiny.kernels]
    del cfg["num_key_value_heads"], cfg["vocab_size"]
    path.write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"missing field\(s\) \['num_key_value_heads', 'vocab_size'\]"):
        predict(str(path), "h100-sxm", prompt_len=16, decode_steps=1)
    with pytest.raises(ValueError, match="num_attention_heads"):
        LlamaConfig(hidden_size=64, intermediate_size=1, num_hidden_layers=1, num_attention_heads=0,
                    num_key_value_heads=1, vocab_size=2, max_position_embeddings=8)


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["predict", "llama-tiny", "--prompt", "32", "--decode", "3", "--json", "--workers", "1"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("ttft_ms", "tpot_ms", "total_ms", "tokens_per_s", "kernels"):
        assert key in out
    assert out["total_ms"] == pytest.approx(out["ttft_ms"] + 3 * out["tpot_ms"])
    assert {"name", "kind", "duration_us", "fallback", "source", "module_path"} <= set(out["kernels"][0])


def test_cli_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "nope-7b"]) == 2
    assert "known:" in capsys.readouterr().err
    assert main(["predict", "llama-tiny", "--batch", "0"]) == 2


def test_disk_cache_serves_a_fresh_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torchsim.prediction.kernel_sim as ks

    monkeypatch.setenv("TORCHSIM_CACHE_DIR", str(tmp_path))
    ks.clear_memo()
    first = predict("llama-tiny", "h100-sxm", prompt_len=24, decode_steps=2, workers=1)
    assert len(list((tmp_path / "kernels").glob("*.json"))) == first.stats["distinct_kernels"]
    ks.clear_memo()  # as in a new process

    def boom(*a: Any) -> Any:
        raise AssertionError("simulated although cached")

    monkeypatch.setattr(ks, "_simulate", boom)
    second = predict("llama-tiny", "h100-sxm", prompt_len=24, decode_steps=2, workers=1)
    assert second.stats["from_disk_cache"] == first.stats["distinct_kernels"]
    assert [k.duration_cycles for k in second.kernels] == [k.duration_cycles for k in first.kernels]
    ks.clear_memo()
    with pytest.raises(AssertionError, match="simulated although cached"):
        predict("llama-tiny", "h100-sxm", prompt_len=24, decode_steps=2, workers=1, cache=False)
