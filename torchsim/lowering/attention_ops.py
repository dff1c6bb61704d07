"""`torchsim::attention`: one op for the attention eager code spells out (Gemma-2, gpt-oss), and its lowering.

Used by models.hf_segments for HF families transformers runs only with eager attention (its SDPA path refuses
them: Gemma-2's logit soft-capping, gpt-oss's attention sinks). Their eager forward is matmul, scale, [tanh
soft-cap], [mask], [sink logit], softmax, matmul over K/V repeated to every query head; serving runtimes run
it as one fused attention kernel instead — FlashAttention-2/-3 take `softcap` (flash_attn_func's `softcap`
argument, applied to each score before the softmax) and vLLM's FlashAttention-3 backend takes per-head sinks
(`s_aux`) — so capture records the op below, with the same inputs and output shape as the eager code, and it
lowers to the existing attention kernel calls, with `softcap` / `sinks` among the call's parameters.

The math the op stands for (its eager reference, `attention_reference`) is the family's eager attention; on
the meta device only its output shape matters.
"""

from __future__ import annotations

from typing import Any

import torch

from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.lowerings import PlanContext, attention_call, register_lowering
from torchsim.lowering.opgraph import OpNode


@torch.library.custom_op("torchsim::attention", mutates_args=())
def attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, sinks: torch.Tensor | None,
              scale: float, causal: bool, softcap: float, window: int) -> torch.Tensor:
    """Causal (or not) attention of query [B, Hq, Sq, D] over key/value [B, Hkv, Skv, D(v)] (Hq a multiple of
    Hkv); `softcap` > 0 caps each score at softcap * tanh(score / softcap); `sinks` [Hq] adds one logit per
    row and head that takes part in the softmax and reads no value; `window` > 0 limits each query to the last
    `window` keys. Returns [B, Hq, Sq, Dv]."""
    return attention_reference(query, key, value, sinks, scale, causal, softcap, window)


@attention.register_fake
def _attention_fake(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, sinks: torch.Tensor | None,
                    scale: float, causal: bool, softcap: float, window: int) -> torch.Tensor:
    return query.new_empty((*query.shape[:-1], value.shape[-1]))


def attention_reference(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, sinks: torch.Tensor | None,
                        scale: float, causal: bool, softcap: float, window: int) -> torch.Tensor:
    """The eager math (real tensors): what Gemma-2's and gpt-oss's eager attention compute."""
    groups = query.shape[1] // key.shape[1]
    k = key.repeat_interleave(groups, dim=1)
    v = value.repeat_interleave(groups, dim=1)
    s = torch.matmul(query, k.transpose(-1, -2)).float() * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    sq, skv = s.shape[-2], s.shape[-1]
    qpos = torch.arange(sq, device=s.device)[:, None] + (skv - sq)  # bottom-right aligned
    kpos = torch.arange(skv, device=s.device)[None, :]
    keep = torch.ones(sq, skv, dtype=torch.bool, device=s.device)
    if causal:
        keep &= kpos <= qpos
    if window > 0:
        keep &= kpos > qpos - window
    s = s.masked_fill(~keep, float("-inf"))
    if sinks is not None:
        sink = sinks.float().reshape(1, -1, 1, 1).expand(*s.shape[:-1], 1)
        p = torch.softmax(torch.cat([s, sink], dim=-1), dim=-1)[..., :-1]
    else:
        p = torch.softmax(s, dim=-1)
    return torch.matmul(p.to(v.dtype), v)


ATTENTION_OP = torch.ops.torchsim.attention.default


@register_lowering(ATTENTION_OP)
def _attention(node: OpNode, ctx: PlanContext) -> list[KernelCall]:
    """The fused attention kernel a serving runtime launches: prefill (FlashAttention) or decode (split-KV)."""
    q, k, v = node.in_specs[0], node.in_specs[1], node.in_specs[2]
    sinks = len(node.in_specs) > 3
    b, hq, sq, d = q.shape
    hkv, skv, dv = k.shape[1], k.shape[2], v.shape[-1]
    causal = bool(node.scalar(5, True))
    softcap = float(node.scalar(6, 0.0) or 0.0)
    extra: dict[str, Any] = {}
    if softcap > 0:
        extra["softcap"] = softcap
    if sinks:
        extra["sinks"] = True
    if dv != d:
        extra["head_dim_v"] = dv
    return attention_call(node, ctx, q.dtype, batch=b, heads_q=hq, heads_kv=hkv, seq_q=sq, seq_kv=skv, head_dim=d,
                          causal=causal, window=int(node.scalar(7, 0) or 0), **extra)  # the layer's own window


# ---- MLA decode (DeepSeek-V2/V3) -----------------------------------------------------------------------------
# Serving runtimes decode multi-head latent attention in its absorbed form (DeepSeek-V2 paper, arXiv:2405.04434
# §2.1.2; vLLM's MLA backends, FlashMLA): W_UK is folded into the query (q_nope @ W_UK, per head), every head
# attends over the one shared latent K/V row [c_kv | k_pe] (576 wide for kv_lora_rank 512 + rope 64) and V is
# c_kv itself; W_UV is applied to the latent output afterwards. `torchsim::mla_decode` is that attention.

@torch.library.custom_op("torchsim::mla_decode", mutates_args=())
def mla_decode(q_latent: torch.Tensor, q_pe: torch.Tensor, c_kv: torch.Tensor, k_pe: torch.Tensor, scale: float,
               causal: bool) -> torch.Tensor:
    """q_latent [B, H, Sq, R], q_pe [B, H, Sq, Dr] over c_kv [B, 1, Skv, R], k_pe [B, 1, Skv, Dr] -> [B, H, Sq, R]."""
    q = torch.cat([q_latent, q_pe], dim=-1)
    k = torch.cat([c_kv, k_pe], dim=-1)
    return attention_reference(q, k, c_kv, None, scale, causal, 0.0, 0)


@mla_decode.register_fake
def _mla_decode_fake(q_latent: torch.Tensor, q_pe: torch.Tensor, c_kv: torch.Tensor, k_pe: torch.Tensor,
                     scale: float, causal: bool) -> torch.Tensor:
    return q_latent.new_empty(q_latent.shape)


MLA_DECODE_OP = torch.ops.torchsim.mla_decode.default
FLASH_MLA_DIMS = (576, 512)  # the head dims FlashMLA serves (templates.mla)


@register_lowering(MLA_DECODE_OP)
def _mla_decode(node: OpNode, ctx: PlanContext) -> list[KernelCall]:
    """FlashMLA for DeepSeek's latent dims (576 / 512); other latent widths as an MQA split-KV decode (one K/V
    head of width R + Dr, V of width R)."""
    ql, qpe, ckv = node.in_specs[0], node.in_specs[1], node.in_specs[2]
    b, h, sq, r = ql.shape
    d, skv = r + qpe.shape[-1], ckv.shape[2]
    if (d, r) == FLASH_MLA_DIMS:
        return [ctx.call(KernelKind.MLA_DECODE, [node], ql.dtype, batch=b, heads_q=h, seq_q=sq, seq_kv=skv,
                         head_dim=d, head_dim_v=r)]
    return [ctx.call(KernelKind.ATTENTION_DECODE, [node], ql.dtype, batch=b, heads_q=h, heads_kv=1, seq_q=sq,
                     seq_kv=skv, head_dim=d, head_dim_v=r, paged=False)]
