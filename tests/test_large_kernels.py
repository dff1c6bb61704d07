"""Kernels sized by a user-given number stay bounded: a batched GEMM of many tiles and a very long attention
prompt are built without per-CTA Python rows and extrapolated, not simulated in full (issue 14)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.lowering.templates import gemm
from torchsim.lowering.templates.attention import attention
from torchsim.lowering.templates.attention_config import AttnShape, default_config, kv_span
from torchsim.lowering.templates.attention_parts import group_ctas
from torchsim.prediction.repeats import family_of, simulate_kernel

H100 = get_profile("h100-sxm")


@pytest.mark.parametrize("shared_b", [True, False], ids=["linear", "bmm"])
def test_a_batched_gemm_is_extrapolated_over_its_waves_and_matches_full_simulation(shared_b: bool) -> None:
    kg = gemm(128, 128, 128, DType.BF16, H100, batch=20_000, shared_b=shared_b)
    assert kg.attrs["shared_b"] is shared_b
    fam = family_of(kg, H100)
    assert fam is not None and [d.name for d in fam.dims] == ["waves"]
    ex = simulate_kernel(kg, H100, exact_events=10_000)
    full = simulate_kernel(kg, H100, exact=True)
    assert ex.attrs["method"] == "extrapolated-waves" and full.attrs["method"] == "exact"
    assert ex.time_s == pytest.approx(full.time_s, rel=0.01)


def test_a_batched_gemm_family_keeps_the_b_traffic_of_its_kind() -> None:
    # one shared weight (a linear layer) against one B per batch (bmm): the bmm reads batch x more of B
    lin, bmm = (simulate_kernel(gemm(256, 256, 1024, DType.BF16, H100, batch=2000, shared_b=s), H100,
                                exact_events=10_000) for s in (True, False))
    assert bmm.dram_bytes > 1.5 * lin.dram_bytes


def _rows_grouped(shape: AttnShape) -> list[tuple[tuple[int, ...], np.ndarray]]:
    cfg = default_config(shape, H100)
    spans = [kv_span(shape, cfg.bm, cfg.bn, m) for m in range(-(-shape.seq_q // cfg.bm))]
    window = bool(shape.binding_window)
    names = ("b", "h", "hk", "m", *(("k0",) if window else ()))
    rows = [((n, masked), (b, h, h // shape.group, m, *((first,) if window else ())))
            for b in range(shape.batch) for h in range(shape.heads_q) for m, (n, masked, first) in enumerate(spans)]
    return [(c.key, c.params) for c in group_ctas(rows, names, order=lambda key: -key[0])]


@pytest.mark.parametrize("shape", [
    AttnShape(2, 8, 2, 1000, 1000, 128, True, DType.BF16),
    AttnShape(3, 4, 4, 700, 4096, 64, False, DType.BF16),
    AttnShape(2, 8, 2, 3000, 3000, 128, True, DType.BF16, window=512),
], ids=["causal", "cross", "sliding"])
def test_uniform_attention_classes_are_the_rows_grouped_in_launch_order(shape: AttnShape) -> None:
    kg = attention(shape, H100)
    want = _rows_grouped(shape)
    assert len(kg.classes) == len(want)
    for c, (_, params) in zip(kg.classes, want):
        assert np.array_equal(c.params, params)


CAUSAL = AttnShape(1, 64, 16, 8192, 8192, 128, True, DType.BF16)  # 64 query blocks of 128 on H100 (FA3)


def _extrapolated(kg: Any, start: int) -> Any:
    from torchsim.prediction.repeats import Extrapolator, causal_attention_family
    from torchsim.sim import simulate

    fam = causal_attention_family(kg, H100, start=start)
    assert fam is not None and [(d.name, d.order) for d in fam.dims] == [("seq", 2)]
    return Extrapolator(fam)(lambda g, share: simulate(g, H100))


def test_causal_attention_is_extrapolated_as_a_quadratic_in_the_sequence() -> None:
    from torchsim.sim import simulate

    kg = attention(CAUSAL, H100)
    ex = _extrapolated(kg, start=4)
    assert ex.attrs["method"] == "extrapolated-seq" and "from 4,8,12,16,20" in ex.attrs["extrapolation"]
    full = simulate(kg, H100)
    assert ex.cycles == pytest.approx(full.cycles, rel=0.005)
    assert ex.flops == full.flops and ex.ctas == full.ctas


def test_causal_samples_that_disagree_fall_back_to_the_full_kernel() -> None:
    # 8 heads: a sample of 4-20 query blocks is 32-160 CTAs on 132 SMs, its partial wave too large a share
    from torchsim.sim import simulate

    kg = attention(AttnShape(1, 8, 8, 8192, 8192, 128, True, DType.BF16), H100)
    ex = _extrapolated(kg, start=4)
    assert ex.attrs["method"] == "exact" and "(full)" in ex.attrs["extrapolation"]
    assert ex.cycles == simulate(kg, H100).cycles


def test_a_causal_call_family_describes_the_kernel_without_building_it() -> None:
    from torchsim.lowering.kernel_call import KernelCall, KernelKind
    from torchsim.prediction.repeats import causal_call_family, graph_events

    call = KernelCall.make(KernelKind.ATTENTION_PREFILL, batch=1, heads_q=64, heads_kv=16, seq_q=8192, seq_kv=8192,
                           head_dim=128, causal=True)
    fam = causal_call_family(call, H100, start=4)
    kg = attention(CAUSAL, H100)
    assert fam is not None and (fam.name, fam.attrs, fam.flops, fam.ctas) == \
        (kg.name, kg.attrs, kg.flops, sum(c.count for c in kg.classes))
    assert fam.events == pytest.approx(graph_events(kg), rel=0.01)  # fitted from three samples' node counts
    cross = KernelCall.make(KernelKind.ATTENTION_PREFILL, batch=1, heads_q=64, heads_kv=16, seq_q=2048,
                            seq_kv=8192, head_dim=128, causal=True)  # a chunk against a longer cache: not the family
    assert causal_call_family(cross, H100, start=4) is None


def test_a_quadratic_dimension_is_checked() -> None:
    from torchsim.prediction.repeats import Dim

    with pytest.raises(ValueError, match="order must be 1"):
        Dim("seq", 100, 4, order=3)
    assert Dim("seq", 100, 10, order=2).cost([10, 20]) == pytest.approx(0.05)


def test_kernel_gemm_extrapolates_a_large_gemm_without_building_it(monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # the command reports what extrapolating the full graph gives (same time, name, FLOPs, DRAM bytes, datapath
    # fill), but builds only the truncated instances: the full template is never called
    import json

    import torchsim.cli.kernels.gemm as cli_gemm
    from torchsim.cli import main

    m, n, k = 2048, 2048, 16384
    kg = gemm(m, n, k, DType.BF16, H100)
    want = simulate_kernel(kg, H100)
    assert want.attrs["method"].startswith("extrapolated")

    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("the full GEMM graph was built")

    monkeypatch.setattr(cli_gemm, "gemm", refuse)
    assert main(["kernel", "gemm", "--m", str(m), "--n", str(n), "--k", str(k), "--hw", "h100-sxm", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["method"] == want.attrs["method"] and d["kernel"] == kg.name
    assert d["cycles"] == want.cycles and d["tflops"] == pytest.approx(kg.flops / want.time_s / 1e12)
    assert d["tensor_datapath_fill"] == pytest.approx(kg.tensor_datapath_fill(), rel=1e-6)
    assert d["config"]["k"] == k and d["output_tiles"] == 16 * 8
