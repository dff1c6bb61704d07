"""Sliding-window attention (Mistral, Qwen2, per-layer `layer_types`): the window reaches the attention kernel
calls, and the templates read only the K/V it allows (FlashAttention-2/-3/-4, Triton, Flash-Decoding paged or
not, Tensix). A window at least the sequence is no window; a larger window is never faster; no windowed kernel
beats its roofline."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.plan import plan_model
from torchsim.lowering.templates import build_kernel, build_kernels
from torchsim.lowering.templates.attention import attention
from torchsim.lowering.templates.attention_config import AttnShape, AttnVariant, default_config, kv_span
from torchsim.lowering.templates.decode import flash_decode
from torchsim.lowering.templates.tensix.attention import flash_decode as tt_flash_decode
from torchsim.lowering.templates.tensix.attention import sdpa_prefill
from torchsim.models.llama import LlamaConfig
from torchsim.models.mixtral import MixtralConfig
from torchsim.models.registry import build_model, get_config
from torchsim.sim import simulate

GPUS = ("a100-sxm", "h100-sxm", "h200", "b200")
# (profile, variant): every prefill template the profiles run
VARIANTS = (("a100-sxm", None), ("h100-sxm", None), ("h100-sxm", AttnVariant.TRITON), ("h100-sxm", AttnVariant.FA2),
            ("b200", None))
MISTRAL = Path(__file__).parent / "data" / "model_configs" / "mistral-7b-v0.1.json"  # its public config.json


def roofline_s(kg, hw) -> float:
    floor = kg.dram_bytes / float(hw.dram_peak_bytes_per_s.value)
    if kg.flops:
        floor = max(floor, kg.flops / hw.peak_tensor_flops_per_s(kg.classes[0].graph.dtype))
    return floor


# -- the problem a window defines ----------------------------------------------------------------------------
@given(sq=st.integers(1, 300), extra=st.integers(0, 300), window=st.integers(1, 400))
@settings(max_examples=80, deadline=None)
def test_score_pairs_and_keys_read_match_the_window_mask(sq: int, extra: int, window: int) -> None:
    skv = sq + extra
    shape = AttnShape(1, 1, 1, sq, skv, 64, causal=True, window=window)
    off = skv - sq
    seen = [[c for c in range(skv) if r + off - window < c <= r + off] for r in range(sq)]
    assert shape.score_pairs() == sum(len(s) for s in seen)
    assert shape.kv_read() == len({c for s in seen for c in s})
    assert all(shape.visible(r) == len(s) for r, s in enumerate(seen))


@given(sq=st.integers(1, 700), extra=st.integers(0, 300), window=st.integers(1, 800),
       bm=st.sampled_from([64, 128, 192]), bn=st.sampled_from([64, 80, 128, 176]))
@settings(max_examples=80, deadline=None)
def test_a_query_block_visits_exactly_the_kv_blocks_its_windows_intersect(sq: int, extra: int, window: int, bm: int,
                                                                         bn: int) -> None:
    skv = sq + extra
    shape = AttnShape(1, 1, 1, sq, skv, 64, causal=True, window=window)
    for m in range(math.ceil(sq / bm)):
        n, masked, first = kv_span(shape, bm, bn, m)
        rows = range(m * bm, min(sq, (m + 1) * bm))
        keys = {c for r in rows for c in range(*shape.key_range(r))}
        blocks = {c // bn for c in keys}
        assert set(range(first, first + n)) == blocks  # every visible key's block, and only those
        whole = [j for j in blocks if all(shape.key_range(r)[0] <= j * bn and (j + 1) * bn <= shape.key_range(r)[1]
                                           for r in rows)]
        assert masked == n - len(whole) or (masked == 1 and n - len(whole) == 0)  # ragged last block


@pytest.mark.parametrize(("hw_name", "variant"), VARIANTS)
def test_a_window_at_least_the_sequence_is_no_window(hw_name: str, variant: AttnVariant | None) -> None:
    hw = get_profile(hw_name)
    shape = AttnShape(1, 4, 2, 640, 640, 128, causal=True)
    none = simulate(attention(shape, hw, variant=variant), hw)
    for w in (640, 4096):
        assert simulate(attention(replace(shape, window=w), hw, variant=variant), hw).cycles == none.cycles
    dec = AttnShape(2, 8, 2, 1, 3000, 128)
    if variant is None:
        for page in (0, 16):
            base = [simulate(k, hw).cycles for k in flash_decode(dec, hw, page_size=page)]
            assert [simulate(k, hw).cycles for k in flash_decode(replace(dec, window=3000), hw, page_size=page)] == base


@pytest.mark.parametrize(("hw_name", "variant"), VARIANTS)
def test_a_larger_window_is_never_faster_and_none_beats_its_roofline(hw_name: str,
                                                                     variant: AttnVariant | None) -> None:
    hw = get_profile(hw_name)
    times = []
    for w in (128, 512, 1536, 0):
        kg = attention(AttnShape(1, 8, 2, 2048, 2048, 128, causal=True, window=w), hw, variant=variant)
        r = simulate(kg, hw)
        assert r.time_s >= roofline_s(kg, hw)
        times.append(r.time_s)
    assert times == sorted(times) and times[0] < 0.5 * times[-1]  # 128 keys of 2048: far less work


@pytest.mark.parametrize("hw_name", GPUS)
@pytest.mark.parametrize("page_size", [0, 16, 256])
def test_decode_reads_only_the_window(hw_name: str, page_size: int) -> None:
    hw = get_profile(hw_name)
    shape = AttnShape(1, 32, 8, 1, 16384, 128)
    times, reads = [], []
    for w in (1024, 4096, 0):
        kgs = flash_decode(replace(shape, window=w), hw, page_size=page_size)
        split = kgs[0]
        cfg_bn = split.attrs["bn"]
        blocks = split.attrs["splits"] * split.attrs["blocks_per_split"]
        assert blocks - split.attrs["blocks_per_split"] < math.ceil((w or 16384) / cfg_bn) + 1 <= blocks + 1
        res = [simulate(k, hw) for k in kgs]
        assert all(r.time_s >= roofline_s(k, hw) for r, k in zip(res, kgs, strict=True))
        times.append(sum(r.time_s for r in res))
        reads.append((split.dram_bytes, res[0].dram_bytes))
    kv_bytes_per_key = 2 * 8 * 128 * 2
    assert reads[0][0] < 1.1 * 1024 * kv_bytes_per_key  # compulsory: min(kv_len, W) keys, not the whole cache
    assert reads[0][1] < 0.15 * reads[-1][1]  # simulated: 1024 of 16384 keys (+ the FP32 partials)
    assert times == sorted(times) and times[0] < 0.5 * times[-1]


def test_tensix_attention_reads_only_the_window() -> None:
    hw = get_profile("wormhole-n150")
    bf = DType.BF16
    full = sdpa_prefill(1, 8, 8, 4096, 4096, 128, True, bf, bf, hw)
    same = sdpa_prefill(1, 8, 8, 4096, 4096, 128, True, bf, bf, hw, window=4096)
    assert simulate(same, hw).cycles == simulate(full, hw).cycles
    prefill = [simulate(sdpa_prefill(1, 8, 8, 4096, 4096, 128, True, bf, bf, hw, window=w), hw).cycles
               for w in (512, 2048, 0)]
    assert prefill == sorted(prefill) and prefill[0] < 0.5 * prefill[-1]
    dec = [simulate(tt_flash_decode(1, 32, 8, 32768, 128, bf, bf, hw, window=w), hw).cycles for w in (4096, 0)]
    assert dec[0] < 0.5 * dec[1]
    assert simulate(tt_flash_decode(1, 32, 8, 4096, 128, bf, bf, hw, window=4096), hw).cycles == \
        simulate(tt_flash_decode(1, 32, 8, 4096, 128, bf, bf, hw), hw).cycles


def test_a_window_call_builds_on_every_backend() -> None:
    prefill = KernelCall.make(KernelKind.ATTENTION_PREFILL, batch=1, heads_q=8, heads_kv=2, seq_q=1024, seq_kv=1024,
                              head_dim=128, causal=True, window=256)
    decode = KernelCall.make(KernelKind.ATTENTION_DECODE, batch=1, heads_q=8, heads_kv=2, seq_q=1, seq_kv=8192,
                             head_dim=128, paged=16, window=256)
    for hw_name in ("h100-sxm", "wormhole-n150"):
        hw = get_profile(hw_name)
        for call in (prefill, decode):
            windowed = build_kernels(call, hw)
            plain = build_kernels(replace(call, params=tuple(p for p in call.params if p[0] != "window")), hw)
            assert windowed[0].flops < plain[0].flops
            # decode reads only the window's keys; in prefill every key lies in some query's window
            assert windowed[0].dram_bytes < plain[0].dram_bytes if call is decode else \
                windowed[0].dram_bytes <= plain[0].dram_bytes
    assert build_kernel(prefill, get_profile("h100-sxm")).attrs["window"] == 256


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"window": -1}, "window must be an integer >= 0"),
    ({"window": 64, "causal": False}, "needs causal attention"),
])
def test_bad_window_names_the_parameter(kwargs: dict, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        AttnShape(1, 4, 4, 256, 512, 64, **kwargs)
    with pytest.raises(ValueError, match="window"):
        sdpa_prefill(1, 4, 4, 256, 512, 64, kwargs.get("causal", True), DType.BF16, DType.BF16,
                     get_profile("wormhole-n150"), window=kwargs["window"])


def test_default_configs_ignore_the_window() -> None:
    hw = get_profile("h100-sxm")
    shape = AttnShape(1, 8, 2, 2048, 2048, 128, causal=True)
    assert default_config(replace(shape, window=256), hw) == default_config(shape, hw)


# -- the window reaches the kernel calls -----------------------------------------------------------------------
SMALL = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 1024, "max_position_embeddings": 4096}


def _attention_calls(model, q_len: int, past_len: int) -> list[KernelCall]:
    plan = plan_model(model, batch=1, q_len=q_len, past_len=past_len)
    return [c for c in plan.calls if c.kind in (KernelKind.ATTENTION_PREFILL, KernelKind.ATTENTION_DECODE)]


def test_mistral_window_reaches_prefill_chunked_prefill_and_decode_calls() -> None:
    cfg = LlamaConfig.from_dict({**SMALL, "model_type": "mistral", "sliding_window": 512}, "mistral-small")
    assert cfg.sliding_window == 512 and cfg.approximations == ()  # modelled, not approximated
    model = build_model(cfg)
    for q_len, past in ((2048, 0), (256, 2048), (1, 2048)):
        calls = _attention_calls(model, q_len, past)
        assert len(calls) == 2 and all(c.p("window") == 512 for c in calls)
    short = _attention_calls(model, 256, 0)  # the window never binds: no window parameter at all
    assert short and all(c.p("window", 0) == 0 for c in short)
    assert all(c.p("window", 0) == 0 for c in _attention_calls(build_model(LlamaConfig(**SMALL)), 2048, 0))


def test_a_bad_window_value_is_named() -> None:
    with pytest.raises(ValueError, match="sliding_window"):
        LlamaConfig.from_dict({**SMALL, "sliding_window": "wide"}, "bad")
    with pytest.raises(ValueError, match="sliding_window"):
        LlamaConfig(**SMALL, sliding_window=0)


def test_a_family_that_does_not_model_the_window_still_names_it() -> None:
    data = {**SMALL, "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 512}
    with pytest.raises(ValueError, match="sliding_window = 512"):
        MixtralConfig.from_dict(data, "mixtral-small")


hf = pytest.importorskip("transformers")


def _qwen2(tmp_path: Path, **extra) -> Path:
    data = {"model_type": "qwen2", **SMALL, "num_hidden_layers": 4, "use_sliding_window": True,
            "sliding_window": 256, **extra}
    (tmp_path / "tiny-qwen2").mkdir(exist_ok=True)
    path = tmp_path / "tiny-qwen2" / "config.json"
    path.write_text(json.dumps(data))
    return path


def test_hf_per_layer_windows_follow_layer_types_and_max_window_layers(tmp_path: Path) -> None:
    alternating = ["sliding_attention", "full_attention"] * 2
    cfg = get_config(_qwen2(tmp_path, layer_types=alternating))
    assert cfg.approximations == ()
    calls = _attention_calls(build_model(cfg), 1024, 0)
    assert [c.p("window", 0) for c in calls] == [256, 0, 256, 0]
    decode = _attention_calls(build_model(cfg), 1, 1024)
    assert [c.p("window", 0) for c in decode] == [256, 0, 256, 0]
    layered = get_config(_qwen2(tmp_path, max_window_layers=3))  # Qwen2: layers from max_window_layers slide
    assert [c.p("window", 0) for c in _attention_calls(build_model(layered), 1024, 0)] == [0, 0, 0, 256]
    off = get_config(_qwen2(tmp_path, use_sliding_window=False))
    assert [c.p("window", 0) for c in _attention_calls(build_model(off), 1024, 0)] == [0, 0, 0, 0]


def test_layer_kinds_torchsim_does_not_model_are_named(tmp_path: Path) -> None:
    path = _qwen2(tmp_path, layer_types=["sliding_attention", "linear_attention", "full_attention", "full_attention"])
    with pytest.raises(ValueError, match="linear_attention"):
        get_config(path)


def test_hf_mistral_build_keeps_the_window() -> None:
    from torchsim.models.hf import build_hf_model
    from torchsim.models.hf_segments import HFSegmented

    cfg = LlamaConfig.from_dict({**SMALL, "sliding_window": 128}, "mistral-small")
    own = [c.params for c in _attention_calls(build_model(cfg), 1024, 0)]
    assert own == [c.params for c in _attention_calls(HFSegmented(build_hf_model(cfg)), 1024, 0)]


def test_the_per_layer_table_shows_both_attention_kinds(tmp_path: Path) -> None:
    from torchsim.prediction.pipeline import predict

    path = _qwen2(tmp_path, layer_types=["sliding_attention", "full_attention"] * 2)
    p = predict(str(path), "h100-sxm", prompt_len=1024, decode_steps=1, workers=1, cache=False)
    rows = [r for r in p.table("prefill", top=0) if r["kind"] == "attention_prefill"]
    assert len(rows) == 2 and all(r["count"] == 2 for r in rows)
    sliding = next(r for r in rows if "window=256" in r["shapes"])
    full = next(r for r in rows if "window" not in r["shapes"])
    assert sliding["mean_us"] < full["mean_us"]
    dec = [r for r in p.table("decode", top=0) if r["kind"] == "attention_decode" and
           not r["kernel"].endswith(".combine")]  # the split kernels (combine kernels follow them)
    assert len(dec) == 2 and len({r["shapes"] for r in dec}) == 2
    by_window = sorted(dec, key=lambda r: "window" in r["shapes"])
    assert by_window[1]["mean_us"] <= by_window[0]["mean_us"]


def test_mistral_7b_attention_calls_carry_its_window_at_32k() -> None:
    """Mistral-7B-v0.1's public config (sliding_window 4096): a 32k prompt and a decode step at KV 32k read
    the last 4096 keys per query; with the window removed they read them all. Kernels are built (work and
    bytes checked) here; their simulated times are in benchmarks/sliding_window.py."""
    cfg = get_config(MISTRAL)
    assert cfg.sliding_window == 4096 and cfg.approximations == ()
    one = cfg.with_layers(1)
    hw = get_profile("h100-sxm")
    for q_len, past in ((32768, 0), (1, 32768)):
        (call,) = _attention_calls(build_model(one), q_len, past)
        assert call.p("window") == 4096
        (plain,) = _attention_calls(build_model(replace(one, sliding_window=None)), q_len, past)
        assert plain.p("window", 0) == 0
        windowed, full = build_kernel(call, hw), build_kernel(plain, hw)
        assert windowed.flops < 0.25 * full.flops
        if past:
            assert windowed.dram_bytes < 0.2 * full.dram_bytes


def test_the_roofline_estimate_counts_the_window_like_the_templates() -> None:
    """Shapes no template serves (head_dim 16: llama-tiny) are roofline estimates; they count the window too."""
    from torchsim.lowering.fallback import work

    for sq, skv, w in ((512, 512, 64), (128, 640, 100), (1, 4096, 256)):
        kind = KernelKind.ATTENTION_DECODE if sq == 1 else KernelKind.ATTENTION_PREFILL
        call = KernelCall.make(kind, batch=1, heads_q=4, heads_kv=2, seq_q=sq, seq_kv=skv, head_dim=64,
                               causal=sq > 1, window=w)
        shape = AttnShape(1, 4, 2, sq, skv, 64, causal=sq > 1, window=w)
        flops, dram, _ = work(call)
        assert flops == shape.flops()
        assert dram == 1 * (2 * 4 * sq * 64 + 2 * 2 * shape.kv_read() * 64) * 2
