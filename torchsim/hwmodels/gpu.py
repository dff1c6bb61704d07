"""GPU hardware profiles: A100 SXM, A100 PCIe, H100 SXM, H200, B200, each number a Quantity with its source.

Each generation is composed from the previous one with `dataclasses.replace` (H200 = H100 + HBM3e; B200 =
Hopper + tcgen05/TMEM and its own figures), never copied. Sources name the row of ../shared/hardware/facts.csv
("facts.csv DEVICE parameter") or of ../shared/validation/published_dev.csv ("published_dev.csv ID").
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from typing import Any

from torchsim.graph.kinds import DType, Unit
from torchsim.hwmodels.quantity import Quantity, assumed, calibrated, derived, doc, measured


class Arch(Enum):
    SM80 = "sm80"
    SM90 = "sm90"
    SM100 = "sm100"
    TENSIX = "tensix"


GTSIM = "GPU-Tile-Sim paper §5 'Memory' (TMA: 128 B transactions, ~100 B/cycle aggregate issue rate)"
A100, H100, H200, B200 = "A100-SXM4-80GB", "H100-SXM5-80GB", "H200-SXM-141GB", "B200 (HGX/DGX, SXM, 180GB)"


def fact(device: str, parameter: str) -> str:
    return f"facts.csv {device} {parameter}"


@dataclass(frozen=True)
class GpuProfile:
    """A GPU: SM resources, units, memory hierarchy. Field names carry units; every value has provenance."""

    name: str
    arch: Arch
    description: str
    sm_count: Quantity
    clock_hz: Quantity  # sustained SM clock under load
    subpartitions_per_sm: Quantity
    max_threads_per_sm: Quantity
    max_ctas_per_sm: Quantity
    registers_per_sm: Quantity
    smem_per_sm_bytes: Quantity
    smem_per_cta_bytes: Quantity
    tensor_bf16_flop_per_clk_per_sm: Quantity
    tensor_fp8_flop_per_clk_per_sm: Quantity  # 0 = no FP8 tensor cores
    tensor_tf32_flop_per_clk_per_sm: Quantity
    tensor_latency_cycles: Quantity
    tensor_inflight_subops: Quantity  # sub-operations the pipe holds in flight (issue width)
    tensor_subop_flop: Quantity  # work of one tensor sub-operation (one MMA instruction's FLOPs)
    tensor_datapath_rows: Quantity  # rows (M) an MMA needs to fill the tensor datapath; fewer take as long
    fma_flop_per_clk_per_sm: Quantity
    fma_latency_cycles: Quantity
    sfu_ops_per_clk_per_sm: Quantity
    sfu_latency_cycles: Quantity
    # 1: MUFU work runs beside the work of MMAs that accumulate in registers (mma.sync, wgmma); 0: they exclude
    # each other. MMAs accumulating in TMEM (tcgen05; a kernel's attrs "tmem_accumulators") never exclude it.
    sfu_overlaps_tensor: Quantity
    ldst_bytes_per_clk_per_sm: Quantity  # L1 / shared-memory port
    smem_latency_cycles: Quantity
    l1_latency_cycles: Quantity
    l1_bytes_per_sm: Quantity  # data cache left beside the default carve-out
    tma_bytes_per_clk_per_sm: Quantity
    tma_latency_cycles: Quantity  # extra fixed cost of a TMA (descriptor, async proxy) on top of the memory path
    tmem_bytes_per_sm: Quantity  # 0 = no TMEM
    tmem_bytes_per_clk_per_sm: Quantity
    l2_bytes: Quantity
    l2_bytes_per_s: Quantity
    l2_latency_cycles: Quantity
    dram_peak_bytes_per_s: Quantity
    dram_bytes_per_s: Quantity  # sustained
    dram_latency_cycles: Quantity
    dram_bytes: Quantity
    # -- fixed costs every kernel pays, and the DRAM path by traffic kind (torchsim issue 12) ------------
    # The prologue nodes (templates/prologue.py) fetch each TMA tensor map from global memory and initialise
    # the CTA's mbarriers in shared memory before the first load; their cost comes from the memory model.
    tensormap_bytes: Quantity  # one TMA tensor-map descriptor (CUtensorMap), read in a TMA kernel's prologue
    mbarrier_bytes: Quantity  # one mbarrier object in shared memory, written by mbarrier.init in the prologue
    # achievable DRAM bandwidth by traffic kind (STREAM-style); the engine serves each kind, and the read/write
    # mix, at its share of dram_bytes_per_s (torchsim.sim.memory.dram_server; docs/architecture.md §3)
    dram_read_bytes_per_s: Quantity  # read-only stream
    dram_write_bytes_per_s: Quantity  # write-only stream
    dram_copy_bytes_per_s: Quantity  # one read + one write stream, every byte moved counted
    cta_launch_cycles: Quantity
    launch_overhead_s: Quantity  # gap between dependent kernel launches (stream, no CUDA graph)
    graph_launch_overhead_s: Quantity  # the same under CUDA graphs
    # -- power and DVFS (torchsim.hwmodels.power; applied by torchsim.sim.sustained) --------------------------
    # clock_hz above stays the clock the engine is given by a plain simulate(); predictions run each kernel at
    # the highest clock in [clock_min_hz, clock_max_hz] whose average board power stays within power_limit_w.
    # Energies are per unit of work at the voltage of clock_max_hz; dynamic core energy scales with V(f)^2.
    power_limit_w: Quantity  # board power limit the firmware holds (TDP/TGP)
    static_power_w: Quantity  # idle board power: leakage, HBM refresh, fans/VRs (not scaled with the clock)
    clock_max_hz: Quantity  # highest SM clock (max boost)
    clock_min_hz: Quantity  # lowest SM clock of the DVFS range
    dvfs_voltage_floor: Quantity  # V(clock_min_hz) / V(clock_max_hz); V linear in f between them
    tensor_pj_per_flop_bf16: Quantity  # tensor-core MMA energy per FLOP (bf16/fp16), operand delivery included
    tensor_pj_per_flop_fp8: Quantity
    tensor_pj_per_flop_tf32: Quantity
    dram_pj_per_byte: Quantity  # HBM access + PHY energy per byte crossing the DRAM interface
    l2_pj_per_byte: Quantity  # L2 read/write energy per byte served
    simt_pj_per_op: Quantity  # one lane operation of the FMA pipe or the SFU
    # -- warp-level MMA (torchsim issue 12, attention fidelity) -------------------------------------------
    # The rate of the sm80 instruction mma.sync (HMMA m16n8k16, bf16/fp16 in, FP32 accumulate) on this part:
    # a kernel compiled for sm80 (FlashAttention-2) issues it on every later GPU, where it need not reach the
    # wgmma/tcgen05 rate of the tensor_*_flop_per_clk_per_sm fields. Templates issuing mma.sync scale their
    # MMA work by tensor rate / this rate (the time the instruction holds the tensor datapath).
    warp_mma_flop_per_clk_per_sm: Quantity
    # -- quantised weight/activation formats (torchsim issue 15; lowering/quant.py) -------------------------
    # int8 MMA (s8 x s8 -> s32; one multiply-add counted as 2 FLOPs) and the block-scaled FP4 MMA (E2M1 with
    # per-block scale factors: tcgen05 kind::mxf4 / kind::mxf4nvf4); 0 = the part has none. The INT32 pipe serves
    # the integer half of a weight-only kernel's dequantisation (LOP3/PRMT/shifts) beside the FMA pipe.
    tensor_int8_flop_per_clk_per_sm: Quantity
    tensor_fp4_flop_per_clk_per_sm: Quantity
    int32_ops_per_clk_per_sm: Quantity  # INT32 lanes per SM (lane operations per clock)
    # -- a timer's own cost (torchsim issue 12, validation timing methods) -------------------------------------
    # What a profiler that serialises kernels (CUPTI_ACTIVITY_KIND_KERNEL: 'all kernel executions are serialized
    # on the GPU', cupti_activity.h) adds to each kernel's recorded duration on this part. Only the comparison reads
    # it (torchsim.validation.timing, method 'cupti-serialised'); the engine and predictions never do.
    kernel_trace_overhead_s: Quantity = field(default_factory=lambda: assumed(
        0.0, "s", "assumed: no measurement of a kernel-serialising tracer's floor on this part (no published row "
        "of it is timed with one)"))
    # -- the power an SM draws for being clocked with work resident, whatever it computes (torchsim issue 12) ------
    # Clock tree, schedulers, operand collectors and the memory path's SM side switch every cycle an SM holds a
    # CTA: C*V^2*f per active SM, on the core rail (torchsim.hwmodels.power). 0 where no memory-bound kernel's
    # board power has been measured on the part: its calibrated tensor energy then carries that power for the
    # GEMM it was anchored on.
    # Device time a kernel spends beyond its CTAs' work as a profiler records it (CUPTI start to end): the front end
    # starting the grid and the kernel's completion (its writes acknowledged, the end signalled). Added once per
    # launch by the engine (torchsim.sim.summary). 0 = not measured.
    kernel_tail_cycles: Quantity = field(default_factory=lambda: assumed(
        0.0, "cycles", "not measured on this part (no profiler record of a one-CTA kernel): no tail"))
    # The fast power cap: what no kernel may draw even for milliseconds, while power_limit_w is held as an average
    # over tens of milliseconds (torchsim.prediction.clock_window shares one clock across a step's kernels under
    # the two). 0 = not measured: the TDP caps each kernel, as it did before.
    power_limit_fast_w: Quantity = field(default_factory=lambda: assumed(
        0.0, "W", "not measured on this part: no separate fast limit (each kernel is held to power_limit_w)"))
    sm_active_pj_per_cycle: Quantity = field(default_factory=lambda: assumed(
        0.0, "pJ/cycle", "assumed: not separated on this part (no measured board power of a memory-bound kernel); "
        "the calibrated tensor energy absorbs it for the anchor GEMM"))

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, Quantity) and v.value < 0:
                raise ValueError(f"profile {self.name!r}: field {f.name} is negative ({v.value} {v.unit})")
        for name in ("sm_count", "clock_hz", "dram_bytes_per_s", "l2_bytes_per_s", "tensor_bf16_flop_per_clk_per_sm",
                     "smem_per_sm_bytes", "subpartitions_per_sm"):
            if getattr(self, name).value <= 0:
                raise ValueError(f"profile {self.name!r}: field {name} must be > 0")
        if self.dram_bytes_per_s.value > self.dram_peak_bytes_per_s.value:
            raise ValueError(f"profile {self.name!r}: sustained DRAM bandwidth exceeds its peak")
        if not 0 < self.clock_min_hz.value <= self.clock_max_hz.value:
            raise ValueError(f"profile {self.name!r}: clock_min_hz must be > 0 and <= clock_max_hz")
        if not self.static_power_w.value < self.power_limit_w.value:
            raise ValueError(f"profile {self.name!r}: static_power_w must be below power_limit_w")
        if not 0 < self.dvfs_voltage_floor.value <= 1:
            raise ValueError(f"profile {self.name!r}: dvfs_voltage_floor must be in (0, 1]")
        for name in ("dram_read_bytes_per_s", "dram_write_bytes_per_s", "dram_copy_bytes_per_s"):
            if not 0 < getattr(self, name).value <= self.dram_peak_bytes_per_s.value:
                raise ValueError(f"profile {self.name!r}: field {name} must be > 0 and at most dram_peak_bytes_per_s")

    # -- float views used on hot paths ---------------------------------------------------------------
    @property
    def clock_hz_value(self) -> float:
        return float(self.clock_hz.value)

    @property
    def dram_bytes_per_s_value(self) -> float:
        return float(self.dram_bytes_per_s.value)

    @property
    def launch_overhead_s_value(self) -> float:
        return float(self.launch_overhead_s.value)

    @property
    def sms(self) -> int:
        return int(self.sm_count.value)

    def tensor_flop_per_clk_per_sm(self, dtype: DType) -> float:
        if dtype is DType.INT8:
            return float(self.tensor_int8_flop_per_clk_per_sm.value)
        if dtype is DType.FP4_E2M1:
            return float(self.tensor_fp4_flop_per_clk_per_sm.value)
        if dtype is DType.INT4:
            return 0.0  # no 4-bit integer MMA is modelled: int4 weights are dequantised (lowering/quant.py)
        if dtype.is_fp8:
            return float(self.tensor_fp8_flop_per_clk_per_sm.value)
        if dtype in (DType.FP32, DType.TF32):
            return float(self.tensor_tf32_flop_per_clk_per_sm.value)
        return float(self.tensor_bf16_flop_per_clk_per_sm.value)

    def peak_tensor_flops_per_s(self, dtype: DType) -> float:
        return self.tensor_flop_per_clk_per_sm(dtype) * self.sms * self.clock_hz_value

    def supports(self, dtype: DType) -> bool:
        return self.tensor_flop_per_clk_per_sm(dtype) > 0

    def tensor_formats(self) -> tuple[str, ...]:
        """The MMA input types this part's tensor cores run, for error messages ("bf16, fp16, tf32, int8")."""
        kinds = (("bf16", DType.BF16), ("fp16", DType.FP16), ("tf32", DType.TF32), ("int8", DType.INT8),
                 ("fp8", DType.FP8_E4M3), ("fp4", DType.FP4_E2M1))
        return tuple(name for name, dt in kinds if self.supports(dt))

    @property
    def units(self) -> frozenset[Unit]:
        have = {Unit.NONE, Unit.TENSOR, Unit.FMA, Unit.SFU, Unit.LDST}
        if self.arch in (Arch.SM90, Arch.SM100):
            have.add(Unit.TMA)
        if self.tmem_bytes_per_sm.value > 0:
            have.add(Unit.TMEM)
        return frozenset(have)

    def quantities(self) -> dict[str, Quantity]:
        return {f.name: getattr(self, f.name) for f in fields(self) if isinstance(getattr(self, f.name), Quantity)}

    def numbers_hash(self) -> str:
        """Hash of every number of the profile (for result metadata and memo keys)."""
        blob = json.dumps({k: [q.value, q.unit] for k, q in self.quantities().items()}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def mma_datapath_flop(m: int, n: int, k: int, rows: int) -> float:
    """Work an m x n x k MMA holds the tensor datapath for: M padded up to the datapath's `rows` (an M=64
    tcgen05 MMA takes as long as M=128), so the FLOP rate falls with short M."""
    return 2.0 * (-(-m // rows) * rows) * n * k


def sm_limits(device: str, combined: str | None = None) -> dict[str, Any]:
    """Per-SM scheduling limits cited from `device`'s rows (or its one combined row)."""
    src = {k: fact(device, combined or f"compute.{k}") for k in
           ("subpartitions_per_sm", "max_threads_per_sm", "max_ctas_per_sm", "registers_per_sm")}
    if combined is None and device == B200:
        src.update(max_threads_per_sm=fact(B200, "compute.max_warps / threads / CTAs per SM"),
                   max_ctas_per_sm=fact(B200, "compute.max_warps / threads / CTAs per SM"))
    return {
        "subpartitions_per_sm": doc(4, "SMSPs", src["subpartitions_per_sm"]),
        "max_threads_per_sm": doc(2048, "threads", src["max_threads_per_sm"]),
        "max_ctas_per_sm": doc(32, "CTAs", src["max_ctas_per_sm"]),
        "registers_per_sm": doc(65536, "32-bit regs", src["registers_per_sm"]),
    }


# First-hand H200 measurements (torchsim/validation/measured/h200-2026-12-04, its README says how they were taken)
H200_RUN = "torchsim/validation/measured/h200-2026-12-04"
H200_MB = H200_RUN + "/microbench.csv"
H200_SMI = H200_RUN + "/smi_before.txt"
# Power fit of that run: printed by scripts/calibrate_power_h200.py (the rows it uses are named at the fields),
# refitted with the L2 probe's idle time = graph gap + each add's kernel tail (hwmodels.power.graph_idle_s)
H200_SM_ACTIVE_PJ, H200_DRAM_PJ, H200_BF16_PJ, H200_FP8_PJ, H200_FAST_W = 1317, 45.7, 0.7072, 0.4080, 877

# Tensor energies per FLOP, bf16, at V(clock_max_hz): printed by scripts/calibrate_power.py (sources at the fields).
A100_BF16_PJ, H100_BF16_PJ, B200_BF16_PJ = 1.2061, 0.4426, 0.6034

GPU_BENCHES = "github te42kyfo/gpu-benches @ 1c36d509ee717dca9215c27135fa1e611bb03ed1"
MICROBENCH_BW = "github SemiAnalysisAI/microbench-blackwell @ 9a068d853d5c3676939eb46fe21ff6d6a2a4133b"
TENSORMAP = doc(128, "B", "CUDA driver API cuda.h: CUtensorMap is CU_TENSOR_MAP_NUM_QWORDS = 16 64-bit words")
MBARRIER = doc(8, "B", "PTX ISA 'Size and alignment of mbarrier object': an opaque 64-bit object in shared memory")


def small_kernel_gap(period_s: float, source: str, kernel_s: float, what: str) -> Quantity:
    """The device gap between back-to-back kernels: gpu-small-kernels' per-kernel period (the intercept a of
    T = a + V/b over V < 2 MB, A[i] = 0.25 B[i]) less what torchsim simulates for that kernel at its smallest
    size (N = 4096 fp64, 64 KB: CTA launch, one L2 round trip, the store; see tests/test_fixed_costs.py), so
    that gap + simulated kernel = the measured period."""
    return derived(round(period_s - kernel_s, 9), "s", f"{source}: {what} period {period_s * 1e6:.2f} us/kernel "
                   f"(fit intercept) less the simulated 64 KB kernel ({kernel_s * 1e6:.2f} us)")


XLA_PTABLE_TOOL = ("XLA's matmul perf-table tool (xla/tools/matmul_perf_table_gen.cc: the median over its runs of "
                   "each kernel's CUPTI duration; xla/service/gpu/model/hlo_op_profiler.cc enables "
                   "CUPTI_ACTIVITY_KIND_KERNEL, which serialises kernels)")


def kernel_trace_overhead(floor_s: float, entry: str, kernel_s: float) -> Quantity:
    """What a kernel-serialising tracer adds per kernel: the floor it records for a GEMM that does almost nothing
    (the smallest entries of XLA's perf table, which the published rows come from but are not among them) less
    what torchsim simulates for that GEMM (default tiles, at the sustained clock; tests/test_fixed_costs.py checks
    the two still add up), as small_kernel_gap does for the launch gaps."""
    return derived(round(floor_s - kernel_s, 9), "s", f"{XLA_PTABLE_TOOL}: {entry} -> {floor_s * 1e6:.2f} us, less "
                   f"the simulated kernel ({kernel_s * 1e6:.2f} us)")


POWER_NOTES = "power.md (torchsim research notes on power/DVFS)"
_VFLOOR = ("assumed: H800 (H100 SXM silicon) reports 725 mV at its 345 MHz idle clock (find_string id 19203529334, "
           "cited in " + POWER_NOTES + " §2); ~1.0 V at max boost assumed (no public V-f table found)")
_TF32_E = ("assumed: TF32 MMA runs at half the BF16 rate on the same datapath; the same power at full rate means "
           "twice the energy per FLOP of BF16")
_HBM3_E = ("assumed: HBM3/HBM3e access + PHY ~3 pJ/bit (secondary range 2.5-3.5 pJ/bit, find_string id 61334451592 "
           "in " + POWER_NOTES + " §4; H200 decode bound <= ~7 pJ/bit, ibid.)")
_L2_4N = ("assumed: RTX 3090 (Samsung 8N) effective L2 increment 10.8 pJ/B (find_string id 55788419707 in " +
          POWER_NOTES + " §4), halved for TSMC 4N")
_SIMT_4N = ("assumed: one FP32 FMA lane-op with register-file access and amortised issue ~5 pJ at 4N (Horowitz "
            "ISSCC 2014 45 nm fp32 mult+add 4.6 pJ before operand/issue overhead, scaled ~4x down by node)")

a100_sxm = GpuProfile(
    name="a100-sxm", arch=Arch.SM80, description="NVIDIA A100 SXM4 80GB (GA100, sm80)",
    sm_count=doc(108, "SMs", fact(A100, "compute.sm_count")),
    clock_hz=calibrated(1.41e9, "Hz", "published_dev.csv UBENCH-018 (peakflops fp16 311.2 of 312 TFLOPS: boost "
                        "clock sustained); " + fact(A100, "compute.boost_clock")),
    **sm_limits(A100),
    smem_per_sm_bytes=doc(164 * 1024, "B", fact(A100, "memory.smem_max_per_sm")),
    smem_per_cta_bytes=doc(163 * 1024, "B", fact(A100, "memory.smem_max_per_cta_optin")),
    tensor_bf16_flop_per_clk_per_sm=derived(2048, "FLOP/clk/SM",
                                            fact(A100, "tensor.tc_dense_fp16_bf16_flop_per_clk_per_sm")),
    tensor_fp8_flop_per_clk_per_sm=doc(0, "FLOP/clk/SM", fact(A100, "tensor.tc_dense_fp8_flop_per_clk_per_sm")),
    tensor_tf32_flop_per_clk_per_sm=derived(1024, "FLOP/clk/SM",
                                            fact(A100, "tensor.tc_dense_tf32_flop_per_clk_per_sm")),
    tensor_latency_cycles=assumed(32, "cycles",
                                  "assumed: mma.sync m16n8k16 dependent-issue latency order (~30 cycles)"),
    tensor_inflight_subops=assumed(16, "sub-ops", "assumed: enough in-flight MMAs per SM to cover the pipe latency"),
    tensor_subop_flop=derived(4096, "FLOP", fact(A100, "tensor.mma_instruction_shapes") + ": m16n8k16 = 2*16*8*16"),
    tensor_datapath_rows=doc(16, "rows", fact(A100, "tensor.mma_instruction_shapes") + ": mma.sync M is always 16"),
    fma_flop_per_clk_per_sm=derived(128, "FLOP/clk/SM", fact(A100, "simt.fp32_flop_per_clk_per_sm")),
    fma_latency_cycles=assumed(4, "cycles", "assumed: FP32 FMA dependent-issue latency"),
    sfu_ops_per_clk_per_sm=derived(16, "ops/clk/SM", fact(A100, "simt.mufu_ex2_throughput")),
    sfu_latency_cycles=assumed(20, "cycles", "assumed: MUFU latency order"),
    sfu_overlaps_tensor=calibrated(0, "bool", "published_dev.csv ATTN-003/007/011 and FlashAttention-3's head-dim "
                                   "sweep (50/65/75% of peak at d = 64/128/256): forward time ~ tensor time + exp "
                                   "time, i.e. MUFU and mma.sync/wgmma work (accumulators in the register file) do "
                                   "not overlap on sm80/sm90; FA2 on A100 (~70% of peak) agrees"),
    ldst_bytes_per_clk_per_sm=measured(125, "B/clk/SM", fact(A100, "memory.l1_bandwidth_measured")),
    smem_latency_cycles=measured(30, "cycles", fact(A100, "latency.smem_latency") + " (MT4G 60 is flagged low-"
                                 "confidence; Hopper's 29.9 used as the same-design proxy)"),
    l1_latency_cycles=measured(39, "cycles", "published_dev.csv UBENCH-006"),
    l1_bytes_per_sm=derived(28 * 1024, "B", fact(A100, "memory.l1_data_cache_size") + " (192 - 164 KiB carve-out)"),
    tma_bytes_per_clk_per_sm=doc(0, "B/clk/SM", fact(A100, "async.tma") + " (no TMA on sm80)"),
    tma_latency_cycles=doc(0, "cycles", fact(A100, "async.tma")),
    tmem_bytes_per_sm=doc(0, "B", "no TMEM before sm100 (" + fact(B200, "memory.tmem_per_sm") + ")"),
    tmem_bytes_per_clk_per_sm=doc(0, "B/clk/SM", "no TMEM before sm100"),
    l2_bytes=doc(40 * 2**20, "B", fact(A100, "memory.l2_size")),
    l2_bytes_per_s=measured(5.4e12, "B/s", fact(A100, "memory.l2_bandwidth_measured")),
    l2_latency_cycles=measured(210, "cycles", "published_dev.csv UBENCH-007"),
    dram_peak_bytes_per_s=doc(2.039e12, "B/s", fact(A100, "memory.hbm_bandwidth_peak")),
    dram_bytes_per_s=measured(1.88e12, "B/s", fact(A100, "memory.hbm_bandwidth_measured_stream") +
                              " (the better single-kind stream, 1.88 write; 1.77 read: the engine serves each kind "
                              "at its stream's share of this, torchsim.sim.memory.dram_server)"),
    dram_latency_cycles=measured(550, "cycles", "published_dev.csv UBENCH-008"),
    dram_bytes=doc(80e9, "B", fact(A100, "memory.hbm_capacity")),
    tensormap_bytes=doc(0, "B", fact(A100, "async.tma") + " (no TMA on sm80: no tensor maps)"),
    mbarrier_bytes=MBARRIER,
    dram_read_bytes_per_s=measured(1.769e12, "B/s", fact(A100, "memory.hbm_bandwidth_measured_stream") +
                                   " (gpu-stream read, 1024-thread blocks)"),
    dram_write_bytes_per_s=measured(1.880e12, "B/s", fact(A100, "memory.hbm_bandwidth_measured_stream") +
                                    " (gpu-stream init, 1024-thread blocks)"),
    dram_copy_bytes_per_s=measured(1.732e12, "B/s", GPU_BENCHES + " gpu-stream/a100_80.txt (scale: 1 load + 1 "
                                   "store stream, 1024-thread blocks)"),
    cta_launch_cycles=assumed(200, "cycles", "assumed: cycles from a CTA's dispatch to an SM until its first "
                              "node can issue (the engine delays every CTA by it, so the first wave also pays it "
                              "as the grid start); no CTA launch-latency or launch-rate microbenchmark found"),
    launch_overhead_s=small_kernel_gap(2.62e-6, GPU_BENCHES + " gpu-small-kernels/a100_80.txt", 0.73e-6,
                                       "eager-stream back-to-back"),
    graph_launch_overhead_s=small_kernel_gap(1.34e-6, GPU_BENCHES + " gpu-small-kernels/a100_80_graph.txt",
                                             0.73e-6, "CUDA-graph back-to-back"),
    # -- power and DVFS --
    power_limit_w=doc(400, "W", fact(A100, "power.tdp")),
    static_power_w=measured(88, "W", "A100 idle in Horace He, 'Strangely, Matrix Multiplications on GPUs Run Faster "
                            "When Given Predictable Data' (thonking.ai), as quoted in HN thread 48247005 (" +
                            POWER_NOTES + " §3)"),
    clock_max_hz=doc(1.41e9, "Hz", fact(A100, "compute.boost_clock")),
    clock_min_hz=assumed(210e6, "Hz", "assumed: lowest graphics clock Ampere data-center parts list (no source in "
                         + POWER_NOTES + "); only a floor for the solver"),
    dvfs_voltage_floor=assumed(0.725, "V/V", _VFLOOR),
    tensor_pj_per_flop_bf16=calibrated(A100_BF16_PJ, "pJ/FLOP", "scripts/calibrate_power.py: the simulated "
                                       "8192^3 bf16 GEMM draws 400 W at the clock where it gives 257 TFLOPS: "
                                       "A100 SXM cuBLAS bf16 8192^3 on randn inputs under the 400 W cap, Horace "
                                       "He (thonking.ai, " + POWER_NOTES + " §1)"),
    tensor_pj_per_flop_fp8=doc(0, "pJ/FLOP", fact(A100, "tensor.tc_dense_fp8_flop_per_clk_per_sm") +
                               " (no FP8 tensor cores)"),
    tensor_pj_per_flop_tf32=assumed(2 * A100_BF16_PJ, "pJ/FLOP", _TF32_E),
    dram_pj_per_byte=assumed(32, "pJ/B", "assumed: HBM2e ~4 pJ/bit (O'Connor et al., MICRO-50 2017 HBM2 baseline "
                             "~3.9 pJ/bit, body text not retrieved; " + POWER_NOTES + " §4)"),
    l2_pj_per_byte=assumed(8, "pJ/B", "assumed: RTX 3090 (8N) effective L2 increment 10.8 pJ/B (find_string id "
                           "55788419707 in " + POWER_NOTES + " §4), ~0.75x for TSMC N7"),
    simt_pj_per_op=assumed(7, "pJ/op", "assumed: 4N's ~5 pJ per FMA lane-op (see H100) x1.4 for N7"),
    # -- warp-level MMA --
    warp_mma_flop_per_clk_per_sm=derived(2048, "FLOP/clk/SM", fact(A100, "tensor.mma_instruction_shapes") +
                                         ": mma.sync is sm80's tensor instruction, so its rate is the dense "
                                         "peak (" + fact(A100, "tensor.tc_dense_fp16_bf16_flop_per_clk_per_sm") +
                                         ")"),
    # -- quantised formats --
    tensor_int8_flop_per_clk_per_sm=derived(4096, "FLOP/clk/SM", fact(A100, "tensor.tc_dense_int8_tops") +
                                            ": 624 TOPS / (108 SMs x 1.41 GHz) = 4098, twice the bf16 rate"),
    tensor_fp4_flop_per_clk_per_sm=doc(0, "FLOP/clk/SM", "no FP4 tensor cores before sm100 (" +
                                       fact(B200, "tensor.tc_dense_fp4_pflops") + ")"),
    int32_ops_per_clk_per_sm=doc(64, "ops/clk/SM", "NVIDIA CUDA C++ Programming Guide §20.7.1 (compute capability "
                                 "8.x: 64 INT32 cores per SM beside the 64 FP32 cores; the section " +
                                 fact(A100, "simt.fp32_cores_per_sm") + " cites; INT32 figure as recalled)"),
)

h100_sxm = replace(
    a100_sxm,
    name="h100-sxm", arch=Arch.SM90, description="NVIDIA H100 SXM5 80GB (GH100, sm90)",
    **sm_limits(H100),
    sm_count=doc(132, "SMs", fact(H100, "compute.sm_count")),
    clock_hz=derived(1.83e9, "Hz", fact(H100, "compute.clock_implied_by_tensor_peaks") +
                     " (the clock NVIDIA's dense tensor peak assumes; boost max 1980 MHz)"),
    smem_per_sm_bytes=doc(228 * 1024, "B", fact(H100, "memory.smem_max_per_sm")),
    smem_per_cta_bytes=doc(227 * 1024, "B", fact(H100, "memory.smem_max_per_cta_optin")),
    tensor_bf16_flop_per_clk_per_sm=derived(4096, "FLOP/clk/SM",
                                            fact(H100, "tensor.tc_dense_fp16_bf16_flop_per_clk_per_sm")),
    tensor_fp8_flop_per_clk_per_sm=derived(8192, "FLOP/clk/SM",
                                            fact(H100, "tensor.tc_dense_fp8_flop_per_clk_per_sm")),
    tensor_tf32_flop_per_clk_per_sm=derived(2048, "FLOP/clk/SM",
                                            fact(H100, "tensor.tc_dense_tf32_flop_per_clk_per_sm")),
    tensor_latency_cycles=assumed(64, "cycles", "assumed: wgmma m64nNk16 issue-to-accumulator latency order"),
    tensor_subop_flop=derived(2 * 64 * 256 * 16 / 4, "FLOP", fact(H100, "tensor.wgmma_shapes") +
                              ": m64n256k16 per warp of the warp group"),
    tensor_datapath_rows=doc(64, "rows", fact(H100, "tensor.wgmma_shapes") + ": wgmma M is always 64"),
    fma_flop_per_clk_per_sm=derived(256, "FLOP/clk/SM", fact(H100, "simt.fp32_flop_per_clk_per_sm")),
    sfu_ops_per_clk_per_sm=derived(16, "ops/clk/SM", fact(H100, "simt.mufu_ex2_throughput")),
    ldst_bytes_per_clk_per_sm=measured(126, "B/clk/SM", fact(H100, "memory.l1_bandwidth_measured")),
    smem_latency_cycles=measured(30, "cycles", fact(H100, "latency.smem_latency")),
    l1_latency_cycles=measured(40, "cycles", "published_dev.csv UBENCH-009"),
    l1_bytes_per_sm=derived(28 * 1024, "B", fact(H100, "memory.l1_data_cache_size") + " (256 - 228 KiB carve-out)"),
    tma_bytes_per_clk_per_sm=measured(100, "B/clk/SM", GTSIM),
    tma_latency_cycles=assumed(100, "cycles", "assumed: TMA descriptor fetch + async-proxy overhead beyond the "
                               "L2/DRAM latency (B200 microbenchmarks in facts.csv report more)"),
    l2_bytes=doc(50 * 2**20, "B", fact(H100, "memory.l2_size")),
    l2_bytes_per_s=measured(9.7e12, "B/s", fact(H200, "memory.l2_bandwidth_measured") + " (same GH100 L2; the "
                            "H100 SXM MT4G 4.86 TB/s uses a different method)"),
    l2_latency_cycles=measured(291, "cycles", "published_dev.csv UBENCH-010"),
    dram_peak_bytes_per_s=doc(3.35e12, "B/s", fact(H100, "memory.hbm_bandwidth_peak")),
    dram_bytes_per_s=measured(3.13e12, "B/s", "published_dev.csv UBENCH-029 (single-pass reduction 3134 GB/s on "
                              "an SXM-class H100)"),
    dram_latency_cycles=measured(700, "cycles", "published_dev.csv UBENCH-011"),
    dram_bytes=doc(80e9, "B", fact(H100, "memory.hbm_capacity")),
    # -- power and DVFS --
    power_limit_w=doc(700, "W", fact(H100, "power.tdp")),
    static_power_w=measured(74.7, "W", "H800 SXM (H100 silicon) idle at P0, 345 MHz, nvidia-smi -q (find_string id "
                            "19203529334, " + POWER_NOTES + " §3)"),
    clock_max_hz=doc(1.98e9, "Hz", fact(H100, "compute.boost_clock_max")),
    clock_min_hz=doc(345e6, "Hz", "device-reported idle SM clock, nvidia-smi -q on H800/H200 (find_string ids "
                     "19203529334, 9046480431; " + POWER_NOTES + " §2)"),
    tensor_pj_per_flop_bf16=calibrated(H100_BF16_PJ, "pJ/FLOP", "scripts/calibrate_power.py: the simulated "
                                       "8192^3 bf16 GEMM draws 700 W at the clock where it gives 794.5 TFLOPS: "
                                       "H100 SXM MAMF bf16 (stas00/ml-engineering compute/accelerator/README.md "
                                       "@ 744d01e, " + POWER_NOTES + " §1; published_dev.csv GEMM-151 797.5 "
                                       "TFLOPS at 8192^3 agrees)"),
    tensor_pj_per_flop_fp8=calibrated(H100_BF16_PJ * 794.5 / 1402.6, "pJ/FLOP", "bf16 energy x 794.5/1402.6: "
                                      "H100 SXM MAMF bf16 vs fp8 e4m3 TFLOPS at the same 700 W (ml-engineering "
                                      "README @ 744d01e, " + POWER_NOTES + " §1; equal clocks assumed)"),
    tensor_pj_per_flop_tf32=assumed(2 * H100_BF16_PJ, "pJ/FLOP", _TF32_E),
    # the GH100 die's active-SM and memory-path energies, measured on the H200 (the same SM, clock range and
    # voltage; HBM3 here, HBM3e there): with them the MAMF anchor leaves the tensor energy above
    dram_pj_per_byte=derived(H200_DRAM_PJ, "pJ/B", "the H200's, same GH100 memory path (HBM3 on this part, HBM3e "
                             "on the H200): scripts/calibrate_power_h200.py, " + H200_RUN + "/power_window.json"),
    sm_active_pj_per_cycle=derived(H200_SM_ACTIVE_PJ, "pJ/cycle", "the H200's, same GH100 SM, clock range and "
                                   "voltage: scripts/calibrate_power_h200.py (an L2-resident add at boost, " +
                                   H200_RUN + "/power_window.json)"),
    l2_pj_per_byte=assumed(5, "pJ/B", _L2_4N),
    simt_pj_per_op=assumed(5, "pJ/op", _SIMT_4N),
    tensormap_bytes=TENSORMAP,
    dram_read_bytes_per_s=measured(3.13e12, "B/s", "published_dev.csv UBENCH-029 (single-pass sum reduction: "
                                   "read-only, 3134 GB/s)"),
    dram_write_bytes_per_s=measured(3.01e12, "B/s", fact(H100, "memory.hbm_bandwidth_measured") + " (MT4G write)"),
    dram_copy_bytes_per_s=derived(2.85e12, "B/s", "0.852 x 3.35 TB/s peak: the copy (scale) share of peak measured "
                                  "on H100 PCIe, published_dev.csv UBENCH-027 (1704 of ~2000 GB/s)"),
    launch_overhead_s=derived(1.80e-6, "s", "H200's period (same GH100 and launch path; " + GPU_BENCHES +
                              " gpu-small-kernels/h200.txt, 2.48 us) less the simulated 0.68 us kernel; "
                              "the repository has no H100 small-kernel data"),
    graph_launch_overhead_s=derived(0.62e-6, "s", "~1.3 us/kernel under CUDA graphs (Hazy Research 'Look Ma, No "
                                    "Bubbles', hazyresearch.stanford.edu/blog/2025-05-27-no-bubbles, as summarised "
                                    "at mlops.substack.com/p/one-megakernel-to-rule-llama-1b) less the simulated "
                                    "0.68 us kernel; agrees with H200's 1.27 us (" + GPU_BENCHES +
                                    " gpu-small-kernels/h200_graph.txt)"),
    kernel_trace_overhead_s=kernel_trace_overhead(
        5.856e-6, "tensorflow/tensorflow third_party/xla/xla/service/gpu/model/matmul_interpolator_data.h @ "
        "372d578bb861cc5804e56d37d93aec931a59762c, key sm_90, its smallest entries 512x256x256 and 256x512x256 bf16 "
        "(67 MFLOP at 11.46 TFLOPS each; 256x1024x256 takes 5.92 us)", 3.646e-6),
    # -- warp-level MMA --
    warp_mma_flop_per_clk_per_sm=measured(2048, "FLOP/clk/SM", "half the wgmma peak: WMMA (HMMA.16816, as "
                                          "mma.sync) alone 'goes only up to 50% of peak theoretical FP16 compute "
                                          "throughput of H100' (r/CUDA post 'Since WGMMA has 2x throughput of WMMA "
                                          "in H100 GPU...', stored page reddit.gpgaming.de/r/CUDA/controversial); "
                                          "the per-SM rate A100 and B200 have too, and FlashAttention-2 on H100 "
                                          "(~350 TFLOPS at d=128 in the FlashAttention-3 paper's baselines, as "
                                          "recalled) is ~70% of it as on those parts. Hazy Research's 'GPUs Go "
                                          "Brrr' puts the no-wgmma ceiling at ~63% (as recalled; not re-read)"),
    # -- quantised formats --
    tensor_int8_flop_per_clk_per_sm=derived(8192, "FLOP/clk/SM", fact(H100, "tensor.tc_dense_int8_tops") +
                                            ": 1978.9 TOPS / (132 SMs x 1.83 GHz), the FP8 rate"),
    int32_ops_per_clk_per_sm=doc(64, "ops/clk/SM", "NVIDIA CUDA C++ Programming Guide §20.8.1 (compute capability "
                                 "9.0: 64 INT32 cores per SM beside 128 FP32 cores; the section " +
                                 fact(H100, "simt.fp32_cores_per_sm") + " cites; INT32 figure as recalled)"),
)


h200 = replace(
    h100_sxm,
    name="h200", description="NVIDIA H200 SXM 141GB (GH100 + HBM3e, sm90)",
    **sm_limits(H200, "compute.subpartitions / warps / threads / CTAs / regs per SM"),
    smem_per_sm_bytes=doc(228 * 1024, "B", fact(H200, "memory.smem_max_per_sm / per_cta")),
    smem_per_cta_bytes=doc(227 * 1024, "B", fact(H200, "memory.smem_max_per_sm / per_cta")),
    sm_count=doc(132, "SMs", fact(H200, "compute.sm_count")),
    l2_bytes=measured(62914560, "B", H200_RUN + "/llama_gpu.json l2_bytes: CUDA device properties L2_cache_size "
                      "of the H200 measured (60 MiB; " + fact(H200, "memory.l2_size") + " assumed the H100's 50)"),
    l2_bytes_per_s=measured(9.7e12, "B/s", fact(H200, "memory.l2_bandwidth_measured")),
    dram_peak_bytes_per_s=doc(4.8e12, "B/s", fact(H200, "memory.hbm_bandwidth_peak")),
    dram_bytes_per_s=measured(4.636e12, "B/s", H200_MB + " MB-009 (fill of a 1 GiB buffer, 4636 GB/s: the better "
                              "single-kind stream; MB-008 sum 4281 GB/s; a bf16 mul of two 470 MB tensors ran at "
                              "91% of ncu's DRAM peak, ncu_details.csv ID 12; " +
                              fact(H200, "memory.hbm_bandwidth_measured") + " read 3.89 TB/s on another board)"),
    dram_latency_cycles=measured(690, "cycles", "published_dev.csv UBENCH-014 (GH200's H100 with HBM3, proxy)"),
    l2_latency_cycles=measured(281, "cycles", "published_dev.csv UBENCH-013 (GH200 proxy)"),
    dram_bytes=doc(141e9, "B", fact(H200, "memory.hbm_capacity")),
    # -- power and DVFS: the GH100 V-f range of the H100; limit, idle power and energies measured on an H200 --
    power_limit_w=measured(700, "W", H200_SMI + ": enforced power limit 700 W (NVML; default and max the same), "
                           "as " + fact(H200, "power.tdp")),
    kernel_tail_cycles=calibrated(862, "cycles", "scripts/calibrate_fixed_h200.py: one-CTA elementwise kernels of the "
                                  "HF Llama-3-8B eager decode step (" + H200_RUN + "/llama_gpu.json, torch.profiler "
                                  "CUDA records, 487 calls at the 1980 MHz boost: 0.95-1.22 us each) less their "
                                  "simulated work; the median (range 568-1173 cycles)"),
    power_limit_fast_w=calibrated(H200_FAST_W, "W", "scripts/calibrate_power_h200.py: bf16 8192^3, FP8 8192^3 and "
                                  "bf16 4096^3 GEMMs from idle run their first 5-20 ms at the clock where the model "
                                  "draws 887, 881 and 863 W (" + H200_RUN + "/power_window.json), then fall to the "
                                  "700 W average; the mean. Check: an 8192^3 GEMM alternating with a 1 GiB copy is "
                                  "predicted at 1.394 GHz, 1.539 ms per GEMM, against 1.605 ms measured"),
    static_power_w=measured(79.19, "W", H200_SMI + ": Average Power Draw 79.19 W idle at 345 MHz, before the run "
                            "(another board read 74.6 W: find_string id 9046480431, " + POWER_NOTES + " §3)"),
    clock_max_hz=measured(1.98e9, "Hz", H200_SMI + ": clocks.max.sm 1980 MHz (NVML)"),
    sm_active_pj_per_cycle=calibrated(H200_SM_ACTIVE_PJ, "pJ/cycle", "scripts/calibrate_power_h200.py: an add over "
                                      "an L2-resident 8 MiB buffer at the 1980 MHz boost draws 387 W with no DRAM "
                                      "traffic (" + H200_RUN + "/power_window.json, 3 s, 200 adds per CUDA-graph "
                                      "replay): idle + its L2 bytes' energy + this per busy SM-cycle"),
    dram_pj_per_byte=calibrated(H200_DRAM_PJ, "pJ/B", "scripts/calibrate_power_h200.py: the same add over 1 GiB "
                                "(4.23 TB/s, DRAM-bound) draws 643 W; what idle, the SMs and L2 leave, per DRAM byte "
                                "(5.6 pJ/bit: HBM3e, PHY, controller and NoC). Checks: a 1 GiB copy_ 639 W modelled "
                                "vs 649 W measured, a bf16 GEMV (" + H200_MB + " MB-087/089) 627 vs 569 W"),
    tensor_pj_per_flop_bf16=calibrated(H200_BF16_PJ, "pJ/FLOP", "scripts/calibrate_power_h200.py: the simulated "
                                       "8192^3 bf16 GEMM draws the 700 W limit at the clock where it takes the "
                                       "1639 us per call measured sustained on random data (" + H200_MB + " MB-072: "
                                       "1.32 GHz; NVML read 1470 MHz, ~9% above the effective clock, see the run's "
                                       "README); held out, 4096^3 (MB-078) is predicted within 2.2%"),
    tensor_pj_per_flop_fp8=calibrated(H200_FP8_PJ, "pJ/FLOP", "scripts/calibrate_power_h200.py: the FP8 8192^3 "
                                      "GEMM (torch._scaled_mm) at the limit where it takes the 895.5 us per call "
                                      "measured sustained (" + H200_MB + " MB-081: 1.24 GHz)"),
    tensor_pj_per_flop_tf32=assumed(2 * H200_BF16_PJ, "pJ/FLOP", _TF32_E),
    dram_read_bytes_per_s=measured(4.281e12, "B/s", H200_MB + " MB-008 (x.sum() of a 1 GiB fp32 buffer)"),
    dram_write_bytes_per_s=measured(4.636e12, "B/s", H200_MB + " MB-009 (x.fill_() of a 1 GiB fp32 buffer)"),
    dram_copy_bytes_per_s=measured(4.257e12, "B/s", H200_MB + " MB-010 (y.copy_(x) of 1 GiB, read + write "
                                   "bytes counted)"),
    launch_overhead_s=small_kernel_gap(2.48e-6, GPU_BENCHES + " gpu-small-kernels/h200.txt", 1.14e-6,
                                       "eager-stream back-to-back"),
    graph_launch_overhead_s=small_kernel_gap(1.27e-6, GPU_BENCHES + " gpu-small-kernels/h200_graph.txt", 1.14e-6,
                                             "CUDA-graph back-to-back"),
)

b200 = replace(
    h100_sxm,
    name="b200", arch=Arch.SM100, description="NVIDIA B200 SXM 180GB (2 dies, sm100)",
    **sm_limits(B200),
    # register-accumulator MMAs (mma.sync) exclude MUFU work as on sm80/sm90; tcgen05 kernels accumulate in TMEM,
    # off the register file, and overlap it (the premise of FlashAttention-4's design; the engine pairs the pipes
    # only for kernels without TMEM accumulators)
    sfu_overlaps_tensor=calibrated(0, "bool", "published_dev.csv ATTN-027/028/031: FlashAttention-2's sm80 path "
                                   "(mma.sync, register accumulators) on B200 runs at ~ mma.sync time + exp time, as "
                                   "on sm80/sm90 (h100-sxm's sfu_overlaps_tensor)"),
    smem_per_sm_bytes=doc(228 * 1024, "B", fact(B200, "memory.smem_max_per_sm")),
    smem_per_cta_bytes=doc(227 * 1024, "B", fact(B200, "memory.smem_max_per_cta_optin")),
    sm_count=doc(148, "SMs", fact(B200, "compute.sm_count")),
    clock_hz=derived(1.856e9, "Hz", fact(B200, "compute.clock_implied_by_tensor_peaks") +
                     " (2.25 PFLOPS dense BF16 / (148 SM x 8192 FLOP/clk))"),
    tensor_bf16_flop_per_clk_per_sm=derived(8192, "FLOP/clk/SM",
                                            fact(B200, "tensor.tc_dense_fp16_bf16_flop_per_clk_per_sm")),
    tensor_fp8_flop_per_clk_per_sm=derived(16384, "FLOP/clk/SM",
                                            fact(B200, "tensor.tc_dense_fp8_flop_per_clk_per_sm")),
    tensor_tf32_flop_per_clk_per_sm=assumed(4096, "FLOP/clk/SM", "assumed: half of BF16 as on Hopper (" +
                                            fact(B200, "tensor.tc_dense_tf32_flop_per_clk_per_sm") + " unknown)"),
    tensor_latency_cycles=calibrated(303, "cycles", fact(B200, "latency.op_latencies_microbench") +
                                     ": tcgen05 128x128x64 = 559 cycles issue to completion, less its 256 cycles "
                                     "at 8192 FLOP/clk (128x128x128 = 900 - 512 = 388; the smaller is taken)"),
    tensor_subop_flop=derived(2 * 128 * 256 * 16, "FLOP", fact(B200, "tensor.tcgen05_mma") + ": M128 N256 K16"),
    tensor_datapath_rows=derived(128, "rows", fact(B200, "tensor.tcgen05_mma") + " (cta_group::1, M=128) and " +
                                 fact(B200, "memory.tmem_per_sm") + " (128 lanes): an M=128 MMA writes one "
                                 "accumulator row per TMEM lane (datapath); an M=64 MMA uses only the low 16 of "
                                 "each sub-partition's 32 lanes (PTX TMEM layout F, as read in tile-ai/tilelang "
                                 "issue #2877 and JAX Mosaic GPU's 'support for 1CTA MMA with M=64': 'each MMA "
                                 "instruction only accesses half the lanes'), so it holds the datapath as long "
                                 "as M=128 for half the FLOPs (inference from the layout; no M=64 throughput "
                                 "microbenchmark found)"),
    tma_latency_cycles=assumed(200, "cycles", "assumed from " + fact(B200, "latency.op_latencies_microbench") +
                               " (TMA overhead reported larger on B200)"),
    fma_flop_per_clk_per_sm=derived(256, "FLOP/clk/SM", fact(B200, "simt.fp32_flop_per_clk_per_sm")),
    sfu_ops_per_clk_per_sm=derived(16, "ops/clk/SM", fact(B200, "simt.sfu_per_sm / mufu per clk")),
    tmem_bytes_per_sm=derived(256 * 1024, "B", fact(B200, "memory.tmem_per_sm")),
    tmem_bytes_per_clk_per_sm=assumed(512, "B/clk/SM", "assumed: tcgen05.ld 32 lanes x 32 bit x 4 SMSPs per clk"),
    l1_latency_cycles=measured(40, "cycles", "published_dev.csv UBENCH-015"),
    l2_bytes=measured(126.5e6, "B", fact(B200, "memory.l2_size")),
    l2_bytes_per_s=assumed(19.4e12, "B/s", "assumed: 2 dies each with Hopper's measured L2 bandwidth (" +
                           fact(H200, "memory.l2_bandwidth_measured") + ")"),
    l2_latency_cycles=measured(295, "cycles", "published_dev.csv UBENCH-016"),
    dram_peak_bytes_per_s=derived(7.67e12, "B/s", fact(B200, "memory.hbm_bandwidth_from_bus") +
                                  " (chosen over the 8.0 TB/s spec: the driver reports a 7680-bit bus)"),
    dram_bytes_per_s=calibrated(6.9e12, "B/s", "0.90 x 7.67 TB/s: " + fact(B200, "memory.async_copy_bw_measured") +
                                " (LDGSTS saturates ~6.6 TB/s; TMA goes higher)"),
    dram_latency_cycles=measured(860, "cycles", "published_dev.csv UBENCH-017"),
    dram_bytes=doc(180e9, "B", fact(B200, "memory.hbm_capacity")),
    # -- power and DVFS --
    power_limit_w=doc(1000, "W", fact(B200, "power.tgp") + " (HGX B200; flashinfer PR #2899 measured ~1000 W while "
                      "throttling. DGX B200's configurable 700 W default set point is a what-if: power_limit_w)"),
    static_power_w=assumed(150, "W", "assumed: 2 x H100's 75 W idle (two dies, 8 HBM3e stacks); B200 idle not found ("
                           + POWER_NOTES + " §3)"),
    clock_max_hz=doc(1.965e9, "Hz", "device-reported max SM clock: ml-engineering README §'Clock speed' @ 744d01e; "
                     "flashinfer-ai/flashinfer PR #2899 (" + POWER_NOTES + " §2)"),
    clock_min_hz=assumed(345e6, "Hz", "assumed: Hopper's idle SM clock (B200 min clock not found, " + POWER_NOTES +
                         " §2)"),
    tensor_pj_per_flop_bf16=calibrated(B200_BF16_PJ, "pJ/FLOP", "scripts/calibrate_power.py: the simulated "
                                       "4096^3 bf16 GEMM draws 1000 W at 1.586 GHz: a B200 write-up measuring "
                                       "clock and power during back-to-back cuBLAS GEMMs ('TCA 51% but MFU Under "
                                       "8%: Hidden GPU Performance Losses' §4.2, find_string id 54600572863: "
                                       "4096^3 1586 MHz at 984 W, 2048^3 1939 MHz at 964 W, 1024^3 1965 MHz at "
                                       "409 W; large matrices ~1460 MHz). Corroborated by HGX B200 1965 -> ~1580 "
                                       "MHz at ~1000 W under BF16 tensor work (flashinfer-ai/flashinfer PR #2899, "
                                       + POWER_NOTES + " §1; MAMF bf16 1745 TFLOPS implies >= 1.44 GHz). Was "
                                       "0.5383, anchored on the simulated 8192^3 GEMM at 1.58 GHz: no size was "
                                       "given for that clock, and 8192^3 then ran at 1.58 instead of ~1.46 GHz"),
    tensor_pj_per_flop_fp8=calibrated(B200_BF16_PJ * 1745.0 / 3432.5, "pJ/FLOP", "bf16 energy x 1745/3432.5: "
                                      "B200 MAMF bf16 vs fp8 TFLOPS (ml-engineering README @ 744d01e, " +
                                      POWER_NOTES + " §1; equal clocks assumed)"),
    tensor_pj_per_flop_tf32=assumed(2 * B200_BF16_PJ, "pJ/FLOP", _TF32_E),
    dram_pj_per_byte=assumed(24, "pJ/B", _HBM3_E),  # its anchor was calibrated with these, not the GH100 values
    sm_active_pj_per_cycle=assumed(0.0, "pJ/cycle", "assumed: not separated on this part (no measured board power "
                                   "of a memory-bound kernel); the calibrated tensor energy absorbs it for the anchor "
                                   "GEMM"),
    dram_read_bytes_per_s=measured(7.26e12, "B/s", MICROBENCH_BW + " tma2d_throughput/tma2d_tput_results.csv (TMA "
                                   "2D read, 1 CTA/SM, 128 KB in flight per SM, ncu dram__bytes_read)"),
    dram_write_bytes_per_s=assumed(6.9e12, "B/s", "assumed: the sustained figure (no B200 write-only stream "
                                   "measurement found)"),
    dram_copy_bytes_per_s=assumed(5.6e12, "B/s", "assumed: 0.81 x the write figure, H200's copy/write ratio (" +
                                  GPU_BENCHES + " gpu-stream/h200.txt: 3165 / 3898 GB/s); no B200 copy stream found"),
    launch_overhead_s=assumed(1.81e-6, "s", "assumed: H200's gap (no B200 back-to-back small-kernel data; a "
                              "host-timed single launch, dogacel.github.io 2026-03-14 'four counter-intuitive "
                              "lessons', implies more, ~4.3 us, but includes the synchronisation)"),
    graph_launch_overhead_s=assumed(0.60e-6, "s", "assumed: H200's gap under CUDA graphs (no B200 back-to-back "
                                    "data; the same blog's graph replay implies ~1.8 us including the sync)"),
    kernel_trace_overhead_s=kernel_trace_overhead(
        4.960e-6, "ROCm/xla xla/service/gpu/model/matmul_interpolator_data.h @ "
        "63ce2981d3f46d47fb25509a2d257f428f3dd275, key sm_100_B200, its smallest entry 256x256x256 bf16 (34 MFLOP at "
        "6.77 TFLOPS)", 3.950e-6),
    # -- warp-level MMA: sm80's mma.sync on sm100 is not tcgen05; it issues one HMMA.16816 (4096 FLOP) per
    # sub-partition every ~8 cycles, A100's per-SM rate and a quarter of tcgen05's --
    warp_mma_flop_per_clk_per_sm=derived(2048, "FLOP/clk/SM", "4 sub-partitions x 4096 FLOP per HMMA.16816 / 8 "
                                         "cycles: mma.sync microbenchmarks on sm100 in the stored corpus -- a "
                                         "GB200 MMA emitter's notes, 'one issued every 8' cycles, 8.17 cycles per "
                                         "HMMA with eight independent accumulator chains per scheduler "
                                         "(find_string id 66483417908), and a B200 mma.sync benchmark log, "
                                         "'independent chains reach about 8.5 cycles per HMMA per SMSP' "
                                         "(find_string id 70564832306); cross-check: FlashAttention-2 (mma.sync) "
                                         "forward peaks at 381 TFLOPS at d=64 (published_dev.csv ATTN-028) and "
                                         "362 at d=128 (meta-pytorch/tritonbench PR #171) on B200, ~68% of this "
                                         "rate, as FA2 reaches ~70% of A100's (Dao-AILab/flash-attention issue "
                                         "#1059)"),
    # -- quantised formats --
    tensor_int8_flop_per_clk_per_sm=derived(16384, "FLOP/clk/SM", "glennklockwood.com/garden/processors/B200, HGX "
                                            "B200 at 1,000 W table: INT8 matrix 4,500 TOPS dense (9,000 sparse) / "
                                            "(148 SMs x 1.856 GHz) = 16382: the FP8 rate"),
    tensor_fp4_flop_per_clk_per_sm=derived(32768, "FLOP/clk/SM", fact(B200, "tensor.tc_dense_fp4_flop_per_clk_per_sm")
                                           + " (4 x the bf16 rate: " + fact(B200, "tensor.tc_dense_fp4_pflops") +
                                           " 9.0 PFLOPS dense / 2.25 bf16; twice FP8, NVIDIA blog 'Introducing NVFP4 "
                                           "for Efficient and Accurate Low-Precision Inference' Figure 1: B200 9/18 "
                                           "PFLOPS dense/sparse FP4)"),
    int32_ops_per_clk_per_sm=assumed(64, "ops/clk/SM", "assumed: Hopper's 64 INT32 lanes per SM (CUDA C++ "
                                     "Programming Guide §20.8.1); the compute capability 10.0 section not read"),
)

# -- A100 PCIe 40GB (issue 12): the same GA100 die and clocks as the SXM part on a 250 W board with 40 GB HBM2 --
# (published rows measured on 'NVIDIA A100-PCIE-40GB' ran on the 400 W SXM profile before: too fast under load)
A100_PCIE_SPECS = ("thundercompute.com/blog/nvidia-a100-specs-full-guide 'A100 Specifications' table, column "
                   "'A100 PCIe 40GB' (secondary, reproduces NVIDIA's A100 40GB PCIe product brief PB-10137-001)")
A100_40_STREAM = GPU_BENCHES + " gpu-stream/a100_40.txt (1024-thread-block row; fixed_costs.md §2)"
a100_pcie = replace(
    a100_sxm,
    name="a100-pcie", description="NVIDIA A100 PCIe 40GB (GA100, sm80; 250 W board, HBM2)",
    dram_peak_bytes_per_s=doc(1.555e12, "B/s", A100_PCIE_SPECS + ": memory bandwidth 1,555 GB/s"),
    dram_bytes_per_s=measured(1.503e12, "B/s", A100_40_STREAM + ": the better single-kind stream, 1503 GB/s "
                              "write (init; read 1490 GB/s)"),
    dram_read_bytes_per_s=measured(1.490e12, "B/s", A100_40_STREAM + ": read"),
    dram_write_bytes_per_s=measured(1.503e12, "B/s", A100_40_STREAM + ": init (write-only)"),
    dram_copy_bytes_per_s=measured(1.381e12, "B/s", A100_40_STREAM + ": scale (1 load + 1 store stream)"),
    dram_bytes=doc(40e9, "B", A100_PCIE_SPECS + ": 40GB HBM2"),
    power_limit_w=doc(250, "W", A100_PCIE_SPECS + ": TDP 250 W"),
    static_power_w=measured(40, "W", "A100 40GB idle ~40 W, Hacker News comments (hackernews4u.vercel.app/item/"
                            "48247005; anecdotal, " + POWER_NOTES + " §3)"),
)

GPU_PROFILES: dict[str, GpuProfile] = {p.name: p for p in (a100_sxm, a100_pcie, h100_sxm, h200, b200)}
