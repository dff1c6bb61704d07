"""Prediction-level reuse: calls that differ only in a dimension their template's time is affine in.

A prediction (or a sweep of them) asks for kernel calls that are the same kernel but for one size: decode
attention at the KV length of each sampled decode step, a decode GEMM at each batch below its tile height. Their
templates are built with the same configuration, and their time is affine (piecewise, between configuration
changes) in that size:

- Flash-Decoding / FlashMLA (GPU), dimension `kv_blocks`: with the same split count, tiles and CTA classes
  relative to the split length, the K/V blocks each split walks (the main loop) grow with the KV length; the
  K/V ring alternates two buffers, so the line is drawn through lengths of one parity.
- GEMM (GPU) with M no larger than its tile height (bm), dimension `m`: the same grid of N tiles and K loop, only
  the rows of A loaded and stored change (the MMA datapath is padded to the tile height).

Calls are grouped by everything but that dimension, and by the template configuration each is built with (a
call whose configuration differs is in another group). A group with at least three distinct sizes is simulated
at its smallest and largest size and at the one nearest the middle; when the middle one's simulated time is within
`TOLERANCE` of the line through the two ends, every other member is interpolated between its two neighbouring
simulated sizes (method `interpolated-<dim>`; `extrapolation` names the sizes). Otherwise every member is simulated.
`exact` predictions (`--exact`) simulate every call. tests/test_reuse.py checks interpolated calls against their
full simulation within the bound stated in torchsim.prediction.repeats (2%).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.templates.mla import MLA_BLOCK
from torchsim.prediction.repeats import TOLERANCE, _is_tensix

_BLOCKS = re.compile(r"(\d+)blocks")
_NUMERIC = ("cycles", "time_s", "flops", "dram_bytes", "l2_hit_rate", "events", "clock_hz", "power_w")


def reuse_key(call: KernelCall, hw: Any) -> tuple[tuple[Any, ...], str, int] | None:
    """(group key, dimension, size) of a call whose time is affine in one size, or None."""
    if _is_tensix(hw) or call.p("roofline", False) or call.p("seqs", ()) or call.p("kv_lens", ()):
        return None  # (varlen attention: its time is not affine in one size)
    if call.kind in (KernelKind.ATTENTION_DECODE, KernelKind.MLA_DECODE):
        dim = "kv_blocks"  # K/V blocks each split walks
        try:
            from torchsim.lowering.templates import build_kernels

            kgs = build_kernels(call, hw)
        except (NotImplementedError, ValueError):
            return None
        a = kgs[0].attrs
        per = a.get("blocks_per_split")
        if not isinstance(per, int):
            return None
        unit = int(a.get("bn") or MLA_BLOCK)
        cfg: tuple[Any, ...] = (
            # the CTA classes relative to the split length (a shorter last split keeps its shortfall), the ragged
            # last block: calls of one group differ only in how many K/V blocks every split walks
            tuple(tuple((c.count, _BLOCKS.sub(lambda mt: f"{per - int(mt.group(1))}short", c.graph.name))
                        for c in kg.classes) for kg in kgs),
            tuple(tuple(sorted((k, v) for k, v in kg.attrs.items() if k not in ("seq_kv", "blocks_per_split")))
                  for kg in kgs),
            call.p("seq_kv") % unit != 0,
            per % 2)  # the K/V ring alternates its two buffers: a block's cost repeats every two blocks
        rest = tuple((k, v) for k, v in call.params if k != "seq_kv")
        return (call.kind, call.dtype, rest, cfg), dim, per
    if call.kind is KernelKind.GEMM and not call.p("tune", False):
        from torchsim.prediction.repeats import gemm_call_config

        try:
            c = gemm_call_config(call, hw)
        except (NotImplementedError, ValueError):
            return None
        if call.p("m") > c.bm:
            return None
        rest = tuple((k, v) for k, v in call.params if k != "m")
        return (call.kind, call.dtype, rest, (repr(c),)), "m", int(call.p("m"))
    return None


Group = tuple[str, list[tuple[int, KernelCall]]]  # (dimension, [(size, call)] sorted by size)


def plan(calls: Sequence[KernelCall], hw: Any) -> tuple[list[KernelCall], list[Group]]:
    """(calls to simulate first, groups to reuse). A group's anchors (`anchors`) are among the calls to simulate;
    groups of fewer than three distinct sizes are simulated whole."""
    groups: dict[tuple[Any, ...], list[tuple[int, KernelCall]]] = {}
    dims: dict[tuple[Any, ...], str] = {}
    first: list[KernelCall] = []
    for c in calls:
        rk = reuse_key(c, hw)
        if rk is None:
            first.append(c)
            continue
        key, dim, x = rk
        groups.setdefault(key, []).append((x, c))
        dims[key] = dim
    reused: list[Group] = []
    for key, members in groups.items():
        members.sort(key=lambda xc: xc[0])
        if len({x for x, _ in members}) < 3:
            first += [c for _, c in members]
            continue
        first += [c for _, c in anchors(members)]
        reused.append((dims[key], members))
    return first, reused


def anchors(members: list[tuple[int, KernelCall]]) -> list[tuple[int, KernelCall]]:
    """The smallest, the largest and the member nearest the middle (by size) of a sorted group."""
    lo, hi = members[0], members[-1]
    mid_x = (lo[0] + hi[0]) / 2
    inner = [m for m in members if lo[0] < m[0] < hi[0]]
    mid = min(inner, key=lambda m: (abs(m[0] - mid_x), m[0]))
    return [lo, mid, hi]


def interpolate(a: Sequence[Any], b: Sequence[Any], xa: int, xb: int, x: int, dim: str, note: str) -> tuple[Any, ...]:
    """Launch by launch, the KernelSims at size x on the line through those at xa and xb."""
    f = (x - xa) / (xb - xa) if xb != xa else 0.0
    out = []
    for sa, sb in zip(a, b, strict=True):
        vals = {n: getattr(sa, n) + (getattr(sb, n) - getattr(sa, n)) * f for n in _NUMERIC}
        vals["cycles"] = int(round(vals["cycles"]))
        vals["events"] = 0  # nothing was simulated for this call
        vals["l2_hit_rate"] = min(1.0, max(0.0, vals["l2_hit_rate"]))
        keys = set(sa.unit_util) | set(sb.unit_util)
        util = {k: sa.unit_util.get(k, 0.0) + (sb.unit_util.get(k, 0.0) - sa.unit_util.get(k, 0.0)) * f for k in keys}
        keys = set(sa.stalls) | set(sb.stalls)
        stalls = {k: max(0.0, sa.stalls.get(k, 0.0) + (sb.stalls.get(k, 0.0) - sa.stalls.get(k, 0.0)) * f)
                  for k in keys}
        near = sa if f <= 0.5 else sb
        config = {**near.config, dim: x} if dim in near.config else dict(near.config)
        out.append(replace(near, config=config, unit_util=util, stalls=stalls, method=f"interpolated-{dim}",
                           extrapolation=f"{dim} {x} between simulated {xa} and {xb}{note}", **vals))
    return tuple(out)


def derive(groups: list[Group], result: Callable[[KernelCall], tuple[Any, ...]]
           ) -> tuple[dict[tuple[Any, ...], tuple[Any, ...]], list[KernelCall]]:
    """(interpolated launches per call key, calls that must be simulated after all: groups whose middle anchor
    is off the line through the ends by more than TOLERANCE)."""
    done: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    again: list[KernelCall] = []
    for dim, members in groups:
        (xl, cl), (xm, cm), (xh, ch) = anchors(members)
        rl, rm, rh = result(cl), result(cm), result(ch)
        tl, tm, th = (sum(s.time_s for s in r) for r in (rl, rm, rh))
        line = tl + (th - tl) * (xm - xl) / (xh - xl)
        off = abs(line - tm) / max(tm, 1e-30)
        if off > TOLERANCE or len(rl) != len(rm) or len(rm) != len(rh):
            again += [c for x, c in members if c not in (cl, cm, ch)]
            continue
        note = f" (the middle size {xm} is {100 * off:.2f}% off the line through {xl} and {xh})"
        pts = [(xl, rl), (xm, rm), (xh, rh)]
        for x, c in members:
            if c in (cl, cm, ch) or c.key() in done:
                continue
            (xa, ra), (xb, rb) = (pts[0], pts[1]) if x <= xm else (pts[1], pts[2])
            done[c.key()] = interpolate(ra, rb, xa, xb, x, dim, note)
    return done, again
