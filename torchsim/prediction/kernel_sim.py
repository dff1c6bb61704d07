"""One kernel call -> its simulated (or estimated) time: templates + engine, memoised per call and profile.

Sits between lowering (KernelCalls) and prediction.pipeline (which places the results on a stream). A call's launches
(two for a split Flash-Decoding or FlashMLA call: split kernel, then combine) come from
`torchsim.lowering.templates.build_kernels` and run at their sustained clock under the profile's power limit
(`torchsim.sim.sustained.sustain`); kernels larger than `max_events` node executions are simulated at
truncated sizes of their repeating dimensions and extrapolated (torchsim.prediction.repeats: one mechanism, one
error bound), the others in full; only calls without a template are a roofline (`fallback`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import as_completed
from dataclasses import dataclass, field
from typing import Any

from torchsim.lowering.fallback import roofline, work
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.prediction.cache import DiskCache
from torchsim.prediction.repeats import EXACT_EVENTS
from torchsim.prediction.workers import cpus, worker_pool

DEFAULT_MAX_SIM_EVENTS = EXACT_EVENTS  # kernels up to this many node executions are simulated in full
EXACT = 1 << 62  # max_events that simulates every kernel in full (`--exact`)


@dataclass(frozen=True)
class KernelSim:
    """How long one kernel call takes on one profile, and what bound it."""

    template: str
    config: dict[str, Any]
    cycles: int
    time_s: float
    flops: float
    dram_bytes: float
    l2_hit_rate: float
    unit_util: dict[str, float] = field(default_factory=dict)
    stalls: dict[str, float] = field(default_factory=dict)
    bound: str = ""
    fallback: bool = False
    method: str = "exact"  # "exact" | "extrapolated-waves" | "extrapolated-k" | "extrapolated-waves+k" | ... |
    # "roofline: <why>" (only for a call without a template)
    extrapolation: str = ""  # how an extrapolated kernel was sampled (torchsim.prediction.repeats)
    events: int = 0  # node executions simulated
    clock_hz: float = 0.0  # SM clock it ran at (torchsim.sim.sustained); 0 = not recorded
    clock_reason: str = ""  # why that clock: "boost: ...", "power-limited: ...", a roofline's profile clock
    power_w: float = 0.0  # average board power at that clock

    def check_entry(self) -> None:
        """Raise ValueError when a value cannot come from a simulation (a cache entry read back is checked)."""
        for name in ("cycles", "time_s", "flops", "dram_bytes", "events", "clock_hz", "power_w"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} = {v!r} is not a finite non-negative number")
        if not 0.0 <= self.l2_hit_rate <= 1.0:
            raise ValueError(f"l2_hit_rate = {self.l2_hit_rate!r} is outside [0, 1]")
        for name in ("unit_util", "stalls"):
            d = getattr(self, name)
            if not isinstance(d, dict) or not all(isinstance(x, (int, float)) and math.isfinite(x) and x >= 0
                                                  for x in d.values()):
                raise ValueError(f"{name} is not a table of finite non-negative numbers")
        for name in ("template", "bound", "method", "clock_reason", "extrapolation"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{name} is not text")


@dataclass(frozen=True)
class Launches:
    """Every launch of one call, in stream order (the on-disk cache entry; JSON gives back dicts)."""

    launches: tuple[KernelSim, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.launches, (list, tuple)) or not self.launches:
            raise ValueError("launches is not a non-empty list")
        object.__setattr__(self, "launches", tuple(s if isinstance(s, KernelSim) else KernelSim(**s)
                                                   for s in self.launches))

    def check_entry(self) -> None:
        for s in self.launches:
            s.check_entry()


_MEMO: dict[tuple[Any, ...], tuple[KernelSim, ...]] = {}


def memo_key(call: KernelCall, hw: Any, max_events: int) -> tuple[Any, ...]:
    return (call.key(), hw.name, _hw_hash(hw), max_events)


_HW_HASHES: dict[int, tuple[Any, str]] = {}  # id -> (profile, its hash): profiles are frozen, hashed once each


def _hw_hash(hw: Any) -> str:
    """The profile's numbers_hash (every call's memo key takes it: 3,400 calls on a warm 80-layer prediction)."""
    got = _HW_HASHES.get(id(hw))
    if got is not None and got[0] is hw:
        return got[1]
    fn = getattr(hw, "numbers_hash", None)
    h = fn() if callable(fn) else repr(hw)
    if len(_HW_HASHES) >= 64:
        _HW_HASHES.clear()
    _HW_HASHES[id(hw)] = (hw, h)
    return h


def is_memoised(call: KernelCall, hw: Any, max_events: int = DEFAULT_MAX_SIM_EVENTS) -> bool:
    return memo_key(call, hw, max_events) in _MEMO


def clear_memo() -> None:
    _MEMO.clear()


def simulate_launches(call: KernelCall, hw: Any, *, max_events: int = DEFAULT_MAX_SIM_EVENTS
                      ) -> tuple[KernelSim, ...]:
    """Each kernel launch of `call` on `hw` in order, simulated once per (call, profile numbers, budget) per process.

    >>> from torchsim.hwmodels import get_profile
    >>> call = KernelCall.make(KernelKind.ATTENTION_DECODE, batch=1, heads_q=8, heads_kv=2, seq_q=1, seq_kv=4096,
    ...                        head_dim=128)
    >>> [s.template for s in simulate_launches(call, get_profile("h100-sxm"))]
    ['flash_decode/fa3', 'flash_decode/combine']
    """
    key = memo_key(call, hw, max_events)
    hit = _MEMO.get(key)
    if hit is None:
        hit = _MEMO[key] = _simulate(call, hw, max_events)
    return hit


def simulate_call(call: KernelCall, hw: Any, *, max_events: int = DEFAULT_MAX_SIM_EVENTS) -> KernelSim:
    """Device time of `call` on `hw`: its one launch, or its launches summed (without the gaps between them;
    `simulate_launches` keeps them apart for placing on a stream).

    >>> from torchsim.hwmodels import get_profile
    >>> s = simulate_call(KernelCall.make(KernelKind.RMSNORM, rows=1, hidden=4096), get_profile("h100-sxm"))
    >>> s.fallback or s.time_s > 0
    True
    """
    return merged(simulate_launches(call, hw, max_events=max_events))


def merged(launches: Sequence[KernelSim]) -> KernelSim:
    """One KernelSim for launches run back to back: times, work and stalls summed, utilisation time-weighted,
    the bound of the longest launch."""
    if len(launches) == 1:
        return launches[0]
    total_s = sum(s.time_s for s in launches) or 1.0
    util: dict[str, float] = {}
    stalls: dict[str, float] = {}
    for s in launches:
        for unit, u in s.unit_util.items():
            util[unit] = util.get(unit, 0.0) + u * s.time_s / total_s
        for why, v in s.stalls.items():
            stalls[why] = stalls.get(why, 0.0) + v
    dram = sum(s.dram_bytes for s in launches)
    first, longest = launches[0], max(launches, key=lambda s: s.time_s)
    return KernelSim(template="+".join(s.template for s in launches), config={**first.config,
                                                                            "launches": len(launches)},
                     cycles=sum(s.cycles for s in launches), time_s=sum(s.time_s for s in launches),
                     flops=sum(s.flops for s in launches), dram_bytes=dram,
                     l2_hit_rate=sum(s.l2_hit_rate * s.dram_bytes for s in launches) / dram if dram else 0.0,
                     unit_util=util, stalls=stalls, bound=longest.bound, fallback=any(s.fallback for s in launches),
                     method=longest.method, extrapolation=longest.extrapolation,
                     events=sum(s.events for s in launches), clock_hz=longest.clock_hz,
                     clock_reason=longest.clock_reason,
                     power_w=sum(s.power_w * s.time_s for s in launches) / total_s)


def simulate_many(calls: Sequence[KernelCall], hw: Any, *, max_events: int = DEFAULT_MAX_SIM_EVENTS,
                  workers: int | None = None, progress: bool = False, disk: DiskCache | None = None) -> list[KernelSim]:
    """`simulate_call` for each call; distinct un-memoised calls run on `workers` forked processes.

    `workers=None` picks one process per CPU (at most 4) when the new work is large (`auto_workers`). With
    `disk`, results are read from and written to the on-disk cache. Unless `max_events` is EXACT, calls that
    differ only in a size their time is affine in are simulated at a few sizes and the others interpolated
    (torchsim.prediction.reuse).
    """
    todo = list({c.key(): c for c in calls if not is_memoised(c, hw, max_events)}.values())
    if disk is not None:
        todo = [c for c in todo if not _from_disk(disk, c, hw, max_events)]
    groups: list[Any] = []
    if max_events < EXACT and len(todo) >= 3:
        from torchsim.prediction import reuse

        todo, groups = reuse.plan(todo, hw)
    _run(todo, hw, max_events, workers, progress, disk)
    if groups:
        from torchsim.prediction import reuse

        done, again = reuse.derive(groups, lambda c: _MEMO[memo_key(c, hw, max_events)])
        for c in {c.key(): c for _, members in groups for _, c in members}.values():
            if c.key() in done:
                _store(c, hw, max_events, done[c.key()], disk)
        _run(again, hw, max_events, workers, progress, disk)
    return [simulate_call(c, hw, max_events=max_events) for c in calls]  # launches: `simulate_launches`


def auto_workers(todo: Sequence[KernelCall]) -> int:
    """Processes for simulating `todo`: one per CPU (at most 4) when the work is large (over 100 GFLOP in
    total) and there is more than one call, else 1."""
    heavy = sum(work(c)[0] for c in todo) > 1e11
    return cpus() if heavy and len(todo) > 1 else 1


def _work_cost(c: KernelCall) -> float:
    """A call's FLOPs plus bytes: an order of calls by simulation cost that builds nothing."""
    return float(sum(work(c)[:2]))


class _Dropped(Exception):
    """Leaves a worker pool at once: its workers simulate guesses no plan needs (Background.wait)."""


class Background:
    """Calls simulated on forked worker processes while the caller goes on (capturing the next steps of a
    prediction): `submit` starts the distinct, un-memoised calls not on disk, `wait` stores their results (memo and
    disk) and stops the workers. Used as a context manager: leaving it by an exception stops the workers at once.

    `speculate` queues calls before they are known to be needed (torchsim.prediction.speculate) and runs them one
    at a time, leaving the other CPUs to the caller, until `submit` names the calls that are: from then on every
    worker runs. `wait(needed)` stores the speculated calls whose keys are among `needed` and drops the others
    unfinished."""

    def __init__(self, hw: Any, max_events: int, workers: int, disk: DiskCache | None,
                 cost: Callable[[KernelCall], float] | None = None,
                 count: Callable[[KernelCall, Any, int], int | None] | None = None) -> None:
        self.hw, self.max_events, self.workers, self.disk = hw, max_events, workers, disk
        # `count(call, hw, max_events)`: a speculated call's simulation-limit estimate, made by its worker
        # (torchsim.prediction.limits.estimate; a module-level function: it goes to the worker by name)
        self.count = count
        # what simulating a call costs, to start the longest first (default: its FLOPs and bytes)
        self.cost = cost or _work_cost
        self.futures: dict[Any, KernelCall] = {}
        self.counted: set[Any] = set()  # futures of speculated calls: (launches, their simulation-limit estimate)
        self.keys: set[tuple[Any, ...]] = set()
        self.speculative: set[tuple[Any, ...]] = set()
        self._queued: list[KernelCall] = []  # speculated calls not yet handed to the pool (one runs at a time)
        self._lock = threading.RLock()  # the pool's callback thread hands the next speculated call over
        self._ctx: Any = None
        self._pool: Any = None

    @property
    def started(self) -> bool:
        return self._pool is not None

    def __enter__(self) -> Background:
        return self

    def __exit__(self, *exc: Any) -> None:
        with self._lock:
            self._queued.clear()
        if self._ctx is not None:
            ctx, self._ctx = self._ctx, None
            ctx.__exit__(*exc)

    def speculate(self, calls: Sequence[KernelCall]) -> None:
        """Queue `calls` (largest first by FLOPs and bytes: this runs before the first worker starts, and the
        pool's own cost, an event estimate, builds each GEMM's family, ~0.2 s for a prefill's six calls) and start
        the first; each one's completion starts the next."""
        todo = self._new(calls, _work_cost)
        if not todo:
            return
        with self._lock:
            self.speculative |= {c.key() for c in todo}
            self._queued = todo[1:]
            self._start(todo[0], chain=True)

    def _next(self, _fut: Any) -> None:
        with self._lock:
            if self._queued and self._pool is not None:
                self._start(self._queued.pop(0), chain=True)

    def _new(self, calls: Sequence[KernelCall], cost: Callable[[KernelCall], float] | None = None
             ) -> list[KernelCall]:
        """The distinct calls not yet submitted, memoised or on disk, costliest first by `cost` (default: the
        pool's; the pool finishes together)."""
        todo = [c for c in {c.key(): c for c in calls}.values()
                if c.key() not in self.keys and not is_memoised(c, self.hw, self.max_events)]
        if self.disk is not None:
            todo = [c for c in todo if not _from_disk(self.disk, c, self.hw, self.max_events)]
        by = cost or self.cost
        return sorted(todo, key=lambda c: -by(c))

    def _start(self, c: KernelCall, chain: bool = False) -> None:
        if self._pool is None:
            self._ctx = worker_pool(self.workers)
            self._pool = self._ctx.__enter__()
        self.keys.add(c.key())
        if chain and self.count is not None:
            fut = self._pool.submit(_simulate_counted, c, self.hw, self.max_events, self.count)
            self.counted.add(fut)
        else:
            fut = self._pool.submit(_simulate, c, self.hw, self.max_events)
        self.futures[fut] = c
        if chain:
            fut.add_done_callback(self._next)

    def estimates(self) -> dict[tuple[Any, ...], int]:
        """The simulation-limit estimates (`count`) of the speculated calls simulated so far, by call key: the same
        numbers this process would compute, counted by the worker from the GEMM families it builds for the
        simulation anyway (for `EventBudget.seed`)."""
        with self._lock:
            done = [(f, self.futures[f]) for f in self.counted if f.done() and not f.cancelled()]
        out: dict[tuple[Any, ...], int] = {}
        for f, c in done:
            if f.exception() is None and (events := f.result()[1]) is not None:
                out[c.key()] = events
        return out

    def submit(self, calls: Sequence[KernelCall]) -> None:
        calls = list(calls)
        with self._lock:
            self.speculative -= {c.key() for c in calls}  # asked for: needed
            queued, self._queued = self._queued, []  # every worker runs from now on
            for c in self._new([*calls, *queued]):
                self._start(c)

    def wait(self, needed: set[tuple[Any, ...]] | None = None) -> None:
        """Store every submitted call's result; a speculated call whose key is not in `needed` (every key of the
        captured plans) is cancelled, or its worker stopped, instead of waited for."""
        with self._lock:
            self._queued.clear()
            drop = {k for k in self.speculative if needed is not None and k not in needed}
            wanted = {f: c for f, c in self.futures.items() if c.key() not in drop}
            unwanted = [f for f, c in self.futures.items() if c.key() in drop]
        for f in unwanted:
            f.cancel()
        for fut in as_completed(wanted):
            got = fut.result()
            _store(wanted[fut], self.hw, self.max_events, got[0] if fut in self.counted else got, self.disk)
        running = any(not f.done() for f in unwanted)
        self.futures.clear()
        self.counted.clear()
        self.speculative.clear()
        if running and self._ctx is not None:  # a guess still simulating: stop the workers rather than wait
            ctx, self._ctx = self._ctx, None
            ctx.__exit__(_Dropped, _Dropped(), None)  # worker_pool stops its workers on an exception
        self.__exit__(None, None, None)
        self._pool = None


def _run(todo: list[KernelCall], hw: Any, max_events: int, workers: int | None, progress: bool,
         disk: DiskCache | None) -> None:
    """Simulate `todo` (none memoised), largest first, on `workers` processes when that pays."""
    if not todo:
        return
    todo = sorted(todo, key=lambda c: -sum(work(c)[:2]))  # largest first: the pool finishes together
    if workers is None:
        workers = auto_workers(todo)
    bar = _bar(len(todo), progress, f"simulating {len(todo)} kernels on {getattr(hw, 'name', hw)}")
    if workers > 1 and len(todo) > 1:
        with worker_pool(workers) as pool:  # workers stop with the command (Ctrl-C, SIGTERM, an error)
            futures = {pool.submit(_simulate, c, hw, max_events): c for c in todo}
            for fut in as_completed(futures):
                _store(futures[fut], hw, max_events, fut.result(), disk)
                bar.update(1)
    else:
        for c in todo:
            _store(c, hw, max_events, _simulate(c, hw, max_events), disk)
            bar.update(1)
    bar.close()


def _disk_key(disk: DiskCache, call: KernelCall, hw: Any, max_events: int) -> str:
    return disk.key(call.key(), str(getattr(hw, "name", "")), _hw_hash(hw), max_events)


def _from_disk(disk: DiskCache, call: KernelCall, hw: Any, max_events: int) -> bool:
    if call.kind is KernelKind.COLLECTIVE:  # costed in microseconds; a what-if system file may have changed
        return False
    hit = disk.get(_disk_key(disk, call, hw, max_events), Launches)
    if hit is not None:
        _MEMO[memo_key(call, hw, max_events)] = hit.launches
    return hit is not None


def _store(call: KernelCall, hw: Any, max_events: int, sims: tuple[KernelSim, ...], disk: DiskCache | None) -> None:
    _MEMO[memo_key(call, hw, max_events)] = sims
    if disk is not None and call.kind is not KernelKind.COLLECTIVE:
        disk.put(_disk_key(disk, call, hw, max_events), Launches(sims))


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _bar(total: int, enabled: bool, desc: str) -> Any:
    if not enabled or not total:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="kernel", leave=False)


def _simulate(call: KernelCall, hw: Any, max_events: int) -> tuple[KernelSim, ...]:
    """Every launch of `call`, each simulated in full or extrapolated (torchsim.prediction.repeats); a roofline
    (one flagged launch) only when no template serves the call."""
    if call.p("roofline", False):
        return (_roofline(call, hw, "op has no lowering (fallback=roofline)"),)
    if call.kind is KernelKind.COLLECTIVE:
        return (_collective(call, hw),)
    try:
        from torchsim.lowering.templates import build_kernels
    except ImportError:  # the template library is optional while it is being written
        return (_roofline(call, hw, "no template library"),)
    from torchsim.lowering.templates.varlen import NotModelledError
    from torchsim.prediction import repeats

    try:
        fam = repeats.unbuilt_family(call, hw) if max_events < EXACT else None
        if fam is not None and fam.full_cost > max_events and fam.dims:  # a large GEMM or causal attention, never
            # built in full (unless its samples disagree)
            res = repeats.simulate_kernel(fam, hw, exact_events=max_events)
            return (_from_result(fam, res, fam.events),)
        kgs = build_kernels(call, hw)
    except NotImplementedError:
        return (_roofline(call, hw, f"no {call.kind.value} template yet"),)
    except NotModelledError:  # e.g. varlen attention on Tensix: an error, never a roofline passed off as a kernel
        raise
    except ValueError as exc:  # the template exists but does not serve this shape/dtype on this profile
        return (_roofline(call, hw, f"no template serves this shape ({exc})"),)
    out = []
    for i, kg in enumerate(kgs):
        events = graph_events(kg)
        fam = repeats.call_family(call, hw, i, kg) if repeats.sim_cost(kg) > max_events else None
        res = repeats.simulate_kernel(fam if fam is not None and fam.dims else kg, hw, exact_events=max_events)
        out.append(_from_result(kg, res, events))
    return tuple(out)


def _simulate_counted(call: KernelCall, hw: Any, max_events: int, count: Callable[[KernelCall, Any, int], int | None]
                      ) -> tuple[tuple[KernelSim, ...], int | None]:
    """A speculated call's launches and its simulation-limit estimate `count(call, hw, max_events)`, counted first:
    the CTA templates the estimate writes are the ones the simulation reuses (torchsim.lowering.templates.gemm's
    memo)."""
    events = count(call, hw, max_events)
    return _simulate(call, hw, max_events), events


def graph_events(kg: Any) -> int:
    """Node executions a simulation of the kernel graph takes: nodes of each CTA class times its CTA count."""
    return int(sum(c.count * c.graph.num_nodes for c in kg.classes))


def _clock(r: Any) -> dict[str, Any]:
    return {"clock_hz": float(r.clock_hz), "clock_reason": str(getattr(r, "clock_reason", "")),
            "power_w": float(getattr(r, "power_w", 0.0))}


def _from_result(kg: Any, r: Any, events: int) -> KernelSim:
    attrs = dict(getattr(kg, "attrs", {}) or {})
    return KernelSim(template=str(attrs.pop("template", kg.name)), config=attrs, cycles=int(r.cycles),
                     time_s=float(r.time_s), flops=float(r.flops or kg.flops), dram_bytes=float(r.dram_bytes),
                     l2_hit_rate=float(r.l2_hit_rate), unit_util=dict(r.unit_busy), stalls=dict(r.stalls),
                     bound=str(r.bound), method=str(r.attrs.get("method", "exact")),
                     extrapolation=str(r.attrs.get("extrapolation", "")), events=int(r.attrs.get("sim_events", events)),
                     **_clock(r))


def _collective(call: KernelCall, hw: Any) -> KernelSim:
    """A tensor-parallel collective, by the system's kind: on a GPU system NCCL's pick of algorithm and protocol
    on its links, or a serving engine's custom all-reduce where the call allows it and it is faster, at the device
    time CUDA-graph replay sees (torchsim.sim.collectives; the channels' SMs are not taken from other kernels, which
    do not run beside it on the one stream); on a Tenstorrent mesh tt-metal's CCL op over its Ethernet links,
    traced (torchsim.sim.ccl)."""
    from torchsim.hwmodels.systems import SystemProfile, get_system
    from torchsim.sim.ccl import ccl_cost
    from torchsim.sim.collectives import collective_cost
    from torchsim.sim.custom_allreduce import STAGES as CUSTOM_STAGES

    system = get_system(call.p("system"))
    op, ranks, nbytes = call.p("op"), call.p("ranks"), call.p("nbytes")
    if isinstance(system, SystemProfile):
        cost = collective_cost(op, system, ranks, nbytes, custom_ar=bool(call.p("custom_ar", False)))
        lib = "custom-allreduce" if cost.algorithm in CUSTOM_STAGES else "nccl"
    else:
        ax = call.p("axis", -1)  # a 2D mesh's cluster axis, where the layout names it
        cost, lib = ccl_cost(op, system, ranks, nbytes, axis=None if ax < 0 else int(ax)), "ttnn"
    clock = float(getattr(hw, "clock_hz_value", 1e9))
    bound = "latency" if cost.latency_s >= cost.time_s / 2 else "interconnect bandwidth"
    return KernelSim(template=f"{lib}/{cost.collective}/{cost.algorithm}/{cost.protocol}",
                     config={"algorithm": cost.algorithm, "protocol": cost.protocol, "channels": cost.channels,
                             "busbw_GBps": round(cost.busbw_bytes_per_s / 1e9, 3), "system": cost.system},
                     cycles=int(round(cost.time_s * clock)), time_s=cost.time_s, flops=0.0, dram_bytes=0.0,
                     l2_hit_rate=0.0, bound=bound, method="collective model (torchsim.sim.collectives)",
                     clock_hz=clock, clock_reason="a collective: link time, not SM cycles")


def _roofline(call: KernelCall, hw: Any, why: str) -> KernelSim:
    r = roofline(call, hw)
    clock = float(getattr(hw, "clock_hz_value", 1e9))
    return KernelSim(template="roofline", config={}, cycles=int(round(r.time_s * clock)), time_s=r.time_s,
                     flops=r.flops, dram_bytes=r.dram_bytes, l2_hit_rate=0.0, bound=r.bound, fallback=True,
                     method=f"roofline: {why}", clock_hz=clock,
                     clock_reason=f"roofline at the profile clock {clock / 1e9:.3f} GHz (no power model applied)")
