"""End-to-end prediction on Tenstorrent profiles: tt_transformers' data formats per role, its op structure, the
DRAM-sharded decode matmul, the metal-trace launch model, and the CLI options (issue 6, part 5)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import torchsim.prediction.pipeline as api
from torchsim.cli import main
from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.hwmodels.tensix.noc import NocTopology
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.plan import KernelPlan, Preset
from torchsim.lowering.templates.tensix.dram_sharded import READ_NOC, bank_workers, dram_sharded_matmul
from torchsim.lowering.templates.tensix.model_config import adapt_plan, tensix_weight_bytes
from torchsim.prediction.kernel_sim import KernelSim
from torchsim.prediction.launch import LaunchModel
from torchsim.sim import simulate

N150 = get_profile("wormhole-n150")
P150 = get_profile("blackhole-p150")


@pytest.fixture(scope="module")
def tiny() -> dict[str, api.Prediction]:
    return {w: api.predict("llama-tiny", "wormhole-n150", prompt_len=32, decode_steps=2, decode_samples=1,
                           weights=w, cache=False) for w in ("performance", "accuracy")}


def _decode_param(p: api.Prediction, suffix: str, key: str) -> object:
    rec = next(k for k in p.step_kernels("decode") if k.name.endswith(suffix))
    return dict(rec.params)[key]


def test_predict_runs_every_kernel_on_a_tensix_template(tiny: dict[str, api.Prediction]) -> None:
    p = tiny["performance"]
    assert p.ttft_s > 0 and p.tpot_s > 0
    assert not [k.name for k in p.kernels if k.fallback]
    assert all(k.template.startswith("tensix_") for k in p.kernels)


def test_weight_formats_and_fidelity_follow_the_mode(tiny: dict[str, api.Prediction]) -> None:
    perf, acc = tiny["performance"], tiny["accuracy"]
    assert _decode_param(perf, "gate_proj+up_proj.w1", "in1_dtype") == "bfp4_b"
    assert _decode_param(perf, "gate_proj+up_proj.w1", "fidelity") == "LoFi"
    assert _decode_param(acc, "gate_proj+up_proj.w1", "in1_dtype") == "bfp8_b"
    assert _decode_param(acc, "gate_proj+up_proj.w1", "fidelity") == "HiFi2"
    for p in (perf, acc):
        assert _decode_param(p, "down_proj", "in1_dtype") == "bfp8_b"
        assert _decode_param(p, "q_proj+k_proj+v_proj", "program") == "dram_sharded"
        assert _decode_param(p, "self_attn", "kv_dtype") == "bfp8_b"
    assert perf.stats["weight_bytes"] < acc.stats["weight_bytes"]


def test_decode_layer_launches_tt_transformers_ops(tiny: dict[str, api.Prediction]) -> None:
    names = [k.name for k in tiny["performance"].step_kernels("decode") if k.layer == 1]
    kinds = Counter(n.rsplit(".", 1)[-1] for n in names)
    for op in ("sharded_to_interleaved", "nlp_create_qkv_heads_decode", "rotary_q", "rotary_k",
               "paged_update_cache_k", "paged_update_cache_v", "nlp_concat_heads_decode", "w1", "w3"):
        assert kinds[op] == 1, op
    assert len(names) == 19  # the residual add + norm closing layer 0 open layer 1


def test_gpu_profiles_reject_tensix_weight_modes() -> None:
    with pytest.raises(ValueError, match="h100-sxm"):
        api.predict("llama-tiny", "h100-sxm", prompt_len=8, decode_steps=1, weights="accuracy")
    call = KernelCall.make(KernelKind.GEMM, m=1, n=64, k=64, name="layers.0.mlp.down_proj", layer=0)
    with pytest.raises(ValueError, match="valid: performance, accuracy"):
        adapt_plan(KernelPlan((call,), Preset.SERVING, "decode", 1, 1, 8), N150, "fast")


def _sims(*us: float) -> list[KernelSim]:
    return [KernelSim("t", {}, int(u * 1e3), u * 1e-6, 0.0, 0.0, 0.0) for u in us]


def test_traced_decode_is_dispatch_bound_for_short_ops_and_hides_dispatch_behind_long_ones() -> None:
    lm = LaunchModel.for_mode("cuda-graphs", N150, "decode")
    assert lm.mode.startswith("metal trace")
    disp, gap, step = (float(q) for q in (N150.program_dispatch_s, N150.op_to_op_s, N150.step_overhead_s))
    _, short = lm.place(_sims(*[0.5] * 20))
    assert short == pytest.approx(step + 20 * disp + 0.5e-6, rel=1e-6)  # each op waits for its dispatch
    _, long = lm.place(_sims(*[100.0] * 5))
    assert long == pytest.approx(step + disp + 5 * 100e-6 + 4 * gap, rel=1e-6)  # dispatch hidden after the first
    prefill = LaunchModel.for_mode("cuda-graphs", N150, "prefill")
    assert prefill.mode.startswith("host dispatch") and float(prefill.host_per_kernel) > disp
    assert LaunchModel.for_mode("eager", N150, "decode").mode.startswith("host dispatch")


def test_dram_sharded_readers_sit_next_to_their_banks() -> None:
    for hw in (N150, P150):
        workers = bank_workers(hw)
        assert len(workers) == int(hw.dram_banks) == len(set(workers))
        cols, rows = sorted({x for x, _ in hw.worker_xy}), sorted({y for _, y in hw.worker_xy})
        topo = NocTopology(int(hw.noc_grid_x), int(hw.noc_grid_y))
        hops = [topo.hops(b, (cols[x], rows[y]), READ_NOC) for b, (x, y) in zip(hw.dram_bank_xy, workers)]
        assert max(hops) <= 4 and sum(hops) <= 2 * len(hops), (hw.name, hops)  # WH: row 11 is not computed on


def test_dram_sharded_matmul_streams_the_weights_once_and_never_beats_the_banks() -> None:
    m, n, k = 32, 4096, 4096
    kg = dram_sharded_matmul(m, n, k, DType.BF16, N150, in1=DType.BFP8_B, fidelity="HiFi2")
    r = simulate(kg, N150)
    weights = k * n * DType.BFP8_B.nbytes
    assert kg.classes[0].count == int(N150.dram_banks)
    assert r.dram_bytes == pytest.approx(-(-n // 32 // 12) * 12 * 32 * k * DType.BFP8_B.nbytes, rel=0.01)
    assert r.time_s > weights / N150.dram_bytes_per_s_value


def test_packer_l1_accumulation_makes_thin_k_blocks_slower() -> None:
    """More storage cores -> smaller in0_block_w -> more K blocks, each re-accumulating the whole output."""
    wide, thin = (simulate(dram_sharded_matmul(32, 8192, 4096, DType.BF16, N150, in1=DType.BFP4_B, fidelity="LoFi",
                                               cores=c), N150) for c in (16, 64))
    assert thin.time_s > wide.time_s


def test_blackhole_decode_matmuls_run_on_eight_workers() -> None:
    kg = dram_sharded_matmul(32, 4096, 4096, DType.BF16, P150, in1=DType.BFP8_B, fidelity="HiFi2")
    assert kg.attrs["config"]["workers"] == 8 and kg.attrs["config"]["per_core_n"] == 16


def test_tensix_weight_bytes_per_role() -> None:
    from torchsim.prediction.pipeline import _resolve_model

    _, _, module = _resolve_model("llama-small", "bf16")
    bf16 = sum(p.numel() * 2 for p in module.parameters())
    perf = tensix_weight_bytes(module, N150, "performance")
    acc = tensix_weight_bytes(module, N150, "accuracy")
    assert perf is not None and acc is not None and perf < acc < bf16
    assert tensix_weight_bytes(module, get_profile("h100-sxm"), None) is None


def test_cli_gemm_on_wormhole_takes_grid_and_fidelity(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["kernel", "gemm", "--m", "256", "--n", "256", "--k", "256", "--hw", "wormhole-n150",
               "--grid", "4x4", "--fidelity", "hifi2", "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and out["grid"] == [4, 4] and out["fidelity"] == "HiFi2"
    assert main(["kernel", "gemm", "--m", "64", "--n", "64", "--k", "64", "--hw", "h100-sxm", "--fidelity",
                 "lofi"]) != 0
    assert "Tenstorrent" in capsys.readouterr().err


def test_cli_predict_weights_option(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["predict", "llama-tiny", "--hw", "wormhole-n150", "--prompt", "16", "--decode", "1",
               "--decode-samples", "1", "--weights", "accuracy", "--json", "--no-cache"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["hw"] == "wormhole-n150" and any("metal trace" in a for a in out["assumptions"])


def test_lm_head_grid_and_splits_follow_the_hidden_size() -> None:
    """tt_transformers sizes the LM head's core grid from the hidden size (rows, then columns, dropped until the
    grid divides it) and its vocabulary splits at 668 columns per core of that grid: a 1152-wide model (Gemma-3-1B)
    takes 36 cores and splits of 24048 columns, each of which fits L1 (at 64 cores' 42752 the weight buffer
    overflowed it and the LM head fell back to a roofline)."""
    from torchsim.lowering.templates.tensix.model_config import lm_head_cores, lm_head_split_cols
    from torchsim.lowering.templates.tensix.registry import build_tensix_kernel

    assert [lm_head_cores(d // 32) for d in (4096, 3072, 3584, 1152, 8192)] == [64, 48, 56, 36, 64]
    wh, bh = get_profile("wormhole-n150"), get_profile("blackhole-p150")
    assert lm_head_split_cols(wh, 4096 // 32) == 42752 and lm_head_split_cols(wh, 1152 // 32) == 24048
    assert lm_head_split_cols(bh, 1152 // 32) == 128256 // 8
    head = KernelCall.make(KernelKind.GEMM, m=1, n=262144, k=1152, name="tail.lm_head")
    plan = adapt_plan(KernelPlan((head,), Preset.SERVING, "decode", 1, 1, 8), wh, "performance")
    parts = [c for c in plan.calls if c.kind is KernelKind.GEMM]
    assert [c.p("n") for c in parts] == [24048] * 10 + [262144 - 10 * 24048]
    assert {c.p("storage_cores") for c in parts} == {36}
    for c in parts:  # every split builds: no L1 overflow
        assert build_tensix_kernel(c, wh).flops == pytest.approx(2.0 * 1152 * c.p("n"))
    with pytest.raises(ValueError, match="at least one 32-wide tile"):
        lm_head_cores(0)


def test_prefill_block_width_divides_the_k_tiles() -> None:
    """ttnn's matmul needs in0_block_w to divide K in tiles: a tensor-parallel shard of Granite's MLP (12800 / 8
    = 1600 wide, 50 tiles) takes 2 (K tiles / 8 = 6 does not divide 50), and its program config builds."""
    from torchsim.lowering.templates.tensix.model_config import Role, prefill_blocking
    from torchsim.lowering.templates.tensix.registry import build_tensix_kernel

    cfg = prefill_blocking(Role.FF2, 128, 1600, 4096)
    assert cfg["in0_block_w"] == 2 and 50 % cfg["in0_block_w"] == 0
    assert prefill_blocking(Role.FF2, 128, 14336, 4096)["in0_block_w"] == 8  # 448 tiles: unchanged
    call = KernelCall.make(KernelKind.GEMM, m=128, n=4096, k=1600, name="layers.0.mlp.down_proj", grid="8x8", **cfg)
    assert build_tensix_kernel(call, get_profile("wormhole-n150")).flops == pytest.approx(2.0 * 128 * 4096 * 1600)


def test_eltwise_ops_of_the_hf_families_cost_what_ttnn_runs() -> None:
    """Data movement (concat, typecast, reshape copies) costs a copy; a divide by a scalar an SFPU multiply, by a
    tensor a reciprocal and a multiply; tanh its LUT; an op the SFPU table lacks names the known ones."""
    from torchsim.lowering.templates.tensix.registry import build_tensix_kernel
    from torchsim.sim import simulate

    hw = get_profile("wormhole-n150")

    def cycles(op: str, inputs: int = 1) -> int:
        call = KernelCall.make(KernelKind.ELEMENTWISE, numel=1 << 20, op=op, inputs=inputs, outputs=1)
        return simulate(build_tensix_kernel(call, hw), hw).cycles

    copy = cycles("copy")
    assert cycles("cat") == cycles("to") == cycles("stack") == cycles("reshape") == copy
    assert cycles("div") == cycles("mul", 1)
    assert cycles("div", 2) > cycles("mul", 2)  # + the divisor's reciprocal
    assert copy <= cycles("tanh") < cycles("exp")  # one SFPLUT per vector against exp's polynomial
    with pytest.raises(ValueError, match="SFPU op 'erfinv' is not modelled; known: .*tanh"):
        cycles("erfinv")


def test_moe_routing_and_reductions_have_tensix_templates() -> None:
    """ROUTER_TOPK (ttnn.topk + softmax over 64 padded gate columns) and REDUCE (ttnn.sum) build and cost more
    for more tokens / a larger input (single-chip MoE families used to fall back to rooflines for both)."""
    from torchsim.lowering.templates.tensix.registry import build_tensix_kernel
    from torchsim.sim import simulate

    hw = get_profile("wormhole-n150")

    def cycles(kind: KernelKind, **params: int) -> int:
        return simulate(build_tensix_kernel(KernelCall.make(kind, **params), hw), hw).cycles

    assert cycles(KernelKind.ROUTER_TOPK, tokens=4096, experts=8, top_k=2) > \
        cycles(KernelKind.ROUTER_TOPK, tokens=32, experts=8, top_k=2) > 0
    assert cycles(KernelKind.REDUCE, numel_in=8 << 20, numel_out=1 << 20) > \
        cycles(KernelKind.REDUCE, numel_in=2 << 20, numel_out=1 << 20) > 0


def test_a_prefill_longer_than_one_pass_loops_the_program_config_over_row_blocks() -> None:
    """tt_transformers sizes a prefill matmul's program config for one pass of rows (QKV 2048, WO 1024, the MLP the
    chip's prefill_len_cutoff: 1024 on Wormhole, 512 on Blackhole) and runs a longer prompt over its row blocks,
    reading the weights again in each: a 2048-row down projection on an n150 is two 1024-row passes."""
    from torchsim.lowering.templates.tensix.model_config import Role, pass_rows, prefill_blocking, prefill_len_cutoff
    from torchsim.lowering.templates.tensix.registry import build_tensix_kernel

    wh, bh = prefill_len_cutoff(N150), prefill_len_cutoff(P150)
    assert [pass_rows(r, wh) for r in (Role.WQKV, Role.WO, Role.FF1_FF3, Role.FF2)] == [2048, 1024, 1024, 1024]
    assert pass_rows(Role.FF2, bh) == 512

    def down(rows: int):  # type: ignore[no-untyped-def]
        cfg = prefill_blocking(Role.FF2, rows, 14336, 4096, wh)
        call = KernelCall.make(KernelKind.GEMM, m=rows, n=4096, k=14336, name="layers.0.mlp.down_proj", grid="8x8",
                               in1_dtype="bfp8_b", fidelity="HiFi2", **cfg)
        return build_tensix_kernel(call, N150)

    one, two = down(1024), down(2048)
    assert ("row_passes" not in one.attrs, two.attrs["row_passes"]) == (True, 2)
    assert two.attrs["config"] == one.attrs["config"]  # one program config, per_core_M for 1024 rows
    assert two.flops == pytest.approx(2 * one.flops)
    assert two.dram_bytes == pytest.approx(2 * one.dram_bytes)  # twice the rows, the weights read twice
    ratio = simulate(two, N150).cycles / simulate(one, N150).cycles
    assert 1.9 < ratio < 2.1


def test_long_prefill_on_a_wormhole_simulates_every_matmul() -> None:
    """A 2040-token prefill (more rows than one pass of the QKV, WO and MLP configs): every kernel runs a Tensix
    template (before, the five matmuls of each layer fell back to a roofline estimate: their program configs were
    sized for 512 rows and needed 16 rows of cores)."""
    p = api.predict("llama-small", "wormhole-n150", prompt_len=2040, decode_steps=1, decode_samples=1, cache=False)
    assert p.stats["fallback_kernels"] == 0, [k.name for k in p.kernels if k.fallback][:5]
    passes = {k.name.rsplit(".", 1)[-1]: dict(k.params).get("block_rows") for k in p.kernels
              if k.kind == "gemm" and k.layer == 0 and k.phase == "prefill"}
    assert passes == {"q_proj+k_proj+v_proj": None, "o_proj": 1024, "w1": 1024, "w3": 1024, "down_proj": 1024}


def test_gpt_oss_runs_on_one_blackhole_with_its_experts_in_bfp4(tmp_path: Path) -> None:
    """gpt-oss's MXFP4 checkpoint on a p150 (its public config, cut to 2 layers and 8 experts to keep the test
    short): the experts stored as bfloat4_b (tt-metal's gpt-oss demo), attention in bfp8_b; decode runs the experts
    as one sparse_matmul program over the active experts with the demo's tuned 1D configs (9x5 cores), prefill every
    expert over every token (the demo's all-ones prefill sparsity); every kernel has a Tensix template."""
    import torchsim
    from torchsim.lowering.templates.tensix.model_config import GPT_OSS_DECODE_EXPERTS

    pytest.importorskip("transformers")
    data = json.loads((Path(__file__).parent / "data" / "hf_configs" / "gpt-oss-20b.json").read_text())
    layers, experts = 2, 8
    data |= {"num_hidden_layers": layers, "num_local_experts": experts, "layer_types": data["layer_types"][:layers]}
    cfg = tmp_path / "gpt-oss-cut.json"
    cfg.write_text(json.dumps(data))
    p = torchsim.predict(str(cfg), "blackhole-p150", prompt_len=8, decode_steps=1, cache=False)
    assert p.stats["fallback_kernels"] == 0, [k.name for k in p.kernels if k.fallback][:5]
    grouped = [k for k in p.kernels if k.kind == "grouped_gemm"]
    assert grouped and {dict(k.params)["in1_dtype"] for k in grouped} == {"bfp4_b"}
    assert {k.template for k in grouped} == {"tensix_moe_sparse_matmul"}
    for k in grouped:
        prm = dict(k.params)
        if k.phase == "prefill":  # every expert, every token; ttnn's own program config
            assert prm["tokens_per_expert"] == (8,) * experts and "program_config" not in prm
            continue
        assert sum(prm["tokens_per_expert"]) == data["num_experts_per_tok"]  # the routed experts only
        gx, gy, bw, sw = GPT_OSS_DECODE_EXPERTS[(prm["k"], prm["n"])]
        pc = dict(prm["program_config"])
        assert (tuple(pc["grid"]), pc["in0_block_w"], pc["sub_w"]) == ((gx, gy), bw, sw)
    act = next(dict(k.params) for k in p.kernels if k.phase == "prefill" and k.kind == "silu_mul" and k.layer == 0)
    assert act["rows"] == 8 * experts
    qkv = next(k for k in p.kernels if k.name.endswith("q_proj+k_proj+v_proj") and k.phase == "decode")
    assert dict(qkv.params)["in1_dtype"] == "bfp8_b"
    h, inter = data["hidden_size"], data["intermediate_size"]
    expert_bytes = layers * experts * 3 * h * inter * 576 / 1024  # bfp4_b: 576 B per 32 x 32 tile
    other = p.stats["weight_bytes"] - expert_bytes  # bf16 embedding 1.16 GB, bfp8 LM head 0.62 GB, attention
    assert 1.7e9 < other < 2.0e9, other
    assert "in tt_transformers performance formats; experts bfp4_b (mxfp4 checkpoint)" in p.summary()


def test_mxfp4_on_a_tensix_profile_needs_experts() -> None:
    with pytest.raises(ValueError, match="stores an MoE model's experts as bfp4_b"):
        api.predict("llama-tiny", "wormhole-n150", prompt_len=8, decode_steps=1, quant="mxfp4")


def test_a_layers_grouped_gemms_take_the_expert_roles_in_turn() -> None:
    """On one chip a layer's first grouped GEMM (the experts' gate-up projection) takes FF1/FF3's format and the
    second (down) FF2's, in the performance mode bfp4_b at LoFi and bfp8_b at HiFi2."""
    calls = tuple(KernelCall.make(KernelKind.GROUPED_GEMM, k=k, n=n, tokens_per_expert=(1, 0, 2, 1),
                                  name="layers.0.mlp.experts", layer=0) for k, n in ((256, 1024), (512, 256)))
    plan = adapt_plan(KernelPlan(calls, Preset.SERVING, "decode", 1, 1, 8), N150, "performance")
    got = [(c.p("in1_dtype"), c.p("fidelity")) for c in plan.calls if c.kind is KernelKind.GROUPED_GEMM]
    assert got == [("bfp4_b", "LoFi"), ("bfp8_b", "HiFi2")]


def test_gpt_oss_on_a_t3000_splits_every_expert_over_the_chips() -> None:
    """tt-metal's gpt-oss layout on a 1 x 8 mesh (TP=8, EP=1): each chip holds an eighth of every expert (gate-up
    columns, down rows) and of the attention heads, the router runs on every chip, and two ttnn all-reduces per
    layer (after WO and after the experts) join the partial sums; a Mixtral-style expert per chip needs experts
    == chips, which gpt-oss's 32 experts on 8 chips are not."""
    import torchsim

    pytest.importorskip("transformers")
    cfg = Path(__file__).parent / "data" / "hf_configs" / "gpt-oss-20b.json"
    data = json.loads(cfg.read_text())
    p = torchsim.predict(str(cfg), "wormhole-n300", tp=8, prompt_len=1, decode_steps=1, cache=False)
    assert p.system == "t3000" and p.stats["fallback_kernels"] == 0
    inter, hidden = data["intermediate_size"], data["hidden_size"]
    layer0 = [k for k in p.kernels if k.phase == "decode" and k.layer == 0]
    grouped = [dict(k.params) for k in layer0 if k.kind == "grouped_gemm"]
    assert [(g["k"], g["n"]) for g in grouped] == [(hidden, 2 * inter // 8), (inter // 8, hidden)]
    ccl = [dict(k.params) for k in layer0 if k.kind == "collective"]
    assert [c["op"] for c in ccl] == ["all-reduce", "all-reduce"] and all("custom_ar" not in c for c in ccl)
    attn = next(dict(k.params) for k in layer0 if k.kind == "attention_decode")
    assert (attn["heads_q"], attn["heads_kv"]) == (data["num_attention_heads"] // 8, data["num_key_value_heads"] // 8)
    assert p.stats["weight_bytes"] < 2.0e9  # an eighth of ~13.2 GB
    assert any("tt-metal's gpt-oss layout" in a for a in p.assumptions)


def test_gpt_oss_on_a_galaxy_splits_experts_over_rows_and_each_over_a_row(tmp_path: Path) -> None:
    """tt-metal's gpt-oss 2D layout on a Galaxy (mesh_4x8 decode: TP=8 along a row, EP=4 down a column): a chip
    holds a quarter of the experts, each split over the row's 8 chips, and runs them on the tokens routed to its
    row; after the experts' combine an all-reduce down the column (4 chips) precedes the row's (8 chips). The
    prediction takes the slowest row's experts; the rows' routing slices partition the experts' counts."""
    import torchsim
    from torchsim.lowering.templates.tensix.mesh_plan import tt_tp_experts_plan

    pytest.importorskip("transformers")
    data = json.loads((Path(__file__).parent / "data" / "hf_configs" / "gpt-oss-20b.json").read_text())
    layers = 2
    data |= {"num_hidden_layers": layers, "layer_types": data["layer_types"][:layers]}
    cfg = tmp_path / "gpt-oss-cut.json"
    cfg.write_text(json.dumps(data))
    experts, topk = data["num_local_experts"], data["num_experts_per_tok"]
    inter, hidden = data["intermediate_size"], data["hidden_size"]
    p = torchsim.predict(str(cfg), "galaxy", tp=8, ep=4, prompt_len=8, decode_steps=1, cache=False)
    assert p.system == "galaxy" and p.stats["fallback_kernels"] == 0
    layer0 = [k for k in p.kernels if k.phase == "decode" and k.layer == 0]
    grouped = [dict(k.params) for k in layer0 if k.kind == "grouped_gemm"]
    assert [(g["k"], g["n"], len(g["tokens_per_expert"])) for g in grouped] == \
        [(hidden, 2 * inter // 8, experts // 4), (inter // 8, hidden, experts // 4)]
    assert 1 <= sum(grouped[0]["tokens_per_expert"]) <= topk  # the slowest row's share of the routed experts
    ccl = [(dict(k.params)["op"], dict(k.params)["ranks"]) for k in layer0 if k.kind == "collective"]
    assert ccl == [("all-reduce", 8), ("all-reduce", 4), ("all-reduce", 8)]  # WO's; the column's, then the row's
    assert any("gpt-oss 2D layout" in a for a in p.assumptions)
    assert "expert parallel over 4 rows" in p.summary() and "per chip" in p.summary()
    t3k = torchsim.predict(str(cfg), "wormhole-n300", tp=8, prompt_len=8, decode_steps=1, cache=False)
    expert_bytes = layers * experts * 3 * hidden * inter * 576 / 1024 / 8  # bfp4_b, an eighth of each expert
    assert p.stats["weight_bytes"] == pytest.approx(t3k.stats["weight_bytes"] - expert_bytes * 3 / 4, rel=0.01)
    # the rows' slices of one decode plan's routing partition every expert's count
    plan = _decode_plan(str(cfg))
    rows = [tt_tp_experts_plan(plan, 8, "galaxy", ep=4, rank=r) for r in range(4)]
    first = [next(c for c in r.calls if c.kind.value == "grouped_gemm" and c.layer == 0) for r in rows]
    total = next(c for c in plan.calls if c.kind.value == "grouped_gemm" and c.layer == 0)
    assert sum((c.p("tokens_per_expert") for c in first), ()) == total.p("tokens_per_expert")
    with pytest.raises(ValueError, match="--hw galaxy --tp 8 --ep 4"):
        torchsim.predict(str(cfg), "galaxy", tp=4, ep=8, prompt_len=8, decode_steps=1, cache=False)


def _decode_plan(cfg: str) -> Any:
    """The captured decode plan of an HF config (batch 1, KV 8), before any multi-chip layout."""
    from torchsim.lowering.capture import capture_model
    from torchsim.lowering.plan import Preset, plan_capture
    from torchsim.prediction.pipeline import _resolve_model

    _name, _cfg, module = _resolve_model(cfg, "bf16")
    return plan_capture(capture_model(module, 1, 1, 8), Preset.parse("serving"))


def test_model_precision_follows_tt_transformers_branches_per_model() -> None:
    """ModelOptimizations picks formats per model: Qwen2.5-7B's performance mode keeps BF16 attention and KV cache
    at HiFi4 with BFP8 MLPs; the 70B-class models keep BFP4 MLPs in accuracy mode; models outside the Llama-3 /
    Mistral-7B / Phi-3-mini branch run BF16 attention in accuracy mode; torchsim's own names meet tt's."""
    from torchsim.hwmodels.tensix.formats import MathFidelity
    from torchsim.lowering.templates.tensix.model_config import Role, WeightMode, model_precision, tt_base_name

    perf, acc = WeightMode.PERFORMANCE, WeightMode.ACCURACY
    assert tt_base_name("Qwen/Qwen2.5-7B-Instruct") == "Qwen2.5-7B" and tt_base_name(None) == ""
    llama = model_precision(perf, "llama3.1-8b")
    assert llama == model_precision(perf) and llama.roles[Role.FF1_FF3].weights is DType.BFP4_B
    qwen = model_precision(perf, "Qwen2.5-7B-Instruct")
    assert {r: qwen.roles[r].weights for r in (Role.WQKV, Role.WO, Role.FF1_FF3, Role.FF2)} == {
        Role.WQKV: DType.BF16, Role.WO: DType.BF16, Role.FF1_FF3: DType.BFP8_B, Role.FF2: DType.BFP8_B}
    assert qwen.kv_cache is DType.BF16 and set(qwen.sdpa.values()) == {MathFidelity.HIFI4}
    assert qwen.roles[Role.WQKV].fidelity is MathFidelity.HIFI4 and "BF16 attention" in qwen.rule
    assert model_precision(acc, "llama3.1-70b").roles[Role.FF1_FF3].weights is DType.BFP4_B
    assert model_precision(acc, "llama3.1-8b").roles[Role.FF1_FF3].weights is DType.BFP8_B
    assert model_precision(acc, "Qwen3-8B").kv_cache is DType.BF16
    assert model_precision(acc, "llama3.1-8b").kv_cache is DType.BFP8_B


def test_qwen2_5_7b_runs_its_own_formats_on_tensix(tmp_path: Path) -> None:
    """A prediction names the model's branch and runs its formats: Qwen2.5-7B (its config, cut to 2 layers) reads
    bf16 QKV and KV cache and bfp8 FF1/FF3 in decode; the same config under another name takes the default
    performance formats (bfp4 FF1/FF3), with fewer weight bytes and a faster decode step."""
    import torchsim

    pytest.importorskip("transformers")
    data = json.loads((Path(__file__).parent / "data" / "hf_configs" / "qwen2.5-7b.json").read_text())
    data |= {"num_hidden_layers": 2}
    runs = {}
    for name in ("qwen2.5-7b", "some-qwen2-7b"):
        cfg = tmp_path / f"{name}.json"
        cfg.write_text(json.dumps(data))
        runs[name] = torchsim.predict(str(cfg), "wormhole-n150", prompt_len=32, decode_steps=1, cache=False)
    qwen, other = runs["qwen2.5-7b"], runs["some-qwen2-7b"]

    def fmt(p: Any, suffix: str) -> str:
        k = next(k for k in p.kernels if k.phase == "decode" and k.name.endswith(suffix))
        return str(dict(k.params).get("in1_dtype") or dict(k.params).get("kv_dtype"))

    assert (fmt(qwen, "q_proj+k_proj+v_proj"), fmt(qwen, ".w1"), fmt(qwen, "self_attn")) == ("bf16", "bfp8_b", "bf16")
    assert (fmt(other, "q_proj+k_proj+v_proj"), fmt(other, ".w1"), fmt(other, "self_attn")) == \
        ("bfp8_b", "bfp4_b", "bfp8_b")
    assert "(qwen2.5-7b: BF16 attention and KV cache at HiFi4, BFP8 MLP)" in qwen.summary()
    assert qwen.stats["weight_bytes"] > other.stats["weight_bytes"]
    assert qwen.tpot_s > other.tpot_s


def test_deepseek_v2_lite_decode_runs_flash_mla_on_tensix(tmp_path: Path) -> None:
    """DeepSeek-V2-Lite (cut to 2 layers) on a p150: its MLA decode runs tt-metal's flash MLA decode template
    over the latent cache (bfp8_b, SDPA decode fidelity), its prefill the flash SDPA with 128-wide values; no
    kernel falls back to a roofline."""
    import torchsim

    pytest.importorskip("transformers")
    data = json.loads((Path(__file__).parent / "data" / "hf_configs" / "deepseek-v2-lite.json").read_text())
    data |= {"num_hidden_layers": 2}
    cfg = tmp_path / "deepseek-v2-lite.json"
    cfg.write_text(json.dumps(data))
    p = torchsim.predict(str(cfg), "blackhole-p150", prompt_len=32, decode_steps=1, cache=False)
    assert p.stats["fallback_kernels"] == 0, [k.name for k in p.kernels if k.fallback][:5]
    mla = [k for k in p.kernels if k.kind == "mla_decode"]
    assert mla and {k.template for k in mla} == {"tensix_flash_mla_decode"}
    prm = dict(mla[0].params)
    assert (prm["head_dim"], prm["head_dim_v"], prm["kv_dtype"]) == (576, 512, "bfp8_b")
    pre = next(dict(k.params) for k in p.kernels if k.kind == "attention_prefill")
    assert (pre["head_dim"], pre["head_dim_v"]) == (192, 128)


def _deepseek_cut(tmp_path: Path) -> Path:
    """DeepSeek-V3's public config cut to one dense and one MoE layer (its FP8 block checkpoint kept)."""
    data = json.loads((Path(__file__).parent / "data" / "hf_configs" / "deepseek-v3.json").read_text())
    data |= {"num_hidden_layers": 2, "first_k_dense_replace": 1}
    cfg = tmp_path / "deepseek-v3-cut.json"
    cfg.write_text(json.dumps(data))
    return cfg


def test_deepseek_v3_on_a_galaxy_takes_tt_metals_layout(tmp_path: Path) -> None:
    """tt-metal's DeepSeek-V3 layout on a Galaxy (--tp 8 --ep 32): each row of 8 its own 32 users (batch 128 over
    4 rows), attention split along the row with MLA's head shards turned into user shards (an all-to-all along the
    row, flash MLA decode on 4 users x all 128 heads), the 256 routed experts 8 per chip run dense over the 128
    tokens dispatched down the column, the demo's formats; every collective names its cluster axis."""
    import torchsim

    pytest.importorskip("transformers")
    cfg = _deepseek_cut(tmp_path)
    data = json.loads(cfg.read_text())
    p = torchsim.predict(str(cfg), "galaxy", tp=8, ep=32, batch=128, prompt_len=32, decode_steps=1, cache=False)
    assert p.system == "galaxy" and p.stats["fallback_kernels"] == 0
    dec = [k for k in p.kernels if k.phase == "decode"]
    mla = next(dict(k.params) for k in dec if k.kind == "mla_decode")
    assert (mla["batch"], mla["heads_q"]) == (32 // 8, data["num_attention_heads"])
    grouped = [dict(k.params) for k in dec if k.kind == "grouped_gemm"]
    assert [g["tokens_per_expert"] for g in grouped] == [(32 * 4,) * (data["n_routed_experts"] // 32)] * 2
    assert [(g["in1_dtype"], g["fidelity"]) for g in grouped] == [("bfp4_b", "LoFi"), ("bfp8_b", "HiFi2")]
    wo = next(dict(k.params) for k in dec if k.name.endswith("o_proj") and k.layer == 0)
    assert (wo["n"], wo["k"], wo["in1_dtype"]) == (data["hidden_size"] // 8, 16384, "bfp8_b")
    ccl = {k.name.rsplit(".", 1)[-1]: dict(k.params) for k in dec if k.kind == "collective" and k.layer == 1}
    assert (ccl["all_to_all_dispatch"]["ranks"], ccl["all_to_all_dispatch"]["axis"]) == (4, 0)
    assert (ccl["all-to-all"]["ranks"], ccl["all-to-all"]["axis"]) == (8, 1)  # MLA's heads -> users
    assert all("axis" in dict(k.params) for k in dec if k.kind == "collective")
    assert any("tt-metal's DeepSeek-V3 layout" in a for a in p.assumptions)
    assert "DeepSeek-V3 demo formats" in p.summary() and "experts over all 32 chips" in p.summary()
    with pytest.raises(ValueError, match=r"batch 6 is not divisible over 4 rows x 8 chips \(give a multiple of 32"):
        torchsim.predict(str(cfg), "galaxy", tp=8, ep=32, batch=6, prompt_len=32, decode_steps=1, cache=False)


def test_deepseek_layout_needs_latent_attention_and_experts(tmp_path: Path) -> None:
    import torchsim

    pytest.importorskip("transformers")
    data = json.loads((Path(__file__).parent / "data" / "hf_configs" / "gpt-oss-20b.json").read_text())
    data |= {"num_hidden_layers": 2, "layer_types": data["layer_types"][:2]}
    cfg = tmp_path / "gpt-oss-cut.json"
    cfg.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="DeepSeek-V3 layout .* use --tp 8 --ep 4"):
        torchsim.predict(str(cfg), "galaxy", tp=8, ep=32, batch=128, prompt_len=8, decode_steps=1, cache=False)
