"""Kernels sized by a user-given number stay bounded: a batched GEMM of many tiles and a very long attention
prompt are built without per-CTA Python rows and extrapolated, not simulated in full (issue 14)."""

from __future__ import annotations

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
