"""Per-SM L1 data cache for the load/store path (LDG): hits decided per 128 B line from tile coordinates.

The engine (torchsim.sim.engine) asks `L1Cache.access` for every LDG; TMA and cp.async.cg bypass L1 as on the
hardware. Lines are derived from the tile descriptor: global row = block coordinate x tile rows + row, line =
byte column // 128, so overlapping tiles of one tensor share lines whatever their shapes. Capacity comes from
the profile's `l1_bytes_per_sm`; misses go on to L2. An observer (the cache-conscious issue policy) hears which
warp missed and whose lines were evicted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable
from itertools import islice, product
from typing import Any, Protocol

from torchsim.hwmodels.quantity import Quantity, measured

LINE_BYTES = measured(128, "B", "facts.csv H100-SXM5-80GB memory.l1_line_size / sector (128 B lines, 32 B sectors; "
                      "A100 the same)")
SECTOR_BYTES = measured(32, "B", "facts.csv H100-SXM5-80GB memory.l1_line_size / sector")


class L1Observer(Protocol):
    def l1_miss(self, owner: int, line: Hashable, t: int) -> None: ...

    def l1_evict(self, owner: int, line: Hashable) -> None: ...


def tile_lines(key: tuple[Any, ...], shape: tuple[int, ...], elem_bytes: float,
               line_bytes: int = int(LINE_BYTES.value)) -> tuple[Hashable, ...]:
    """The 128 B lines a tile touches. `key` = (tensor, block coordinate per dim); rows are all dims but the last.

    >>> tile_lines(("X", 1, 0), (2, 64), 2.0)  # rows 2..3, bytes 0..127 of each
    (('X', 2, 0), ('X', 3, 0))
    """
    tensor, coords = key[0], key[1:]
    if not shape:
        return ()
    cols = shape[-1]
    col0 = (coords[-1] if coords else 0) * cols
    first = int(col0 * elem_bytes) // line_bytes
    last = int((col0 + cols) * elem_bytes - 1) // line_bytes
    # leading dims: block coordinate x extent + offset; rows in lexicographic order, lines along each row
    rows = [range(b, b + n) for b, n in ((coords[d] * shape[d] if d < len(coords) else 0, shape[d])
                                        for d in range(len(shape) - 1))]
    return tuple(product((tensor,), *rows, range(first, last + 1)))


_ROW_BITS, _COL_BITS = 31, 16  # line ids of two-dimensional tiles: tensor | row + 2^30 | line column
_ROW_OFFSET = 1 << 30


def tile_line_ids(key: tuple[Any, ...], shape: tuple[int, ...], elem_bytes: float, tensor_id: int,
                  line_bytes: int = int(LINE_BYTES.value)) -> tuple[Hashable, ...]:
    """`tile_lines` with each line of a two-dimensional tile as one int (tensor_id, global row, line column
    packed), built with numpy: the same lines in the same order, equal exactly where `tile_lines`' tuples are
    equal (other ranks keep the tuples, which never equal a two-dimensional tile's lines there either).

    >>> tile_line_ids(("X", 1, 0), (2, 64), 2.0, 3) == tuple((3 << 47) | ((r + 2**30) << 16) for r in (2, 3))
    True
    """
    if len(shape) != 2:
        return tile_lines(key, shape, elem_bytes, line_bytes)
    import numpy as np

    coords = key[1:]
    rows, cols = shape
    col0 = (coords[-1] if coords else 0) * cols
    first = int(col0 * elem_bytes) // line_bytes
    last = int((col0 + cols) * elem_bytes - 1) // line_bytes
    row0 = (coords[0] * rows if coords else 0) + _ROW_OFFSET
    if row0 < 0 or row0 + rows > 1 << _ROW_BITS or first < 0 or last >= 1 << _COL_BITS or tensor_id >= 1 << 16:
        raise ValueError(f"tile {key} of shape {shape} lies outside the L1 model's line ids (rows within +-2^30, "
                         f"lines per row < 2^16, tensors < 2^16)")
    base = tensor_id << (_ROW_BITS + _COL_BITS)
    r = np.arange(row0, row0 + rows, dtype=np.int64) << _COL_BITS
    c = np.arange(first, last + 1, dtype=np.int64)
    return tuple((base + r[:, None] + c[None, :]).ravel().tolist())


class L1Cache:
    """Fully associative LRU over lines (a stand-in for the set-associative array), owner warp per line.

    The lines live in a plain dict in LRU order, oldest first: a hit moves its line to the young end by popping
    and reinserting it (the line keeps its owner), an eviction drops the first key. A dict takes a tile's fresh
    lines about twice as fast as an OrderedDict (measured: 64 vs 115 us per 512-line tile into a 2048-line
    cache), and streaming LDG tiles are most of what a memory-bound kernel's simulation does."""

    __slots__ = ("capacity", "lines", "hits", "misses", "observer", "line_bytes")

    def __init__(self, capacity_bytes: float, line_bytes: int = int(LINE_BYTES.value),
                 observer: L1Observer | None = None) -> None:
        if capacity_bytes < line_bytes:
            raise ValueError(f"L1 of {capacity_bytes:.0f} B cannot hold one {line_bytes} B line (l1_bytes_per_sm)")
        self.capacity = int(capacity_bytes // line_bytes)
        self.line_bytes = line_bytes
        self.lines: dict[Hashable, int] = {}
        self.hits = 0
        self.misses = 0
        self.observer = observer

    def access(self, lines: tuple[Hashable, ...], owner: int, t: int) -> int:
        """Touch `lines` for warp `owner` at cycle `t`; returns how many missed (and are now allocated)."""
        cache = self.lines
        obs = self.observer
        pop = cache.pop
        missed = 0
        if obs is None:
            capacity = self.capacity
            if all(map(cache.__contains__, lines)):  # every line hits: each moves to the young end, in order
                cache.update(zip(lines, map(pop, lines)))
                self.hits += len(lines)
                return 0
            if cache.keys().isdisjoint(lines):
                fresh = dict.fromkeys(lines, owner)
                if len(fresh) == len(lines):  # distinct new lines (a tile's): appending them all, then dropping
                    # the oldest down to capacity, leaves the LRU order that one line at a time leaves
                    cache.update(fresh)
                    over = len(cache) - capacity
                    if over > 0:  # the oldest `over` lines, dropped without a Python step per line
                        deque(map(cache.__delitem__, list(islice(cache, over))), maxlen=0)
                    self.misses += len(lines)
                    return len(lines)
            for ln in lines:
                if ln in cache:
                    cache[ln] = pop(ln)
                else:
                    missed += 1
                    cache[ln] = owner
                    if len(cache) > capacity:
                        del cache[next(iter(cache))]
            self.hits += len(lines) - missed
            self.misses += missed
            return missed
        for ln in lines:
            if ln in cache:
                cache[ln] = pop(ln)
                continue
            missed += 1
            obs.l1_miss(owner, ln, t)
            cache[ln] = owner
            if len(cache) > self.capacity:
                old = next(iter(cache))
                obs.l1_evict(pop(old), old)
        self.hits += len(lines) - missed
        self.misses += missed
        return missed


def l1_capacity(hw: Any) -> Quantity | None:
    """The profile's L1 data-cache size, or None for profiles without one (Tensix)."""
    q = getattr(hw, "l1_bytes_per_sm", None)
    return q if isinstance(q, Quantity) and q.value > 0 else None
