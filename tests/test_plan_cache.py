"""The on-disk plan cache: a warm rerun of a prediction loads its kernel plans instead of capturing the model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

import torchsim.prediction.kernel_sim as ks
from torchsim.prediction.cache import CacheWarning
from torchsim.prediction.pipeline import predict

ARGS: dict[str, Any] = {"prompt_len": 16, "decode_steps": 3, "workers": 1}


def _doc(pred: Any) -> dict[str, Any]:
    doc = json.loads(pred.to_json())
    doc.pop("timings_s", None)  # wall times of this run
    for k in ("simulated_now", "from_disk_cache"):  # what this run found in the kernel cache
        doc["stats"].pop(k)
    return doc


def _entries(root: Path) -> list[Path]:
    return sorted((root / "plans").glob("*.pkl"))


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TORCHSIM_CACHE_DIR", str(tmp_path))
    ks.clear_memo()
    yield tmp_path
    ks.clear_memo()


def test_a_warm_run_gives_the_cold_runs_prediction_without_capturing(cache_dir: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import torchsim.prediction.pipeline as pipeline

    cold = predict("llama-tiny", "h100-sxm", **ARGS)
    assert len(_entries(cache_dir)) == 1
    ks.clear_memo()
    monkeypatch.setattr(pipeline, "_capture", lambda *a, **k: pytest.fail("captured on a warm run"))
    warm = predict("llama-tiny", "h100-sxm", **ARGS)
    assert _doc(warm) == _doc(cold)
    assert warm.stats["from_disk_cache"] == warm.stats["distinct_kernels"]


def test_a_warm_run_takes_the_event_estimate_from_the_plan(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulation limit's estimate (stats.events.estimated) is kept with the plan: a warm run reports the same
    figure without laying out any call's kernels again (0.9 s of a warm 80-layer prediction); a run with another
    per-kernel threshold estimates its own."""
    import torchsim.prediction.limits as limits

    real = limits.call_events
    estimated: list[Any] = []
    warm_run = [False]

    def spy(*a: Any, **k: Any) -> int:
        if warm_run[0]:
            pytest.fail("estimated on a warm run")
        estimated.append(a)
        return real(*a, **k)

    monkeypatch.setattr(limits, "call_events", spy)
    cold = predict("llama-tiny", "h100-sxm", **ARGS)
    assert estimated
    ks.clear_memo()
    warm_run[0] = True
    warm = predict("llama-tiny", "h100-sxm", **ARGS)
    assert warm.stats["events"]["estimated"] == cold.stats["events"]["estimated"] > 0
    warm_run[0] = False
    estimated.clear()
    ks.clear_memo()
    predict("llama-tiny", "h100-sxm", max_sim_events=1_000, **ARGS)
    assert estimated  # another per-kernel threshold: its own estimates


def test_no_cache_skips_the_plan_cache(cache_dir: Path) -> None:
    predict("llama-tiny", "h100-sxm", cache=False, **ARGS)
    assert not _entries(cache_dir)


def test_a_changed_scenario_misses(cache_dir: Path) -> None:
    base = predict("llama-tiny", "h100-sxm", **ARGS)
    for change in ({"batch": 2}, {"prompt_len": 24}, {"decode_steps": 5}, {"preset": "eager"}, {"kv_cache": "fp8"}):
        other = predict("llama-tiny", "h100-sxm", **{**ARGS, **change})
        assert _doc(other) != _doc(base), change
    predict("llama-small", "h100-sxm", **ARGS)
    assert len(_entries(cache_dir)) == 7  # one entry per distinct scenario


def test_a_config_file_is_keyed_by_its_content(cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    from torchsim.prediction.plancache import plan_key

    cfg = tmp_path_factory.mktemp("model") / "config.json"
    cfg.write_text('{"model_type": "llama", "hidden_size": 64}')
    from torchsim.hwmodels import get_profile

    prof = get_profile("h100-sxm")
    first = plan_key(str(cfg), prof, "h", [0], batch=1)
    cfg.write_text('{"model_type": "llama", "hidden_size": 128}')
    assert plan_key(str(cfg), prof, "h", [0], batch=1) != first
    assert plan_key(object(), prof, "h", [0], batch=1) is None  # a module or config object: not cached


@pytest.mark.parametrize("damage", [
    lambda b: b[:-10] + b"0123456789",  # edited payload: the checksum no longer matches
    lambda b: b"0" * 64 + b[64:],  # edited checksum
    lambda b: b[: len(b) // 2],  # cut short
    lambda b: b"",
])
def test_a_damaged_entry_is_reported_once_and_recomputed(cache_dir: Path, damage: Any) -> None:
    cold = predict("llama-tiny", "h100-sxm", **ARGS)
    (entry,) = _entries(cache_dir)
    entry.write_bytes(damage(entry.read_bytes()))
    ks.clear_memo()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = predict("llama-tiny", "h100-sxm", **ARGS)
    bad = [w for w in caught if issubclass(w.category, CacheWarning)]
    assert len(bad) == 1 and entry.name in str(bad[0].message)
    assert _doc(again) == _doc(cold)
    assert _entries(cache_dir) == [entry]  # rewritten
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        predict("llama-tiny", "h100-sxm", **ARGS)
    assert not [w for w in caught if issubclass(w.category, CacheWarning)]


def test_a_warm_run_does_not_import_torch(tmp_path: Path) -> None:
    script = ("import sys, json; from torchsim.prediction.pipeline import predict; "
              "p = predict('llama-tiny', 'h100-sxm', prompt_len=16, decode_steps=3, workers=1); "
              "print(json.dumps({'torch': 'torch' in sys.modules, 'ttft': p.ttft_s}))")
    env = {**os.environ, "TORCHSIM_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": str(Path(__file__).resolve().parents[1]) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    runs = [json.loads(subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                                      check=True).stdout.strip().splitlines()[-1]) for _ in range(2)]
    assert runs[0]["torch"] and not runs[1]["torch"]
    assert runs[0]["ttft"] == runs[1]["ttft"]
