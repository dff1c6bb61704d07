"""The records and names collective cost models share: the costs of one collective (torchsim.sim.collectives for
NCCL on GPU systems, torchsim.sim.ccl for tt-metal's CCL ops on Tenstorrent meshes), the collectives' names and
nccl-tests' bus-bandwidth factor."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")
ALIASES = {"allreduce": "all-reduce", "all_reduce": "all-reduce", "allgather": "all-gather",
           "all_gather": "all-gather", "reducescatter": "reduce-scatter", "reduce_scatter": "reduce-scatter",
           "alltoall": "all-to-all", "all_to_all": "all-to-all", "a2a": "all-to-all"}


class CollectiveError(ValueError):
    """A collective that cannot be costed as asked (unknown name, too many ranks, a bad size)."""


@dataclass(frozen=True)
class Candidate:
    algorithm: str
    protocol: str
    time_s: float
    latency_s: float
    bus_bytes_per_s: float  # the asymptotic bus bandwidth of this candidate


@dataclass(frozen=True)
class CollectiveCost:
    """The cost of one collective: NCCL's pick on this system and the candidates it was chosen from."""

    collective: str
    system: str
    ranks: int
    nbytes: int
    algorithm: str
    protocol: str
    time_s: float
    latency_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    channels: int  # CTAs the collective occupies (one SM each)
    device_time_s: float = 0.0  # the device's time alone (CUDA graphs)
    eager: bool = False  # time_s bounded below by the host's enqueue time
    candidates: tuple[Candidate, ...] = field(default=())

    @property
    def sms(self) -> int:
        return self.channels

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["candidates"] = [asdict(c) for c in self.candidates]
        return d


def canonical(collective: str) -> str:
    key = str(collective).strip().lower()
    key = ALIASES.get(key, key)
    if key not in COLLECTIVES:
        raise CollectiveError(f"unknown collective {collective!r}; known: {', '.join(COLLECTIVES)}")
    return key


def bus_factor(collective: str, ranks: int) -> float:
    """nccl-tests' busbw / algbw."""
    n = ranks
    return 2 * (n - 1) / n if collective == "all-reduce" else (n - 1) / n


__all__ = ["ALIASES", "COLLECTIVES", "Candidate", "CollectiveCost", "CollectiveError", "bus_factor", "canonical"]
