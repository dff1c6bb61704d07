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
    cache), and streaming LDG tiles are most of what a memory-bound kernel's simulation does.

    Whole tiles (`access_tile`): a tensor whose LDG tiles never share only some of their lines (the engine
    checks, `tile_granular`) only ever has whole tiles touched, so its lines of one tile sit together in
    LRU order, in the tile's line order, and an eviction takes a tile's first lines first. Such a tile is one
    entry holding how many of its lines are present (its youngest ones), with the same hits, misses and
    evictions as its lines one at a time (tests/test_l1_lru.py compares them), at a dict operation per tile
    instead of per line. Without an observer only (the cache-conscious policy hears of every line)."""

    __slots__ = ("capacity", "lines", "hits", "misses", "observer", "line_bytes", "count", "tiles")

    def __init__(self, capacity_bytes: float, line_bytes: int = int(LINE_BYTES.value),
                 observer: L1Observer | None = None) -> None:
        if capacity_bytes < line_bytes:
            raise ValueError(f"L1 of {capacity_bytes:.0f} B cannot hold one {line_bytes} B line (l1_bytes_per_sm)")
        self.capacity = int(capacity_bytes // line_bytes)
        self.line_bytes = line_bytes
        # line -> owner warp; or whole-tile key -> [lines present] (a list: the values tell entries apart)
        self.lines: dict[Hashable, Any] = {}
        self.hits = 0
        self.misses = 0
        self.observer = observer
        self.count = 0  # lines present (entries count a tile's present lines)
        self.tiles = 0  # whole-tile entries present

    def _evict(self, over: int, stop: Hashable = None) -> int:
        """Drop the `over` oldest lines (a whole-tile entry loses its first lines first); stops before touching the
        entry `stop` and returns how many lines were still to drop then (0: all dropped)."""
        cache = self.lines
        if not self.tiles:  # lines only: the oldest `over` keys, without a Python step per line
            deque(map(cache.__delitem__, list(islice(cache, over))), maxlen=0)
            self.count -= over
            return 0
        while over > 0:
            key = next(iter(cache))
            if key == stop and stop is not None:
                return over
            v = cache[key]
            if type(v) is list:
                if v[0] > over:
                    v[0] -= over
                    self.count -= over
                    return 0
                over -= v[0]
                self.count -= v[0]
                del cache[key]
                self.tiles -= 1
            else:
                del cache[key]
                self.count -= 1
                over -= 1
        return 0

    def access_tile(self, key: Hashable, n: int) -> int:
        """Touch the `n` lines of whole tile `key` (its tensor is read only in whole tiles); returns how many
        missed. The same outcome as `access` on its lines in order: the absent first lines are inserted at the
        young end, the present ones move there after them; where inserting them would evict one of the tile's own
        present lines (nothing older is left), each later line is evicted just before its turn, so all miss."""
        cache = self.lines
        entry = cache.get(key)
        present = entry[0] if entry is not None else 0
        k = n - present
        if not k:  # every line hits
            cache[key] = cache.pop(key)
            self.hits += n
            return 0
        if entry is not None:
            over = self.count + k - self.capacity
            if over <= 0 or not self._evict(over, stop=key):  # the lines older than the tile made the room
                cache[key] = cache.pop(key)
                entry[0] = n
                self.count += k
                self.hits += present
                self.misses += k
                return k
            del cache[key]  # its own first present line would go: the whole tile misses
            self.tiles -= 1
            self.count -= present
        cache[key] = [n]
        self.tiles += 1
        self.count += n
        self.misses += n
        if self.count > self.capacity:
            self._evict(self.count - self.capacity)
        return n

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
                    self.count += len(lines)
                    if self.count > capacity:  # the oldest lines dropped
                        self._evict(self.count - capacity)
                    self.misses += len(lines)
                    return len(lines)
            for ln in lines:
                if ln in cache:
                    cache[ln] = pop(ln)
                else:
                    missed += 1
                    cache[ln] = owner
                    self.count += 1
                    if self.count > capacity:
                        self._evict(1)
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
        self.count = len(cache)
        self.hits += len(lines) - missed
        self.misses += missed
        return missed


def tile_granular(reads: Any, line_bytes: int = int(LINE_BYTES.value)) -> dict[tuple[str, tuple[int, ...]], int]:
    """The (tensor, tile shape) pairs whose L1 reads can be kept as whole tiles, with the lines of one such tile.

    `reads` gives every LDG of a kernel as (tensor, tile shape, bytes per element, coordinates in its key,
    coordinates) where the last is a callable returning the read's key coordinates in every CTA (an int array
    [CTAs, coordinates]; called only for a tensor read in more than one shape). A tensor qualifies when each of its
    reads has a tile whose lines are set by its key (two dimensions with at most two key coordinates, or one
    dimension with one) and whose row spans whole lines, and no two of its tiles share some lines but not all:
    guaranteed for tiles of one shape (block coordinates x shape), checked on the coordinates of every CTA
    where there are several shapes (a tail CTA's shorter tile beside the others).

    >>> tile_granular([("X", (4, 256), 2.0, 2, None), ("X", (4, 256), 2.0, 2, None), ("H", (4, 96), 1.0, 2, None)])
    {('X', (4, 256)): 16}
    """
    by_tensor: dict[str, list[tuple[tuple[int, ...], float, int, Any]]] = {}
    for tensor, shape, elem_bytes, ncoords, coords in reads:
        by_tensor.setdefault(tensor, []).append((tuple(shape), float(elem_bytes), int(ncoords), coords))
    out = {}
    for tensor, rs in by_tensor.items():
        lines = {}
        for shape, elem_bytes, ncoords, _ in rs:
            row = shape[-1] * elem_bytes if shape else 0.0
            keyed = (len(shape) == 2 and ncoords <= 2) or (len(shape) == 1 and ncoords == 1)
            if not keyed or min(shape) <= 0 or row != int(row) or int(row) % line_bytes:
                break
            lines[shape] = (shape[0] if len(shape) == 2 else 1) * int(row) // line_bytes
        else:
            if len(lines) > 1 and not _disjoint_tiles(rs, line_bytes):
                continue
            out.update({(tensor, shape): n for shape, n in lines.items()})
    return out


def _disjoint_tiles(reads: list[tuple[tuple[int, ...], float, int, Any]], line_bytes: int) -> bool:
    """Whether the distinct tiles these reads touch (over every CTA) share no line: each tile is a rectangle of
    rows x line columns (one-dimensional tiles have line ids of their own, never equal to a 2-D tile's)."""
    import numpy as np

    rects: dict[int, list[Any]] = {1: [], 2: []}
    for shape, elem_bytes, _, coords in reads:
        c = np.asarray(coords(), dtype=np.int64)
        if c.size == 0:
            continue
        per = int(shape[-1] * elem_bytes) // line_bytes
        l0 = c[:, -1] * per
        r0 = c[:, 0] * shape[0] if len(shape) == 2 else np.zeros_like(l0)
        rows = shape[0] if len(shape) == 2 else 1
        rects[len(shape)].append(np.stack([l0, l0 + per, r0, r0 + rows], axis=1))
    for parts in rects.values():
        if not parts:
            continue
        r = np.unique(np.concatenate(parts), axis=0)  # sorted by line column, then row
        cols = np.unique(r[:, :2], axis=0)
        if (cols[1:, 0] < cols[:-1, 1]).any():  # column ranges that overlap without being equal
            return False
        same = (r[1:, 0] == r[:-1, 0]) & (r[1:, 1] == r[:-1, 1])
        if (r[1:, 2][same] < r[:-1, 3][same]).any():  # row ranges of one column range that overlap
            return False
    return True


def l1_capacity(hw: Any) -> Quantity | None:
    """The profile's L1 data-cache size, or None for profiles without one (Tensix)."""
    q = getattr(hw, "l1_bytes_per_sm", None)
    return q if isinstance(q, Quantity) and q.value > 0 else None
