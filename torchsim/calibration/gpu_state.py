"""What the GPU did while a microbenchmark ran: SM clock, board power and clock-event reasons read through NVML.

A `Sampler` polls NVML (the `nvidia-ml-py` package, module `pynvml`) from a background thread while a measurement
runs, so each `torchsim microbench` row can say at what clock and power it was measured, and the sustained runs
can measure the clock a power-limited kernel settles at (what torchsim.sim.sustained predicts). `limits` reads the
board's documented envelope (maximum SM clock, enforced power limit). Where NVML is missing or refuses, both
return nothing and the measurements go on without them: a reading is never invented.

NVML's board power is the driver's running average (about a second on recent GPUs), so a power reading is
meaningful only for loops that run for a second or more; the SM clock is instantaneous.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any

# NVML clock-event ("throttle") reason bits (nvml.h, nvmlClocksEventReason*), named as nvidia-smi names them
REASONS = (
    (0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"), (0x8, "hw_slowdown"),
    (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"), (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"), (0x100, "display_clock_setting"),
)


def _nvml(index: int) -> tuple[Any, Any] | None:
    """(pynvml, device handle), or None where NVML cannot be used."""
    try:
        import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]
        pynvml.nvmlInit()
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # noqa: BLE001 - no package, no driver, no permission: no reading, never a failure
        return None


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in REASONS if mask & bit]


@dataclass(frozen=True)
class Reading:
    """The median of a sampler's readings over a window."""

    samples: int
    sm_clock_mhz: float
    power_w: float | None  # None where the board does not report power
    reasons: tuple[str, ...]  # every clock-event reason seen in the window, in NVML's bit order
    seconds: float  # the window's length

    def note(self) -> str:
        power = f", board power {self.power_w:.0f} W" if self.power_w is not None else ""
        why = f", clock-event reasons: {'+'.join(self.reasons)}" if self.reasons else ""
        return f"SM clock {self.sm_clock_mhz:.0f} MHz{power} (NVML, median of {self.samples} samples{why})"


class Sampler:
    """Background NVML polling while a `with` block runs. `reading(after_s)` summarises the samples taken at
    least `after_s` seconds into the block (None when there are none, or when NVML is not available)."""

    def __init__(self, index: int = 0, period_s: float = 0.005) -> None:
        if period_s <= 0:
            raise ValueError(f"sampler period must be > 0, got {period_s}")
        self._nvml = _nvml(index)
        self._period = period_s
        self._samples: list[tuple[float, float, float | None, int]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    @property
    def available(self) -> bool:
        return self._nvml is not None

    def _poll(self) -> None:
        assert self._nvml is not None
        nv, h = self._nvml
        while not self._stop.is_set():
            try:
                clock = float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
                try:
                    power: float | None = nv.nvmlDeviceGetPowerUsage(h) / 1000.0
                except Exception:  # noqa: BLE001 - a board without a power sensor
                    power = None
                try:
                    mask = int(nv.nvmlDeviceGetCurrentClocksEventReasons(h))
                except Exception:  # noqa: BLE001 - older bindings name it ...ThrottleReasons
                    try:
                        mask = int(nv.nvmlDeviceGetCurrentClocksThrottleReasons(h))
                    except Exception:  # noqa: BLE001
                        mask = 0
                self._samples.append((time.perf_counter() - self._t0, clock, power, mask))
            except Exception:  # noqa: BLE001 - NVML stopped answering: keep what was read
                return
            self._stop.wait(self._period)

    def __enter__(self) -> Sampler:
        self._samples.clear()
        self._stop.clear()
        self._t0 = time.perf_counter()
        if self._nvml is not None:
            self._thread = threading.Thread(target=self._poll, name="torchsim-nvml", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None

    def reading(self, after_s: float = 0.0) -> Reading | None:
        window = [s for s in self._samples if s[0] >= after_s]
        if not window:
            return None
        powers = [p for _, _, p, _ in window if p is not None]
        mask = 0
        for *_, m in window:
            mask |= m
        return Reading(len(window), statistics.median(c for _, c, _, _ in window),
                       statistics.median(powers) if powers else None, tuple(reason_names(mask)),
                       window[-1][0] - window[0][0])


def limits(index: int = 0) -> dict[str, float]:
    """The board's envelope as NVML reports it: max_sm_clock_mhz, max_mem_clock_mhz, power_limit_w (the enforced
    limit), default_power_limit_w; only the fields NVML answered."""
    got = _nvml(index)
    if got is None:
        return {}
    nv, h = got
    out: dict[str, float] = {}
    for key, call in (("max_sm_clock_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)),
                      ("max_mem_clock_mhz", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM)),
                      ("power_limit_w", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0),
                      ("default_power_limit_w", lambda: nv.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000.0)):
        try:
            out[key] = float(call())
        except Exception:  # noqa: BLE001 - a field this board or driver does not report
            continue
    return out


def idle_power(index: int = 0, seconds: float = 2.0) -> Reading | None:
    """The board's power with nothing running, before the measuring process uses the GPU (call it first): the
    static power of torchsim's power model (`static_power_w`). None where NVML cannot read it."""
    sampler = Sampler(index, period_s=0.02)
    if not sampler.available:
        return None
    with sampler:
        time.sleep(seconds)
    return sampler.reading()
