"""KernelCall: one kernel launch of a KernelPlan, the unit that templates turn into tile graphs.

Lowering (capture + plan) produces KernelCalls; `torchsim.lowering.templates.build_kernel(call, hw)` turns a
call into a KernelGraph; the engine simulates it. `KernelCall.key()` excludes where the call came from, so
identical kernels of different layers are simulated once (memoisation).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from torchsim.graph.kinds import DType


class KernelKind(Enum):
    """What a kernel computes. Each kind's `params` keys are listed beside it."""

    GEMM = "gemm"  # m, n, k, epilogue ("none"|"silu"|"bias"|"residual"), batch (default 1)
    GROUPED_GEMM = "grouped_gemm"  # tokens_per_expert (tuple), n, k, epilogue
    ATTENTION_PREFILL = "attention_prefill"  # batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, causal
    ATTENTION_DECODE = "attention_decode"  # batch, heads_q, heads_kv, seq_q, seq_kv, head_dim, paged
    MLA_DECODE = "mla_decode"  # batch, heads_q, seq_q, seq_kv, head_dim (576), head_dim_v (512)
    RMSNORM = "rmsnorm"  # rows, hidden
    ADD_RMSNORM = "add_rmsnorm"  # rows, hidden
    ROPE = "rope"  # tokens, heads_q, heads_kv, head_dim
    SILU_MUL = "silu_mul"  # rows, hidden (output width)
    ELEMENTWISE = "elementwise"  # numel, inputs, outputs, op (e.g. "add", "mul", "copy", "silu")
    SOFTMAX = "softmax"  # rows, cols
    EMBEDDING = "embedding"  # tokens, hidden, vocab
    ROUTER_TOPK = "router_topk"  # tokens, experts, top_k
    ARGMAX = "argmax"  # rows, vocab
    REDUCE = "reduce"  # numel_in, numel_out
    COLLECTIVE = "collective"  # op ("all-reduce"|"all-gather"), nbytes (per rank, as nccl-tests), ranks, system


@dataclass(frozen=True, slots=True)
class KernelCall:
    """A kernel launch: what it computes (kind, params, dtype) and where it came from (name, layer, source)."""

    kind: KernelKind
    params: tuple[tuple[str, Any], ...]  # sorted (name, value) pairs; values are ints, strs, bools or tuples
    dtype: DType = DType.BF16
    name: str = ""  # e.g. "layers.0.attn.qkv_proj"
    phase: str = "prefill"  # "prefill" | "decode"
    layer: int | None = None
    stream: int = 0
    module_path: str = ""
    source: str = ""  # "file.py:123" of the model code line
    fx_nodes: tuple[str, ...] = field(default=(), compare=False)

    @staticmethod
    def make(kind: KernelKind, dtype: DType = DType.BF16, *, name: str = "", phase: str = "prefill",
             layer: int | None = None, stream: int = 0, module_path: str = "", source: str = "",
             fx_nodes: tuple[str, ...] = (), **params: Any) -> KernelCall:
        """Build a call from keyword params: `KernelCall.make(KernelKind.GEMM, m=1, n=4096, k=4096)`."""
        frozen = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in params.items()))
        return KernelCall(kind, frozen, dtype, name, phase, layer, stream, module_path, source, fx_nodes)

    def p(self, name: str, default: Any = None) -> Any:
        if _READS:
            _READS[-1].add(name)
        for k, v in self.params:
            if k == name:
                return v
        if default is None:
            raise KeyError(f"{self.kind.value} kernel {self.name!r} has no parameter {name!r}")
        return default

    def with_params(self, **params: Any) -> KernelCall:
        """This call with `params` added or replaced; what it is and where it came from stay."""
        return replace(self, params=tuple(sorted({**dict(self.params), **params}.items())))

    def key(self) -> tuple[Any, ...]:
        """Identity for memoisation: what is computed, not where it came from."""
        return (self.kind, self.params, self.dtype)


_READS: list[set[str]] = []  # the parameter names `KernelCall.p` was asked for, per open `params_read()`


@contextmanager
def params_read() -> Iterator[set[str]]:
    """The names of the parameters read through `KernelCall.p` (of any call) inside the block: what a template
    used, so a parameter a user gave that no template read can be named (`torchsim sweep kernel --param`).

    >>> call = KernelCall.make(KernelKind.RMSNORM, rows=4, hidden=64, colour="blue")
    >>> with params_read() as seen:
    ...     _ = call.p("rows"), call.p("hidden")
    >>> sorted(seen)
    ['hidden', 'rows']
    """
    seen: set[str] = set()
    _READS.append(seen)
    try:
        yield seen
    finally:
        _READS.pop()


def even_split(rows: int, experts: int) -> tuple[int, ...]:
    """A GROUPED_GEMM call's `tokens_per_expert` when no routing is given: `rows` (tokens x top_k) over `experts`
    as evenly as whole rows go, the remainder to the lowest indices (torchsim.lowering.lowerings.tokens_per_expert;
    torchsim.prediction.speculate names the same calls before torch is imported)."""
    base, extra = divmod(rows, experts)
    return tuple(base + (1 if e < extra else 0) for e in range(experts))
