"""Disk-cache entries are checked on read: a damaged or edited entry is reported once, discarded and recomputed."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

import torchsim.prediction.kernel_sim as ks
from torchsim.prediction.cache import CacheWarning
from torchsim.prediction.pipeline import predict


def _entries(root: Path) -> list[Path]:
    return sorted((root / "kernels").glob("*.json"))


def _edit(path: Path, change: Any) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _first_time(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["data"]["launches"][0]


@pytest.mark.parametrize("damage", [
    lambda d: _first_time(d).__setitem__("time_s", -1.0),  # edited: checksum no longer matches
    lambda d: d.__setitem__("checksum", "0" * 64),
    lambda d: d.pop("checksum"),
    lambda d: d["data"]["launches"][0].pop("cycles"),
])
def test_a_damaged_entry_is_reported_once_and_recomputed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         damage: Any) -> None:
    monkeypatch.setenv("TORCHSIM_CACHE_DIR", str(tmp_path))
    ks.clear_memo()
    first = predict("llama-tiny", "h100-sxm", prompt_len=16, decode_steps=2, workers=1)
    entries = _entries(tmp_path)
    assert entries
    _edit(entries[0], damage)
    ks.clear_memo()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        second = predict("llama-tiny", "h100-sxm", prompt_len=16, decode_steps=2, workers=1)
    bad = [w for w in caught if issubclass(w.category, CacheWarning)]
    assert len(bad) == 1 and entries[0].name in str(bad[0].message)
    assert second.ttft_s == first.ttft_s and second.tpot_s == first.tpot_s  # recomputed, not the edited value
    json.loads(entries[0].read_text())["checksum"]  # rewritten whole
    ks.clear_memo()


def test_a_value_that_no_simulation_gives_is_refused_even_with_a_valid_checksum(tmp_path: Path) -> None:
    from torchsim.prediction.cache import DiskCache, _checksum
    from torchsim.prediction.kernel_sim import Launches

    c = DiskCache(tmp_path)
    sim = {"template": "t", "config": {}, "cycles": 10, "time_s": float("nan"), "flops": 1.0, "dram_bytes": 1.0,
           "l2_hit_rate": 0.5, "unit_util": {}, "stalls": {}, "bound": "", "fallback": False, "method": "exact",
           "extrapolation": "", "events": 1, "clock_hz": 1e9, "clock_reason": "", "power_w": 0.0}
    data = {"launches": [sim]}
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "k.json").write_text(json.dumps({"checksum": _checksum(data), "data": data}))
    with pytest.warns(CacheWarning, match="time_s"):
        assert c.get("k", Launches) is None
    assert not (tmp_path / "kernels" / "k.json").exists() and c.discarded == 1
