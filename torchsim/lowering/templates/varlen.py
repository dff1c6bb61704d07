"""Variable-length attention calls: the varlen prefill and decode kernels a continuous-batching engine launches.

An engine iteration mixes prefill chunks of different lengths (FlashAttention's varlen forward over
`cu_seqlens_q/k`: chunk i has q_i new tokens and sees kv_i >= q_i keys, the kv_i - q_i before it already cached)
and decode sequences at different K/V lengths (Flash-Decoding over a paged cache with `seqused_k`). These
helpers build the KernelCalls (`seqs` on ATTENTION_PREFILL, `kv_lens` on ATTENTION_DECODE) that
torchsim.lowering.templates.attention / .decode build and torchsim.prediction.kernel_sim simulates; they check
their lengths and name the item that is wrong. Tensix profiles have no varlen kernels (`NotModelledError`).

Example:
    >>> call = varlen_prefill_call([(128, 128), (512, 1024)], 32, 8, 128)
    >>> call.p("batch"), call.p("seq_q"), call.p("seq_kv")
    (2, 512, 1024)
    >>> varlen_decode_call([100, 2000], 32, 8, 128).p("seq_kv")
    2000
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from numbers import Integral
from typing import Any

from torchsim.graph import DType
from torchsim.lowering.kernel_call import KernelCall, KernelKind

DEFAULT_PAGE_TOKENS = 16  # vLLM's default KV block size (as attention_calls.DEFAULT_PAGE_TOKENS)


class NotModelledError(ValueError):
    """A call torchsim has no model for on this profile (kernel_sim raises it rather than fall back to a roofline)."""


def _length(item: Any, what: str, where: str) -> int:
    if isinstance(item, bool) or not isinstance(item, Integral):  # (numpy integers are Integral)
        if isinstance(item, float) and item.is_integer():
            return _length(int(item), what, where)
        raise ValueError(f"{where}: {what} must be a positive integer, got {item!r}")
    if item <= 0:
        raise ValueError(f"{where}: {what} must be a positive integer, got {item}")
    return int(item)


def check_seqs(seqs: Iterable[Any], what: str = "seqs", shown: Sequence[str] = ()) -> tuple[tuple[int, int], ...]:
    """(q_len, kv_len) pairs as ints, each q_len <= kv_len; ValueError naming the first bad item (as `what` item i,
    shown as `shown[i]` where given: the command line's text)."""
    items = list(seqs) if not isinstance(seqs, (str, bytes)) else None
    if not items:
        raise ValueError(f"{what} must list at least one (q_len, kv_len) pair, got {seqs!r}")
    out = []
    for i, item in enumerate(items):
        where = f"{what} item {i} ({shown[i] if i < len(shown) else repr(item)})"
        if isinstance(item, (str, bytes)) or not isinstance(item, Sequence) or len(item) != 2:
            raise ValueError(f"{where}: must be a (q_len, kv_len) pair")
        q, kv = _length(item[0], "q_len", where), _length(item[1], "kv_len", where)
        if q > kv:
            raise ValueError(f"{where}: q_len {q} > kv_len {kv} (a chunk's keys include its own queries)")
        out.append((q, kv))
    return tuple(out)


def check_kv_lens(kv_lens: Iterable[Any], what: str = "kv_lens", shown: Sequence[str] = ()) -> tuple[int, ...]:
    """K/V lengths as ints; ValueError naming the first bad item (as check_seqs)."""
    items = list(kv_lens) if not isinstance(kv_lens, (str, bytes)) else None
    if not items:
        raise ValueError(f"{what} must list at least one K/V length, got {kv_lens!r}")
    return tuple(_length(kv, "the K/V length", f"{what} item {i} ({shown[i] if i < len(shown) else repr(kv)})")
                 for i, kv in enumerate(items))


def varlen_prefill_call(seqs: Iterable[Any], heads_q: int, heads_kv: int, head_dim: int, dtype: DType = DType.BF16,
                        *, causal: bool = True, name: str = "", layer: int | None = None, variant: str = "",
                        **extra: Any) -> KernelCall:
    """The varlen FlashAttention forward over prefill chunks `seqs` = [(q_len, kv_len), ...] (causal, bottom-right
    aligned per chunk). `extra`: head_dim_v, window, softcap as on a uniform ATTENTION_PREFILL call."""
    s = check_seqs(seqs)
    params = {"batch": len(s), "seq_q": max(q for q, _ in s), "seq_kv": max(kv for _, kv in s), "seqs": s,
              **({"variant": variant} if variant else {}), **extra}
    return KernelCall.make(KernelKind.ATTENTION_PREFILL, dtype, name=name, phase="prefill", layer=layer,
                           heads_q=heads_q, heads_kv=heads_kv, head_dim=head_dim, causal=bool(causal), **params)


def varlen_decode_call(kv_lens: Iterable[Any], heads_q: int, heads_kv: int, head_dim: int,
                       dtype: DType = DType.BF16, *, kv_dtype: DType | None = None, seq_q: int = 1,
                       page_size: int = DEFAULT_PAGE_TOKENS, name: str = "", layer: int | None = None,
                       variant: str = "", num_splits: int = 0, **extra: Any) -> KernelCall:
    """Flash-Decoding over sequences at K/V lengths `kv_lens`, `seq_q` new tokens each, reading a paged cache of
    `page_size`-token pages (0: contiguous). On GPUs the split kernel runs in the cache's dtype (`kv_dtype`, e.g.
    FP8 as `predict(kv_cache="fp8")` makes it; default `dtype`); `num_splits` 0 = FlashAttention's heuristic."""
    kv = check_kv_lens(kv_lens)
    params = {"batch": len(kv), "seq_q": seq_q, "seq_kv": max(kv), "kv_lens": kv, "page_size": page_size,
              **({"variant": variant} if variant else {}), **({"num_splits": num_splits} if num_splits else {}),
              **extra}
    return KernelCall.make(KernelKind.ATTENTION_DECODE, kv_dtype or dtype, name=name, phase="decode", layer=layer,
                           heads_q=heads_q, heads_kv=heads_kv, head_dim=head_dim, **params)


def is_varlen(call: KernelCall) -> bool:
    """Whether an attention call carries per-sequence lengths (`seqs` or `kv_lens`)."""
    return any(k in ("seqs", "kv_lens") for k, _ in call.params)


def call_seqs(call: KernelCall) -> tuple[tuple[int, int], ...] | None:
    """A prefill call's checked (q_len, kv_len) pairs, consistent with its batch / seq_q / seq_kv, or None."""
    raw = call.p("seqs", ())
    if not raw:
        return None
    s = check_seqs(raw)
    _consistent(call, len(s), max(kv for _, kv in s), max(q for q, _ in s))
    return s


def call_kv_lens(call: KernelCall) -> tuple[int, ...] | None:
    """A decode call's checked K/V lengths, consistent with its batch / seq_kv, or None."""
    raw = call.p("kv_lens", ())
    if not raw:
        return None
    kv = check_kv_lens(raw)
    _consistent(call, len(kv), max(kv), None)
    return kv


def _consistent(call: KernelCall, batch: int, seq_kv: int, seq_q: int | None) -> None:
    want = {"batch": batch, "seq_kv": seq_kv, **({"seq_q": seq_q} if seq_q is not None else {})}
    given = {k: call.p(k, "missing") for k in want}
    for k, v in want.items():
        if given[k] != v:
            raise ValueError(f"{call.kind.value} call {call.name!r}: {k}={given.get(k)} but its per-sequence lengths "
                             f"give {v} ({'the number of sequences' if k == 'batch' else 'the longest'}); build it "
                             "with varlen_prefill_call / varlen_decode_call")


def kv_lengths(call: KernelCall) -> list[int]:
    """Each sequence's K/V length in an attention call: its kv_lens or seqs, or batch x seq_kv."""
    if call.p("kv_lens", ()):
        return [int(k) for k in call.p("kv_lens")]
    if call.p("seqs", ()):
        return [int(kv) for _, kv in call.p("seqs")]
    return [int(call.p("seq_kv"))] * int(call.p("batch"))


def kv_tokens(call: KernelCall) -> int:
    """K/V tokens an attention call reads over its batch: the sum of its sequences' lengths."""
    return sum(kv_lengths(call))


def cached_kv_tokens(call: KernelCall) -> int:
    """K/V tokens the cache holds for an attention call's sequences and its kernels read from it: under a sliding
    window the last `window` keys of each sequence (vLLM's hybrid KV-cache manager frees the blocks that leave a
    sliding layer's window; HF's sliding-window cache is one window long), else every key (kv_tokens)."""
    window = int(call.p("window", 0) or 0)
    return sum(min(n, window) if window > 0 else n for n in kv_lengths(call))


def not_on_tensix(call: KernelCall, hw_name: str) -> None:
    """Raise NotModelledError for a varlen call on a Tensix profile."""
    if is_varlen(call):
        raise NotModelledError(f"{call.kind.value} call {call.name!r}: variable-length attention (seqs / kv_lens) is "
                               f"not modelled on Tensix profiles ({hw_name}); use a GPU profile or one call per "
                               "sequence length")
