"""Same input, same output, across processes: `torchsim predict` writes byte-identical Parquet and Perfetto files
with the disk cache off, cold, warm, shared by two concurrent runs, and after a damaged entry is recomputed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ARGS = ["predict", "llama-tiny", "--prompt", "48", "--decode", "3", "--workers", "1"]


def _start(out: Path, cache: Path | None) -> subprocess.Popen[str]:
    env = dict(os.environ)
    extra = ["--no-cache"] if cache is None else []
    if cache is not None:
        env["TORCHSIM_CACHE_DIR"] = str(cache)
    cmd = [sys.executable, "-m", "torchsim", *ARGS, *extra, "--parquet", f"{out}.parquet", "--perfetto",
           f"{out}.pftrace"]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen[str]) -> str:
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stdout[-1000:] + stderr[-2000:]
    return stderr


def _files(out: Path) -> tuple[bytes, bytes]:
    return Path(f"{out}.parquet").read_bytes(), Path(f"{out}.pftrace").read_bytes()


def test_outputs_are_byte_identical_with_and_without_the_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _finish(_start(tmp_path / "nocache", None))
    reference = _files(tmp_path / "nocache")
    assert reference[0] and reference[1]

    # two cold runs at once share one empty cache: both succeed with the same files
    a, b = _start(tmp_path / "cold-a", cache), _start(tmp_path / "cold-b", cache)
    _finish(a)
    _finish(b)
    assert _files(tmp_path / "cold-a") == reference
    assert _files(tmp_path / "cold-b") == reference
    entries = sorted((cache / "kernels").glob("*.json"))
    assert entries, "the cold runs wrote no cache entries"

    _finish(_start(tmp_path / "warm", cache))
    assert _files(tmp_path / "warm") == reference

    # an edited entry: reported once on stderr, recomputed, and the outputs do not change
    doc = json.loads(entries[0].read_text())
    doc["data"]["launches"][0]["time_s"] = -1.0
    entries[0].write_text(json.dumps(doc))
    stderr = _finish(_start(tmp_path / "damaged", cache))
    assert stderr.count(entries[0].name) == 1, stderr[-2000:]
    assert _files(tmp_path / "damaged") == reference
    assert json.loads(entries[0].read_text())["data"]["launches"][0]["time_s"] > 0  # rewritten whole
