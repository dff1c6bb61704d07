"""torchsim.serving: continuous batching over simulated iterations (engine, load, cost, result)."""

from __future__ import annotations

import json

import pytest

from torchsim.serving.engine import IterBatch, KvCacheTooSmall, SchedulerConfig, run
from torchsim.serving.load import LengthDist, Request, read_requests, synthetic


def _cost(batch: IterBatch) -> float:
    return 1e-3 + 1e-6 * batch.tokens  # a toy iteration cost: fixed part + per token


def test_offline_run_serves_every_token_and_is_deterministic() -> None:
    reqs = synthetic(50, LengthDist.parse("uniform:10:200"), LengthDist.parse("uniform:1:30"), seed=3)
    cfg = SchedulerConfig.preset("vllm", max_num_batched_tokens=256)
    a, b = run(reqs, cfg, _cost, kv_blocks=10_000), run(reqs, cfg, _cost, kv_blocks=10_000)
    assert all(s.generated == s.req.output_len for s in a.requests)
    assert [i.duration_s for i in a.iterations] == [i.duration_s for i in b.iterations]
    assert all(i.tokens <= 256 for i in a.iterations)
    assert all(s.first_token_s <= s.finish_s for s in a.requests)


def test_small_kv_cache_preempts_and_still_finishes() -> None:
    reqs = [Request(i, 0.0, 64, 64) for i in range(16)]
    cfg = SchedulerConfig.preset("vllm")
    tight = run(reqs, cfg, _cost, kv_blocks=20)  # 320 tokens: not all 16 requests fit at once
    roomy = run(reqs, cfg, _cost, kv_blocks=10_000)
    assert sum(s.preemptions for s in tight.requests) > 0
    assert all(s.generated == 64 for s in tight.requests)
    assert max(s.finish_s for s in tight.requests) > max(s.finish_s for s in roomy.requests)


def test_reserve_admission_never_preempts() -> None:
    reqs = [Request(i, 0.0, 64, 64) for i in range(16)]
    out = run(reqs, SchedulerConfig.preset("trtllm"), _cost, kv_blocks=20)
    assert sum(s.preemptions for s in out.requests) == 0
    assert max(i.kv_blocks_used for i in out.iterations) <= 20


def test_kv_cache_that_cannot_hold_one_request_is_an_error() -> None:
    with pytest.raises(KvCacheTooSmall, match="request 0"):
        run([Request(0, 0.0, 1000, 10)], SchedulerConfig.preset("vllm"), _cost, kv_blocks=4)


def test_closed_loop_clients_bound_concurrency() -> None:
    reqs = [Request(i, 0.0, 32, 8) for i in range(20)]
    out = run(reqs, SchedulerConfig.preset("vllm"), _cost, kv_blocks=10_000, clients=3)
    assert max(i.running for i in out.iterations) <= 3
    assert all(s.generated == 8 for s in out.requests)


def test_bad_loads_are_clear_errors(tmp_path) -> None:
    with pytest.raises(ValueError, match="rate"):
        synthetic(5, LengthDist.parse("10"), LengthDist.parse("10"), rate=0.0)
    with pytest.raises(ValueError, match="uniform"):
        LengthDist.parse("uniform:9:3")
    empty = tmp_path / "r.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match="no requests"):
        read_requests(empty)
    bad = tmp_path / "b.jsonl"
    bad.write_text(json.dumps({"input_len": 5, "output_len": 3}) + "\n{oops\n")
    with pytest.raises(ValueError, match="line 2"):
        read_requests(bad)
    neg = tmp_path / "n.csv"
    neg.write_text("arrival_s,input_len,output_len\n0,10,5\n0.5,-3,5\n")
    with pytest.raises(ValueError, match="line 3"):
        read_requests(neg)


def test_serve_end_to_end_on_a_tiny_model(tmp_path) -> None:
    from torchsim.serving import serve

    r = serve("llama-tiny", "h100-sxm", offline=True, num_requests=12, input_len=48, output_len=6)
    d = r.summary_dict()
    assert d["requests"] == 12 and d["output_tokens"] == 72
    assert d["ttft_ms"]["p50"] > 0 and d["output_tokens_per_s"] > 0
    assert json.loads(r.to_json())["tpot_ms"]["p99"] >= json.loads(r.to_json())["tpot_ms"]["p50"]
    rows, its = r.write_parquet(tmp_path / "req.parquet", tmp_path / "req.iterations.parquet")
    assert rows == 12 and its == d["iterations"]
    assert r.write_perfetto(tmp_path / "t.pftrace") >= d["iterations"]
    with pytest.raises(ValueError, match="context"):
        serve("llama-tiny", "h100-sxm", requests=[Request(0, 0.0, 10**6, 10)])


def _tiny_cost(cfg: SchedulerConfig):
    from torchsim.hwmodels import get_profile
    from torchsim.prediction.pipeline import step_entry
    from torchsim.serving.cost import BASE_PAST, BASE_ROWS, IterationCost

    entry, prof, _ = step_entry("llama-tiny", "h100-sxm", rows=BASE_ROWS, q=1, past=BASE_PAST, dtype="bf16",
                                kv_cache=None, quant=None, tp=1, system=None, cache=False)
    assert prof.name == get_profile("h100-sxm").name
    return lambda: IterationCost(entry.plans[0].calls, prof, cfg, workers=1)


def test_prefetching_the_foreseen_batches_changes_no_iteration_time() -> None:
    """serve() foresees an offline load's batches on roofline guesses and simulates their kernels at once; the
    real pass then needs nothing more, and its times are those of a cost model that simulated lazily."""
    cfg = SchedulerConfig.preset("vllm", max_num_batched_tokens=512)
    make = _tiny_cost(cfg)
    reqs = synthetic(40, LengthDist.parse("uniform:16:300"), LengthDist.parse("uniform:2:12"), seed=5)
    ahead, lazy = make(), make()
    foreseen: list[IterBatch] = []
    run(reqs, cfg, lambda b: foreseen.append(b) or ahead.estimate(b), kv_blocks=10_000)
    assert ahead.prefetch(foreseen) > 0
    seen: list[IterBatch] = []
    real = run(reqs, cfg, lambda b: seen.append(b) or ahead(b), kv_blocks=10_000)
    fresh = make()  # offline: the guessed pass foresaw every kernel the real one costed
    assert {c.key() for c in fresh.needs(seen)} <= {c.key() for c in fresh.needs(foreseen)}
    assert [i.duration_s for i in real.iterations] == [i.duration_s for i in run(reqs, cfg, lazy, 10_000).iterations]


def test_token_grid_is_dense_where_tiles_change_and_doubles_beyond() -> None:
    from torchsim.serving.cost import token_grid

    g = token_grid(8192)
    assert g[:8] == [1, 2, 4, 8, 16, 32, 48, 64] and g[-1] == 8192 and 2048 in g and 4096 in g
    steps = [b - a for a, b in zip(g, g[1:])]
    assert all(b >= a for a, b in zip(steps, steps[1:]))  # never denser at larger token counts
    assert token_grid(300)[-1] == 300 and token_grid(1) == [1]


def test_a_request_prefills_once_then_decodes_one_token_a_step() -> None:
    batches: list[IterBatch] = []
    out = run([Request(0, 0.0, 32, 4)], SchedulerConfig.preset("vllm"), lambda b: batches.append(b) or _cost(b),
              kv_blocks=100)
    assert [(b.chunks, b.decodes, b.sampled) for b in batches] == [(((32, 32),), (), 1), ((), (33,), 1),
                                                                   ((), (34,), 1), ((), (35,), 1)]
    assert [(i.prefill_seqs, i.decode_seqs) for i in out.iterations] == [(1, 0), (0, 1), (0, 1), (0, 1)]


def test_a_preempted_request_recomputes_its_prompt_and_generated_tokens() -> None:
    batches: list[IterBatch] = []
    reqs = [Request(0, 0.0, 30, 20), Request(1, 0.0, 30, 20)]
    out = run(reqs, SchedulerConfig.preset("vllm", block_size=8), lambda b: batches.append(b) or _cost(b),
              kv_blocks=9)  # 72 tokens: both prompts fit (4 + 4 blocks), not both at full length (2 x 50)
    victim = next(s for s in out.requests if s.preemptions)
    assert victim.preemptions == 1
    again = [(q, kv) for b in batches for q, kv in b.chunks if q > 30]  # the prompt and the tokens made so far,
    assert len(again) == 1 and 30 < again[0][0] < 50 and again[0][1] == again[0][0]  # from an empty cache
    assert all(s.generated == 20 for s in out.requests)
    assert all(len(b.decodes) + len(b.chunks) <= 2 for b in batches)


def test_decode_buckets_count_kv_blocks_and_interpolate_the_mean() -> None:
    from torchsim.serving.cost import _parts

    # 44 sequences of 132 tokens walk two 128-token blocks each, as 256-token ones would: one uniform bucket
    assert _parts(IterBatch((), (132,) * 44, 44), 128) == [(1.0, ("d", 44, 2, 2))]
    # mixed lengths: the longest (in blocks, rounded up to the grid) and the mean between two grid counts
    parts = _parts(IterBatch((), (128 * 20,) + (128 * 3,) * 9, 10), 128)
    assert [p[1][:2] for p in parts] == [("d", 10)] * 2 and all(p[1][3] == 20 for p in parts)
    (w_lo, lo), (w_hi, hi) = parts
    assert lo[2] < 4.7 < hi[2] and abs(w_lo * lo[2] + w_hi * hi[2] - 4.7) < 1e-9 and abs(w_lo + w_hi - 1) < 1e-12
