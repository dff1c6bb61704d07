"""torchsim's eager-preset predictions of HF Llama-3-8B beside a measurement of it on a real GPU, kernel group by
kernel group: what `benchmarks/measure_llama_gpu.py` wrote.

    python benchmarks/validate_hf_gpu.py [--json torchsim/validation/measured/h200-2026-12-04/llama_gpu.json]

For each measured prefill (batch x prompt): the measured time (CUDA events around the HF forward: kernels plus
whatever the host adds) beside the predicted TTFT of `predict(llama3-8b, preset="eager", decode_steps=0)` on the
profile the GPU name maps to, and, where the measurement kept a per-kernel profile, the device time per kernel
group (GEMM, attention, the rest: elementwise, reductions, copies) measured (torch.profiler's CUDA activity)
and predicted (the sum of the kernels' simulated durations). For the eager decode step: the measured kernel sum
beside the predicted step's kernels; its measured wall time is the host's (Python issuing ~1500 kernels), not
the GPU's, and is shown only. A report, not a test.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from torchsim.models.registry import get_config
from torchsim.prediction.pipeline import predict
from torchsim.validation.published import HW_MAP

DEFAULT = Path(__file__).resolve().parents[1] / "torchsim/validation/measured/h200-2026-12-04/llama_gpu.json"
GROUPS = ("gemm", "attention", "other")


def measured_group(kernel_name: str) -> str:
    n = kernel_name.lower()
    if re.search(r"nvjet|gemm|cutlass|xmma|splitk", n):
        return "gemm"
    if re.search(r"flash|sdpa|fmha", n):
        return "attention"
    return "other"


def predicted_group(kind: str) -> str:
    return "gemm" if kind == "gemm" else "attention" if kind.startswith("attention") or kind == "decode" else "other"


def groups_measured(profile: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for r in profile["top"]:
        out[measured_group(r["kernel"])] += r["device_us"] / 1e3
    out["other"] += profile["device_us_total"] / 1e3 - sum(out.values())  # kernels past the kept top list
    return out


def groups_predicted(p: Any, phase: str) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for k in p.kernels:
        if k.phase == phase:
            out[predicted_group(k.kind)] += k.duration_us / 1e3 * k.weight
    return out


def err(pred: float, meas: float) -> str:
    return f"{100 * (pred / meas - 1):+6.1f}%" if meas > 0 else "   n/a"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=DEFAULT)
    args = ap.parse_args()
    doc = json.loads(args.json.read_text())
    hw = next((prof for key, prof, _ in HW_MAP if key in doc["gpu"]), None)
    if hw is None:
        raise SystemExit(f"{args.json}: GPU {doc['gpu']!r} maps to no torchsim profile")
    cfg = get_config("llama3-8b")
    if doc["layers"] != cfg.num_hidden_layers:
        from dataclasses import replace
        cfg = replace(cfg, num_hidden_layers=doc["layers"])
    print(f"{doc['model']} on {doc['gpu']} (profile {hw}); torch {doc['torch']}, transformers {doc['transformers']}")
    print(f"{'case':<14} {'measured ms':>12} {'predicted':>10} {'err':>7}   per group, measured / predicted ms (err)")
    errs = []
    t0 = time.time()
    for e in doc["prefill"]:
        if "time_ms" not in e:
            print(f"b{e['batch']} p{e['prompt']}: not measured ({e.get('error', '')})")
            continue
        p = predict(cfg, hw, preset="eager", batch=e["batch"], prompt_len=e["prompt"], decode_steps=0)
        pred = p.ttft_s * 1e3
        errs.append(abs(pred / e["time_ms"] - 1))
        tail = ""
        if "profile" in e:
            gm, gp = groups_measured(e["profile"]), groups_predicted(p, "prefill")
            tail = "  ".join(f"{g} {gm[g]:.2f}/{gp[g]:.2f} ({err(gp[g], gm[g]).strip()})" for g in GROUPS)
            tail += f"  non-kernel {e['time_ms'] - e['profile']['device_us_total'] / 1e3:.2f} ms measured"
        case = f"b{e['batch']} p{e['prompt']}"
        print(f"{case:<14} {e['time_ms']:>12.2f} {pred:>10.2f} "
              f"{err(pred, e['time_ms'])}   {tail}", flush=True)
    for d in doc.get("decode", []):
        p = predict(cfg, hw, preset="eager", batch=d["batch"], prompt_len=d["kv_start"], decode_steps=1)
        gm, gp = groups_measured(d["profile"]), groups_predicted(p, "decode")
        meas, pred = d["profile"]["device_us_total"] / 1e3, sum(gp.values())
        print(f"decode b{d['batch']} kv{d['kv_start']}: kernels {meas:.2f} ms measured / {pred:.2f} predicted "
              f"({err(pred, meas).strip()}); "
              + "  ".join(f"{g} {gm[g]:.2f}/{gp[g]:.2f} ({err(gp[g], gm[g]).strip()})" for g in GROUPS)
              + f"; the measured step took {d['time_ms']:.1f} ms (the host's Python), predicted with eager launch "
              f"gaps {p.decode_step_s[0] * 1e3:.2f} ms")
    if errs:
        print(f"\nprefill MAPE {100 * sum(errs) / len(errs):.1f}% over {len(errs)} cases ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
