"""The ops tt_transformers launches for one torchsim KernelCall on a single Tensix device: its own op sequence
(separate FF1/FF3 matmuls, residual add and RMSNorm as two ops, RoPE for Q and K, one KV-cache update per tensor)
plus the data-movement ops between them (sharded<->interleaved conversions, head split and concat).

Used by model_config.adapt_plan. Each added op keeps the call's name, layer and source with a suffix naming the
tt-metal op, so tables show where the time goes. Sources: tt-metal models/tt_transformers/tt/attention.py
(forward_decode, forward_prefill), mlp.py, decoder.py. Every op costs one program dispatch (hwmodels/tensix/
launch.py); on a single device the CCL calls (all-reduce/all-gather) are no-ops and launch nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from torchsim.lowering.kernel_call import KernelCall, KernelKind


def derive(call: KernelCall, suffix: str, kind: KernelKind, **params: object) -> KernelCall:
    """A kernel tt-metal launches for `call` (same layer, phase and source), named `call.name` + `.suffix`."""
    return replace(call, kind=kind, name=f"{call.name}.{suffix}", params=tuple(sorted(params.items())))


def _copy(call: KernelCall, op: str, numel: int) -> KernelCall:
    """A data-movement op (no math): modelled as a streaming copy of `numel` elements."""
    return derive(call, op, KernelKind.ELEMENTWISE, numel=max(1, int(numel)), inputs=1, outputs=1, op="copy")


def _qkv(call: KernelCall, phase: str) -> list[KernelCall]:
    rows, n = int(call.p("m")) * int(call.p("batch", 1)), int(call.p("n"))
    if phase == "decode":  # DRAM-sharded output -> L1 interleaved bf16 -> heads height-sharded per user
        return [call, _copy(call, "sharded_to_interleaved", rows * n),
                _copy(call, "nlp_create_qkv_heads_decode", rows * n)]
    return [call, _copy(call, "nlp_create_qkv_heads", rows * n)]


def _split_gate_up(call: KernelCall) -> list[KernelCall]:
    """tt_transformers runs FF1 (w1) and FF3 (w3) as two matmuls; the plan fused them into one GEMM."""
    half = int(call.p("n")) // 2
    params = {**dict(call.params), "n": half}
    return [replace(call, name=f"{call.name}.w1", params=tuple(sorted(params.items()))),
            replace(call, name=f"{call.name}.w3", params=tuple(sorted(params.items())))]


def _rope(call: KernelCall) -> list[KernelCall]:
    """rotary_embedding_llama once for Q and once for K."""
    base = {k: v for k, v in call.params}
    return [derive(call, "rotary_q", KernelKind.ROPE, **{**base, "heads_kv": 0}),
            derive(call, "rotary_k", KernelKind.ROPE, **{**base, "heads_q": 0})]


def _kv_write(call: KernelCall, phase: str) -> list[KernelCall]:
    half = int(call.p("numel")) // 2
    if phase == "decode":  # paged_update_cache for K, then for V
        return [_copy(call, "paged_update_cache_k", half), _copy(call, "paged_update_cache_v", half)]
    # prefill: typecast to the cache format, then fill_cache, for K and for V
    return [_copy(call, "typecast_k", half), _copy(call, "typecast_v", half), _copy(call, "fill_cache_k", half),
            _copy(call, "fill_cache_v", half)]


def _attention(call: KernelCall, phase: str) -> list[KernelCall]:
    b, hq, d = int(call.p("batch")), int(call.p("heads_q")), int(call.p("head_dim"))
    if phase == "decode":  # SDPA output DRAM -> height-sharded per user -> heads concatenated, width-sharded
        out = b * hq * d
        return [call, _copy(call, "to_memory_config", out), _copy(call, "nlp_concat_heads_decode", out)]
    out = b * int(call.p("seq_q")) * hq * d
    return [_copy(call, "typecast_q", out), call, _copy(call, "nlp_concat_heads", out)]


def _lm_head(call: KernelCall, split_cols: int) -> list[KernelCall]:
    """LMHead: the vocabulary in splits of at most `split_cols` columns (L1 limit), one DRAM-sharded matmul and
    one to_memory_config each, then a concat (tt_transformers lm_head.py)."""
    n, rows = int(call.p("n")), int(call.p("m")) * int(call.p("batch", 1))
    sizes = [split_cols] * (-(-n // split_cols) - 1)
    sizes.append(n - sum(sizes))
    if len(sizes) == 1:
        return [call]
    out: list[KernelCall] = []
    for i, cols in enumerate(sizes):
        part = replace(call, name=f"{call.name}.split{i}",
                       params=tuple(sorted({**dict(call.params), "n": cols}.items())))
        out += [part, _copy(part, "to_memory_config", rows * cols)]
    return [*out, _copy(call, "concat", rows * n)]


def _add_norm(call: KernelCall) -> list[KernelCall]:
    rows, hidden = int(call.p("rows")), int(call.p("hidden"))
    add = derive(call, "residual_add", KernelKind.ELEMENTWISE, numel=rows * hidden, inputs=2, outputs=1, op="add")
    return [add, derive(call, "rms_norm", KernelKind.RMSNORM, rows=rows, hidden=hidden)]


def _unsplit(kt: int) -> int:
    return 1 << 30


def tt_ops(call: KernelCall, phase: str, lm_head_cols: Callable[[int], int] = _unsplit) -> list[KernelCall]:
    """The tt-metal ops for `call` in `phase` ("prefill" | "decode"), in launch order; the LM head is split in
    chunks of `lm_head_cols(hidden size in tiles)` vocabulary columns.

    >>> c = KernelCall.make(KernelKind.ADD_RMSNORM, name="layers.1.input_layernorm", rows=1, hidden=4096)
    >>> [o.name for o in tt_ops(c, "decode")]
    ['layers.1.input_layernorm.residual_add', 'layers.1.input_layernorm.rms_norm']
    """
    name = call.name
    last = name.split(".")[-1]
    # HF's fused projections (Phi-3's qkv_proj, gate_up_proj) are split at load by tt_transformers
    # (load_checkpoints.split_hf_keys) into its wqkv and its w1 / w3
    if call.kind is KernelKind.GEMM and (("q_proj" in name and "v_proj" in name) or last == "qkv_proj"):
        return _qkv(call, phase)
    if call.kind is KernelKind.GEMM and (("gate_proj" in name and "up_proj" in name) or last == "gate_up_proj"):
        return _split_gate_up(call)
    if call.kind is KernelKind.GEMM and last == "lm_head":
        return _lm_head(call, lm_head_cols(-(-int(call.p("k")) // 32)))
    if call.kind is KernelKind.ROPE:
        return _rope(call)
    if call.kind is KernelKind.ELEMENTWISE and call.p("op", "") == "kv_cache_write":
        return _kv_write(call, phase)
    if call.kind in (KernelKind.ATTENTION_DECODE, KernelKind.ATTENTION_PREFILL):
        return _attention(call, phase)
    if call.kind is KernelKind.ADD_RMSNORM:
        return _add_norm(call)
    return [call]
