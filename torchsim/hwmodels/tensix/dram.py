"""Tensix DRAM: interleaved buffers spread page by page across banks, and read streams over the NoC model.

Part of torchsim.hwmodels.tensix. Templates use `InterleavedBuffer` to find which bank (and so which NoC
endpoint) holds each page of a tensor; `run_read_streams` drives many concurrent readers through `NocModel`
(the DRAM-bandwidth benchmark and tests use it; the engine issues the same `NocModel.read` calls per node).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from torchsim.hwmodels.tensix.noc import NocId, NocModel, NocTopology
from torchsim.hwmodels.tensix.spec import XY, TensixSpec


@dataclass(frozen=True, slots=True)
class InterleavedBuffer:
    """A DRAM buffer of `pages` pages of `page_bytes`; page p lives in bank (first_bank + p) mod banks.

    This is tt-metal's interleaved layout (one tile per page for tiled tensors).
    Example:
        >>> buf = InterleavedBuffer("w", pages=30, page_bytes=2048, banks=12)
        >>> buf.bank_of(13), buf.pages_per_bank()[:3].tolist()
        (1, [3, 3, 3])
    """

    name: str
    pages: int
    page_bytes: int
    banks: int
    first_bank: int = 0

    def __post_init__(self) -> None:
        if self.pages <= 0 or self.page_bytes <= 0 or self.banks <= 0:
            raise ValueError(f"buffer {self.name!r}: pages, page_bytes and banks must be > 0")

    def bank_of(self, page: int) -> int:
        if not 0 <= page < self.pages:
            raise IndexError(f"buffer {self.name!r} has pages 0..{self.pages - 1}; asked for page {page}")
        return (self.first_bank + page) % self.banks

    def pages_per_bank(self) -> np.ndarray:
        counts = np.full(self.banks, self.pages // self.banks, dtype=np.int64)
        rest = self.pages % self.banks
        counts[(self.first_bank + np.arange(rest)) % self.banks] += 1
        return counts

    @property
    def nbytes(self) -> int:
        return self.pages * self.page_bytes


@dataclass(frozen=True, slots=True)
class ReadStream:
    """One reader core issuing `count` reads of `nbytes` from DRAM `banks` (cycled), `outstanding` in flight.

    `barrier_every` > 0 waits for every outstanding read after that many reads (tt-metal's
    noc_async_read_barrier per block); 0 keeps `outstanding` transactions in flight continuously.
    """

    reader: XY
    banks: tuple[int, ...]
    nbytes: float
    count: int
    noc: NocId = NocId.NOC0
    outstanding: int = 2
    barrier_every: int = 0
    issue_cycles: float = 0.0  # RISC-V work between issuing two reads


def run_read_streams(hw: TensixSpec, streams: list[ReadStream],
                     noc: NocModel | None = None) -> tuple[float, NocModel]:
    """Run concurrent read streams; returns (cycle the last read lands, the NoC model with its statistics).

    Streams advance in time order through one heap keyed by (time, stream index, sequence): deterministic.
    """
    model = noc or NocModel(hw)
    heap: list[tuple[float, int, int]] = []
    issued = [0] * len(streams)
    inflight: list[list[float]] = [[] for _ in streams]
    seq = 0
    for i in range(len(streams)):
        heapq.heappush(heap, (0.0, i, seq))
        seq += 1
    end = 0.0
    while heap:
        t, i, _ = heapq.heappop(heap)
        s = streams[i]
        if issued[i] >= s.count:
            continue
        live = [d for d in inflight[i] if d > t]
        if s.barrier_every and issued[i] and issued[i] % s.barrier_every == 0 and live:
            heapq.heappush(heap, (max(live), i, seq))  # barrier: wait for the whole block
            seq += 1
            inflight[i] = []
            continue
        if len(live) >= s.outstanding:
            heapq.heappush(heap, (min(live), i, seq))
            seq += 1
            inflight[i] = live
            continue
        bank = s.banks[issued[i] % len(s.banks)]
        done = model.read(t, s.reader, hw.dram_bank_xy[bank], s.nbytes, s.noc, bank=bank)
        live.append(done)
        inflight[i] = live
        issued[i] += 1
        end = max(end, done)
        heapq.heappush(heap, (t + max(s.issue_cycles, float(hw.noc_transaction_min_cycles)), i, seq))
        seq += 1
    return end, model


def adjacent_readers(hw: TensixSpec, noc: NocId = NocId.NOC0) -> tuple[XY, ...]:
    """One distinct worker per DRAM bank, each the nearest downstream of its bank's endpoint on `noc`.

    This is the placement of tt-metal's DRAM reports ('bank-adjacent' readers); banks take their pick in order.
    """
    topo = NocTopology(int(hw.noc_grid_x), int(hw.noc_grid_y))
    free = set(hw.worker_xy)
    out: list[XY] = []
    for ep in hw.dram_bank_xy:
        if not free:
            raise ValueError(f"{hw.name}: fewer worker cores than DRAM banks for one reader per bank")
        best = min(free, key=lambda w: (topo.hops(ep, w, noc), w))
        free.remove(best)
        out.append(best)
    return tuple(out)
