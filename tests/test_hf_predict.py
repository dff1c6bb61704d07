"""HF LlamaForCausalLM (through HFSegmented) and torchsim's own Llama, same config: same kernel plan and the
same predicted time within 1% (issue 4, Must show)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

pytest.importorskip("transformers")

from torchsim.models.hf import build_hf_model  # noqa: E402
from torchsim.models.hf_segments import HFSegmented  # noqa: E402
from torchsim.models.registry import get_config  # noqa: E402
from torchsim.prediction.pipeline import predict  # noqa: E402


def test_hf_llama_and_own_llama_predict_the_same() -> None:
    cfg = replace(get_config("llama-small"), num_hidden_layers=3)
    args: dict[str, Any] = dict(prompt_len=96, kv_len=1024, decode_steps=3, workers=1)
    own = predict(cfg, "h100-sxm", **args)
    hf = predict(HFSegmented(build_hf_model(cfg)), "h100-sxm", **args)
    plan = [(k.kind, k.shapes, k.dtype, k.phase, k.decode_step, k.layer) for k in own.kernels]
    assert [(k.kind, k.shapes, k.dtype, k.phase, k.decode_step, k.layer) for k in hf.kernels] == plan
    assert any(k.template.endswith("/combine") for k in hf.kernels)  # KV 1024: split decode + combine
    assert hf.stats["weight_bytes"] == own.stats["weight_bytes"]
    for attr in ("ttft_s", "tpot_s", "total_s"):
        assert getattr(hf, attr) == pytest.approx(getattr(own, attr), rel=0.01), attr
