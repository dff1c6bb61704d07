"""Node-writing helpers shared by the GEMM family: operand loads, MMAs, slot reuse, epilogues.

A `GemmWriter` wraps a GraphBuilder for one CTA class; tile coordinates are affine in the CTA's unit
parameters (`m{t}`, `nb{t}`, `k{t}`, `r{t}`), so one template serves every CTA of the class.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torchsim.graph import DType, GraphBuilder, Op, Space, TileDesc, Unit, aff
from torchsim.hwmodels.gpu import mma_datapath_flop
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
        tile = TileDesc(Space.GLOBAL, self.dtype, (cfg.bn // s, cfg.bk), "B",
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
        operands = (rows + b_cols) * self.cfg.bk * self.dtype.nbytes if smem_operands else 0.0
        work = mma_datapath_flop(rows, cols, self.cfg.bk, self.datapath_rows)
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
