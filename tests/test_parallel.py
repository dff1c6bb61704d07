"""Tensor parallelism (torchsim.lowering.parallel, predict(tp=...)): one rank's kernels and its collectives."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchsim import predict
from torchsim.lowering.capture import capture_model
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.parallel import ParallelError, kv_heads_per_rank, shard_plan
from torchsim.lowering.plan import KernelPlan, Preset, plan_capture
from torchsim.prediction.pipeline import _resolve_model

STEP = dict(prompt_len=32, decode_steps=2, cache=False, workers=1)


def _plan(model: str, q: int = 8, past: int = 0, batch: int = 2) -> KernelPlan:
    _name, _cfg, module = _resolve_model(model, "bf16")
    return plan_capture(capture_model(module, batch, q, past), Preset.SERVING)


def _by_name(plan: KernelPlan, layer: int = 0) -> dict[str, KernelCall]:
    return {c.name.split(".", 2)[-1]: c for c in plan.calls if c.layer == layer}


def test_dense_layer_splits_megatron_style() -> None:
    full = _plan("llama-small")  # 4 heads, 2 KV heads, head_dim 64, hidden 256, intermediate 512
    one = shard_plan(full, 2, "dgx-h100")
    f, s = _by_name(full), _by_name(one)
    assert s["self_attn.q_proj+k_proj+v_proj"].p("n") == f["self_attn.q_proj+k_proj+v_proj"].p("n") // 2
    assert s["self_attn.o_proj"].p("k") == f["self_attn.o_proj"].p("k") // 2
    assert s["self_attn.o_proj"].p("n") == f["self_attn.o_proj"].p("n")  # the hidden width stays whole
    assert s["mlp.gate_proj+up_proj"].p("n") == f["mlp.gate_proj+up_proj"].p("n") // 2
    assert s["mlp.down_proj"].p("k") == f["mlp.down_proj"].p("k") // 2
    assert s["mlp.silu_mul"].p("hidden") == f["mlp.silu_mul"].p("hidden") // 2
    att = s["self_attn"]
    assert (att.p("heads_q"), att.p("heads_kv")) == (2, 1)
    assert s["input_layernorm"].params == f["input_layernorm"].params  # the residual stream is replicated
    # an all-reduce of tokens x hidden in bf16 right after each row-parallel GEMM
    names = [c.name for c in one.calls if c.layer == 0]
    for row in ("self_attn.o_proj", "mlp.down_proj"):
        i = next(j for j, n in enumerate(names) if n.endswith(row))
        ar = [c for c in one.calls if c.layer == 0][i + 1]
        assert ar.kind is KernelKind.COLLECTIVE and ar.p("op") == "all-reduce"
        assert ar.p("nbytes") == 16 * 256 * 2 and ar.p("ranks") == 2
    # vocabulary-parallel embedding (all-reduce) and LM head (all-gather of the logits)
    colls = [c for c in one.calls if c.kind is KernelKind.COLLECTIVE]
    assert colls[0].name == "head.embed_tokens.all-reduce"
    head = next(c for c in one.calls if c.name == "tail.lm_head")
    assert head.p("n") == 1024 // 2
    assert colls[-1].p("op") == "all-gather" and colls[-1].p("nbytes") == head.p("m") * 1024 * 2
    assert len(colls) == 1 + 2 * 4 + 1  # embedding, two per layer, logits


def test_kv_heads_replicate_when_fewer_than_ranks() -> None:
    assert kv_heads_per_rank(8, 2) == 4 and kv_heads_per_rank(2, 4) == 1 and kv_heads_per_rank(8, 8) == 1
    with pytest.raises(ParallelError, match="3 KV heads cannot be split over tp=2"):
        kv_heads_per_rank(3, 2)
    full = _plan("llama-small", q=1, past=16)
    s = _by_name(shard_plan(full, 4, "dgx-h100"))  # 4 heads, 2 KV heads over 4 ranks: one KV head each
    assert s["self_attn.q_proj+k_proj+v_proj"].p("n") == (1 + 2 * 1) * 64
    assert (s["self_attn"].p("heads_q"), s["self_attn"].p("heads_kv")) == (1, 1)
    f = _by_name(full)
    assert s["self_attn.kv_cache_write"].p("numel") == f["self_attn.kv_cache_write"].p("numel") // 2


def test_moe_block_reduces_once_after_its_combine() -> None:
    full = _plan("mixtral-tiny")
    one = shard_plan(full, 2, "dgx-h100")
    layer = [c for c in one.calls if c.layer == 0]
    fl = [c for c in full.calls if c.layer == 0]
    g_full = [c for c in fl if c.kind is KernelKind.GROUPED_GEMM]
    g_one = [c for c in layer if c.kind is KernelKind.GROUPED_GEMM]
    assert g_one[0].p("n") == g_full[0].p("n") // 2 and g_one[0].p("k") == g_full[0].p("k")  # gate-up: columns
    assert g_one[1].p("k") == g_full[1].p("k") // 2 and g_one[1].p("n") == g_full[1].p("n")  # down: rows
    router = next(c for c in layer if c.name.endswith("mlp.gate"))
    assert router.params == next(c for c in fl if c.name.endswith("mlp.gate")).params  # every rank routes
    kinds = [c.kind for c in layer]
    i = kinds.index(KernelKind.REDUCE)
    assert kinds[i + 1] is KernelKind.COLLECTIVE  # after moe_sum, not after the down GEMM
    assert layer[i + 1].p("nbytes") == layer[i].p("numel_out") * 2


def test_unknown_roles_and_bad_splits_are_named() -> None:
    plan = _plan("llama-tiny")
    odd = KernelPlan(calls=(KernelCall.make(KernelKind.GEMM, name="layers.0.mystery", m=4, n=64, k=64, layer=0),),
                     preset=Preset.SERVING, phase="prefill", batch=1, q_len=4, past_len=0)
    with pytest.raises(ParallelError, match="layers.0.mystery.*role is not known"):
        shard_plan(odd, 2, "dgx-h100")
    with pytest.raises(ParallelError, match="heads_q = 4 is not divisible by tp=8|KV heads cannot be split"):
        shard_plan(plan, 8, "dgx-h100")
    assert shard_plan(plan, 1, "dgx-h100") is plan


def test_predict_tp_one_rank_and_its_collectives() -> None:
    one = predict("llama-small", "h100-sxm", **STEP)
    two = predict("llama-small", "h100-sxm", tp=2, **STEP)
    assert (two.tp, two.system, one.tp) == (2, "dgx-h100", 1)
    colls = [k for k in two.step_kernels("decode", 0) if k.kind == "collective"]
    assert colls and all(k.template.startswith(("nccl/all-", "custom-allreduce/all-reduce/"))
                         and k.duration_us > 0 for k in colls)
    g1 = {k.name: k.duration_us for k in one.step_kernels("decode", 0) if k.kind == "gemm"}
    g2 = {k.name: k.duration_us for k in two.step_kernels("decode", 0) if k.kind == "gemm"}
    assert g1.keys() == g2.keys() and all(g2[n] <= g1[n] for n in g1)  # half the weights: never slower
    comm = sum(k.duration_us for k in colls)
    assert two.step_kernels("decode", 0) and comm < two.tpot_s * 1e6
    assert any("tensor parallel over 2 GPUs of dgx-h100" in a for a in two.assumptions)
    assert two.stats["weight_bytes"] == pytest.approx(one.stats["weight_bytes"] / 2)
    assert two.to_dict(kernels=False)["tp"] == 2
    via_system = predict("llama-small", "dgx-h100", tp=2, **STEP)
    assert via_system.hw == "h100-sxm" and via_system.tpot_s == two.tpot_s


@pytest.mark.parametrize(("hw", "tp", "match"), [
    ("h100-sxm", 16, r"16 GPUs \(max\(tp, ep\) x pp\); dgx-h100"),
    ("a100-pcie", 2, "no built-in multi-device system has 'a100-pcie' devices"),
    ("wormhole-n150", 2, "no built-in multi-device system has 'wormhole-n150' devices"),
    ("h100-sxm", 0, "tp must be an integer >= 1"),
])
def test_predict_tp_errors(hw: str, tp: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        predict("llama-tiny", hw, tp=tp, **STEP)


def test_cli_tp_on_a_system_and_its_errors(capsys: pytest.CaptureFixture[str]) -> None:
    from torchsim.cli import main

    rc = main(["predict", "llama-small", "--hw", "dgx-h100", "--tp", "2", "--prompt", "32", "--decode", "2",
               "--no-cache", "--workers", "1", "--json"])
    assert rc == 0
    import json

    doc = json.loads(capsys.readouterr().out)
    assert (doc["tp"], doc["system"], doc["hw"]) == (2, "dgx-h100", "h100-sxm")
    assert main(["predict", "llama-small", "--hw", "dgx-h100", "--prompt", "32"]) == 2
    assert "dgx-h100 is a system of 8 GPUs: pass --tp N" in capsys.readouterr().err
    assert main(["predict", "llama-small", "--tp", "3", "--prompt", "32", "--decode", "1", "--no-cache"]) == 2
    assert "2 KV heads cannot be split over tp=3 ranks" in capsys.readouterr().err


def test_expert_parallel_takes_each_layers_slowest_rank() -> None:
    full = _plan("mixtral-tiny")
    r0, r1 = (shard_plan(full, 2, "dgx-h100", ep=2, rank=r) for r in (0, 1))
    g_full = [c for c in full.calls if c.layer == 0 and c.kind is KernelKind.GROUPED_GEMM]
    g0 = [c for c in r0.calls if c.layer == 0 and c.kind is KernelKind.GROUPED_GEMM]
    g1 = [c for c in r1.calls if c.layer == 0 and c.kind is KernelKind.GROUPED_GEMM]
    counts = g_full[0].p("tokens_per_expert")
    assert g0[0].p("tokens_per_expert") + g1[0].p("tokens_per_expert") == counts  # whole experts, split
    assert (g0[0].p("n"), g0[0].p("k")) == (g_full[0].p("n"), g_full[0].p("k"))  # not split by columns
    silu = next(c for c in r1.calls if c.layer == 0 and c.kind is KernelKind.SILU_MUL)
    assert silu.p("rows") == sum(g1[0].p("tokens_per_expert"))
    with pytest.raises(ParallelError, match="ep = tp"):
        shard_plan(full, 2, "dgx-h100", ep=4)
    step = dict(STEP, batch=4, prompt_len=1024, decode_steps=0)  # 8192 expert assignments: skew changes the tiles
    bal = predict("mixtral-tiny", "h100-sxm", tp=2, ep=2, routing="balanced", **step)
    skew = predict("mixtral-tiny", "h100-sxm", tp=2, ep=2, routing="skewed", **step)
    tp_skew = predict("mixtral-tiny", "h100-sxm", tp=2, routing="skewed", **step)

    def experts_us(p):  # type: ignore[no-untyped-def]
        return sum(k.duration_us for k in p.step_kernels("prefill") if k.kind == "grouped_gemm")

    # skewed routing puts the hot experts on one rank: EP pays for it, TP-within-expert spreads it
    assert experts_us(skew) > experts_us(bal)
    assert experts_us(skew) > experts_us(tp_skew)
    assert skew.ep == 2 and any("expert parallel over the 2" in a for a in skew.assumptions)
    with pytest.raises(ValueError, match="has no MoE layers"):
        predict("llama-tiny", "h100-sxm", tp=2, ep=2, **STEP)


def test_pipeline_parallel_stages_and_bubble() -> None:
    one = predict("llama-small", "h100-sxm", batch=4, **STEP)
    pp2 = predict("llama-small", "h100-sxm", batch=4, pp=2, micro_batches=1, **STEP)
    pp2m = predict("llama-small", "h100-sxm", batch=4, pp=2, micro_batches=4, **STEP)
    pipe = pp2.stats["pipeline"]["decode"]
    assert len(pipe["stage_s"]) == 2 and pipe["send_s"] > 0 and pp2.pp == 2
    # one micro-batch: the stages run one after the other, half the GPUs idle, plus a send
    assert pipe["bubble"] == pytest.approx(0.5, abs=0.05)
    assert pp2.tpot_s == pytest.approx(sum(pipe["stage_s"]) + pipe["send_s"])
    assert pp2.tpot_s > one.tpot_s * 0.9  # no faster than one GPU running the same batch
    # more micro-batches fill the pipeline: a smaller bubble
    assert pp2m.stats["pipeline"]["decode"]["bubble"] < pipe["bubble"]
    assert pp2.stats["weight_bytes"] == pytest.approx(one.stats["weight_bytes"] / 2)
    with pytest.raises(ValueError, match="not divisible into 3 micro-batches"):
        predict("llama-small", "h100-sxm", batch=4, pp=2, micro_batches=3, **STEP)
    with pytest.raises(ValueError, match="pp=8 stages need at least 8 layers"):
        predict("llama-small", "h100-sxm", pp=8, **STEP)


def test_compare_sets_systems_side_by_side(capsys: pytest.CaptureFixture[str]) -> None:
    from torchsim.cli import main

    rc = main(["compare", "llama-small", "--hw", "h100-sxm:tp2,h200", "--prompt", "32", "--decode", "1"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "h100-sxm TP2" in out and "h200 TP1" in out
    assert main(["compare", "llama-small", "--hw", "h100-sxm:x2", "--prompt", "32"]) == 2
    assert "write NAME:tpN" in capsys.readouterr().err


def test_outputs_show_ranks_and_collectives(tmp_path: Path) -> None:
    import pyarrow.parquet as pq
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

    from torchsim.exports.from_prediction import prediction_records
    from torchsim.exports.parquet import write_kernels
    from torchsim.exports.perfetto import write_trace
    from torchsim.hwmodels import get_profile

    p = predict("llama-small", "h100-sxm", tp=2, **STEP)
    rec = prediction_records(p)
    write_kernels(tmp_path / "k.parquet", [rec], [get_profile("h100-sxm")])
    df = pq.read_table(tmp_path / "k.parquet").to_pandas()
    assert set(df.tp_ranks) == {2} and set(df["rank"]) == {0}
    coll = df[df.kernel_kind == "collective"]
    assert len(coll) and (coll.collective_bytes > 0).all() and (coll.busbw_GBps > 0).all()
    assert df[df.kernel_kind != "collective"].collective_bytes.isna().all()
    report = write_trace(tmp_path / "t.pftrace", [rec])
    trace = Trace()
    trace.ParseFromString((tmp_path / "t.pftrace").read_bytes())
    procs = [q.track_descriptor.name for q in trace.packet if q.HasField("track_descriptor")
             and q.track_descriptor.name.endswith(("rank 0", "rank 1"))]
    assert len(procs) == 2
    assert report.stats.flows == len(coll)  # each collective: one arrow from rank 0 to rank 1


def test_expert_parallel_with_data_parallel_attention() -> None:
    full = _plan("mixtral-tiny", batch=1)  # one rank's share of a batch of 2
    r0 = shard_plan(full, 1, "dgx-h100", ep=2, rank=0)
    layer = [c for c in r0.calls if c.layer == 0]
    kinds = [c.kind for c in layer]
    g = [i for i, k in enumerate(kinds) if k is KernelKind.GROUPED_GEMM]
    assert kinds[g[0] - 1] is KernelKind.COLLECTIVE and kinds[g[1] + 1] is KernelKind.COLLECTIVE  # dispatch, combine
    assert {layer[g[0] - 1].p("op"), layer[g[1] + 1].p("op")} == {"all-to-all"}
    fg = [c for c in full.calls if c.layer == 0 and c.kind is KernelKind.GROUPED_GEMM][0]
    copies = sum(fg.p("tokens_per_expert"))
    assert layer[g[0] - 1].p("nbytes") == copies * fg.p("k") * 2
    # this rank's 4 experts see both ranks' tokens
    assert layer[g[0]].p("tokens_per_expert") == tuple(2 * n for n in fg.p("tokens_per_expert")[:4])
    assert not [c for c in r0.calls if c.kind is KernelKind.COLLECTIVE and c.p("op") == "all-reduce"]
    dp = predict("mixtral-tiny", "h100-sxm", ep=2, batch=2, **STEP)
    assert dp.ep == 2 and dp.tp == 1 and any("data-parallel attention" in a for a in dp.assumptions)
    one = predict("mixtral-tiny", "h100-sxm", batch=2, **STEP)
    assert dp.stats["weight_bytes"] < one.stats["weight_bytes"]  # half the experts per GPU
    with pytest.raises(ValueError, match="not divisible over 2 ranks"):
        predict("mixtral-tiny", "h100-sxm", ep=2, batch=3, **STEP)
    with pytest.raises(ParallelError, match="8 experts are not divisible over ep=3 ranks"):
        predict("mixtral-tiny", "h100-sxm", ep=3, batch=3, **STEP)


def test_faster_links_never_slower_slower_links_never_faster(tmp_path: Path) -> None:
    def system(name: str, rate: str, raw: str = "") -> str:
        path = tmp_path / f"{name}.toml"
        path.write_text(f'base = "dgx-h100"\nname = "{name}"\nlink_effective_bytes_per_s = "{rate}"\n'
                        + (f'link_bytes_per_s = "{raw}"\n' if raw else ""))
        return str(path)

    step = dict(STEP, batch=8, prompt_len=256, decode_steps=1)  # 1 MiB all-reduces: the links' bandwidth counts
    slow, mid, fast = (predict("llama-small", "h100-sxm", tp=4, system=system(name, rate, raw), **step)
                       for name, rate, raw in (("slow", "2 GB/s", ""), ("mid", "10 GB/s", ""),
                                               ("fast", "45 GB/s", "50 GB/s")))
    base = predict("llama-small", "h100-sxm", tp=4, **step)

    def comm(p):  # type: ignore[no-untyped-def]
        return sum(k.duration_us for k in p.step_kernels("prefill") if k.kind == "collective")

    assert comm(slow) > comm(mid) > comm(base) >= comm(fast)
    assert slow.ttft_s > mid.ttft_s > base.ttft_s >= fast.ttft_s
    assert slow.system.endswith("slow.toml")
    with pytest.raises(ValueError, match="has h100-sxm GPUs; hw is 'b200'"):
        predict("llama-small", "b200", tp=2, system="dgx-h100", **STEP)


def test_sequence_parallel_scatters_the_residual_stream() -> None:
    from torchsim.lowering.parallel import sequence_parallel

    tp_plan = shard_plan(_plan("llama-small"), 2, "dgx-h100")  # 16 tokens
    sp = sequence_parallel(tp_plan, 2, "dgx-h100")
    ops = [c.p("op") for c in sp.calls if c.kind is KernelKind.COLLECTIVE]
    assert "all-reduce" not in ops and ops.count("reduce-scatter") == ops.count("all-reduce") + 1 + 2 * 4
    assert ops.count("all-gather") == 2 * 4 + 1 + 1  # before every QKV / gate-up GEMM and the LM head, + logits
    norms = [c for c in sp.calls if c.kind in (KernelKind.RMSNORM, KernelKind.ADD_RMSNORM)]
    assert all(c.p("rows") == 16 // 2 for c in norms)  # this rank's tokens
    i = next(i for i, c in enumerate(sp.calls) if c.name.endswith("self_attn.q_proj+k_proj+v_proj"))
    assert sp.calls[i - 1].p("op") == "all-gather"
    # decode at batch 1 over 2 ranks: no token split, the all-reduces stay
    dec = shard_plan(_plan("llama-small", q=1, past=16, batch=1), 2, "dgx-h100")
    assert sequence_parallel(dec, 2, "dgx-h100") is dec
    with pytest.raises(ParallelError, match="MoE"):
        sequence_parallel(shard_plan(_plan("mixtral-tiny"), 2, "dgx-h100"), 2, "dgx-h100")
    p = predict("llama-small", "h100-sxm", tp=2, sp=True, batch=2, **STEP)
    assert any(k.template.startswith("nccl/reduce-scatter") for k in p.step_kernels("prefill"))
    assert any("sequence parallel" in a for a in p.assumptions)
