"""tt-metal's CCL ops as costed operations on a Tenstorrent multi-chip system (torchsim.hwmodels.tensix.mesh):
all-gather, reduce-scatter, all-reduce (a reduce-scatter then an all-gather over the same links) and all-to-all
over TT-Fabric on a line or a ring of chips (on a 2D mesh, along one of its axes: TensixSystem.axis).

Sizes follow nccl-tests as torchsim.sim.collectives does (all-gather: the gathered output; reduce-scatter: the
input; all-reduce: the tensor; all-to-all: each chip's send buffer). The time of one call over N chips:

    time = invoke + steps x (per-step cost + hop latency) + wire bytes / (line rate x transfer efficiency)

- bytes through the busiest link direction (tt-metal's CCL report): all-gather and reduce-scatter (N-1)/N x T,
  all-reduce 2(N-1)/N x T, all-to-all floor(N/2) ceil(N/2)/N x B; spread over the CCL links between neighbours
  and, on a ring, both directions (each carries half);
- ERISC data-movement granularity: those bytes travel in fabric packets of at most one channel slot of payload,
  each with the fabric header and, per Ethernet packet of at most the MTU, the Ethernet framing; the wire bytes
  are the payload plus every packet's overhead (a part-filled last packet pays its own header, no more);
- steps: N-1 hops on a line, N/2 on a ring (its diameter); each costs the fabric's forwarding latency plus the op's
  synchronisation per step;
- transfer efficiency and the per-call and per-step costs per op and topology: calibrated on tt-metal's published
  LoudBox CCL benchmark (the system's Quantities say which).

The model is torchsim's; the constants are read from tt-metal's reports and sources (named on each Quantity). All
tt-metal CCL measurements are traced (no host dispatch): the time is device time, and `eager` changes nothing.
Not modelled: the ops' size-thresholded algorithm switches (ring reduce-scatter's one-shot path up to 512 KiB
per device), fabric congestion from other traffic, 2D fabric routing, the reduction's compute (far cheaper than
the data movement, per the report).
"""

from __future__ import annotations

from torchsim.hwmodels.tensix.mesh import TensixSystem
from torchsim.sim.collective_types import Candidate, CollectiveCost, CollectiveError, bus_factor, canonical

PROTOCOL = "fabric-1d"
WORKERS_PER_LINK = 2  # tt_transformers ccl.py passes num_workers_per_link=2 to every CCL op


def bottleneck_bytes(collective: str, ranks: int, nbytes: int) -> float:
    """Bytes the busiest link carries over the whole axis (before the split over links and directions)."""
    n = ranks
    if collective == "all-reduce":
        return 2 * (n - 1) / n * nbytes
    if collective == "all-to-all":
        return (n // 2) * (-(-n // 2)) / n * nbytes
    return (n - 1) / n * nbytes


def wire_bytes(system: TensixSystem, payload: float) -> float:
    """`payload` bytes on one link direction plus the fabric header and Ethernet framing of every packet."""
    p = float(system.packet_payload_bytes.value)
    full, rest = divmod(max(0.0, payload), p)
    eff_full = system.payload_efficiency(p)
    wire = full * p / eff_full
    if rest > 0:
        wire += rest / system.payload_efficiency(rest)
    return wire


def ccl_cost(collective: str, system: TensixSystem, ranks: int, nbytes: int, *, algorithm: str | None = None,
             protocol: str | None = None, eager: bool = False, axis: int | None = None) -> CollectiveCost:
    """The time, algbw, busbw and topology of one tt-metal CCL op (module docstring). `algorithm` "line" forces a
    line on a ring system ("ring" where no ring closes is an error); `protocol` can only be "fabric-1d"; `axis`
    the cluster axis of a 2D mesh it runs along (TensixSystem.axis: by default the one `ranks` names)."""
    coll = canonical(collective)
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise CollectiveError(f"ranks must be a whole number >= 1, got {ranks!r}")
    if ranks > system.devices:
        raise CollectiveError(f"{ranks} chips on {system.name}, which has {system.devices}")
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes <= 0:
        raise CollectiveError(f"message size must be a positive whole number of bytes, got {nbytes!r}")
    if protocol is not None and protocol.lower() != PROTOCOL:
        raise CollectiveError(f"protocol {protocol!r} is not available on {system.name}; tt-metal's CCL ops run "
                              f"{PROTOCOL}")
    if ranks == 1:
        return CollectiveCost(coll, system.name, 1, nbytes, "local", "-", 0.0, 0.0, 0.0, 0.0, 0, 0.0, eager)
    try:
        _axis, ring, links = system.axis(ranks, axis)
    except ValueError as exc:
        raise CollectiveError(str(exc)) from None
    topo = "ring" if ring else "line"
    if algorithm is not None:
        want = algorithm.strip().lower()
        if want not in ("line", "ring") or (want == "ring" and topo != "ring"):
            raise CollectiveError(f"algorithm {algorithm!r} is not available for {coll} over {ranks} chips of "
                                  f"{system.name}; available: {', '.join(sorted({'line', topo}))}")
        topo = want
    dirs = 2 if topo == "ring" else 1
    invoke, step, eff = system.op_numbers(coll, topo)
    steps = ranks / 2 if topo == "ring" else ranks - 1
    latency = invoke + steps * (step + float(system.hop_latency_s.value))
    lane = bottleneck_bytes(coll, ranks, nbytes) / (links * dirs)
    rate = float(system.link_bytes_per_s.value) * eff
    t = latency + wire_bytes(system, lane) / rate
    algbw = nbytes / t
    peak_bus = rate * system.payload_efficiency() * links * dirs * bus_factor(coll, ranks) \
        * nbytes / bottleneck_bytes(coll, ranks, nbytes)
    return CollectiveCost(coll, system.name, ranks, nbytes, topo, PROTOCOL, t, latency, algbw,
                          algbw * bus_factor(coll, ranks), WORKERS_PER_LINK * links * dirs, t, eager,
                          (Candidate(topo, PROTOCOL, t, latency, peak_bus),))


__all__ = ["PROTOCOL", "bottleneck_bytes", "ccl_cost", "wire_bytes"]
