"""Node-writing helpers shared by the GEMM family: operand loads, MMAs, slot reuse, epilogues.

A `GemmWriter` wraps a GraphBuilder for one CTA class; tile coordinates are affine in the CTA's unit
parameters (`m{t}`, `nb{t}`, `k{t}`, `r{t}`), so one template serves every CTA of the class.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torchsim.graph import DType, GraphBuilder, Op, Space, TileDesc, Unit, aff
from torchsim.hwmodels.gpu import mma_datapath_flop
from torchsim.lowering.quant import QuantFormat
from torchsim.lowering.templates.gemm_config import Epilogue, GemmConfig


@dataclass
class GemmWriter:
    b: GraphBuilder
    cfg: GemmConfig
    dtype: DType
    out_dtype: DType
    epilogue: Epilogue
    async_copy: bool  # True: TMA (sm90/sm100); False: cp.async through LD/ST (sm80)
    multicast_b: bool = True  # b_split > 1 shares B by TMA multicast (sm90) rather than a CTA pair (sm100)
    datapath_rows: int = 1  # MMA rows that fill the tensor datapath (profile's tensor_datapath_rows)
    slot_users: list[list[int]] = field(default_factory=list)  # per global stage: nodes freeing its slot
    stage_loads: list[list[int]] = field(default_factory=list)  # per global stage: the loads filling it
    # per execution group: its last TMA store of C, whose shared-memory buffer that group reuses next
    last_store: dict[int, int] = field(default_factory=dict)
    last_sts: dict[int, int] = field(default_factory=dict)  # per execution group: its last staging of C
    # a quantised format (cfg.quant): B's element type and scales; weight-only formats dequantise B in the main
    # loop (`dequant_work`: FMA-pipe work per weight element, lowering.quant.dequant_fma_work); `swap_ab`: the
    # weights are the MMA's M side and the tokens its N (Machete swaps A and B on sm90; on sm90 the weights are
    # wgmma's register operand)
    quant: QuantFormat | None = None
    dequant_work: float = 0.0
    swap_ab: bool = False

    @property
    def b_dtype(self) -> DType:
        return self.quant.weight if self.quant is not None else self.dtype

    @property
    def weight_only(self) -> bool:
        return self.quant is not None and self.quant.weight_only

    # -- operands -----------------------------------------------------------------------------------------
    def _load(self, group: int, tile: TileDesc, name: str, landed: float = 0.0) -> int:
        """A TMA (or cp.async) load; `landed` is what arrives in this CTA's shared memory when a multicast
        from the cluster delivers more than this CTA fetched itself."""
        op, unit = (Op.TMA_LOAD, Unit.TMA) if self.async_copy else (Op.CP_ASYNC, Unit.LDST)
        return self.b.node(group, op, unit, work=tile.nbytes, tile=tile, name=name, smem_bytes=landed)

    def load_a(self, group: int, t: int, i: int, parts: int = 1, sub: int = 0) -> int:
        cfg = self.cfg
        tile = TileDesc(Space.GLOBAL, self.dtype, (cfg.bm // parts, cfg.bk), "A",
                        (aff(sub, **{f"m{t}": parts}), aff(i, **{f"k{t}": 1})))
        return self._load(group, tile, f"load_A[t{t},k{i}]" + (f".{sub}" if parts > 1 else ""))

    def load_b(self, group: int, t: int, i: int) -> int:
        cfg = self.cfg
        s = cfg.b_split
        tile = TileDesc(Space.GLOBAL, self.b_dtype, (cfg.bn // s, cfg.bk), "B",
                        (aff(0, **{f"nb{t}": s, f"r{t}": 1}), aff(i, **{f"k{t}": 1})))
        multicast = self.async_copy and self.multicast_b
        return self._load(group, tile, f"load_B[t{t},k{i}]", landed=tile.nbytes * s if multicast else 0.0)

    def stage(self, loads: list[int]) -> int:
        """Open the next global pipeline stage filled by `loads`; returns its index."""
        self.stage_loads.append(loads)
        self.slot_users.append([])
        return len(self.stage_loads) - 1

    def link_slots(self) -> None:
        """Buffer reuse: loads of stage g wait (ORDER) until every consumer of stage g - stages released it."""
        if not self.cfg.order_edges:
            return
        for g in range(self.cfg.stages, len(self.stage_loads)):
            for user in self.slot_users[g - self.cfg.stages]:
                for ld in self.stage_loads[g]:
                    self.b.order(user, ld)

    def mma(self, group: int, rows: int, cols: int, name: str, smem_operands: bool = True) -> int:
        """rows x cols x bk MMA; wgmma/tcgen05 read both operands from shared memory (SS mode). Under TMA
        multicast (sm90) the whole B tile sits in this CTA's shared memory; in a tcgen05 CTA pair each SM
        holds and reads only its share of B."""
        b_cols = cols if self.multicast_b else cols / self.cfg.b_split
        # B is read as stored (FP8/INT8/FP4 formats), or as dequantised to the MMA dtype (weight-only, sm100);
        # with swap_ab the weights come from registers and only the activations from shared memory
        b_regs = self.swap_ab and self.multicast_b  # sm90: wgmma's A operand from registers
        b_bytes = 0.0 if b_regs else self.dtype.nbytes if self.weight_only else self.b_dtype.nbytes
        operands = (rows * self.dtype.nbytes + b_cols * b_bytes) * self.cfg.bk if smem_operands else 0.0
        work = mma_datapath_flop(rows, cols, self.cfg.bk, self.datapath_rows)
        if self.swap_ab:  # MMA M = the weight rows (cols), N = the tokens padded to the MMA's N step of 8
            work = mma_datapath_flop(cols, -(-rows // 8) * 8, self.cfg.bk, self.datapath_rows)
        node = self.b.node(group, Op.MMA, Unit.TENSOR, work=work, name=name, smem_bytes=operands)
        self._store_drained(group, node)
        return node

    def _store_drained(self, group: int, node: int) -> None:
        """`node` of `group` waits until the group's last TMA store of C has read its shared-memory buffer out
        (`cp.async.bulk.wait_group.read`). A warp group that runs its own epilogue (sm90) waits before its next
        wgmma: DeepGEMM's sm90 kernels wait for the store right after issuing it, and CUTLASS's sm90 TMA epilogue
        reuses its few sub-tile buffers, so its epilogue loop advances at the pace the stores drain. A dedicated
        epilogue group (sm100) waits before it stages the next tile into the buffer. How fast a store drains is
        the memory model's: the SM's TMA front end and the chip's L2 (with its write-back, torchsim.sim.loop)."""
        prev = self.last_store.pop(group, None)
        if prev is not None and self.cfg.order_edges:
            self.b.data(prev, node)

    @property
    def promotes(self) -> bool:
        """sm90 FP8 without fast accumulation: every BK=128 slice of wgmma accumulates into temporary registers
        that the warp group adds into the FP32 accumulator on the CUDA cores (CUTLASS's FP8 mainloop with
        promotion, DeepGEMM); the next wgmma waits for that add."""
        return (self.dtype.is_fp8 and self.async_copy and self.multicast_b and not self.cfg.fp8_fast_accum)

    def promote(self, group: int, mma: int, rows: int, name: str) -> int:
        node = self.b.node(group, Op.ELEMENTWISE, Unit.FMA, work=2.0 * rows * self.cfg.bn, name=name)
        self.b.data(mma, node)
        return node

    def scales_b(self, group: int, t: int, k_blocks: int) -> int:
        """DeepGEMM's per-tile B scales (one FP32 per 128 x 128 block of B; BLOCK_N up to 160 spans two rows of
        them): the math warp group loads them from global memory into shared memory before its mainloop, once
        its previous store has drained (the store's wait precedes it). Returns the shared-memory write."""
        cfg = self.cfg
        rows, cols = 1 if 128 % cfg.bn == 0 else 2, max(1, -(-k_blocks * cfg.bk // 128))
        src = TileDesc(Space.GLOBAL, DType.FP32, (rows, cols), "scales_b", (aff(**{f"n{t}": 1}), aff()))
        ld = self.b.node(group, Op.LDG, Unit.LDST, work=src.nbytes, tile=src, name=f"ldg_scales_b[t{t}]")
        self._store_drained(group, ld)
        dst = TileDesc(Space.SHARED, DType.FP32, (rows, cols), "scales_b_smem")
        sts = self.b.node(group, Op.STS, Unit.LDST, work=dst.nbytes, tile=dst, name=f"sts_scales_b[t{t}]")
        self.b.data(ld, sts)
        return sts

    # -- quantised formats ------------------------------------------------------------------------------------
    def scale_loads(self, group: int, t: int, i: int) -> list[int]:
        """Stage i's scale loads: a weight-only format's group scales of B (one row of bn fp16 scales per 128 of
        K, loaded on the stage a group starts), and a block-scaled format's scale factors of A and B (bm and bn
        rows of bk / group bytes). DeepGEMM's B scales (cfg.block_scales) are loaded per tile by scales_b instead;
        its A scales (bm fp32 per 128 of K) arrive with each stage."""
        fmt, cfg = self.quant, self.cfg
        if fmt is None:
            return []
        out = []
        kcoord = aff(i, **{f"k{t}": 1})
        gk = fmt.w_group[0]
        b_scaled = fmt.weight_only or fmt.block_scaled_mma or (gk and not cfg.block_scales)
        if b_scaled and gk and (cfg.bk >= gk or (i * cfg.bk) % gk == 0):
            rows = max(1, cfg.bk // gk)
            cols = max(1, -(-cfg.bn // fmt.w_group[1])) if fmt.w_group[1] else 1
            dt = DType.FP16 if fmt.w_scale_bytes == 2 else DType.FP32 if fmt.w_scale_bytes == 4 else DType.INT8
            tile = TileDesc(Space.GLOBAL, dt, (rows, cols), "scales_w", (kcoord, aff(**{f"nb{t}": 1})))
            out.append(self._load(group, tile, f"load_scales_w[t{t},k{i}]"))
        if fmt.a_group:
            dt = DType.FP32 if fmt.a_scale_bytes == 4 else DType.INT8
            tile = TileDesc(Space.GLOBAL, dt, (cfg.bm, max(1, cfg.bk // fmt.a_group)), "scales_a",
                            (aff(**{f"m{t}": 1}), kcoord))
            out.append(self._load(group, tile, f"load_scales_a[t{t},k{i}]"))
        return out

    def dequant(self, group: int, t: int, i: int, after: list[int], share: float = 1.0,
                to_smem: bool = False) -> int:
        """Dequantise this stage's weights (a `share` of the B tile) for a weight-only MMA: read the packed tile
        from shared memory into registers (LDS), convert and scale on the CUDA cores (FMA pipe; the integer half on
        the INT32 pipe, lowering.quant.dequant_fma_work), and with `to_smem` write the converted tile back for an
        MMA that reads shared memory (sm100). Returns the node the MMA waits for."""
        b, cfg = self.b, self.cfg
        elems = cfg.bn * cfg.bk * share
        packed = TileDesc(Space.SHARED, self.b_dtype, (max(1, int(cfg.bn * share)), cfg.bk), "B_smem")
        lds = b.node(group, Op.LDS, Unit.LDST, work=elems * self.b_dtype.nbytes, tile=packed, name=f"lds_W[t{t},k{i}]")
        for node in after:
            b.data(node, lds)
        cvt = b.node(group, Op.ELEMENTWISE, Unit.FMA, work=elems * self.dequant_work, name=f"dequant_W[t{t},k{i}]")
        b.data(lds, cvt)
        if not to_smem:
            return cvt
        out = TileDesc(Space.SHARED, self.dtype, (max(1, int(cfg.bn * share)), cfg.bk), "W_smem")
        sts = b.node(group, Op.STS, Unit.LDST, work=elems * self.dtype.nbytes, tile=out, name=f"sts_W[t{t},k{i}]")
        b.data(cvt, sts)
        return sts

    def scale_factors_to_tmem(self, group: int, t: int, i: int, sf_loads: list[int]) -> int:
        """tcgen05.cp of a block-scaled stage's scale factors from shared memory into TMEM, where the block-scaled
        MMA reads them (CUTLASS's sm100 block-scaled mainloop copies SFA/SFB before each MMA)."""
        fmt, cfg = self.quant, self.cfg
        assert fmt is not None
        nbytes = fmt.act_scale_bytes(cfg.bm, cfg.bk) + fmt.weight_scales(cfg.bk, cfg.bn) * fmt.w_scale_bytes
        tile = TileDesc(Space.TMEM, DType.INT8, (cfg.bm + cfg.bn, max(1, int(nbytes) // (cfg.bm + cfg.bn))),
                        "scale_factors")
        cp = self.b.node(group, Op.TMEM_STORE, Unit.TMEM, work=nbytes, tile=tile, name=f"tcgen05_cp_sf[t{t},k{i}]")
        for ld in sf_loads:
            self.b.data(ld, cp)
        return cp

    # -- epilogue -----------------------------------------------------------------------------------------
    def epilogue_nodes(self, group: int, t: int, rows: int, sub: int, parts: int, after: list[int],
                       tmem: bool = False, split: bool = False) -> tuple[int, int]:
        """Accumulators -> (TMEM load) -> epilogue math -> shared memory -> global.

        Returns (the node that reads the accumulators, the store node)."""
        b, cfg = self.b, self.cfg
        elems = rows * cfg.bn
        prev: list[int] = list(after)
        first: list[int] = []

        def step(node: int) -> None:
            for p in prev:
                b.data(p, node)
            prev[:] = [node]
            if not first:
                first.append(node)

        if tmem:
            step(b.node(group, Op.TMEM_LOAD, Unit.TMEM, work=elems * 4.0,
                        tile=TileDesc(Space.TMEM, DType.FP32, (rows, cfg.bn), f"acc{t % 2}"), name=f"tmem_ld[t{t}]"))
        if self.epilogue is Epilogue.SILU:
            step(b.node(group, Op.EXP, Unit.SFU, work=2.0 * elems, name=f"silu_mufu[t{t}]"))
            step(b.node(group, Op.ELEMENTWISE, Unit.FMA, work=3.0 * elems, name=f"silu_fma[t{t}]"))
        elif self.epilogue in (Epilogue.BIAS, Epilogue.RESIDUAL):
            shape = (1, cfg.bn) if self.epilogue is Epilogue.BIAS else (rows, cfg.bn)
            coord = (aff(), aff(**{f"n{t}": 1})) if self.epilogue is Epilogue.BIAS else \
                (aff(sub, **{f"m{t}": parts}), aff(**{f"n{t}": 1}))
            src = TileDesc(Space.GLOBAL, self.out_dtype, shape, self.epilogue.value, coord)
            op, unit = (Op.TMA_LOAD, Unit.TMA) if self.async_copy else (Op.LDG, Unit.LDST)
            ld = b.node(group, op, unit, work=src.nbytes, tile=src, name=f"load_{self.epilogue.value}[t{t}]")
            prev.append(ld)
            step(b.node(group, Op.ELEMENTWISE, Unit.FMA, work=float(elems), name=f"{self.epilogue.value}[t{t}]"))
        else:
            step(b.node(group, Op.ELEMENTWISE, Unit.FMA, work=float(elems), name=f"convert[t{t}]"))
        out_dtype = DType.FP32 if split else self.out_dtype
        out = TileDesc(Space.GLOBAL, out_dtype, (1, rows, cfg.bn) if split else (rows, cfg.bn),
                       "C_partial" if split else "C",
                       (aff(**{f"k{t}": 1}), aff(sub, **{f"m{t}": parts}), aff(**{f"n{t}": 1})) if split else
                       (aff(sub, **{f"m{t}": parts}), aff(**{f"n{t}": 1})))
        if self.async_copy:
            staged = TileDesc(Space.SHARED, out_dtype, (rows, cfg.bn), "C_smem")
            sts = b.node(group, Op.STS, Unit.LDST, work=staged.nbytes, tile=staged, name=f"sts_C[t{t}]")
            self._store_drained(group, sts)
            self.last_sts[group] = sts
            step(sts)
            step(b.node(group, Op.TMA_STORE, Unit.TMA, work=out.nbytes, tile=out, name=f"store_C[t{t}]"))
            self.last_store[group] = prev[0]
        else:
            step(b.node(group, Op.STG, Unit.LDST, work=out.nbytes, tile=out, name=f"store_C[t{t}]"))
        return first[0], prev[0]
