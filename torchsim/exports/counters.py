"""Counter series over a kernel's lifetime, binned from its node events, for the Perfetto detail view.

Tensor-pipe utilisation is the busy union of TENSOR (Tensix: FPU) nodes per SM over all SMs; DRAM
bandwidth spreads each node's DRAM bytes evenly over its run; L2 hit rate is 1 - DRAM/global bytes per bin.
When the events carry no bytes, the kernel totals are apportioned and the series name says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from torchsim.exports.records import KernelDetail

TENSOR_UNITS = frozenset({"TENSOR", "FPU"})
GLOBAL_MEMORY_OPS = frozenset({"TMA_LOAD", "TMA_STORE", "CP_ASYNC", "LDG", "STG", "NOC_READ", "NOC_WRITE"})
MAX_BINS = 200


@dataclass(frozen=True, slots=True)
class CounterSeries:
    name: str
    unit: str
    cycles: list[int]
    values: list[float]


def integral(starts: np.ndarray, ends: np.ndarray, rates: np.ndarray, at: np.ndarray) -> np.ndarray:
    """sum_j rates_j * |[starts_j, ends_j) ∩ [0, x)| for every x in `at` (O((n + bins) log n))."""
    order_s = np.argsort(starts, kind="stable")
    s, rs = starts[order_s], rates[order_s]
    order_e = np.argsort(ends, kind="stable")
    e, re = ends[order_e], rates[order_e]
    cum_r_s = np.concatenate(([0.0], np.cumsum(rs)))
    cum_rs_s = np.concatenate(([0.0], np.cumsum(rs * s)))
    cum_r_e = np.concatenate(([0.0], np.cumsum(re)))
    cum_re_e = np.concatenate(([0.0], np.cumsum(re * e)))
    cs = np.searchsorted(s, at, side="left")
    ce = np.searchsorted(e, at, side="left")
    started = cum_r_s[cs] * at - cum_rs_s[cs]
    finished = cum_r_e[ce] * at - cum_re_e[ce]
    return np.asarray(started - finished, dtype=np.float64)


def merge_per_sm(sm: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals within each SM (intervals of different SMs never merge)."""
    if starts.size == 0:
        return starts.astype(np.float64), ends.astype(np.float64)
    order = np.lexsort((starts, sm))
    sm, s, e = sm[order], starts[order].astype(np.float64), ends[order].astype(np.float64)
    out_s: list[float] = []
    out_e: list[float] = []
    cur_sm, cur_s, cur_e = sm[0], s[0], e[0]
    for i in range(1, s.size):
        if sm[i] == cur_sm and s[i] <= cur_e:
            cur_e = max(cur_e, e[i])
        else:
            out_s.append(cur_s)
            out_e.append(cur_e)
            cur_sm, cur_s, cur_e = sm[i], s[i], e[i]
    out_s.append(cur_s)
    out_e.append(cur_e)
    return np.array(out_s), np.array(out_e)


def _per_bin(starts: np.ndarray, ends: np.ndarray, rates: np.ndarray, edges: np.ndarray) -> np.ndarray:
    return np.diff(integral(starts, ends, rates, edges.astype(np.float64)))


def kernel_counters(detail: KernelDetail, end_cycle: int) -> list[CounterSeries]:
    """Tensor-pipe utilisation (%), DRAM bandwidth (GB/s) and L2 hit rate (%) over the kernel."""
    ev = detail.events
    k = detail.kernel
    nbins = max(1, min(MAX_BINS, end_cycle))
    edges = np.unique(np.linspace(0, end_cycle, nbins + 1).round().astype(np.int64))
    widths = np.diff(edges).astype(np.float64)
    cycles = edges[:-1].tolist()
    out: list[CounterSeries] = []

    tensor = [e for e in ev if e.unit.upper() in TENSOR_UNITS]
    sms = max(1, detail.num_sms)
    if tensor:
        ms, me = merge_per_sm(np.array([e.sm for e in tensor]), np.array([e.start_cycle for e in tensor]),
                              np.array([e.end_cycle for e in tensor]))
        busy = _per_bin(ms, me, np.ones_like(ms), edges)
        util = 100.0 * busy / (widths * sms)
        out.append(CounterSeries("tensor pipe utilisation", "%", cycles + [end_cycle], util.tolist() + [0.0]))

    mem = [e for e in ev if e.op.upper() in GLOBAL_MEMORY_OPS or e.dram_bytes is not None]
    s = np.array([e.start_cycle for e in mem], dtype=np.float64)
    t = np.maximum(np.array([e.end_cycle for e in mem], dtype=np.float64), s + 1.0)
    have_dram = any(e.dram_bytes is not None for e in mem)
    have_global = any(e.global_bytes is not None for e in mem)
    dram_name = "DRAM bandwidth"
    if have_dram:
        dram = np.array([e.dram_bytes or 0.0 for e in mem])
    elif mem and k.dram_bytes:
        weight = np.array([e.global_bytes or 0.0 for e in mem]) if have_global else (t - s)
        dram = k.dram_bytes * weight / max(float(weight.sum()), 1e-30)
        dram_name = "DRAM bandwidth (kernel total apportioned)"
    else:
        dram = np.zeros(0)
    seconds_per_cycle = 1.0 / k.clock_hz
    if dram.size:
        dram_per_bin = _per_bin(s, t, dram / (t - s), edges)
        gb_per_s = dram_per_bin / (widths * seconds_per_cycle) / 1e9
        out.append(CounterSeries(dram_name, "GB/s", cycles + [end_cycle], gb_per_s.tolist() + [0.0]))

    if have_dram and have_global:
        glob = np.array([e.global_bytes or 0.0 for e in mem])
        g_bin = _per_bin(s, t, glob / (t - s), edges)
        hit = np.where(g_bin > 0, 100.0 * (1.0 - dram_per_bin / np.maximum(g_bin, 1e-30)), np.nan)
        keep = ~np.isnan(hit)
        out.append(CounterSeries("L2 hit rate", "%", np.array(cycles)[keep].tolist(),
                                 np.clip(hit[keep], 0.0, 100.0).tolist()))
    elif k.l2_hit_rate is not None:
        out.append(CounterSeries("L2 hit rate (kernel average)", "%", [0, end_cycle],
                                 [100.0 * k.l2_hit_rate] * 2))
    return out
