"""What the engine reports when a run ends: the KernelResult (utilisation, stalls, bound) or a deadlock diagnosis.

Functions of torchsim.sim.engine._Engine's final state.
"""

from __future__ import annotations

from typing import Any

from torchsim.sim.result import KernelResult

STALLS = ("data", "order", "barrier", "unit_busy", "issue", "memory_queue")


def diagnose(engine: Any, t: int) -> str:
    lines = [f"kernel {engine.kernel.name!r} on {engine.hw.name} stopped making progress at cycle {t}: "
             f"{engine.done_ctas}/{len(engine.pending)} CTAs finished. Waiting nodes:"]
    shown = 0
    for cta in list(engine.resident.values()):
        p = cta.prep
        g = engine.kernel.classes[cta.cls].graph
        for j in range(p.n):
            if shown >= 12:
                break
            waits: list[str] = []
            b = p.barrier[j]
            if p.need[j] and j in cta.bar_wait[b]:
                waits.append(f"barrier {p.barrier_names[b]!r} has {cta.bar[b]} of {p.need[j]} arrivals")
            elif cta.pred[j] > 0:
                for s, k in p.predecessors(j, g.edge_src, g.edge_dst, g.edge_kind):
                    waits.append(f"{'data' if k == 0 else 'order'} edge from node {s} {p.names[s]!r}")
                waits = waits[:3]
            else:
                continue
            lines.append(f"  CTA {cta.seq} (SM {cta.sm}) node {j} {p.names[j]!r} "
                         f"[{p.group_names[p.group[j]]}] waits on: " + "; ".join(waits))
            shown += 1
    return "\n".join(lines)


def summarize(engine: Any, t: int, wall_s: float) -> KernelResult:
    hw = engine.hw
    tail = getattr(hw, "kernel_tail_cycles", None)  # a GPU profile's launch-to-completion overhead
    cycles = max(1, t) + (int(tail.value) if tail is not None else 0)
    busy: dict[str, float] = {}
    sm_busy: dict[str, tuple[float, ...]] = {}  # unit -> busy cycles of each SM (load balance across SMs)
    for unit_id in sorted(engine.sms[0].units):
        pipes = [sm.units[unit_id] for sm in engine.sms if unit_id in sm.units]
        if pipes:
            work = sum(pp.busy_work for pp in pipes)
            busy[pipes[0].name] = work / (pipes[0].throughput * cycles * engine.nsm)
            sm_busy[pipes[0].name] = tuple(pp.busy_work / pp.throughput for pp in pipes)
    if engine.memsys is not None:
        busy.update(engine.memsys.busy(cycles))
    else:
        busy["l2"] = engine.l2srv.busy_cycles / cycles
        busy["dram"] = engine.dram.busy_cycles / cycles
    bound = _bound(busy)
    per_sm = min(engine.occ)
    waves = len(engine.pending) / (per_sm * engine.nsm)
    return KernelResult(
        name=engine.kernel.name, hw=hw.name, cycles=cycles, clock_hz=hw.clock_hz_value,
        flops=engine.kernel.flops, dram_bytes=engine.dram.bytes if engine.memsys is None else engine.memsys.dram_bytes,
        l2_hit_rate=engine.l2.hit_rate,
        unit_busy=busy, stalls=dict(zip(STALLS, engine.stalls)), bound=bound, waves=waves,
        ctas=len(engine.pending), ctas_per_sm=per_sm, node_events=engine.events,
        attrs={**engine.kernel.attrs, "wall_s": wall_s, "sms": engine.nsm, "sm_end_cycles": tuple(engine.sm_end),
               "sm_busy_cycles": sm_busy, **l1_stats(engine)},
        records=tuple(engine.records) if engine.record else None,
        cta_sm=tuple(engine.cta_sm) if engine.record else None,
    )


def l1_stats(engine: Any) -> dict[str, Any]:
    pol = engine.policies[0]
    out: dict[str, Any] = {"policy": pol.name}
    if engine.l1 is not None:
        hits, misses = sum(c.hits for c in engine.l1), sum(c.misses for c in engine.l1)
        out.update(l1_line_hits=hits, l1_line_misses=misses,
                   l1_hit_rate=hits / (hits + misses) if hits + misses else 0.0)
    if engine.noc is not None:
        out.update(noc_requests=engine.noc.requests, noc_bytes=engine.noc.bytes,
                   noc_mean_residence_cycles=engine.noc.mean_residence_cycles,
                   noc=f"{engine.noc.cfg.topology.value}/{engine.noc.cfg.placement.value}")
    if hasattr(pol, "vta_hits"):
        out["vta_hits"] = sum(getattr(p, "vta_hits", 0) for p in engine.policies)
    return out


BOUND_NAMES = {"tensor": "tensor pipe", "dram": "DRAM bandwidth", "l2": "L2 bandwidth", "fma": "CUDA cores",
               "sfu": "SFU", "ldst": "shared-memory/LD-ST port", "tma": "TMA", "tmem": "TMEM", "fpu": "matrix FPU",
               "sfpu": "SFPU", "unpacker": "unpacker", "packer": "packer", "noc": "NoC links"}


def _bound(busy: dict[str, float]) -> str:
        name, util = max(busy.items(), key=lambda kv: kv[1])
        if util >= 0.6:
            return BOUND_NAMES.get(name, name)
        return "latency/synchronisation"
