"""Reference kernels for the engine-regression test and the golden file they are checked against.

The engine must give bit-identical results on these cases before and after a speed change. The golden JSON
(tests/data/engine_golden.json) holds, per case, everything the engine reports: cycles, per-unit busy, stalls,
L2/L1 statistics, node events, every numeric attr, and a SHA-256 over the NodeRecords and CTA placement.

Regenerate it (only when a change is MEANT to alter results) with

    python -m tests.engine_reference --write

`python -m tests.engine_reference` (no flag) prints the cases that differ from the stored file and their time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchsim.graph import DType
from torchsim.hwmodels import get_profile
from torchsim.lowering.kernel_call import KernelCall, KernelKind
from torchsim.lowering.templates import build_kernel, build_kernels, gemm
from torchsim.sim import KernelResult, simulate

GOLDEN = Path(__file__).parent / "data" / "engine_golden.json"


def _gemm(hw_name: str, m: int, n: int, k: int, record: bool = False) -> list[KernelResult]:
    hw = get_profile(hw_name)
    return [simulate(gemm(m, n, k, DType.BF16, hw), hw, record=record)]


def _call(hw_name: str, call: KernelCall, record: bool = False, **kw: Any) -> list[KernelResult]:
    hw = get_profile(hw_name)
    return [simulate(kg, hw, record=record, **kw) for kg in build_kernels(call, hw)]


def _fa3(policies: tuple[str | None, ...] = (None,)) -> list[KernelResult]:
    call = KernelCall.make(KernelKind.ATTENTION_PREFILL, batch=1, heads_q=8, heads_kv=8, seq_q=512, seq_kv=512,
                           head_dim=128, causal=True)
    hw = get_profile("h100-sxm")
    return [simulate(build_kernel(call, hw), hw, record=True, policy=p) for p in policies]


def _tensix() -> list[KernelResult]:
    hw = get_profile("wormhole-n150")
    call = KernelCall.make(KernelKind.GEMM, DType.BFP8_B, m=512, n=512, k=512)
    return [simulate(build_kernel(call, hw), hw, record=True)]


def _ccws() -> list[KernelResult]:
    from torchsim.studies.policies import loop_kernel, one_sm_profile

    hw = one_sm_profile()
    return [simulate(loop_kernel(True), hw, policy=p, max_sms=1, record=p == "ccws")
            for p in ("ccws", "two-level", "rr", "oldest")]


def _cluster() -> list[KernelResult]:
    from torchsim.sim.noc import NocConfig, Placement, Topology
    from torchsim.studies.cluster import GPC_SMS, fused_block, gpc_profile

    hw = gpc_profile()
    return [simulate(fused_block(4, heads=4, kv=1024, dsmem=True), hw, max_sms=GPC_SMS, record=True,
                     noc=NocConfig(Topology.MESH, Placement.TOPOLOGY_AWARE)),
            simulate(fused_block(2, heads=4, kv=1024, dsmem=False), hw, max_sms=GPC_SMS)]


CASES: dict[str, Callable[[], list[KernelResult]]] = {
    "h100_gemm_1024": lambda: _gemm("h100-sxm", 1024, 1024, 1024, record=True),
    "h100_gemm_2048x1024x512": lambda: _gemm("h100-sxm", 2048, 1024, 512, record=True),
    "a100_sm80_gemm_512": lambda: _gemm("a100-sxm", 512, 512, 512, record=True),
    "b200_tcgen05_gemm_1024": lambda: _gemm("b200", 1024, 1024, 1024, record=True),
    "h100_fa3_prefill_512": _fa3,
    "h100_fa3_prefill_512_policies": lambda: _fa3(("rr", "oldest", "two-level", "ccws")),
    "h100_fa3_prefill_2k_waves": lambda: _call("h100-sxm", KernelCall.make(
        KernelKind.ATTENTION_PREFILL, batch=1, heads_q=16, heads_kv=4, seq_q=2048, seq_kv=2048, head_dim=128,
        causal=True), record=True),
    "a100_sm80_gemm_waves": lambda: _gemm("a100-sxm", 4096, 4096, 128, record=True),
    "h100_rmsnorm_waves": lambda: _call("h100-sxm", KernelCall.make(KernelKind.RMSNORM, rows=2048, hidden=4096),
                                        record=True),
    "h100_flash_decode": lambda: _call("h100-sxm", KernelCall.make(
        KernelKind.ATTENTION_DECODE, batch=2, heads_q=32, heads_kv=8, seq_q=1, seq_kv=2048, head_dim=128,
        paged=True), record=True),
    "h100_grouped_gemm": lambda: _call("h100-sxm", KernelCall.make(
        KernelKind.GROUPED_GEMM, tokens_per_expert=(96, 40, 45, 75), n=1024, k=512, epilogue="silu"), record=True),
    "a100_rmsnorm_no_l1": lambda: _call("a100-sxm", KernelCall.make(KernelKind.RMSNORM, rows=64, hidden=4096),
                                        record=True, l1=False),
    "h100_rmsnorm": lambda: _call("h100-sxm", KernelCall.make(KernelKind.ADD_RMSNORM, rows=256, hidden=4096),
                                  record=True),
    "wormhole_gemm_512": _tensix,
    "ccws_reuse_loop": _ccws,
    "cluster_fused_block": _cluster,
}


def _plain(x: Any) -> Any:
    """JSON-ready copy: tuples as lists, keys as strings, anything else non-JSON as its repr."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, (bool, int, float, str)) or x is None:
        return x
    return repr(x)


def fingerprint(r: KernelResult) -> dict[str, Any]:
    """Everything a run reports except its wall time, with the NodeRecords folded into one digest."""
    attrs = {k: v for k, v in r.attrs.items() if k != "wall_s"}
    rec = hashlib.sha256(repr((r.records, r.cta_sm)).encode()).hexdigest() if r.records is not None else None
    return _plain({
        "name": r.name, "hw": r.hw, "cycles": r.cycles, "flops": r.flops, "dram_bytes": r.dram_bytes,
        "l2_hit_rate": r.l2_hit_rate, "unit_busy": r.unit_busy, "stalls": r.stalls, "bound": r.bound,
        "waves": r.waves, "ctas": r.ctas, "ctas_per_sm": r.ctas_per_sm, "node_events": r.node_events,
        "attrs": attrs, "records": len(r.records) if r.records is not None else None, "records_sha256": rec,
    })


def run_case(name: str) -> list[dict[str, Any]]:
    return [fingerprint(r) for r in CASES[name]()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help="overwrite the golden file with the current engine's results")
    args = ap.parse_args()
    stored = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    out: dict[str, Any] = {}
    bad = 0
    for name in CASES:
        t0 = time.perf_counter()
        out[name] = json.loads(json.dumps(run_case(name)))
        same = stored.get(name) == out[name]
        bad += not same
        print(f"{name:<28} {time.perf_counter() - t0:6.2f} s  {'same' if same else 'DIFFERS'}")
    if args.write:
        GOLDEN.parent.mkdir(exist_ok=True)
        body = ",\n".join(f" {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in out.items())
        GOLDEN.write_text("{\n" + body + "\n}\n")
        print(f"wrote {GOLDEN}")
    elif bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
