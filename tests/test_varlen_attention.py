"""Variable-length attention: the varlen FlashAttention prefill (`seqs`) and Flash-Decoding over sequences of different
K/V lengths (`kv_lens`), their library calls, their simulation (no uniform shortcut), the CLI and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from torchsim.cli import main
from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.lowering.fallback import work
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.templates import build_kernel, build_kernels
from torchsim.lowering.templates.varlen import (
    NotModelledError,
    kv_tokens,
    varlen_decode_call,
    varlen_prefill_call,
)
from torchsim.prediction.kernel_sim import clear_memo, graph_events, simulate_call, simulate_launches, simulate_many

GPUS = ("a100-sxm", "h100-sxm", "b200")  # FlashAttention-2, -3, -4 (the architectures' own variants)
HEADS = (16, 4)


def prefill(seqs: list[tuple[int, int]], **kw: object) -> KernelCall:
    return varlen_prefill_call(seqs, *HEADS, 128, **kw)  # type: ignore[arg-type]


def uniform_prefill(batch: int, q: int, kv: int) -> KernelCall:
    return KernelCall.make(KernelKind.ATTENTION_PREFILL, batch=batch, heads_q=HEADS[0], heads_kv=HEADS[1], seq_q=q,
                           seq_kv=kv, head_dim=128, causal=True)


def decode(kv_lens: list[int], **kw: object) -> KernelCall:
    return varlen_decode_call(kv_lens, *HEADS, 128, **kw)  # type: ignore[arg-type]


def time_us(call: KernelCall, hw: str) -> float:
    return simulate_call(call, get_profile(hw)).time_s * 1e6


@pytest.mark.parametrize("hw", GPUS)
def test_equal_lengths_are_the_uniform_kernel(hw: str) -> None:
    """Measured: 0.0% apart on every profile (the acceptance band is 0.5%). With every sequence at the same (q, kv)
    the varlen grid has the uniform grid's CTA rows (sequence = batch index), classes and launch order, so the
    engine runs the same simulation; only the kernel's name differs."""
    for var, uni in ((prefill([(256, 768)] * 3), uniform_prefill(3, 256, 768)),
                     (decode([1500] * 6), KernelCall.make(KernelKind.ATTENTION_DECODE, batch=6, heads_q=HEADS[0],
                                                          heads_kv=HEADS[1], seq_q=1, seq_kv=1500, head_dim=128,
                                                          page_size=16))):
        v, u = simulate_call(var, get_profile(hw)), simulate_call(uni, get_profile(hw))
        assert abs(v.time_s - u.time_s) <= 0.005 * u.time_s
        assert v.flops == u.flops and v.dram_bytes == u.dram_bytes


@pytest.mark.parametrize("hw", GPUS)
def test_a_short_chunk_beside_a_long_one_costs_less_than_its_own_launch(hw: str) -> None:
    short, long = (128, 384), (1024, 1024)
    t_short, t_long, t_both = (time_us(prefill(s), hw) for s in ([short], [long], [short, long]))
    assert t_long < t_both < t_short + t_long


@pytest.mark.parametrize("hw", GPUS)
def test_one_long_decode_sequence_slows_the_batch(hw: str) -> None:
    assert time_us(decode([4096] + [128] * 15), hw) > time_us(decode([128] * 16), hw)


def test_flops_and_bytes_are_the_sums_over_sequences() -> None:
    hw = get_profile("h100-sxm")
    seqs = [(64, 64), (200, 1000), (512, 512), (1, 777)]
    kg = build_kernel(prefill(seqs), hw)
    alone = [build_kernel(uniform_prefill(1, q, kv), hw) for q, kv in seqs]
    assert kg.flops == pytest.approx(sum(k.flops for k in alone), rel=1e-12)
    assert kg.dram_bytes == pytest.approx(sum(k.dram_bytes for k in alone), rel=1e-12)
    assert work(prefill(seqs))[:2] == pytest.approx(tuple(sum(x) for x in zip(*(work(uniform_prefill(1, q, kv))[:2]
                                                                                  for q, kv in seqs))))
    kv_lens = [64, 1000, 333]
    split = build_kernels(decode(kv_lens, num_splits=1), hw)
    one = [build_kernels(decode([kv], num_splits=1), hw)[0] for kv in kv_lens]
    assert len(split) == 1 and split[0].flops == pytest.approx(sum(k.flops for k in one), rel=1e-12)
    assert split[0].dram_bytes == pytest.approx(sum(k.dram_bytes for k in one), rel=1e-12)
    assert kv_tokens(decode(kv_lens)) == sum(kv_lens) and kv_tokens(prefill(seqs)) == sum(kv for _, kv in seqs)


def test_each_query_block_visits_its_own_causal_span() -> None:
    """A 128-token chunk whose 896 earlier tokens are cached sees every block of its 1024 keys (8 blocks of 128 on
    FA3); a fresh 128-token prompt, one block."""
    hw = get_profile("h100-sxm")
    kg = build_kernel(prefill([(128, 1024), (128, 128)]), hw)
    spans = {c.graph.name.split("/")[3]: c.count for c in kg.classes}
    assert spans == {"8blocks": HEADS[0], "1blocks": HEADS[0]}
    b = {c.graph.name.split("/")[3]: {int(x) for x in c.params[:, list(c.param_names).index("b")]} for c in kg.classes}
    assert b == {"8blocks": {0}, "1blocks": {1}}  # the tiles of each carry their own sequence's coordinate


def test_decode_splits_are_chosen_once_from_the_longest_sequence() -> None:
    """FlashAttention-2's set_params_splitkv with max_seqlen_k: every sequence gets the same split length; a short
    sequence's splits past its end exit at once (empty partials the combine weighs by zero)."""
    hw = get_profile("h100-sxm")
    split, combine = build_kernels(decode([8192, 256]), hw)
    per = split.attrs["blocks_per_split"]
    assert split.attrs["splits"] > 1 and combine.attrs["splits"] == split.attrs["splits"]
    assert per == build_kernels(decode([8192, 8192]), hw)[0].attrs["blocks_per_split"]
    names = {c.graph.name for c in split.classes}
    assert any(n.endswith("empty_split") for n in names)
    ctas = sum(c.count for c in split.classes)
    assert ctas == 2 * HEADS[1] * split.attrs["splits"]


def test_large_varlen_kernels_are_simulated_in_full_not_as_uniform() -> None:
    """Above the extrapolation threshold a varlen kernel has no repeating family (its attrs' uniform shape is not the
    kernel), and decode calls of different lengths are not interpolated as if they differed in one size."""
    hw = get_profile("h100-sxm")
    call = prefill([(64, 1024), (512, 512), (256, 2048)])
    (res,) = simulate_launches(call, hw, max_events=1000)
    assert res.method == "exact" and res.events == graph_events(build_kernel(call, hw))
    clear_memo()
    calls = [decode([100 * i, 3000, 64]) for i in range(1, 5)]
    sims = simulate_many(calls, hw, workers=1)
    assert all(s.method == "exact" for s in sims)
    assert len({s.time_s for s in sims}) > 1


def test_numpy_lengths_and_kv_dtype() -> None:
    call = varlen_decode_call(np.array([10, 20]), 8, 2, 128)
    assert call.p("kv_lens") == (10, 20) and all(type(k) is int for k in call.p("kv_lens"))
    assert call.dtype is DType.BF16
    assert varlen_decode_call([10], 8, 2, 128, kv_dtype=DType.FP8_E4M3).dtype is DType.FP8_E4M3


@pytest.mark.parametrize("seqs, item", [([], "at least one"), ([(128, 64)], "item 0"), ([(1, 1), (0, 5)], "item 1"),
                                        ([(1, 1), (2, -5)], "item 1"), ([(4, 4), (4, 4), (2.5, 4)], "item 2"),
                                        ([(1, 1), (1, "x")], "item 1"), ([(1, 2, 3)], "item 0")])
def test_bad_seqs_name_the_item(seqs: list[tuple[int, int]], item: str) -> None:
    with pytest.raises(ValueError, match=item):
        prefill(seqs)


@pytest.mark.parametrize("kv_lens, item", [([], "at least one"), ([5, 0], "item 1"), ([-1], "item 0"),
                                           ([3, 4, 1.5], "item 2"), ([True], "item 0")])
def test_bad_kv_lens_name_the_item(kv_lens: list[int], item: str) -> None:
    with pytest.raises(ValueError, match=item):
        decode(kv_lens)


def test_call_whose_batch_disagrees_with_its_lengths_is_an_error() -> None:
    call = KernelCall.make(KernelKind.ATTENTION_DECODE, batch=3, heads_q=8, heads_kv=2, seq_q=1, seq_kv=100,
                           head_dim=128, kv_lens=(100, 50))
    with pytest.raises(ValueError, match="batch=3"):
        build_kernels(call, get_profile("h100-sxm"))


def test_tensix_says_varlen_is_not_modelled() -> None:
    with pytest.raises(NotModelledError, match="not modelled on Tensix"):
        simulate_call(decode([100, 200]), get_profile("wormhole-n150"))
    with pytest.raises(NotModelledError, match="not modelled on Tensix"):
        build_kernel(prefill([(64, 64)]), get_profile("blackhole-p150"))


def test_cli_varlen_kernels(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    base = ["--heads-q", "16", "--heads-kv", "4", "--head-dim", "128", "--json"]
    assert main(["kernel", "attention", "--seqs", "128:128,256:1024", "--causal", *base]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["config"]["varlen"] and d["config"]["batch"] == 2 and d["config"]["seq_kv"] == 1024
    assert main(["kernel", "decode", "--kv-lens", "100,2000,300", *base]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["config"]["total_kv"] == 2400 and d["total_time_us"] > 0


@pytest.mark.parametrize("args, message", [
    (["attention", "--seqs", ""], "--seqs is empty"),
    (["attention", "--seqs", "128:128,512"], "--seqs item 1 ('512')"),
    (["attention", "--seqs", "128:128,512:256"], "--seqs item 1 ('512:256'): q_len 512 > kv_len 256"),
    (["attention", "--seqs", "0:8"], "--seqs item 0 ('0:8')"),
    (["attention", "--seqs", "8:8.5"], "--seqs item 0 ('8:8.5')"),
    (["attention", "--seqs", "8:8", "--batch", "1"], "drop --batch"),
    (["decode", "--kv-lens", "100,,3"], "--kv-lens item 1 ('')"),
    (["decode", "--kv-lens", "100,-3"], "--kv-lens item 1 ('-3')"),
    (["decode", "--kv-lens", "100,2e3"], "--kv-lens item 1 ('2e3')"),
    (["decode", "--kv-lens", "100", "--seq-kv", "100"], "drop --seq-kv"),
    (["decode"], "give --batch and --seq-kv"),
])
def test_cli_bad_lengths_are_one_clear_line(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kernel", *args, "--heads-q", "8", "--head-dim", "128"]) == 2
    assert message in capsys.readouterr().err
