"""The numbers behind the Tensix profiles, each with its provenance, and the choices made where sources conflict.

Read by torchsim.hwmodels.tensix.profiles. Blackhole is written as Wormhole plus what differs (the ISA docs say
the matrix unit, SFPU and Dst are "similar, but not identical"), never as a copy. Conflicts numbered as in
../shared/hardware/README.md 'Conflicts between sources' are resolved here and the reason is in the source text.
"""

from __future__ import annotations

from torchsim.hwmodels.quantity import Quantity, assumed, calibrated, derived, doc

WH = "Wormhole-B0 (n150 / n300)"
BH = "Blackhole-A0 (p150a/p150b/p100a)"


def fact(device: str, parameter: str) -> str:
    return f"facts.csv {device} {parameter}"


# -- placement: NoC coordinates (x-y) from the soc descriptors cited by facts.csv grid.noc_grid -------------
WH_PLACEMENT = ("tt-metal tt_metal/soc_descriptors/wormhole_b0_80_arch.yaml (functional_workers, "
                "dram_preferred_worker_endpoint); the compute grid takes the first 8 worker rows (assumed: which "
                "row is harvested or used for dispatch differs per chip)")
WH_WORKER_COLS = [1, 2, 3, 4, 6, 7, 8, 9]
WH_WORKER_ROWS = [1, 2, 3, 4, 5, 7, 8, 9, 10, 11]
# One endpoint per tt-metal DRAM bank (12 banks = 6 controllers x 2 channels); bank i uses entry i.
WH_DRAM_WORKER_ENDPOINTS = ((0, 11), (0, 1), (0, 5), (0, 7), (5, 1), (5, 11), (5, 2), (5, 9), (5, 8), (5, 3),
                            (5, 5), (5, 7))

BH_PLACEMENT = ("tt-metal tt_metal/soc_descriptors/blackhole_140_arch.yaml (functional_workers, "
                "dram_preferred_worker_endpoint); the compute grid takes the first worker columns (assumed: "
                "which columns are harvested differs per chip)")
BH_WORKER_COLS = [1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 16]
BH_WORKER_ROWS = [2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
BH_DRAM_WORKER_ENDPOINTS = ((0, 11), (0, 3), (0, 8), (0, 6), (9, 11), (9, 3), (9, 8), (9, 6))

def wormhole_numbers() -> dict[str, Quantity]:
    """Every Quantity field of a Wormhole n150 profile."""
    return {
        "clock_hz": doc(1.0e9, "Hz", fact(WH, "clock.aiclk")),
        "noc_grid_x": doc(10, "nodes", fact(WH, "grid.noc_grid")),
        "noc_grid_y": doc(12, "nodes", fact(WH, "grid.noc_grid")),
        "tensix_enabled": doc(72, "cores", fact(WH, "grid.tensix_enabled_by_product") + " (n150 = 72)"),
        "compute_grid_x": doc(8, "cores", fact(WH, "grid.compute_grid_used_by_tt-metal")),
        "compute_grid_y": doc(8, "cores", fact(WH, "grid.compute_grid_used_by_tt-metal")),
        "l1_bytes_per_core": doc(1464 * 1024, "B", fact(WH, "tensix.l1_sram_per_tile") +
                                 " (= soc-descriptor worker_l1_size 1499136 B)"),
        "l1_reserved_bytes": assumed(96 * 1024, "B", "assumed: firmware, mailboxes (12,640 B, Wolfpine paper §III-A),"
                                     " kernel binaries and runtime arguments below tt-metal's L1 allocator base"),
        "dst_bytes": doc(32 * 1024, "B", fact(WH, "fpu.dst_register")),
        "fpu_flop_per_clk_per_phase": derived(4096, "FLOP/clk", fact(WH, "fpu.matmul_flop_per_clk_per_tile") +
                                              " (MVMUL 8x16 @ 16x16 per cycle per fidelity phase)"),
        "fpu_latency_cycles": doc(5, "cycles", fact(WH, "fpu.mvmul_ipc_latency")),
        "fpu_eltwise_add_datums_per_clk": doc(128, "datums/clk", fact(WH, "fpu.other_fpu_rates_at_1GHz") +
                                              " (ELWADD 0.128 TFLOP/s, AddDst=false)"),
        "fpu_eltwise_mul_datums_per_clk": doc(256, "datums/clk", fact(WH, "fpu.other_fpu_rates_at_1GHz") +
                                              " (ELWMUL 0.256 TFLOP/s per phase)"),
        "fpu_reduce_flop_per_clk": doc(2048, "FLOP/clk", fact(WH, "fpu.other_fpu_rates_at_1GHz") + " (GAPOOL)"),
        "sfpu_lanes": doc(32, "lanes", fact(WH, "sfpu.sfpu_width")),
        "sfpu_latency_cycles": doc(2, "cycles", fact(WH, "sfpu.sfpmad_ipc_latency")),
        "unpackers": doc(2, "units", fact(WH, "data_movement.unpackers")),
        "unpacker_bytes_per_clk": doc(64, "B/clk", fact(WH, "data_movement.unpackers") + " (x4 mode)"),
        "unpack_setup_cycles": doc(2, "cycles", fact(WH, "data_movement.unpackers") +
                                   " (>= 2-cycle address setup per UNPACR; one UNPACR per 16x16 face)"),
        "unpack_l1_bytes_per_clk": doc(64, "B/clk", "tt-isa-documentation WormholeB0/TensixTile/TensixCoprocessor/"
                                       "UNPACR_Regular.md §Performance: when both unpackers are active and both "
                                       "want x4 (64 B/clk) each gets x2 (32 B/clk), so the pair fetches 64 B/clk "
                                       "from L1 together; one alone at x4 also 64 B/clk (" +
                                       fact(WH, "data_movement.unpackers") + ")"),
        "packers": doc(4, "units", fact(WH, "data_movement.packers")),
        "packer_bytes_per_clk": doc(16, "B/clk", fact(WH, "data_movement.packers") + " (1 x 128-bit write each)"),
        "packer_l1_acc_cycles": doc(2, "cycles/write", fact(WH, "data_movement.packers") + " (tt-isa-documentation "
                                    "WormholeB0/TensixTile/L1.md §Packers: one 128-bit non-atomic accumulate every "
                                    "two cycles, atomic every five; non-atomic chosen: a pack pass writes each 16 B "
                                    "once, and tt-metal's choice is not documented)"),
        "riscv_l1_load_cycles": doc(8, "cycles", fact(WH, "tensix.riscv_l1_load_latency") +
                                    "; Wolfpine paper Table II measures 8.098 on p150"),
        "tensix_push_cycles": assumed(2, "cycles", "assumed: one store to the instruction-push address plus its "
                                      "address arithmetic on the in-order TRISC (1 instr/clk, " +
                                      fact(WH, "tensix.baby_riscv_cores") + ")"),
        "llk_call_cycles": assumed(40, "cycles", "assumed: TRISC work of one LLK API call (CB pointer reads at "
                                   ">= 8 cycles each, configuration writes, MOP/replay setup, ~10 pushes)"),
        "noc_flit_bytes": doc(32, "B", fact(WH, "noc.flit_size")),
        "noc_max_packet_bytes": doc(8192, "B", fact(WH, "noc.max_packet")),
        "noc_hop_cycles": doc(9, "cycles", fact(WH, "noc.hop_latency") + " (router to router; ISA numbers chosen "
                              "for the router pipeline, conflict 6)"),
        "noc_niu_cycles": doc(5, "cycles", fact(WH, "noc.hop_latency") + " (NIU to router and router to NIU, ~5)"),
        "noc_niu_bytes_per_clk": doc(28.1, "B/clk", fact(WH, "noc.npe_niu_rates") + " [vendor model: worker "
                                     "inject/absorb]; links run at the raw 1 flit/clk (conflict 7)"),
        "noc_transaction_min_cycles": derived(128 / 5.5, "cycles", fact(WH, "noc.npe_bw_vs_transfer_size") +
                                              ": 128 B at 5.5 B/clk -> one transaction per 23.3 cycles per NIU"),
        "noc_read_endpoint_cycles": derived(50, "cycles", fact(WH, "noc.npe_read_latency") + ": same-tile read 70 "
                                            "cycles minus four ~5-cycle NIU crossings (request and response)"),
        "dram_banks": doc(12, "banks", fact(WH, "dram.channels") + " (tt-metal uses 12 banks)"),
        "dram_bank_bytes_per_s": doc(24e9, "B/s", fact(WH, "dram.per_channel_bandwidth") + " (288 GB/s chip peak "
                                     "chosen over the 384 GB/s of the BH DRAM report, conflict 5)"),
        "dram_bytes": doc(12 * 2**30, "B", fact(WH, "dram.type_capacity")),
        "dram_latency_cycles": assumed(200, "cycles", "assumed: GDDR6 access behind the DRAM tile's NIU (not in the "
                                       "sources read; ~200 ns class as on GPUs' GDDR parts)"),
        "kernel_launch_cycles": assumed(1500, "cycles", "assumed: go message, firmware reading the launch message, "
                                        "circular-buffer setup and runtime arguments before a kernel's first node"),
        "launch_overhead_s": assumed(5e-6, "s", "assumed: gap between two traced programs (dispatch cores writing "
                                     "launch messages to every worker); a what-if profile overrides it"),
    }


def blackhole_numbers() -> dict[str, Quantity]:
    """Wormhole's numbers with what Blackhole changes (clock, L1, NoC width, DRAM, grid size)."""
    wh = wormhole_numbers()
    return wh | {
        "clock_hz": doc(1.35e9, "Hz", fact(BH, "clock.aiclk")),
        "noc_grid_x": doc(17, "nodes", fact(BH, "grid.noc_grid")),
        "noc_grid_y": doc(12, "nodes", fact(BH, "grid.noc_grid")),
        "l1_bytes_per_core": doc(1499136, "B", fact(BH, "tensix.l1_sram_per_tile") + " (conflict 4: the "
                                 "soc-descriptor worker_l1_size 1464 KiB is chosen over MEM_L1_SIZE 1536 KiB "
                                 "because it is what tt-metal's allocator hands to kernels)"),
        "dst_bytes": doc(32 * 1024, "B", fact(BH, "fpu.dst_register")),
        "fpu_flop_per_clk_per_phase": doc(4096, "FLOP/clk", fact(BH, "fpu.matrix_unit") + " (same as Wormhole; "
                                          + fact(BH, "fpu.tile_matmul_cycles_32x32x32") + ")"),
        "sfpu_lanes": doc(32, "lanes", fact(BH, "sfpu.sfpu_width / clock")),
        "sfpu_latency_cycles": doc(2, "cycles", fact(BH, "sfpu.sfpmad_ipc_latency")),
        "riscv_l1_load_cycles": Quantity(8, "cycles", "measured", "Wolfpine paper Table II: RISC-V L1 load 8.098 "
                                         "cycles on p150"),
        "noc_flit_bytes": doc(64, "B", fact(BH, "noc.flit_size")),
        "noc_max_packet_bytes": doc(16384, "B", fact(BH, "noc.max_packet")),
        "noc_hop_cycles": doc(9, "cycles", fact(BH, "noc.hop_latency") + "; Wolfpine paper Table II measures "
                              "8.85-9.03 cycles/hop on p150"),
        "noc_niu_cycles": doc(5, "cycles", fact(BH, "noc.hop_latency")),
        "noc_niu_bytes_per_clk": doc(60.9, "B/clk", fact(BH, "noc.npe_niu_rates") + " [vendor model]"),
        "noc_transaction_min_cycles": derived(128 / 6.0, "cycles", fact(BH, "noc.npe_bw_vs_transfer_size") +
                                              ": 128 B at 6.0 B/clk"),
        "noc_read_endpoint_cycles": derived(45, "cycles", fact(BH, "noc.npe_read_latency") + ": same-tile read 65 "
                                            "cycles minus four ~5-cycle NIU crossings"),
        "dram_banks": doc(8, "banks", fact(BH, "dram.channels")),
        "dram_bank_bytes_per_s": derived(64e9, "B/s", fact(BH, "dram.per_bank_bandwidth") + " (512 GB/s / 8)"),
        "dram_bytes": doc(32 * 2**30, "B", fact(BH, "dram.type_capacity")),
        "kernel_launch_cycles": assumed(2000, "cycles", "assumed: as Wormhole's ~1.5 us at the 1.35 GHz clock"),
        # Blackhole's L1 is 'similar, but not identical' to Wormhole's (tt-isa-documentation BlackholeA0/TensixTile/
        # L1.md) and no Blackhole page gives the unpackers' rate; Wormhole's 64 B/clk would cap a 4x2-subblock bf16
        # HiFi2 matmul at 80 % of the FPU, below the 87 % the p150 rows measure
        "unpack_l1_bytes_per_clk": calibrated(80, "B/clk", "scripts/calibrate_unpack_blackhole.py: fitted to the "
                                              "device-profiler times of published_dev.csv GEMM-100, GEMM-102, "
                                              "GEMM-105, GEMM-109, GEMM-112, GEMM-115, GEMM-118, GEMM-120, GEMM-121, "
                                              "GEMM-122, GEMM-123 (p150 13x10, loss 0.166 at 64 B/clk, 0.079 at 80, "
                                              "flat above: the rows bound the rate from below); held out: the same "
                                              "report's 9 p150 11x10 rows, MAPE 15.9 % at 64 -> 6.0 % at 80. 80 B/clk "
                                              "is Wormhole's documented port limit of both unpackers together (five "
                                              "128-bit L1 reads per cycle, tt-isa-documentation WormholeB0/"
                                              "TensixTile/L1.md §Unpackers)"),
    }


# Not used, on purpose: tt-npe's DRAM endpoint rates (facts.csv noc.npe_niu_rates: WH 23.2 B/clk, BH 40 B/clk =
# 54 GB/s). Blackhole's measured 500 GB/s over 8 banks (facts.csv dram.measured_bandwidth) is 62.5 GB/s per bank,
# above 54 GB/s, so that vendor-model constant is no hard ceiling; the bank's channel rate is the DRAM limit.
