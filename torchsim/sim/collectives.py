"""Collectives as costed operations on a multi-GPU system: all-reduce, all-gather, reduce-scatter, all-to-all.

For each algorithm (ring, tree, NVLS) and protocol (LL, LL128, Simple) that NCCL can run on the system, the
time of a message of `nbytes` over `ranks` GPUs is a latency plus the bytes each GPU's link must carry over the
bandwidth the protocol sustains; the pick is the fastest candidate, as NCCL's tuner picks by its own cost model.
Sizes follow nccl-tests: all-reduce `nbytes` per rank; all-gather the gathered output; reduce-scatter the
input; all-to-all each rank's send buffer. algbw = nbytes / time; busbw = algbw x 2(n-1)/n (all-reduce) or
x (n-1)/n (the others), nccl-tests' definitions (github NVIDIA/nccl-tests doc/PERFORMANCE.md).

Traffic per GPU (the bytes its busiest link direction carries), B = the GPU's effective fabric bandwidth:

- ring all-reduce: 2(n-1)/n x S; ring all-gather / reduce-scatter: (n-1)/n x S; 2(n-1) and n-1 steps.
- tree all-reduce (single node: a chain): reduce up and broadcast down, 2(n-1) steps; bandwidth as NCCL's
  tuner rates the tree kernels (at most ring's).
- NVLS all-reduce: each GPU pulls its S/n chunk reduced by the switch (multimem.ld_reduce; the switch reads S/n
  from every GPU, its own included) and multicasts the result (multimem.st): (n+1)/n x S each way, one step.
  NVLS all-gather / reduce-scatter: S each way (the GPU's own chunk goes through the switch too).
- all-to-all (NCCL's grouped send/recv): (n-1)/n x S each way, the n-1 peers in parallel.
- protocols: Simple carries data alone; LL128 carries 120 B of data in each 128 B line; LL 4 B of data with each
  4 B flag; each capped by what one CTA (channel) of NCCL's kernels moves, times the channels.
- PCIe systems: a ring or all-to-all spanning both CPU sockets also crosses the socket-to-socket link.

Eager or graphed: `time_s` is the device time (as under CUDA-graph capture, what serving engines replay);
with `eager=True` it is max(device time, the system's host_enqueue_s), the time per collective of back-to-back
launches from the host (nccl-tests' default), since the host cannot enqueue them faster.

Latency: NCCL's base latency of the algorithm and protocol (software: launch, synchronisation) plus its
per-step hardware latency times the steps. The constants are read from NCCL's tuner (tuning.cc, named with
its commit in torchsim.hwmodels.interconnect); the model is torchsim's. Not modelled: NCCL's channel
reduction for small messages, its tree correction table, multi-node algorithms (CollNet, NVLS-tree, PAT).
"""

from __future__ import annotations

import math

from torchsim.hwmodels.interconnect import NCCL_TUNING
from torchsim.hwmodels.quantity import Quantity, doc
from torchsim.hwmodels.systems import AnySystem, SystemProfile
from torchsim.sim.collective_types import (  # noqa: F401  (re-exported)
    ALIASES,
    COLLECTIVES,
    Candidate,
    CollectiveCost,
    CollectiveError,
    bus_factor,
    canonical,
)
from torchsim.sim.custom_allreduce import CTAS as CUSTOM_CTAS
from torchsim.sim.custom_allreduce import LATENCY_S as CUSTOM_LATENCY_S
from torchsim.sim.custom_allreduce import STAGES as CUSTOM_STAGES
from torchsim.sim.custom_allreduce import available as custom_available
from torchsim.sim.custom_allreduce import custom_allreduce_time

ALGORITHMS = ("ring", "tree", "nvls")
PROTOCOLS = ("LL", "LL128", "Simple")

# NCCL's software base latency per algorithm and protocol (launch + synchronisation), seconds
BASE_LATENCY: dict[tuple[str, str], Quantity] = {
    ("tree", "LL"): doc(6.8e-6, "s", NCCL_TUNING + " baseLatencies[Tree][LL]"),
    ("tree", "LL128"): doc(14.0e-6, "s", NCCL_TUNING + " baseLatencies[Tree][LL128]"),
    ("tree", "Simple"): doc(8.4e-6, "s", NCCL_TUNING + " baseLatencies[Tree][Simple]"),
    ("ring", "LL"): doc(6.6e-6, "s", NCCL_TUNING + " baseLatencies[Ring][LL]"),
    ("ring", "LL128"): doc(14.0e-6, "s", NCCL_TUNING + " baseLatencies[Ring][LL128]"),
    ("ring", "Simple"): doc(8.4e-6, "s", NCCL_TUNING + " baseLatencies[Ring][Simple]"),
    ("nvls", "Simple"): doc(0.0, "s", NCCL_TUNING + " baseLatencies[NVLS][Simple] = 0 (its latency is the "
                            "switch step alone)"),
}
# all-to-all runs as grouped send/recv, outside NCCL's collective tuner: its base latency is assumed to be the
# ring's of the same protocol
P2P_BASE_NOTE = "assumed: all-to-all (grouped p2p) pays the ring base latency of its protocol plus one step"
# payload fraction of each protocol's lines
PROTOCOL_EFFICIENCY: dict[str, Quantity] = {
    "Simple": doc(1.0, "fraction", "NCCL Simple protocol: data only, synchronised by flags per chunk"),
    "LL128": doc(120 / 128, "fraction", "NCCL LL128 protocol: 120 B of data and 8 B of flag in each 128 B line "
                 "(NCCL_LL128_DATAELEMS = NCCL_LL128_LINEELEMS - 1 in src/include/device.h)"),
    "LL": doc(0.5, "fraction", "NCCL LL protocol: 4 B of data with a 4 B flag in each 8 B store"),
}
# NCCL's tuner rates the tree kernels below the link (single node): these are its factors
TREE_EFFICIENCY: dict[str, Quantity] = {
    "Simple": doc(0.92, "fraction", NCCL_TUNING + " (tree all-reduce busBw x .92)"),
    "LL128": doc(0.92 * 7 / 9, "fraction", NCCL_TUNING + " (tree all-reduce .92, LL128 x 7/9 on one node)"),
    "LL": doc(0.92 / 3.8, "fraction", NCCL_TUNING + " (tree all-reduce .92, LL x 1/3.8)"),
}


def _fabric_bytes_per_s(system: SystemProfile, ranks: int, collective: str) -> float:
    """Per-GPU per-direction bandwidth a collective over `ranks` GPUs sustains on the fabric (Simple protocol)."""
    b = system.device_bytes_per_s()
    per_bridge = int(system.devices_per_host_bridge.value)
    if ranks > per_bridge:  # the traffic crosses the socket-to-socket link
        host = float(system.host_bridge_bytes_per_s.value)
        if collective == "all-to-all":
            # every GPU under one socket sends the share of its data bound for the other socket over one link
            k = per_bridge
            crossing = k * (ranks - k) / (ranks - 1)  # GPU-loads of traffic on that link per GPU-load sent
            b = min(b, host / crossing)
        else:  # a ring crosses the link once each way
            b = min(b, host)
    return b


def _candidates(system: SystemProfile, collective: str, ranks: int) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    protos = [p for p in PROTOCOLS if p != "LL128" or system.ll128]
    if collective == "all-to-all":
        return [("p2p", p) for p in ("LL", "Simple")]
    out += [("ring", p) for p in protos]
    if collective == "all-reduce":
        out += [("tree", p) for p in protos]
    nvls_ok = (system.in_network_reduction and system.nvls_efficiency.value > 0
               and int(system.nvls_channels.value) >= 2)
    if nvls_ok:
        out.append(("nvls", "Simple"))
    return out


def _bus_and_latency(system: SystemProfile, collective: str, ranks: int, algorithm: str,
                     protocol: str) -> tuple[float, float, float, int]:
    """(bytes each GPU's link carries per byte of message, bandwidth it sustains, latency, channels)."""
    n = ranks
    fabric = _fabric_bytes_per_s(system, n, collective)
    ring_ch = int(system.ring_channels.value)
    eff = float(PROTOCOL_EFFICIENCY[protocol].value)
    step = {"LL": system.ring_step_ll_s, "LL128": system.ring_step_ll128_s, "Simple": system.ring_step_simple_s}
    tstep = {"LL": system.tree_step_ll_s, "LL128": system.tree_step_ll128_s, "Simple": system.tree_step_simple_s}
    if algorithm == "nvls":
        bw = fabric * float(system.nvls_efficiency.value)
        traffic = (n + 1) / n if collective == "all-reduce" else 1.0
        return traffic, bw, float(system.nvls_step_s.value), int(system.nvls_channels.value)
    if algorithm == "p2p":
        bw = fabric * eff
        if protocol == "LL":
            bw = min(bw, float(system.ll_max_bytes_per_s.value))
        lat = float(BASE_LATENCY[("ring", protocol)].value) + float(step[protocol].value)
        return (n - 1) / n, bw, lat, ring_ch
    steps = 2 * (n - 1) if collective == "all-reduce" else n - 1
    base = float(BASE_LATENCY[(algorithm, protocol)].value)
    if algorithm == "ring":
        bw = fabric * eff
        if protocol == "LL":
            bw = min(bw, float(system.ll_max_bytes_per_s.value))
        elif protocol == "LL128":
            bw = min(bw, ring_ch * float(system.ring_ll128_channel_bytes_per_s.value))
        traffic = 2 * (n - 1) / n if collective == "all-reduce" else (n - 1) / n
        return traffic, bw, base + steps * float(step[protocol].value), ring_ch
    # tree all-reduce (a chain on one node): the tuner's rate, capped per channel; each byte crosses the link
    # twice (reduce up, broadcast down)
    bw = fabric * float(TREE_EFFICIENCY[protocol].value)
    if protocol == "LL":
        bw = min(bw, float(system.ll_max_bytes_per_s.value))
    elif protocol == "LL128":
        bw = min(bw, ring_ch * float(system.tree_ll128_channel_bytes_per_s.value))
    else:
        bw = min(bw, ring_ch * float(system.tree_channel_bytes_per_s.value))
    return 2.0, bw, base + steps * float(tstep[protocol].value), ring_ch


def collective_cost(collective: str, system: AnySystem, ranks: int, nbytes: int, *,
                    algorithm: str | None = None, protocol: str | None = None,
                    eager: bool = False, custom_ar: bool = False) -> CollectiveCost:
    """The time, algbw, busbw, algorithm, protocol and channels of one collective (see the module docstring).

    `algorithm` / `protocol` force a choice (like NCCL_ALGO / NCCL_PROTO); otherwise the fastest is taken.
    `eager`: launched from the host one after another without CUDA graphs (time >= host_enqueue_s).
    `custom_ar`: an all-reduce a serving engine runs, which also has its custom one-/two-stage kernels on an NVLink
    system (torchsim.sim.custom_allreduce; algorithms "oneshot" / "twoshot", protocol "p2p"); the fastest is taken,
    as the engines' size thresholds were chosen from such measurements. A Tenstorrent system
    (torchsim.hwmodels.tensix.mesh) is costed as tt-metal's CCL ops run (torchsim.sim.ccl).
    """
    if not isinstance(system, SystemProfile):  # a Tenstorrent mesh: tt-metal's CCL ops (torchsim.sim.ccl)
        from torchsim.sim.ccl import ccl_cost

        return ccl_cost(collective, system, ranks, nbytes, algorithm=algorithm, protocol=protocol, eager=eager)
    coll = canonical(collective)
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise CollectiveError(f"ranks must be a whole number >= 1, got {ranks!r}")
    if ranks > system.devices:
        raise CollectiveError(f"{ranks} ranks on {system.name}, which has {system.devices} devices")
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
        raise CollectiveError(f"message size must be a positive whole number of bytes, got {nbytes!r}")
    if ranks == 1:  # nothing leaves the GPU: no time, no bandwidth reported (algbw 0 stands for "not applicable")
        return CollectiveCost(coll, system.name, 1, nbytes, "local", "-", 0.0, 0.0, 0.0, 0.0, 0, 0.0, eager)
    cands = _candidates(system, coll, ranks)
    custom = custom_ar and coll == "all-reduce" and custom_available(system, ranks, nbytes)
    if custom:
        cands += [(stage, "p2p") for stage in CUSTOM_STAGES]
    if algorithm is not None:
        cands = [c for c in cands if c[0] == algorithm.lower()]
        if not cands:
            known = {a for a, _ in _candidates(system, coll, ranks)} | (set(CUSTOM_STAGES) if custom else set())
            raise CollectiveError(f"algorithm {algorithm!r} is not available for {coll} on {system.name}; "
                                  f"available: {', '.join(sorted(known))}")
    if protocol is not None:
        want = {p.lower(): p for p in (*PROTOCOLS, "p2p")}.get(protocol.lower())
        cands = [c for c in cands if c[1] == want]
        if not cands:
            raise CollectiveError(f"protocol {protocol!r} is not available for {coll}"
                                  f"{' with ' + algorithm if algorithm else ''} on {system.name}")
    scored = []
    for algo, proto in cands:
        if algo in CUSTOM_STAGES:
            t = custom_allreduce_time(algo, system, ranks, nbytes)
            lat, ch = float(CUSTOM_LATENCY_S[algo].value), int(CUSTOM_CTAS.value)
            scored.append((t, algo, proto, lat, nbytes / t * bus_factor(coll, ranks), ch))
            continue
        traffic, bw, lat, ch = _bus_and_latency(system, coll, ranks, algo, proto)
        t = lat + nbytes * traffic / bw
        bus = bw / traffic * bus_factor(coll, ranks)
        scored.append((t, algo, proto, lat, bus, ch))
    best = min(scored, key=lambda s: s[0])  # first of equals: the candidate order is fixed
    device_t, algo, proto, lat, _, ch = best
    t = max(device_t, float(system.host_enqueue_s.value)) if eager else device_t
    algbw = nbytes / t
    return CollectiveCost(coll, system.name, ranks, nbytes, algo, proto, t, lat, algbw,
                          algbw * bus_factor(coll, ranks), ch, device_t, eager,
                          tuple(Candidate(a, p, tt, ll, bb) for tt, a, p, ll, bb, _ in scored))


def message_sizes(low: int, high: int, factor: int = 2) -> list[int]:
    """nccl-tests' `-b low -e high -f factor` sweep."""
    if low <= 0 or high < low or factor < 2:
        raise CollectiveError(f"size sweep needs 0 < low <= high and factor >= 2, got {low}..{high} x{factor}")
    out, s = [], low
    while s <= high:
        out.append(s)
        s *= factor
    return out


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20,
          "gib": 2**30, "tib": 2**40, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


# a message per rank above this cannot exist on one device (the largest profiles hold under 200 GB of HBM): a typo
MAX_BYTES = 2**40


def parse_bytes(text: str) -> int:
    """'1MiB' -> 1048576, '8B' -> 8, '4M' -> 4 MiB (nccl-tests' K/M/G are binary); positive whole bytes only."""
    s = str(text).strip()
    i = 0
    while i < len(s) and (s[i].isdigit() or s[i] in ".eE+-"):
        if s[i] in "eE" and (i + 1 >= len(s) or not (s[i + 1].isdigit() or s[i + 1] in "+-")):
            break
        i += 1
    num, unit = s[:i], s[i:].strip().lower()
    if not num or unit not in _UNITS:
        raise CollectiveError(f"message size {text!r}: expected a number and a unit such as 8B, 64KiB, 1MiB, "
                              f"1GB, 4M")
    try:
        value = float(num) * _UNITS[unit]
    except ValueError:
        raise CollectiveError(f"message size {text!r}: {num!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise CollectiveError(f"message size {text!r} must be positive")
    if value != int(value):
        raise CollectiveError(f"message size {text!r} is not a whole number of bytes")
    if value > MAX_BYTES:
        raise CollectiveError(f"message size {text!r} is {value:.3g} B, above torchsim's limit of 1 TiB per rank "
                              f"(more than any accelerator's memory; a typo?)")
    return int(value)


__all__ = ["ALGORITHMS", "BASE_LATENCY", "COLLECTIVES", "PROTOCOLS", "CollectiveCost", "CollectiveError",
           "P2P_BASE_NOTE", "bus_factor", "canonical", "collective_cost", "message_sizes", "parse_bytes"]
