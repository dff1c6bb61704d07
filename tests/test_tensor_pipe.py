"""Tensor-pipe sensitivity: longer latency never helps; width helps until it exceeds warps x chains in flight."""

from __future__ import annotations

from torchsim.studies.tensor_pipe import knee, run


def test_width_knee_sits_at_warps_times_chains() -> None:
    pts = run(latencies=(64, 128), widths=(2, 4, 8, 16), warps=4, chains=2)
    by = {(p.latency, p.width): p for p in pts}
    for lat in (64, 128):
        assert by[(lat, 2)].cycles > 1.5 * by[(lat, 4)].cycles  # below the knee width pays almost linearly
        gain_before = (by[(lat, 4)].cycles - by[(lat, 8)].cycles) / by[(lat, 4)].cycles
        gain_past = (by[(lat, 8)].cycles - by[(lat, 16)].cycles) / by[(lat, 8)].cycles
        assert gain_past < 0.3 * gain_before  # doubling width past 4 x 2 = 8 in flight buys little
        assert knee(pts, lat, gain=0.15) == 8
    for w in (2, 4, 8, 16):
        assert by[(128, w)].cycles >= by[(64, w)].cycles  # a deeper pipe never makes it faster
        assert by[(128, w)].stall_cycles >= by[(64, w)].stall_cycles
