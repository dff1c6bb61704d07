"""FlashAttention-4 vs FlashAttention-3 on B200 (the GPU-Tile-Sim paper's Blackwell case study, §7).

    python benchmarks/fa4_vs_fa3.py [--seqlens 1024,4096,8192] [--full 1024]

32K tokens in total (batch = 32768 / seqlen), 16 heads of dim 128 (hidden 2048), BF16, non-causal. FA3 runs
on B200 with its Hopper tile sizes (128 x 176, two ping-pong consumer warp groups) and Blackwell primitives,
as the paper's adaptation; FA4 is the sm100 template (two 128-row Q tiles per CTA, TMEM, MMA / softmax /
correction warp specialisation, polynomial exp). For each sequence length we print the grid's waves and the
cycles of one wave (the first `SMs x CTAs-per-SM` CTAs of the real grid simulated alone), beside the paper's
14 vs 28 waves and ~1.3x fewer cycles per wave for FA4, and the timeline statistics that explain them.
`--full` also simulates whole kernels up to that sequence length.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace

from torchsim.graph import CtaClass, Edge, KernelGraph, Unit
from torchsim.hwmodels import get_profile
from torchsim.lowering.templates.attention import attention
from torchsim.lowering.templates.attention_config import AttnShape, AttnVariant
from torchsim.sim import KernelResult, simulate

PAPER = {"fa4_waves": 14, "fa3_waves": 28, "per_wave_speedup": 1.3}
TOKENS, HEADS, HEAD_DIM = 32768, 16, 128


def first_wave(kg: KernelGraph, ctas: int) -> KernelGraph:
    """The first `ctas` CTAs of the grid in launch order, as a kernel of their own."""
    classes, left = [], ctas
    for c in kg.classes:
        if left <= 0:
            break
        take = min(left, c.count)
        classes.append(CtaClass(c.graph, c.params[:take], c.param_names, c.threads, c.regs_per_thread, c.smem_bytes))
        left -= take
    share = ctas / kg.num_ctas
    return replace(kg, name=kg.name + "_wave1", classes=tuple(classes), flops=kg.flops * share,
                   dram_bytes=kg.dram_bytes * share)


def tensor_idle(kg: KernelGraph, res: KernelResult, sm: int = 0) -> tuple[int, dict[str, int], int]:
    """Idle cycles of SM `sm`'s tensor datapath: before its first MMA, between MMAs (keyed by what the next
    MMA waited for: its last-arriving input), and after its last MMA until the wave ends. An MMA holds the
    datapath from its start for work / rate cycles; its completion comes a latency later."""
    hw = get_profile(res.hw)
    graphs = {c.graph.name: c.graph for c in kg.classes}
    recs = [r for r in (res.records or ()) if r.sm == sm]
    end = {(r.cta, r.node): r.end for r in recs}
    mmas = sorted((r for r in recs if r.unit == Unit.TENSOR.name), key=lambda r: r.start)
    if not mmas:
        return res.cycles, {}, 0
    preds: dict[tuple[str, int], list[int]] = {}
    for name, g in graphs.items():
        for src, dst, kind in zip(g.edge_src, g.edge_dst, g.edge_kind):
            if kind == Edge.DATA:
                preds.setdefault((name, int(dst)), []).append(int(src))
    between: dict[str, int] = {}
    busy_end = 0.0
    for r in mmas:
        g = graphs[r.cta_class]
        if busy_end and r.start > busy_end:
            last = max(preds.get((r.cta_class, r.node), []), key=lambda k: end.get((r.cta, k), -1), default=-1)
            why = g.node_names[last].split("[")[0].rstrip("0123456789") if last >= 0 else "issue"
            between[why] = between.get(why, 0) + int(r.start - busy_end)
        busy_end = max(busy_end, r.start + float(g.work[r.node]) / hw.tensor_flop_per_clk_per_sm(g.dtype))
    return int(mmas[0].start), between, int(res.cycles - busy_end)


def describe(tag: str, kg: KernelGraph, wave: KernelResult, waves: int, slots: int) -> None:
    busy = wave.unit_busy
    stalls = wave.stalls
    total = sum(stalls.values()) or 1.0
    before, between, after = tensor_idle(kg, wave)
    fill = kg.tensor_datapath_fill() or 0.0
    print(f"  {tag}: {kg.num_ctas} CTAs of {kg.attrs['bm']} query rows, {slots} per wave -> {waves} waves; "
          f"one wave {wave.cycles} cycles ({wave.cycles / kg.attrs['bm'] * 128:.0f} per 128 query rows)")
    print("       unit busy in the wave: " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in busy.items()
                                                       if k in ("tensor", "sfu", "fma", "tmem", "ldst", "tma")))
    print(f"       its MMAs use {100 * fill:.0f}% of the tensor datapath they hold, so useful tensor FLOPs = "
          f"{100 * fill * busy.get('tensor', 0.0):.0f}% of peak in the wave")
    waits = ", ".join(f"{k} {v}" for k, v in sorted(between.items(), key=lambda kv: -kv[1])) or "none"
    print(f"       tensor datapath of SM 0 idle {before} cycles before its first MMA, {sum(between.values())} "
          f"between MMAs (the next MMA waiting for: {waits}), {after} after its last")
    print("       node waits: " + ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in stalls.items() if v))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seqlens", default="1024,4096,8192")
    ap.add_argument("--full", type=int, default=1024, help="also simulate whole kernels up to this seqlen")
    args = ap.parse_args()
    hw = get_profile("b200")
    print(f"FA4 vs FA3 on {hw.name}: {TOKENS} tokens, {HEADS} heads x {HEAD_DIM}, bf16, non-causal "
          f"({hw.sms} SMs)\n")
    for seqlen in (int(s) for s in args.seqlens.split(",")):
        shape = AttnShape(TOKENS // seqlen, HEADS, HEADS, seqlen, seqlen, HEAD_DIM)
        print(f"seqlen {seqlen} (batch {shape.batch}):")
        out = {}
        for v in (AttnVariant.FA3, AttnVariant.FA4):
            kg = attention(shape, hw, variant=v)
            probe = simulate(first_wave(kg, 1), hw)
            slots = hw.sms * probe.ctas_per_sm
            waves = math.ceil(kg.num_ctas / slots)
            wave = simulate(first_wave(kg, slots), hw, record=True)
            describe(v.value, kg, wave, waves, slots)
            top = sorted(((b, k) for k, b in wave.unit_busy.items() if k not in ("l2", "dram")), reverse=True)[:3]
            out[v] = (waves, wave.cycles, ", ".join(f"{k} {100 * b:.0f}%" for b, k in top))
            if seqlen <= args.full:
                full = simulate(kg, hw)
                print(f"       whole kernel: {full.time_us:.1f} us, {full.tflops:.0f} TFLOPS "
                      f"({100 * full.flops / full.time_s / hw.peak_tensor_flops_per_s(shape.dtype):.0f}% of peak)")
        (w3, c3, b3), (w4, c4, b4) = out[AttnVariant.FA3], out[AttnVariant.FA4]
        print(f"  => waves FA4 {w4} vs FA3 {w3} (paper {PAPER['fa4_waves']} vs {PAPER['fa3_waves']}); cycles per "
              f"wave FA3/FA4 = {c3 / c4:.2f} (paper ~{PAPER['per_wave_speedup']}); per 128 query rows "
              f"FA3/FA4 = {2 * c3 / c4:.2f}; whole kernel FA3/FA4 ~ {w3 * c3 / (w4 * c4):.2f}")
        print(f"     busiest units in a wave: FA3 {b3}; FA4 {b4}\n")
    print("Reading the statistics: FA4's CTA owns 256 query rows (two TMEM-resident Q tiles) where FA3's owns 128,\n"
          "so the same grid needs half the waves and each FA4 wave does twice the work: FA4 is faster per wave\n"
          "only if it is more than 2x as efficient per query row. FA3 keeps Hopper's 64-row consumer warp groups,\n"
          "and a 64-row tcgen05 MMA holds the 128-row sm100 datapath as long as a 128-row one (profile field\n"
          "tensor_datapath_rows): its datapath is busy nearly all the wave but does half the useful FLOPs. At that\n"
          "half rate the other consumer's two MMAs outlast one consumer's TMEM round trip (S out, P and rescaled O\n"
          "back) and softmax, so FA3's MMAs hardly ever wait. FA4's 128-row MMAs fill the datapath, but P aliases\n"
          "S in TMEM, so a tile's softmax has only the other tile's two MMAs (1024 cycles, less the MMA completion\n"
          "latency) to load S, exponentiate and store P: the datapath idles between MMAs waiting for tmem_st_P.\n"
          "So per query row FA4 is the 'per 128 query rows' ratio faster (< 2) and per wave it is not faster.\n"
          "GPU-Tile-Sim reports ~1.3x per wave (2.6x per row), which needs FA3's softmax to interrupt its tensor\n"
          "issue; with the half-rate 64-row datapath modelled here it never does.")


if __name__ == "__main__":
    main()
