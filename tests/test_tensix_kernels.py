"""Tensix kernel templates on the engine: matmul structure, physics properties, bad-input errors."""

from __future__ import annotations

import pytest

from torchsim.graph import DType, Unit
from torchsim.hwmodels import get_profile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.templates.tensix import build_tensix_kernel
from torchsim.lowering.templates.tensix.matmul import matmul
from torchsim.sim import simulate

WH = get_profile("wormhole-n150")
BH = get_profile("blackhole-p150-launch")


def _run(m, n, k, dt, hw, **kw):
    kg = matmul(m, n, k, dt, hw, **kw)
    return kg, simulate(kg, hw)


def test_matmul_graph_has_the_five_riscv_threads_and_tensix_units():
    kg = matmul(1024, 1024, 1024, DType.BF16, WH, grid="8x8")
    g = kg.classes[0].graph
    assert [grp.name for grp in g.groups] == ["reader", "writer", "unpack", "math", "pack"]
    assert set(int(u) for u in g.unit) == {Unit.NOC, Unit.UNPACKER, Unit.FPU, Unit.PACKER}
    assert kg.classes[0].count == 64 and kg.attrs["grid"] == (8, 8)
    assert kg.flops == 2.0 * 1024 ** 3


def test_flops_do_not_depend_on_the_grid_and_more_cores_run_faster():
    small, r_small = _run(2048, 2048, 2048, DType.BFP8_B, WH, grid="4x4", fidelity="lofi")
    big, r_big = _run(2048, 2048, 2048, DType.BFP8_B, WH, grid="8x8", fidelity="lofi")
    assert small.flops == big.flops
    assert r_big.cycles < 0.6 * r_small.cycles


@pytest.mark.parametrize("hw", [WH, BH], ids=lambda h: h.name)
def test_matmul_never_beats_the_fpu_roofline_and_fidelity_costs_time(hw):
    times = {}
    for fid in ("LoFi", "HiFi2", "HiFi4"):
        kg, r = _run(2048, 2048, 2048, DType.BF16, hw, fidelity=fid)
        peak = hw.peak_tensor_flops_per_s(DType.BF16, __import__("torchsim.hwmodels.tensix.formats",
                                                                  fromlist=["MathFidelity"]).MathFidelity.parse(fid))
        assert r.time_s >= kg.flops / peak
        times[fid] = r.cycles
    # bf16 LoFi and HiFi2 are both unpacker-bound (core.py matmul_unpack_work: 40 cycles per tile multiply with
    # 4x2 subblocks, above the FPU's 16 / 32); HiFi4's 64 cycles make the FPU the bound
    assert times["LoFi"] <= times["HiFi2"] < times["HiFi4"]


def test_decode_matmul_is_weight_bandwidth_bound_and_block_formats_help():
    _, bf16 = _run(32, 4096, 4096, DType.BF16, WH)
    kg4, bfp4 = _run(32, 4096, 4096, DType.BF16, WH, in1=DType.BFP4_B, fidelity="lofi")
    assert kg4.attrs["template"] == "tensix_matmul_1d_mcast"
    assert bfp4.cycles < 0.5 * bf16.cycles
    weight_s = 4096 * 4096 * 2 / WH.dram_bytes_per_s_value
    assert bf16.time_s >= weight_s


def test_simulation_is_deterministic():
    a = _run(1024, 2048, 1024, DType.BFP8_B, BH)[1]
    b = _run(1024, 2048, 1024, DType.BFP8_B, BH)[1]
    assert a.cycles == b.cycles and a.unit_busy == b.unit_busy


def test_kernel_call_dispatch_reads_tensix_parameters():
    call = KernelCall.make(KernelKind.GEMM, DType.BFP8_B, name="ff1", m=1024, n=1024, k=1024, fidelity="LoFi",
                           grid="4x8", in1_dtype="bfp4_b")
    kg = build_tensix_kernel(call, WH)
    assert kg.attrs["grid"] == (4, 8) and kg.attrs["fidelity"] == "LoFi"
    with pytest.raises(NotImplementedError, match="no tensix template for collective"):  # costed by the CCL model
        build_tensix_kernel(KernelCall.make(KernelKind.COLLECTIVE, op="all-gather", nbytes=4096, ranks=2), WH)


# -- bad input ------------------------------------------------------------------------------------------------
def test_grid_larger_than_the_chip():
    with pytest.raises(ValueError, match=r"grid 9x9 does not fit wormhole-n150: its compute grid is 8x8"):
        matmul(1024, 1024, 1024, DType.BF16, WH, grid="9x9")
    with pytest.raises(ValueError, match=r"grid 13x10 does not fit blackhole-p150: its compute grid is 11x10 "
                                         r"\(120 Tensix enabled, firmware 19.5\)"):
        matmul(1024, 1024, 1024, DType.BF16, get_profile("blackhole-p150"), grid="13x10")
    with pytest.raises(ValueError, match="grid 'eight' is not of the form COLSxROWS"):
        matmul(1024, 1024, 1024, DType.BF16, WH, grid="eight")


def test_l1_overflow_names_the_buffer_and_the_bytes():
    with pytest.raises(ValueError, match=r"matmul 'huge': L1 overflow on wormhole-n150: circular buffer 'in0' "
                                         r"\(1024 tiles of bf16 = 2097152 B\)"):
        matmul(16384, 1024, 1024, DType.BF16, WH, grid="1x1", name="huge", blocking=(512, 32, 1, 1))
    # ttnn's own selection shrinks the out block and in0_block_w until the CBs fit (down to 1x1x1 tiles)
    kg = matmul(16384, 16384, 1024, DType.BF16, WH, grid="1x1", name="fits")
    assert kg.attrs["config"]["out_block"][0] * kg.attrs["config"]["out_block"][1] < 512 * 512


def test_unsupported_data_format():
    with pytest.raises(ValueError, match="matmul 'x' in1 \\(weights\\): data format int64 is not supported"):
        matmul(64, 64, 64, DType.BF16, WH, in1=DType.INT64, name="x")


def test_nonexistent_fidelity_name():
    with pytest.raises(ValueError, match="unknown math fidelity 'HiFi8'; valid: LoFi, HiFi2, HiFi3, HiFi4"):
        matmul(64, 64, 64, DType.BF16, WH, fidelity="HiFi8")


# -- the other kinds -------------------------------------------------------------------------------------------
def _sim(call, hw=WH):
    kg = build_tensix_kernel(call, hw)
    return kg, simulate(kg, hw)


@pytest.mark.parametrize("call", [
    KernelCall.make(KernelKind.ELEMENTWISE, numel=1 << 22, op="add", inputs=2),
    KernelCall.make(KernelKind.SILU_MUL, rows=512, hidden=4096),
    KernelCall.make(KernelKind.RMSNORM, rows=512, hidden=4096),
    KernelCall.make(KernelKind.SOFTMAX, rows=1024, cols=1024),
], ids=lambda c: c.kind.value)
def test_streaming_kernels_run_near_dram_bandwidth_and_never_above(call):
    kg, r = _sim(call)
    floor = kg.dram_bytes / WH.dram_bytes_per_s_value
    assert floor <= r.time_s < 2.5 * floor + 10e-6
    assert {"reader", "writer", "unpack", "math", "pack"} == {g.name for g in kg.classes[0].graph.groups}


def test_decode_attention_time_grows_with_the_kv_length():
    short = _sim(KernelCall.make(KernelKind.ATTENTION_DECODE, batch=1, heads_q=32, heads_kv=8, seq_q=1,
                                 seq_kv=2048, head_dim=128, kv_dtype="bfp8_b"))[1]
    long = _sim(KernelCall.make(KernelKind.ATTENTION_DECODE, batch=1, heads_q=32, heads_kv=8, seq_q=1,
                                seq_kv=8192, head_dim=128, kv_dtype="bfp8_b"))[1]
    assert 2.0 < long.cycles / short.cycles < 4.5


def test_flash_mla_decode_reads_the_latent_cache_once():
    """MLA decode as tt-metal's paged_flash_multi_latent_attention_decode: one latent K/V head 576 wide whose
    first 512 columns are the values (not read again): half the bytes of a flash-decode reading a V of its own,
    and faster; the time grows with the KV length; a value wider than the cache row is an error naming both."""
    kw = dict(batch=4, heads_q=128, seq_q=1, head_dim=576, kv_dtype="bfp8_b")
    mla = [_sim(KernelCall.make(KernelKind.MLA_DECODE, seq_kv=n, head_dim_v=512, **kw)) for n in (1024, 8192)]
    fd = _sim(KernelCall.make(KernelKind.ATTENTION_DECODE, heads_kv=1, seq_kv=8192, **kw))
    assert mla[0][0].attrs["template"] == "tensix_flash_mla_decode"
    assert mla[1][0].dram_bytes < 0.55 * fd[0].dram_bytes and mla[1][1].time_s < fd[1].time_s
    assert 1.3 < mla[1][1].time_s / mla[0][1].time_s < 8.0
    assert mla[1][0].flops == 2.0 * 4 * 128 * 8192 * (576 + 512)
    with pytest.raises(ValueError, match="head_dim_v 640 exceeds the cache row head_dim 576"):
        _sim(KernelCall.make(KernelKind.MLA_DECODE, seq_kv=64, head_dim_v=640, **kw))


def test_prefill_values_narrower_than_keys_cost_less():
    """MLA prefill (flash_mla_prefill: keys 192 wide, values 128) reads and multiplies 128-wide values."""
    kw = dict(batch=1, heads_q=16, heads_kv=16, seq_q=1024, seq_kv=1024, head_dim=192, causal=True)
    narrow = _sim(KernelCall.make(KernelKind.ATTENTION_PREFILL, head_dim_v=128, **kw))
    same = _sim(KernelCall.make(KernelKind.ATTENTION_PREFILL, **kw))
    assert narrow[0].dram_bytes < same[0].dram_bytes and narrow[0].flops < same[0].flops
    assert narrow[1].cycles < same[1].cycles


def test_causal_prefill_costs_less_than_full_attention_when_cores_are_oversubscribed():
    kw = dict(batch=1, heads_q=32, heads_kv=8, seq_q=2048, seq_kv=2048, head_dim=128)  # 256 CTAs on 64 cores
    causal = _sim(KernelCall.make(KernelKind.ATTENTION_PREFILL, causal=True, **kw))
    full = _sim(KernelCall.make(KernelKind.ATTENTION_PREFILL, causal=False, **kw))
    assert causal[0].flops < 0.7 * full[0].flops
    assert causal[1].cycles < 0.8 * full[1].cycles


def test_moe_expert_matmuls_follow_the_routing_counts():
    kg, r = _sim(KernelCall.make(KernelKind.GROUPED_GEMM, tokens_per_expert=(64, 0, 32), n=1024, k=1024,
                                 in1_dtype="bfp8_b"))
    assert kg.attrs["experts"] == 2 and kg.flops == 2.0 * (64 + 32) * 1024 * 1024
    with pytest.raises(ValueError, match="no expert received tokens"):
        build_tensix_kernel(KernelCall.make(KernelKind.GROUPED_GEMM, tokens_per_expert=(0, 0), n=64, k=64), WH)
