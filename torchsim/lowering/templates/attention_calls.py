"""KernelCall adapters of the attention templates: prefill, Flash-Decoding and FlashMLA kernel calls (uniform, or
varlen with per-sequence lengths: torchsim.lowering.templates.varlen builds those calls).

`CALLS` (kind -> builder of the kernel a call launches first) is registered by torchsim.lowering.templates;
`LAUNCHES` (kind -> builder of every launch, in order) serves `build_kernels` for the decode kinds, whose
split kernel is followed by a combine kernel when the K/V sequence is split.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchsim.graph import KernelGraph
from torchsim.hwmodels.gpu import Arch
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.templates.attention import attention
from torchsim.lowering.templates.attention_config import AttnShape, AttnVariant
from torchsim.lowering.templates.decode import flash_decode, flash_mla, triton_mla
from torchsim.lowering.templates.varlen import call_kv_lens, call_seqs

DEFAULT_PAGE_TOKENS = 16  # `paged=True` without a size: vLLM's default block size


def shape_of(call: KernelCall) -> AttnShape:
    """The attention shape a prefill or decode call describes (it checks itself)."""
    return AttnShape(call.p("batch"), call.p("heads_q"), call.p("heads_kv"), call.p("seq_q"), call.p("seq_kv"),
                     call.p("head_dim"), bool(call.p("causal", False)), call.dtype, call.p("head_dim_v", 0),
                     call.p("window", 0), float(call.p("softcap", 0.0)), bool(call.p("sinks", False)))


def _variant(call: KernelCall) -> AttnVariant | None:
    name = call.p("variant", "")
    return AttnVariant.parse(name) if name else None


def page_tokens(call: KernelCall) -> int:
    paged = call.p("page_size", call.p("paged", 0))
    if paged is True:
        return DEFAULT_PAGE_TOKENS
    return int(paged or 0)


def prefill(call: KernelCall, hw: Any) -> KernelGraph:
    """The FlashAttention forward; with `seqs` (varlen.varlen_prefill_call) the varlen kernel over those chunks."""
    return attention(shape_of(call), hw, variant=_variant(call), seqs=call_seqs(call))


def decode_launches(call: KernelCall, hw: Any) -> list[KernelGraph]:
    """Flash-Decoding's launches; with `kv_lens` (varlen.varlen_decode_call) over sequences of those lengths."""
    return flash_decode(shape_of(call), hw, call.p("num_splits", 0) or None, page_tokens(call), _variant(call),
                        kv_lens=call_kv_lens(call))


def mla_launches(call: KernelCall, hw: Any) -> list[KernelGraph]:
    """FlashMLA on sm90+; on sm80, which FlashMLA does not run on, vLLM's Triton MLA decode (TRITON_MLA, the
    backend vLLM selects there)."""
    if getattr(hw, "arch", None) is Arch.SM80:
        return triton_mla(call.p("batch"), call.p("heads_q"), call.p("seq_q"), call.p("seq_kv"), hw,
                          call.p("head_dim", 576), call.p("head_dim_v", 512), call.dtype,
                          call.p("num_splits", 0) or None, call.p("page_size", 16))
    return flash_mla(call.p("batch"), call.p("heads_q"), call.p("seq_q"), call.p("seq_kv"), hw,
                     call.p("head_dim", 576), call.p("head_dim_v", 512), call.dtype,
                     call.p("num_splits", 0) or None, call.p("page_size", 64))


LAUNCHES: dict[KernelKind, Callable[[KernelCall, Any], list[KernelGraph]]] = {
    KernelKind.ATTENTION_DECODE: decode_launches,
    KernelKind.MLA_DECODE: mla_launches,
}


def _first(fn: Callable[[KernelCall, Any], list[KernelGraph]]) -> Callable[[KernelCall, Any], KernelGraph]:
    def build(call: KernelCall, hw: Any) -> KernelGraph:
        return fn(call, hw)[0]
    build.__name__ = f"{fn.__name__}_first"
    return build


CALLS: dict[KernelKind, Callable[[KernelCall, Any], KernelGraph]] = {
    KernelKind.ATTENTION_PREFILL: prefill,
    **{kind: _first(fn) for kind, fn in LAUNCHES.items()},
}
