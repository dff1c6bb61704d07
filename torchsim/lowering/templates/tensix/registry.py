"""KernelCall -> Tensix KernelGraph: one builder per KernelKind, reading Tensix-only call parameters.

Call parameters beyond the kind's own: `grid` ("8x8"), `fidelity` ("LoFi".."HiFi4"), `in1_dtype` (weight
format, e.g. DType.BFP8_B or "bfp8_b"), `out_dtype`, `kv_dtype` (attention), `program` ("dram_sharded":
tt-metal's decode matmul, weights sharded over the DRAM banks; default "mcast"), `fp32_acc`, `storage_cores`;
a program config `per_core_m`, `per_core_n`, `in0_block_w`, `subblock_w` (all four) replaces the template's own
choice; `block_rows` runs it over row blocks of that many rows in turn (a prefill longer than one pass).
Kinds without a Tensix template raise NotImplementedError (the prediction API falls back to a roofline estimate
and flags the row).
"""

from __future__ import annotations

from collections.abc import Callable

from torchsim.graph import DType, KernelGraph
from torchsim.hwmodels.tensix.profiles import TensixProfile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.templates.tensix.attention import flash_decode, flash_mla_decode, sdpa_prefill
from torchsim.lowering.templates.tensix.dram_sharded import dram_sharded_matmul
from torchsim.lowering.templates.tensix.matmul import MatmulConfig, matmul
from torchsim.lowering.templates.tensix.stream import TileWork, stream_kernel

Builder = Callable[[KernelCall, TensixProfile], KernelGraph]


def _dtype(v: object, default: DType) -> DType:
    if v is None or v == "":
        return default
    return v if isinstance(v, DType) else DType.parse(str(v))


def _gemm(call: KernelCall, hw: TensixProfile) -> KernelGraph:
    batch = int(call.p("batch", 1))
    program = str(call.p("program", "") or "mcast")
    if program == "dram_sharded":
        return dram_sharded_matmul(call.p("m") * batch, call.p("n"), call.p("k"), call.dtype, hw,
                                   in1=_dtype(call.p("in1_dtype", ""), call.dtype),
                                   out=_dtype(call.p("out_dtype", ""), call.dtype),
                                   fidelity=call.p("fidelity", "") or None, fp32_acc=bool(call.p("fp32_acc", False)),
                                   cores=int(call.p("storage_cores", 0)) or None, name=call.name or "gemm")
    if program != "mcast":
        raise ValueError(f"gemm {call.name!r}: unknown Tensix matmul program {program!r}; valid: mcast, dram_sharded")
    keys = ("per_core_m", "per_core_n", "in0_block_w", "subblock_w")
    blocking = tuple(int(call.p(key, 0)) for key in keys)
    pc = call.p("program_config", ())  # a whole program config (matmul.program_config_param): run as given
    return matmul(call.p("m") * batch, call.p("n"), call.p("k"), call.dtype, hw,
                  blocking=blocking if all(blocking) else None,  # type: ignore[arg-type]
                  config=MatmulConfig(**dict(pc)) if pc else None,
                  in1=_dtype(call.p("in1_dtype", ""), call.dtype), out=_dtype(call.p("out_dtype", ""), call.dtype),
                  fidelity=call.p("fidelity", "") or None, grid=call.p("grid", "") or None,
                  name=call.name or "gemm", block_rows=int(call.p("block_rows", 0) or 0))


def _t(n: int) -> int:
    return max(1, -(-int(n) // 32))


def _rows_cols(call: KernelCall, rows: str, cols: str) -> tuple[int, int]:
    return _t(call.p(rows)), _t(call.p(cols))


# ops that only move data (ttnn.concat, typecast, reshape / to_layout copies, repeat): each tile read and written
# once, as a copy through Dst with no arithmetic
MOVES = frozenset({"copy", "cat", "stack", "to", "_to_copy", "type_as", "reshape", "contiguous", "clone", "copy_",
                   "repeat", "repeat_interleave"})


def _elementwise(call: KernelCall, hw: TensixProfile) -> KernelGraph:
    """ttnn's eltwise ops: binary add/sub/mul on the FPU, a tensor divide as a reciprocal on the SFPU and an FPU
    multiply (ttnn.divide), a divide by a scalar as an SFPU multiply by its reciprocal (ttnn's unary div), the
    data-movement ops (`MOVES`) as copies, any other op as its SFPU function (hwmodels.tensix.core.SFPU_OPS;
    one it does not know is an error naming the known ones)."""
    numel, op = int(call.p("numel")), str(call.p("op", "add"))
    n_in = int(call.p("inputs", 2 if op in ("add", "sub", "mul") else 1))
    tiles = max(1, -(-numel // 1024))
    if op in MOVES:
        work = TileWork(sfpu=(("copy", 1.0),))
    elif op == "div":
        work = TileWork(muls=1.0, sfpu=(("recip", 1.0),)) if n_in >= 2 else TileWork(sfpu=(("mul", 1.0),))
    else:  # an add over more than two inputs (fast_reduce_nc's sum of gathered partials) is n - 1 tile adds
        work = TileWork(adds=max(1, n_in - 1) if op in ("add", "sub") else 0.0, muls=1.0 if op == "mul" else 0.0,
                        sfpu=() if op in ("add", "sub", "mul") else ((op, 1.0),))
    ins = [(f"x{i}", call.dtype, 1.0) for i in range(n_in)]
    return stream_kernel(f"eltwise_{op}", tiles, ins, call.dtype, work, hw, grid=call.p("grid", "") or None,
                         flops=float(numel))


def _silu_mul(call: KernelCall, hw: TensixProfile) -> KernelGraph:
    r, c = _rows_cols(call, "rows", "hidden")
    return stream_kernel("silu_mul", r * c, [("gate", call.dtype, 1.0), ("up", call.dtype, 1.0)], call.dtype,
                         TileWork(muls=1.0, sfpu=(("silu", 1.0),), llk_calls=2.0), hw,
                         grid=call.p("grid", "") or None, flops=5.0 * call.p("rows") * call.p("hidden"))


def _rmsnorm(call: KernelCall, hw: TensixProfile, residual: bool = False) -> KernelGraph:
    r, c = _rows_cols(call, "rows", "hidden")
    ins = [("x", call.dtype, 1.0)] + ([("residual", call.dtype, 1.0)] if residual else [])
    # x^2, sum over the row (reduce), rsqrt of the row sums, x * scale (bcast), * gamma (+ residual add); LayerNorm
    # (`centered`): first a row-sum reduce and x - mean (bcast), and + beta with a bias
    centered, bias = bool(call.p("centered", False)), bool(call.p("bias", False))
    work = TileWork(adds=float(residual) + centered + bias, muls=3.0, reduces=1.0 + centered,
                    sfpu=(("rsqrt", 1.0 / c),), llk_calls=4.0 + 2 * centered + bias)
    return stream_kernel("add_rmsnorm" if residual else "rmsnorm", r * c, ins, call.dtype, work, hw,
                         grid=call.p("grid", "") or None, flops=4.0 * call.p("rows") * call.p("hidden"),
                         extra_read_bytes=c * 2048.0)


def _softmax(call: KernelCall, hw: TensixProfile) -> KernelGraph:
    r, c = _rows_cols(call, "rows", "cols")
    work = TileWork(adds=1.0, muls=1.0, reduces=2.0, sfpu=(("exp", 1.0), ("recip", 1.0 / c)), llk_calls=5.0)
    return stream_kernel("softmax", r * c, [("x", call.dtype, 1.0)], call.dtype, work, hw,
                         grid=call.p("grid", "") or None, flops=5.0 * call.p("rows") * call.p("cols"))


def _rope(call: KernelCall, hw: TensixProfile) -> KernelGraph:
    rows = int(call.p("tokens")) * (int(call.p("heads_q")) + int(call.p("heads_kv")))
    r, c = _t(rows), _t(call.p("head_dim"))
    # tt-metal's rotary_embedding_llama: x @ trans_mat (one tile matmul), x*cos + rot*sin
    work = TileWork(adds=1.0, muls=2.0, matmuls=1.0, llk_calls=4.0)
    return stream_kernel("rope", r * c, [("x", call.dtype, 1.0), ("cos", call.dtype, 1.0), ("sin", call.dtype, 1.0)],
                         call.dtype, work, hw, grid=call.p("grid", "") or None, flops=3.0 * rows * call.p("head_dim"))


def _embedding(call: KernelCall, hw: TensixProfile) -> KernelGraph:
    r, c = _rows_cols(call, "tokens", "hidden")
    return stream_kernel("embedding", r * c, [("table_rows", call.dtype, 1.0)], call.dtype, TileWork(llk_calls=1.0),
                         hw, grid=call.p("grid", "") or None)


def _argmax(call: KernelCall, hw: TensixProfile) -> KernelGraph:
    """ttnn.argmax over the vocabulary: the logits streamed once, a running max and index on the SFPU."""
    r, c = _rows_cols(call, "rows", "vocab")
    return stream_kernel("argmax", r * c, [("logits", call.dtype, 1.0)], call.dtype,
                         TileWork(sfpu=(("max", 1.0),), llk_calls=1.0), hw, grid=call.p("grid", "") or None,
                         flops=float(call.p("rows")) * call.p("vocab"))


def _router_topk(call: KernelCall, hw: TensixProfile) -> KernelGraph:
    """MoE routing as tt-metal's Mixtral runs it on a chip (models/demos/t3000/mixtral8x7b/tt/mixtral_moe.py): the
    gate logits padded to 64 columns (ttnn.topk's smallest row), a mask add, the top-k on the SFPU, a softmax over
    the kept values and the expert's weight picked out (ttnn.moe fuses these in decode): per 32-row tile of
    tokens, two column tiles through a top-k, an exp, a reciprocal of the row sum and a few adds and multiplies."""
    r, c = _t(call.p("tokens")), max(2, _t(call.p("experts")))
    work = TileWork(adds=2.0, muls=2.0, reduces=1.0, sfpu=(("topk", 1.0), ("exp", 1.0), ("recip", 1.0 / c)),
                    llk_calls=8.0)
    return stream_kernel("router_topk", r * c, [("logits", call.dtype, 1.0)], call.dtype, work, hw,
                         grid=call.p("grid", "") or None, flops=4.0 * call.p("tokens") * call.p("experts"))


def _reduce(call: KernelCall, hw: TensixProfile) -> KernelGraph:
    """A sum over a dimension (ttnn.sum / fast_reduce_nc): the input tiles streamed through FPU adds into the
    output's tiles."""
    n_in, n_out = int(call.p("numel_in")), max(1, int(call.p("numel_out")))
    out_tiles = max(1, -(-n_out // 1024))
    ratio = max(1.0, n_in / n_out)
    return stream_kernel("reduce", out_tiles, [("x", call.dtype, ratio)], call.dtype,
                         TileWork(adds=max(1.0, ratio - 1.0), llk_calls=2.0), hw, grid=call.p("grid", "") or None,
                         flops=float(n_in))


def _grouped_gemm(call: KernelCall, hw: TensixProfile) -> KernelGraph:
    """MoE experts (tt-metal's sparse_matmul: the active experts' weights only; experts without tokens cost
    nothing). When every active expert has as many 32-row tiles (decode, and a prefill whose every expert runs every
    token), one program loops over them on the same cores (`matmul(weight_sets=)`); otherwise one matmul per expert
    sized by its routed tokens, launched back to back (one CTA class each). A `program_config` param runs every
    expert's matmul with that config."""
    counts = [int(c) for c in call.p("tokens_per_expert")]
    in1 = _dtype(call.p("in1_dtype", ""), call.dtype)
    pc = call.p("program_config", ())
    config = MatmulConfig(**dict(pc)) if pc else None
    active = [c for c in counts if c > 0]
    if not active:
        raise ValueError(f"grouped GEMM {call.name!r}: no expert received tokens (tokens_per_expert={counts})")
    if len({_t(c) for c in active}) == 1:  # every active expert as many row tiles: ttnn's sparse_matmul, one
        # program looping over them, each pass reading its expert's weights
        kg = matmul(32 * _t(active[0]), call.p("n"), call.p("k"), call.dtype, hw, in1=in1,
                    fidelity=call.p("fidelity", "") or None, grid=call.p("grid", "") or None, name=call.name or
                    "grouped_gemm", config=config, weight_sets=len(active))
        flops = 2.0 * sum(active) * call.p("n") * call.p("k")
        return KernelGraph(kg.name, kg.classes, flops=flops, dram_bytes=kg.dram_bytes,
                           attrs={**kg.attrs, "template": "tensix_moe_sparse_matmul", "experts": len(active)})
    parts = [matmul(c, call.p("n"), call.p("k"), call.dtype, hw, in1=in1, fidelity=call.p("fidelity", "") or None,
                    grid=call.p("grid", "") or None, name=f"expert{e}", prefix=f"e{e}.", config=config)
             for e, c in enumerate(counts) if c > 0]
    classes = tuple(c for kg in parts for c in kg.classes)
    return KernelGraph(call.name or "grouped_gemm", classes, flops=sum(kg.flops for kg in parts),
                       dram_bytes=sum(kg.dram_bytes for kg in parts),
                       attrs={**parts[0].attrs, "template": "tensix_moe_expert_matmuls", "experts": len(parts),
                              "grid": (max(kg.attrs["grid"][0] for kg in parts),
                                       max(kg.attrs["grid"][1] for kg in parts))})


def _attention(call: KernelCall, hw: TensixProfile) -> KernelGraph:
    from torchsim.lowering.templates.varlen import not_on_tensix

    not_on_tensix(call, hw.name)  # varlen attention: no tt-metal kernel modelled
    kv = _dtype(call.p("kv_dtype", ""), call.dtype)
    fid = call.p("fidelity", "") or "HiFi2"
    grid = call.p("grid", "") or None
    if call.kind is KernelKind.ATTENTION_DECODE:
        return flash_decode(call.p("batch"), call.p("heads_q"), call.p("heads_kv"), call.p("seq_kv"),
                            call.p("head_dim"), call.dtype, kv, hw, fidelity=fid, grid=grid,
                            window=call.p("window", 0))
    if call.kind is KernelKind.MLA_DECODE:
        if call.p("seq_q", 1) != 1:
            raise ValueError(f"MLA decode {call.name!r}: {call.p('seq_q')} query tokens per sequence; tt-metal's flash "
                             "MLA decode takes one (speculative decoding is not modelled on Tensix)")
        return flash_mla_decode(call.p("batch"), call.p("heads_q"), call.p("seq_kv"), call.p("head_dim"),
                                call.p("head_dim_v"), call.dtype, kv, hw, fidelity=fid, grid=grid)
    return sdpa_prefill(call.p("batch"), call.p("heads_q"), call.p("heads_kv"), call.p("seq_q"), call.p("seq_kv"),
                        call.p("head_dim"), bool(call.p("causal", True)), call.dtype, kv, hw, fidelity=fid, grid=grid,
                        window=call.p("window", 0), head_dim_v=call.p("head_dim_v", 0))


TENSIX_TEMPLATES: dict[KernelKind, Builder] = {
    KernelKind.GROUPED_GEMM: _grouped_gemm,
    KernelKind.ATTENTION_PREFILL: _attention,
    KernelKind.ATTENTION_DECODE: _attention,
    KernelKind.MLA_DECODE: _attention,
    KernelKind.GEMM: _gemm,
    KernelKind.ELEMENTWISE: _elementwise,
    KernelKind.SILU_MUL: _silu_mul,
    KernelKind.RMSNORM: _rmsnorm,
    KernelKind.ADD_RMSNORM: lambda call, hw: _rmsnorm(call, hw, residual=True),
    KernelKind.SOFTMAX: _softmax,
    KernelKind.ROPE: _rope,
    KernelKind.EMBEDDING: _embedding,
    KernelKind.ARGMAX: _argmax,
    KernelKind.ROUTER_TOPK: _router_topk,
    KernelKind.REDUCE: _reduce,
}


def build_tensix_kernel(call: KernelCall, hw: TensixProfile) -> KernelGraph:
    fn = TENSIX_TEMPLATES.get(call.kind)
    if fn is None:
        raise NotImplementedError(f"no tensix template for {call.kind.value} yet")
    return fn(call, hw)
