"""Node-writing helpers shared by the attention templates (prefill, Flash-Decoding, FlashMLA) and CTA grids.

An `AttnWriter` wraps a GraphBuilder for one CTA class. Tiles of Q, K, V and O carry coordinates affine in
the CTA's parameters (`b` batch, `h` query head, `hk` K/V head, `m` query block, `n0` first K/V block), so
one template serves every CTA of the class and L2 reuse of K/V across query blocks and GQA heads shows up.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from torchsim.graph import DType, GraphBuilder, Op, Space, TileDesc, Unit, aff
from torchsim.graph.tile import Affine
from torchsim.hwmodels.gpu import mma_datapath_flop
from torchsim.lowering.templates.attention_config import (
    ALU_SLOT_COST,
    DIV_FULL_FMA_SLOTS,
    EXP2_NOFTZ_SLOTS,
    FLOP_PER_LANE_OP,
    MASK_LANE_OPS,
    POLY_EXP_LANE_OPS,
    SOFTMAX_LANE_OPS,
)

OUT_DTYPE = {DType.FP8_E4M3: DType.BF16, DType.FP8_E5M2: DType.BF16}
# the sink logit at the end of a row (AttnWriter.sink): exp2(m - m') and exp2(sink - m') on the SFU; max, the two
# exponent arguments, l * correction + exp (FMA pipe)
SINK_EXPS = 2.0
SINK_LANE_OPS = 5.0


@dataclass
class AttnWriter:
    b: GraphBuilder
    dtype: DType
    head_dim: int
    head_dim_v: int
    tma: bool  # True: TMA bulk copies (sm90+); False: cp.async through the LD/ST unit (sm80)
    kv_head: str = "hk"  # CTA parameter naming the K/V head of the tile
    q_head: str = "h"  # CTA parameter naming the query head (packed GQA decoding: the K/V head)
    kv_base: str = ""  # CTA parameter giving the CTA's first K/V block (split-KV); "" = block 0
    split: str = ""  # CTA parameter of the K/V split: O goes to FP32 partials plus a log-sum-exp per row
    kv_gather: bool = False  # paged K/V with pages smaller than a tile: cp.async gathers instead of TMA
    pages: int = 0  # paged K/V: block-table entries the CTA reads first (0: contiguous K/V)
    datapath_rows: int = 1  # MMA rows filling the tensor datapath: shorter MMAs take as long (attention_config)
    tmem_accumulators: bool = False  # sm100: MMA results land in TMEM, not in the issuing warps' registers
    mma_scale: float = 1.0  # datapath time per FLOP relative to the tensor rate (mma.sync: attention_config)
    softcap: bool = False  # logit soft-capping: a tanh on the SFU and two FMULs per score (AttnShape.softcap)
    sinks: bool = False  # a sink logit per row folded into the row max and sum at the end (AttnShape.sinks)
    _table: int = -1
    _last_exp: dict[int, int] = field(default_factory=dict)  # per group: its latest exponential node

    # -- global tiles -------------------------------------------------------------------------------------
    def _load(self, group: int, tile: TileDesc, name: str, gather: bool = False) -> int:
        op, unit = (Op.TMA_LOAD, Unit.TMA) if self.tma and not gather else (Op.CP_ASYNC, Unit.LDST)
        return self.b.node(group, op, unit, work=tile.nbytes, tile=tile, name=name)

    def load_q(self, group: int, rows: int, row_block: Affine, name: str = "load_Q") -> int:
        t = TileDesc(Space.GLOBAL, self.dtype, (1, 1, rows, self.head_dim), "Q",
                     (aff(b=1), aff(**{self.q_head: 1}), row_block, aff()))
        return self._load(group, t, name)

    def kv_block(self, n: int, i: int) -> Affine:
        """Coordinate of the i-th visited K/V block: FlashAttention walks blocks from the last (the masked
        ones at the diagonal) to the first."""
        return aff(n - 1 - i, **({self.kv_base: 1} if self.kv_base else {}))

    def load_kv(self, group: int, which: str, rows: int, block: Affine, name: str, dim: int | None = None) -> int:
        d = dim or (self.head_dim if which == "K" else self.head_dim_v)
        t = TileDesc(Space.GLOBAL, self.dtype, (1, 1, rows, d), which,
                     (aff(b=1), aff(**{self.kv_head: 1}), block, aff()))
        if self.pages and self._table < 0:
            self._table = self.page_table(group, self.pages)
        ld = self._load(group, t, name, gather=self.kv_gather)
        if self._table >= 0:
            self.b.data(self._table, ld)  # the page index must arrive before the page can be fetched
        return ld

    def page_table(self, group: int, pages: int) -> int:
        """The CTA's block-table entries (int32 page indices), read before its first paged K/V load."""
        t = TileDesc(Space.GLOBAL, DType.INT32, (1, max(1, pages)), "block_table",
                     (aff(b=1), aff(**({self.kv_base: 1} if self.kv_base else {}))))
        return self.b.node(group, Op.LDG, Unit.LDST, work=t.nbytes, tile=t, name="ldg_block_table")

    def store_o(self, group: int, rows: int, row_block: Affine, name: str, via_smem: bool = True,
                col_parts: int = 1, col: int = 0) -> list[int]:
        """O tile (column part `col` of `col_parts`): registers -> shared memory -> TMA store (sm90+), or ->
        global (sm80). Under split-KV the tile is an FP32 partial of its split, plus each row's log-sum-exp."""
        head = aff(**{self.q_head: 1})
        cols = self.head_dim_v // col_parts
        if self.split:
            tile = TileDesc(Space.GLOBAL, DType.FP32, (1, 1, 1, rows, cols + 1), "O_partial",
                            (aff(**{self.split: 1}), aff(b=1), head, row_block, aff(col)))
            return [self.b.node(group, Op.STG, Unit.LDST, work=tile.nbytes, tile=tile, name=name)]
        out = OUT_DTYPE.get(self.dtype, self.dtype)
        tile = TileDesc(Space.GLOBAL, out, (1, 1, rows, cols), "O", (aff(b=1), head, row_block, aff(col)))
        nodes = []
        if via_smem:
            st = TileDesc(Space.SHARED, out, (rows, cols), "O_smem")
            nodes.append(self.b.node(group, Op.STS, Unit.LDST, work=st.nbytes, tile=st, name=f"sts_{name}"))
        if self.tma:
            nodes.append(self.b.node(group, Op.TMA_STORE, Unit.TMA, work=tile.nbytes, tile=tile, name=name))
        else:
            nodes.append(self.b.node(group, Op.STG, Unit.LDST, work=tile.nbytes, tile=tile, name=name))
        for a, c in zip(nodes, nodes[1:]):
            self.b.data(a, c)
        return nodes

    # -- compute ------------------------------------------------------------------------------------------
    def mma(self, group: int, m: int, n: int, k: int, name: str, smem_operand_bytes: float = 0.0) -> int:
        """m x n x k MMA; `smem_operand_bytes` are the operands it reads from shared memory. Its work is what it
        holds the tensor datapath for: m padded up to `datapath_rows`, times `mma_scale` for an instruction
        slower than the tensor rate (mma.sync on sm90/sm100)."""
        work = mma_datapath_flop(m, n, k, self.datapath_rows) * self.mma_scale
        return self.b.node(group, Op.MMA, Unit.TENSOR, work=work, name=name, smem_bytes=smem_operand_bytes)

    def qk(self, group: int, rows: int, cols: int, name: str, q_in_smem: bool = True) -> int:
        e = self.dtype.nbytes
        operands = ((rows if q_in_smem else 0) + cols) * self.head_dim * e
        return self.mma(group, rows, cols, self.head_dim, name, operands)

    def pv(self, group: int, rows: int, cols: int, name: str, p_in_smem: bool = False) -> int:
        e = self.dtype.nbytes
        operands = (cols * self.head_dim_v + (rows * cols if p_in_smem else 0)) * e
        return self.mma(group, rows, self.head_dim_v, cols, name, operands)

    def softmax(self, group: int, rows: int, cols: int, name: str, masked: bool, rescale_o: bool = True,
                poly_fraction: float = 0.0) -> list[int]:
        """Online softmax of a rows x cols score tile: exp2 on the SFU (a `poly_fraction` of it by polynomial
        on the FMA pipe) and the FMA work (max, scale, sum, pack, mask, O rescale). A warp interleaves its
        MUFU and FMA instructions, so the two nodes run side by side; both start from S.

        Returns the nodes: each reads S, and P (and the rescaled O) are ready when all completed."""
        elems = rows * cols
        lane_ops = elems * (SOFTMAX_LANE_OPS + (MASK_LANE_OPS if masked else 0.0))
        if self.dtype.is_fp8:
            lane_ops += elems * 0.25  # P packed to FP8 (4 per instruction) after the 16-bit pack
        if rescale_o:
            lane_ops += rows * self.head_dim_v
        lane_ops += elems * poly_fraction * POLY_EXP_LANE_OPS
        lane_ops += 2.0 * elems * self.softcap  # s / cap and cap * tanh
        fma = self.b.node(group, Op.ELEMENTWISE, Unit.FMA, work=lane_ops * FLOP_PER_LANE_OP, name=f"softmax_{name}")
        sfu_share = elems * (1.0 - poly_fraction + self.softcap)  # exp2 (less its polynomial part), tanh
        if sfu_share <= 0:
            return [fma]
        self._last_exp[group] = self.b.node(group, Op.EXP, Unit.SFU, work=sfu_share, name=f"exp_{name}")
        return [fma, self._last_exp[group]]

    def softmax_chain(self, group: int, rows: int, cols: int, name: str, masked: bool) -> tuple[int, list[int]]:
        """Online softmax as a compiler emits it from tile code (Triton): the row max (FMNMX, and the mask)
        must finish before any exp2; then each element streams through FFMA (scale, subtract), MUFU.EX2 and
        the sum and pack, side by side, with the O rescale. Returns (the row-max node, which reads S; the
        nodes after which P and the rescaled O are ready)."""
        elems = rows * cols
        # the row max is FMNMX on the half-rate ALU pipe (attention_config.ALU_SLOT_COST)
        pre = elems * (ALU_SLOT_COST + (MASK_LANE_OPS if masked else 0.0) + 2.0 * self.softcap)  # soft-capping first
        # scale-and-subtract, sum, pack, the O rescale, and exp2's non-ftz expansion with MUFU's dispatch slot
        post = elems * (SOFTMAX_LANE_OPS - 1.0 + EXP2_NOFTZ_SLOTS) + rows * self.head_dim_v
        first = self.b.node(group, Op.ELEMENTWISE, Unit.FMA, work=pre * FLOP_PER_LANE_OP, name=f"rowmax_{name}")
        rest = self.b.node(group, Op.ELEMENTWISE, Unit.FMA, work=post * FLOP_PER_LANE_OP, name=f"softmax_{name}")
        exp = self.b.node(group, Op.EXP, Unit.SFU, work=elems * (1.0 + self.softcap), name=f"exp_{name}")
        self._last_exp[group] = exp
        self.b.data(first, rest)
        self.b.data(first, exp)
        return first, [rest, exp]

    def divide(self, group: int, rows: int, name: str, after: int | list[int]) -> list[int]:
        """O / row sum as an element-wise fp32 division (Triton's `acc / l_i[:, None]`, div.full.f32): one
        MUFU.RCP and DIV_FULL_FMA_SLOTS FMA-pipe instructions per element, side by side; both read O, once
        `after` completes (and the sink logit is folded in, with sinks)."""
        elems = rows * self.head_dim_v
        waits = self.sink(group, rows, name, after)  # issued first: program order within the group
        lane_ops = elems * DIV_FULL_FMA_SLOTS + (rows * SINK_LANE_OPS if self.folds_sink else 0.0)
        fma = self.b.node(group, Op.ELEMENTWISE, Unit.FMA, work=lane_ops * FLOP_PER_LANE_OP, name=name)
        nodes = [fma, self.b.node(group, Op.EXP, Unit.SFU, work=elems, name=f"rcp_{name}")]
        link(self.b, waits, nodes)
        return nodes

    def normalize(self, group: int, rows: int, name: str, after: int | list[int]) -> int:
        """O / row sum at the end (and the log-sum-exp of each row), once `after` (the last P V or the O read
        back) completes; with sinks, the sink logit is folded in first (`sink`)."""
        waits = self.sink(group, rows, name, after)  # issued first: program order within the group
        lane_ops = self.head_dim_v + 4 + (SINK_LANE_OPS if self.folds_sink else 0.0)
        node = self.b.node(group, Op.ELEMENTWISE, Unit.FMA, work=rows * lane_ops * FLOP_PER_LANE_OP, name=name)
        link(self.b, waits, node)
        return node

    @property
    def folds_sink(self) -> bool:
        """This CTA adds each row's sink logit at its end: sinks, and not a K/V split (whose combine kernel
        folds the sink in once: decode.combine)."""
        return self.sinks and not self.split

    def sink(self, group: int, rows: int, name: str, after: int | list[int]) -> list[int]:
        """The sink logit of each row joining the softmax at the end (FlashAttention-3's finalize as vLLM runs
        gpt-oss): m' = max(m, sink), l' = l exp2(m - m') + exp2(sink - m'): SINK_EXPS MUFU.EX2 per row and
        SINK_LANE_OPS FMA-pipe instructions, which the caller's normalising node carries. The exponentials join
        the group's last exponential node (the same pipe, a few more per row than its block's scores; a node
        of their own would charge a pipe latency and a tensor-exclusion wait for a handful of instructions);
        a group that wrote none gets a node. Returns what the normaliser waits on: `after`, and that node."""
        waits = [after] if isinstance(after, int) else list(after)
        if not self.folds_sink:
            return waits
        last = self._last_exp.get(group)
        if last is not None:
            self.b.add_work(last, rows * SINK_EXPS)
            return waits
        ex = self.b.node(group, Op.EXP, Unit.SFU, work=rows * SINK_EXPS, name=f"sink_exp_{name}")
        link(self.b, after, ex)
        return [ex, *waits]

    def tmem(self, group: int, op: Op, rows: int, cols: int, nbytes_per: float, name: str,
             fraction: float = 1.0) -> int:
        tile = TileDesc(Space.TMEM, DType.FP32, (rows, cols), name.split("[")[0])
        return self.b.node(group, op, Unit.TMEM, work=rows * cols * nbytes_per * fraction, tile=tile, name=name)


def link(b: GraphBuilder, srcs: int | list[int], dsts: int | list[int]) -> None:
    """DATA edges from every node of `srcs` to every node of `dsts` (-1 entries are skipped)."""
    for s in [srcs] if isinstance(srcs, int) else srcs:
        for d in [dsts] if isinstance(dsts, int) else dsts:
            if s >= 0 and d >= 0:
                b.data(s, d)


@dataclass(frozen=True)
class ClassRows:
    key: tuple[int, ...]
    params: np.ndarray
    names: tuple[str, ...]


def group_ctas(rows: Sequence[tuple[tuple[int, ...], tuple[int, ...]]], names: tuple[str, ...],
               order: Callable[[tuple[int, ...]], object] | None = None) -> list[ClassRows]:
    """Group (class key, CTA parameter row) pairs into CTA classes; rows keep launch order within a class
    and classes are launched in `order` of their key (first appearance when None)."""
    groups: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
    for key, row in rows:
        groups.setdefault(key, []).append(row)
    keys = list(groups)
    if order is not None:
        keys.sort(key=order)  # type: ignore[arg-type]
    return [ClassRows(k, np.array(groups[k], dtype=np.int64).reshape(len(groups[k]), len(names)), names)
            for k in keys]
