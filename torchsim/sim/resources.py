"""Resource models behind one small interface: accept work at cycle t, return completion, keep busy statistics.

The engine (torchsim.sim.engine) owns one `Pipeline` per unit per SM and one chip-wide `BandwidthServer` for
L2 and for DRAM, plus an `LruCache` deciding L2 hits from tile coordinates. Times are integer cycles.
"""

from __future__ import annotations

import heapq
import math
from array import array
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

import cython


class Pipeline:
    """A throughput-oriented pipeline: latency, sustained throughput, and sub-operations in flight.

    A node of `work` is split into sub-operations of `subop_work`; with `inflight` of them in flight and a
    latency of `latency` cycles the pipe sustains `min(throughput, inflight * subop_work / latency)` per cycle.
    The pipe accepts a new node once the previous node's sub-operations have all been injected (`free_at`).
    A `partner` pipe excludes it: while either injects work the other accepts none (register-file
    accumulators: MUFU work and mma.sync/wgmma work of one SM do not overlap).
    """

    __slots__ = ("name", "throughput", "latency", "effective", "free_at", "busy_work", "queued", "partner")

    def __init__(self, name: str, throughput: float, latency: int, inflight: float = math.inf,
                 subop_work: float = 0.0, queued: bool = False) -> None:
        if throughput <= 0:
            raise ValueError(f"pipeline {name!r}: throughput must be > 0")
        self.name = name
        self.throughput = throughput
        self.latency = int(latency)
        limit = inflight * subop_work / latency if latency > 0 and subop_work > 0 else math.inf
        self.effective = min(throughput, limit)
        self.free_at = 0
        self.busy_work = 0.0
        self.queued = queued  # memory front-ends queue requests instead of refusing them
        self.partner: Pipeline | None = None

    def occupancy(self, work: float) -> int:
        return max(1, math.ceil(work / self.effective - 1e-9))

    def occupy(self, t: int, occ: int, work: float) -> tuple[int, int]:
        """Take the pipe for `occ` cycles from `t` or when it frees, whichever is later, for `work`; a partner
        pipe accepts nothing until then. Returns (start, end). The engine's event loop does the same inline for
        a node's unit (a call per node costs 4-7% there: 0.27M calls on the 4096^3 GEMM, 1.6M on FA3 8k)."""
        start = self.free_at if self.free_at > t else t
        return start, self.take(t, occ, work)

    @cython.annotation_typing(False)  # a C call from the event loop when compiled: the .pxd types it
    def take(self, t: int, occ: int, work: float) -> int:
        """`occupy`, returning only the end (the event loop's shared-memory port)."""
        end = (self.free_at if self.free_at > t else t) + occ
        self.free_at = end
        self.busy_work += work
        pt = self.partner
        if pt is not None and pt.free_at < end:
            pt.free_at = end
        return end

    def can_accept(self, t: int) -> bool:
        return self.queued or self.free_at <= t

    def accept(self, t: int, work: float) -> tuple[int, int]:
        """Inject `work` at cycle `t`; returns (injection end, completion)."""
        end = self.occupy(t, self.occupancy(work), work)[1]
        return end, end + self.latency


class BandwidthServer:
    """A chip-wide FIFO latency-bandwidth-queue server (L2 slices or DRAM) in bytes per cycle."""

    __slots__ = ("name", "bytes_per_cycle", "free_at", "bytes", "busy_cycles")

    def __init__(self, name: str, bytes_per_cycle: float) -> None:
        if bytes_per_cycle <= 0:
            raise ValueError(f"server {name!r}: bandwidth must be > 0")
        self.name = name
        self.bytes_per_cycle = bytes_per_cycle
        self.free_at = 0.0
        self.bytes = 0.0
        self.busy_cycles = 0.0

    def serve(self, t: int, nbytes: float) -> float:
        """Queue a transfer arriving at `t`; returns when its last byte has passed."""
        start = t if t > self.free_at else self.free_at
        dur = nbytes / self.bytes_per_cycle
        self.free_at = start + dur
        self.bytes += nbytes
        self.busy_cycles += dur
        return self.free_at


class DramServer(BandwidthServer):
    """The chip's DRAM: a FIFO server whose cost per byte depends on the traffic mix (bus turnaround).

    A read-only stream moves `read_bpc` bytes per cycle, a write-only stream `write_bpc`; a copy (one read and
    one write stream, every byte counted) only `copy_bpc`: each read/write pair costs `2/copy_bpc`, more than
    `1/read_bpc + 1/write_bpc` by the turnaround `delta`. A byte pays its own kind's cost plus `delta` times the
    share of the other kind in the traffic served over the last `window` cycles (byte counts decaying with that
    time constant), so a copy streams at the copy rate, a pure stream at its own, and a read stream with a few
    writes pays in proportion to the writes. `serve` (kind unknown) charges the read cost.

    `dirty`: bytes of dirty L2 lines the kernel finds at its start (a benchmark that flushes L2 by zeroing a
    buffer leaves it full of them). Every byte the kernel moves through DRAM allocates an L2 line and so
    evicts one of them until none are left: its write-back queues behind the request (which completes as
    before) and delays what follows.
    """

    __slots__ = ("read_cost", "write_cost", "delta", "window", "recent_r", "recent_w", "last_t", "dirty")

    def __init__(self, name: str, read_bpc: float, write_bpc: float, copy_bpc: float, window: float) -> None:
        if min(read_bpc, write_bpc, copy_bpc) <= 0:
            raise ValueError(f"server {name!r}: read, write and copy bandwidths must be > 0")
        super().__init__(name, max(read_bpc, write_bpc))
        self.read_cost = 1.0 / read_bpc
        self.write_cost = 1.0 / write_bpc
        self.delta = max(0.0, 2.0 / copy_bpc - self.read_cost - self.write_cost)
        self.window = max(1.0, window)
        self.recent_r = 0.0
        self.recent_w = 0.0
        self.last_t = 0
        self.dirty = 0.0

    @cython.annotation_typing(False)  # a C call from the event loop when compiled: the .pxd types it
    def serve_kind(self, t: int, nbytes: float, write: bool) -> float:
        """Queue a read (or write-back) of `nbytes` arriving at `t`; returns when its last byte has passed."""
        if self.delta:
            if t > self.last_t:
                decay = math.exp((self.last_t - t) / self.window)
                self.recent_r *= decay
                self.recent_w *= decay
                self.last_t = t
            r, w = self.recent_r, self.recent_w
            other = r if write else w
            mix = self.delta * other / (r + w + nbytes)
            if write:
                self.recent_w = w + nbytes
            else:
                self.recent_r = r + nbytes
        else:
            mix = 0.0
        start = t if t > self.free_at else self.free_at
        dur = nbytes * ((self.write_cost if write else self.read_cost) + mix)
        end = self.free_at = start + dur
        self.bytes += nbytes
        self.busy_cycles += dur
        if self.dirty > 0.0:  # the lines this traffic allocates in L2 evict dirty ones left before the kernel
            wb = nbytes if nbytes < self.dirty else self.dirty
            left, self.dirty = self.dirty - wb, 0.0
            self.serve_kind(t, wb, True)  # queued behind the request; the write-back itself allocates nothing
            self.dirty = left
        return end

    def serve(self, t: int, nbytes: float) -> float:
        return self.serve_kind(t, nbytes, False)


class LruCache:
    """Fully associative LRU over tiles: a tile key hits when the same tile is still resident."""

    __slots__ = ("capacity", "used", "lines", "hits", "misses", "hit_bytes", "miss_bytes")

    def __init__(self, capacity_bytes: float) -> None:
        self.capacity = capacity_bytes
        self.used = 0.0
        self.lines: OrderedDict[Hashable, float] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.hit_bytes = 0.0
        self.miss_bytes = 0.0

    def access(self, key: Hashable, nbytes: float) -> bool:
        """Touch a tile; returns True on a hit. Misses allocate (reads and writes alike)."""
        lines = self.lines
        if key in lines:
            lines.move_to_end(key)
            self.hits += 1
            self.hit_bytes += nbytes
            return True
        self.misses += 1
        self.miss_bytes += nbytes
        lines[key] = nbytes
        self.used += nbytes
        while self.used > self.capacity and lines:
            _, b = lines.popitem(last=False)
            self.used -= b
        return False

    @property
    def hit_rate(self) -> float:
        total = self.hit_bytes + self.miss_bytes
        return self.hit_bytes / total if total else 0.0


class CycleHeap:
    """The cycles the engine's calendar holds events at: a min-heap of distinct integers, which the event loop
    (torchsim.sim.loop) pops in order. Compiled, a C array behind a typed memoryview (its comparisons and moves
    without Python integers); from source, heapq over a list. Distinct values pop in the same order either way."""

    __slots__ = ("buf", "view", "n")

    def __init__(self) -> None:
        self.n = 0
        self.buf: Any = []  # compiled: an array("q") (the view's buffer); from source: heapq's list
        if cython.compiled:
            self.buf = array("q", bytes(8 * 1024))
            self.view = self.buf

    def __len__(self) -> int:
        return self.n

    @cython.annotation_typing(False)  # typed by the .pxd
    @cython.locals(pos=cython.Py_ssize_t, parent=cython.Py_ssize_t)
    def push(self, x: int) -> None:
        """Add cycle x (not already held)."""
        if not cython.compiled:
            heapq.heappush(self.buf, x)
            self.n += 1
            return
        if self.n == len(self.buf):  # full: a buffer twice the size (the old one is released with its view)
            grown = array("q", bytes(16 * len(self.buf)))
            grown[:self.n] = self.buf[:self.n]
            self.buf = grown
            self.view = grown
        pos = self.n
        self.n += 1
        while pos > 0:
            parent = (pos - 1) >> 1
            if x < self.view[parent]:
                self.view[pos] = self.view[parent]
                pos = parent
            else:
                break
        self.view[pos] = x

    @cython.locals(pos=cython.Py_ssize_t, child=cython.Py_ssize_t, n=cython.Py_ssize_t, x=cython.longlong,
                   cv=cython.longlong, top=cython.longlong)
    def pop(self) -> int:
        """Remove and return the smallest cycle held."""
        if self.n == 0:
            raise IndexError("pop from an empty CycleHeap")
        if not cython.compiled:
            self.n -= 1
            return heapq.heappop(self.buf)
        top = self.view[0]
        self.n -= 1
        n = self.n
        if n == 0:
            return top
        x = self.view[n]
        pos = 0
        while True:
            child = 2 * pos + 1
            if child >= n:
                break
            cv = self.view[child]
            if child + 1 < n and self.view[child + 1] < cv:
                child += 1
                cv = self.view[child]
            if cv < x:
                self.view[pos] = cv
                pos = child
            else:
                break
        self.view[pos] = x
        return top
