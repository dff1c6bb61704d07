"""ServeResult: what a serving run measured — latency percentiles, throughput, KV use — and its files.

Latencies follow the serving benchmarks' definitions (vLLM benchmark_serving, NVIDIA GenAI-Perf): TTFT from a
request's arrival to its first output token; TPOT a request's (last token - first token) / (output tokens - 1);
ITL every gap between two consecutive tokens of a request; E2E arrival to last token. Throughput divides by the
run's makespan, first arrival to last token.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from torchsim.serving.engine import EngineRun

PERCENTILES = (50, 90, 99)


def stats(values: Any) -> dict[str, float]:
    """{mean, p50, p90, p99} of `values` (NaN when there are none)."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return {"mean": math.nan, **{f"p{p}": math.nan for p in PERCENTILES}}
    return {"mean": float(x.mean()), **{f"p{p}": float(np.percentile(x, p)) for p in PERCENTILES}}


@dataclass
class ServeResult:
    model: str
    hw: str
    tp: int
    engine: EngineRun
    memory: dict[str, float]
    kv_bytes_per_token: float
    assumptions: tuple[str, ...]
    timings_s: dict[str, float]
    stats: dict[str, Any] = field(default_factory=dict)

    # -- per request --------------------------------------------------------------------------------------------

    def _arrays(self) -> dict[str, np.ndarray]:
        rs = self.engine.requests
        arrival = np.array([s.req.arrival_s for s in rs])
        first = np.array([s.first_token_s for s in rs])
        finish = np.array([s.finish_s for s in rs])
        out = np.array([s.req.output_len for s in rs])
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(out > 1, (finish - first) / np.maximum(out - 1, 1), np.nan)
        return {"arrival": arrival, "first": first, "finish": finish, "out": out, "tpot": tpot,
                "input": np.array([s.req.input_len for s in rs]),
                "admitted": np.array([s.admitted_s for s in rs])}

    def summary_dict(self) -> dict[str, Any]:
        a = self._arrays()
        span = float(a["finish"].max() - a["arrival"].min()) if len(a["finish"]) else 0.0
        its = self.engine.iterations
        blocks = self.engine.kv_blocks
        kv_used = np.array([i.kv_blocks_used for i in its], dtype=float) / max(blocks, 1)
        durations = np.array([i.duration_s for i in its])
        weights = durations / durations.sum() if durations.sum() > 0 else durations
        ms = 1e3
        return {
            "model": self.model, "hw": self.hw, "tp": self.tp, "scheduler": self.engine.config.name,
            "requests": len(a["out"]), "input_tokens": int(a["input"].sum()), "output_tokens": int(a["out"].sum()),
            "duration_s": span,
            "requests_per_s": len(a["out"]) / span if span else math.nan,
            "output_tokens_per_s": float(a["out"].sum()) / span if span else math.nan,
            "total_tokens_per_s": float(a["out"].sum() + a["input"].sum()) / span if span else math.nan,
            "ttft_ms": _scaled(stats(a["first"] - a["arrival"]), ms),
            "tpot_ms": _scaled(stats(a["tpot"]), ms),
            "itl_ms": _scaled(stats(np.frombuffer(self.engine.itl_s, dtype=float)), ms),
            "e2e_ms": _scaled(stats(a["finish"] - a["arrival"]), ms),
            "queue_ms": _scaled(stats(a["admitted"] - a["arrival"]), ms),
            "iterations": len(its),
            "mean_batch_tokens": float(np.mean([i.tokens for i in its])) if its else 0.0,
            "mean_running": float(np.mean([i.running for i in its])) if its else 0.0,
            "preemptions": int(sum(s.preemptions for s in self.engine.requests)),
            "kv_cache": {"blocks": blocks, "block_size": self.engine.config.block_size,
                         "tokens": blocks * self.engine.config.block_size,
                         "bytes_per_token": self.kv_bytes_per_token,
                         "utilization_mean": float(np.sum(kv_used * weights)) if its else 0.0,
                         "utilization_max": float(kv_used.max()) if its else 0.0},
            "memory_bytes": self.memory,
        }

    def to_json(self) -> str:
        doc = {**self.summary_dict(), "assumptions": list(self.assumptions), "timings_s": self.timings_s,
               "stats": self.stats}
        return json.dumps(doc, allow_nan=False, default=_nan_free) if _finite(doc) else json.dumps(
            _replace_nan(doc))

    def summary(self) -> str:
        d = self.summary_dict()

        def row(name: str, s: dict[str, float]) -> str:
            return (f"  {name:<5} mean {s['mean']:9.2f}  p50 {s['p50']:9.2f}  p90 {s['p90']:9.2f}  "
                    f"p99 {s['p99']:9.2f} ms")

        kv = d["kv_cache"]
        lines = [
            f"{d['model']} on {d['hw']}" + (f" x{d['tp']} (tensor parallel)" if d["tp"] > 1 else "")
            + f", scheduler {d['scheduler']}: {d['requests']} requests in {_seconds(d['duration_s'])} (simulated)",
            f"  throughput {d['output_tokens_per_s']:,.0f} output tokens/s, {d['total_tokens_per_s']:,.0f} total "
            f"tokens/s, {d['requests_per_s']:.2f} requests/s",
            row("TTFT", d["ttft_ms"]), row("TPOT", d["tpot_ms"]), row("ITL", d["itl_ms"]), row("E2E", d["e2e_ms"]),
            f"  {d['iterations']:,} iterations, {d['mean_running']:.0f} requests running and "
            f"{d['mean_batch_tokens']:.0f} tokens per iteration on average; {d['preemptions']} preemptions",
            f"  KV cache {kv['tokens']:,} tokens ({kv['blocks']:,} blocks), used {kv['utilization_mean']:.0%} on "
            f"average (time-weighted), {kv['utilization_max']:.0%} at most",
        ]
        return "\n".join(lines)

    # -- tables and files ---------------------------------------------------------------------------------------

    def request_table(self) -> Any:
        import pyarrow as pa

        a = self._arrays()
        rs = self.engine.requests
        return pa.table({
            "request": pa.array([s.req.id for s in rs], pa.int64()),
            "arrival_s": a["arrival"], "admitted_s": a["admitted"], "first_token_s": a["first"],
            "finish_s": a["finish"],
            "input_tokens": pa.array(a["input"], pa.int64()), "output_tokens": pa.array(a["out"], pa.int64()),
            "ttft_s": a["first"] - a["arrival"], "tpot_s": a["tpot"], "e2e_s": a["finish"] - a["arrival"],
            "queue_s": a["admitted"] - a["arrival"],
            "preemptions": pa.array([s.preemptions for s in rs], pa.int32()),
        }).replace_schema_metadata(self._metadata("requests"))

    def iteration_table(self) -> Any:
        import pyarrow as pa

        its = self.engine.iterations
        cols: dict[str, Any] = {
            "iteration": pa.array([i.index for i in its], pa.int64()),
            "start_s": [i.start_s for i in its], "duration_s": [i.duration_s for i in its],
            "tokens": pa.array([i.tokens for i in its], pa.int32()),
            "padded_tokens": pa.array([i.padded_tokens for i in its], pa.int32()),
            "prefill_tokens": pa.array([i.prefill_tokens for i in its], pa.int32()),
            "prefill_seqs": pa.array([i.prefill_seqs for i in its], pa.int32()),
            "decode_seqs": pa.array([i.decode_seqs for i in its], pa.int32()),
            "running": pa.array([i.running for i in its], pa.int32()),
            "waiting": pa.array([i.waiting for i in its], pa.int32()),
            "kv_blocks_used": pa.array([i.kv_blocks_used for i in its], pa.int32()),
            "kv_utilization": [i.kv_blocks_used / max(1, self.engine.kv_blocks) for i in its],
            "preempted": pa.array([i.preempted for i in its], pa.int32()),
        }
        return pa.table(cols).replace_schema_metadata(self._metadata("iterations"))

    def _metadata(self, table: str) -> dict[str, str]:
        return {"torchsim.table": table, "torchsim.model": self.model, "torchsim.hw": self.hw,
                "torchsim.scheduler": self.engine.config.describe(), "torchsim.units": "seconds, tokens"}

    def write_parquet(self, path: str | Path, iterations_path: str | Path) -> tuple[int, int]:
        """The per-request table at `path`, the per-iteration one at `iterations_path` (both atomically);
        returns their row counts."""
        return _write_tables(path, self.request_table(), iterations_path, self.iteration_table())

    def write_perfetto(self, path: str | Path, max_requests: int = 2000) -> int:
        """A timeline: the engine's iterations (with counters of running/waiting requests and KV use) and one
        track per request (queued, prefill chunks, decode steps); the first `max_requests` requests get tracks.
        Returns the slices written."""
        import io

        from torchsim.exports.atomic import write_bytes_atomic
        from torchsim.exports.trace_builder import TraceWriter

        buf = io.BytesIO()
        ns = 1e9
        with TraceWriter(buf) as w:
            eng = w.process(f"{self.model} on {self.hw} ({self.engine.config.name})")
            it_track = w.thread(eng, "iterations")
            running = w.counter_track(eng, "running requests", "count")
            waiting = w.counter_track(eng, "waiting requests", "count")
            kv = w.counter_track(eng, "KV cache used", "%")
            for i in self.engine.iterations:
                t = int(round(i.start_s * ns))
                w.slice(t, max(1, int(round(i.duration_s * ns))), it_track,
                        f"iteration {i.index}: {i.prefill_seqs} prefill / {i.decode_seqs} decode",
                        {"tokens": i.tokens, "padded_tokens": i.padded_tokens, "prefill_tokens": i.prefill_tokens,
                         "preempted": i.preempted})
                w.counter(t, running, i.running)
                w.counter(t, waiting, i.waiting)
                w.counter(t, kv, 100.0 * i.kv_blocks_used / max(1, self.engine.kv_blocks))
            reqs = w.process("requests")
            for s in self.engine.requests[:max_requests]:
                tr = w.thread(reqs, f"request {s.req.id}")
                start = s.req.arrival_s
                if not math.isnan(s.admitted_s) and s.admitted_s > start:
                    w.slice(int(round(start * ns)), max(1, int(round((s.admitted_s - start) * ns))), tr, "queued")
                for what, a, b in _merge(s.spans):
                    w.slice(int(round(a * ns)), max(1, int(round((b - a) * ns))), tr, what)
            stats = w.close()
        write_bytes_atomic(path, buf.getvalue())
        return stats.slices


def write_sweep_parquet(points: Sequence[tuple[str, float, ServeResult]], path: str | Path,
                        iterations_path: str | Path) -> tuple[int, int]:
    """A sweep's runs as two tables, the per-request one at `path` and the per-iteration one at
    `iterations_path`: each run's rows after a leading column named by its load key ("rate" in requests/s or
    "concurrency" in clients) holding its value. `points` are (key, value, result). Returns the row counts."""
    import pyarrow as pa

    if not points:
        raise ValueError("a sweep without points has no tables to write")
    tables = []
    for make in (ServeResult.request_table, ServeResult.iteration_table):
        parts = []
        for key, value, result in points:
            t = make(result)
            col = pa.array([value] * t.num_rows, pa.int64() if key == "concurrency" else pa.float64())
            parts.append(t.add_column(0, key, col))
        meta = dict(points[0][2]._metadata("requests" if make is ServeResult.request_table else "iterations"))
        meta["torchsim.sweep"] = points[0][0]
        tables.append(pa.concat_tables(parts).replace_schema_metadata(meta))
    return _write_tables(path, tables[0], iterations_path, tables[1])


def _write_tables(path: str | Path, requests: Any, iterations_path: str | Path, iterations: Any) -> tuple[int, int]:
    """Both tables serialised first, then each file written atomically: a table that fails to serialise leaves
    neither file written."""
    import io

    import pyarrow.parquet as pq

    from torchsim.exports.atomic import write_bytes_atomic

    data = []
    for t in (requests, iterations):
        buf = io.BytesIO()
        pq.write_table(t, buf, compression="zstd")
        data.append(buf.getvalue())
    write_bytes_atomic(path, data[0])
    write_bytes_atomic(iterations_path, data[1])
    return requests.num_rows, iterations.num_rows


def _merge(spans: list[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    """Consecutive decode steps as one slice (a request decodes in every iteration it runs in)."""
    out: list[tuple[str, float, float]] = []
    for what, a, b in spans:
        if out and what == "decode" and out[-1][0] == "decode" and abs(out[-1][2] - a) < 1e-12:
            out[-1] = (what, out[-1][1], b)
        else:
            out.append((what, a, b))
    return out


def _seconds(s: float) -> str:
    """A run's length: `12.34 s`, or `193 ms` under a second (small models finish in milliseconds)."""
    return f"{s:.2f} s" if s >= 1 or s == 0 else f"{s * 1e3:.3g} ms"


def _scaled(s: dict[str, float], k: float) -> dict[str, float]:
    return {n: v * k for n, v in s.items()}


def _finite(doc: Any) -> bool:
    if isinstance(doc, float):
        return math.isfinite(doc)
    if isinstance(doc, dict):
        return all(_finite(v) for v in doc.values())
    if isinstance(doc, list | tuple):
        return all(_finite(v) for v in doc)
    return True


def _replace_nan(doc: Any) -> Any:
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, dict):
        return {k: _replace_nan(v) for k, v in doc.items()}
    if isinstance(doc, list | tuple):
        return [_replace_nan(v) for v in doc]
    return doc


def _nan_free(o: Any) -> Any:
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")
