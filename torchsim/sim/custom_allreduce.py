"""Serving engines' custom all-reduce kernels on NVLink systems: one-stage and two-stage (vLLM's
custom_all_reduce.cuh, cross_device_reduce_1stage / _2stage; TensorRT-LLM's one-shot / two-shot allreduce are the
same two algorithms).

Every GPU maps its peers' buffers (CUDA IPC) and reads them over NVLink with its own SMs:

- one stage: each GPU reads the whole message from each of the n - 1 peers and sums: (n - 1) x S per GPU, one
  barrier (flags written to every peer) before and after;
- two stages: each GPU reads its 1/n slice from every peer and sums it (a reduce-scatter), then reads the other
  slices' sums back (an all-gather): 2 (n - 1) / n x S per GPU, a barrier between the stages as well.

t = latency + traffic / (efficiency x the GPU's NVLink bandwidth), with the latency (launch, the barriers) and the
efficiency (what peer reads sustain of the link) of each stage calibrated on vLLM's benchmark on H100
(scripts/calibrate_custom_allreduce.py, rows in torchsim/validation/custom_allreduce_published.csv). Other NVLink
systems scale the bandwidth with their links and keep H100's latencies (assumed). A PCIe system has no custom
all-reduce here (vLLM disables it beyond two PCIe GPUs). Messages above `MAX_BYTES` (vLLM's default max_size,
8 MiB) are left to NCCL.
"""

from __future__ import annotations

import csv
from pathlib import Path

from torchsim.hwmodels.quantity import Quantity, assumed, calibrated, doc

PUBLISHED = Path(__file__).resolve().parents[1] / "validation" / "custom_allreduce_published.csv"

CALIBRATION = ("scripts/calibrate_custom_allreduce.py: least squares through vllm-project/vllm PR #24111's H100 "
               "rows (torchsim/validation/custom_allreduce_published.csv CAR-001..036, 4 and 6 GPUs, 0.5-4 MiB)")
STAGES = {"oneshot": "ca_1stage", "twoshot": "ca_2stage"}  # torchsim's names -> vLLM's benchmark labels
LATENCY_S: dict[str, Quantity] = {
    "oneshot": calibrated(4.54e-6, "s", CALIBRATION + ", ca_1stage"),
    "twoshot": calibrated(12.58e-6, "s", CALIBRATION + ", ca_2stage"),
}
EFFICIENCY: dict[str, Quantity] = {
    "oneshot": calibrated(0.891, "fraction", CALIBRATION + ", ca_1stage"),
    "twoshot": calibrated(0.672, "fraction", CALIBRATION + ", ca_2stage"),
}
CTAS = assumed(36, "CTAs", "assumed: vLLM's custom all-reduce launches at most its default block_limit of 36 CTAs "
               "(csrc/custom_all_reduce.cuh; not re-read): the SMs it occupies while it runs")
MAX_BYTES = doc(8 * 2**20, "B", "vllm-project/vllm vllm/distributed/device_communicators/custom_all_reduce.py "
                "CustomAllreduce(max_size=8192 * 1024): larger inputs go to NCCL")


def traffic_bytes(stage: str, ranks: int, nbytes: int) -> float:
    """Bytes each GPU reads from its peers for one all-reduce of `nbytes`."""
    if stage == "oneshot":
        return (ranks - 1) * float(nbytes)
    if stage == "twoshot":
        return 2.0 * (ranks - 1) / ranks * nbytes
    raise ValueError(f"unknown custom all-reduce stage {stage!r}; valid: {', '.join(STAGES)}")


def available(system: object, ranks: int, nbytes: int) -> bool:
    """A custom all-reduce can run: more than one GPU, all on NVLink (an NVSwitch fabric), within MAX_BYTES."""
    return ranks > 1 and getattr(system, "fabric", "") == "nvswitch" and nbytes <= MAX_BYTES.value


def custom_allreduce_time(stage: str, system: object, ranks: int, nbytes: int) -> float:
    """Device time of one custom all-reduce of `nbytes` per rank over `ranks` GPUs of `system`, seconds."""
    bw = float(system.device_bytes_per_s()) * float(EFFICIENCY[stage].value)  # type: ignore[attr-defined]
    return float(LATENCY_S[stage].value) + traffic_bytes(stage, ranks, nbytes) / bw


__all__ = ["CTAS", "EFFICIENCY", "LATENCY_S", "MAX_BYTES", "STAGES", "available", "custom_allreduce_time",
           "traffic_bytes"]


def published_rows() -> list[dict[str, str]]:
    """The rows the stages are calibrated and checked on (`PUBLISHED`): vLLM's device-communicator benchmark on
    H100, custom all-reduce and pynccl, one dict per row."""
    with PUBLISHED.open() as f:
        return list(csv.DictReader(f))
