"""Prints MoE routing counts from every source and times HF capture on meta (issue 4, models part).

Run: python benchmarks/moe_routing_hf_capture.py [--layers 32]
1. routing recorded by router hooks on real token inputs (mixtral-tiny, CPU, random-init weights);
2. the same counts written to and read back from JSON and Parquet;
3. balanced and skewed patterns for mixtral-8x7b at 2048 tokens;
4. HF LlamaForCausalLM / MixtralForCausalLM from torchsim's llama3-8b / mixtral-8x7b configs exported on the
   meta device (build and export times, node counts, peak RSS), and whether the GEMM / attention / grouped-GEMM
   operand shapes equal those of torchsim's own models;
5. the serving kernel plans of the HF models (through HFSegmented, one layer captured and reused) and of
   torchsim's own models, compared call by call (kind, shapes, name, layer), with the capture+plan times.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch

from torchsim.models.mixtral import build_mixtral
from torchsim.models.registry import build_model, get_config
from torchsim.models.routing_hook import record_routing
from torchsim.models.routing_io import load_routing, save_routing
from torchsim.models.routing_synthetic import synthetic_routing

KERNEL_OPS = (torch.ops.aten.linear.default, torch.ops.aten.scaled_dot_product_attention.default,
              torch.ops.aten._grouped_mm.default)


def signature(ep: torch.export.ExportedProgram) -> Counter[tuple[object, ...]]:
    sig: Counter[tuple[object, ...]] = Counter()
    for n in ep.graph.nodes:
        if n.target in KERNEL_OPS:
            shapes = tuple(tuple(a.meta["val"].shape) for a in n.args[:3] if isinstance(a, torch.fx.Node))
            sig[(str(n.target), shapes)] += 1
    return sig


def routing_sources() -> None:
    model = build_mixtral("mixtral-tiny", device="cpu", dtype=torch.float32, seed=0)
    ids = torch.randint(0, model.config.vocab_size, (4, 64), generator=torch.Generator().manual_seed(1))
    t = time.perf_counter()
    recorded = record_routing(model, [ids], source="hook:mixtral-tiny")
    print(f"[1] hook on real inputs ({time.perf_counter() - t:.3f} s)\n{recorded.describe()}")
    for i, row in enumerate(recorded.counts):
        print(f"    layer {i}: sum {sum(row)} == tokens x top_k = {recorded.tokens} x {recorded.top_k}: "
              f"{sum(row) == recorded.tokens * recorded.top_k}")
    with tempfile.TemporaryDirectory() as tmp:
        for suffix in (".json", ".parquet"):
            path = save_routing(recorded, Path(tmp) / f"routing{suffix}", model="mixtral-tiny")
            loaded = load_routing(path)
            same = loaded.counts == recorded.counts
            print(f"[2] loaded from {suffix}: {[list(r) for r in loaded.counts]} same as recorded: {same}")
    cfg = get_config("mixtral-8x7b")
    for name in ("balanced", "skewed"):
        rc = synthetic_routing(name, num_layers=cfg.num_hidden_layers, num_experts=cfg.num_local_experts,
                               top_k=cfg.num_experts_per_tok, tokens=2048)
        print(f"[3] {name:8s} mixtral-8x7b, 2048 tokens, layer 0: {list(rc.layer(0))} "
              f"sum {sum(rc.layer(0))} max/mean {rc.imbalance(0):.2f}")


def hf_capture(layers: int) -> None:
    from dataclasses import replace

    from torchsim.models import hf

    t = time.perf_counter()
    transformers = hf.require_transformers()
    print(f"[4] transformers {transformers.__version__}, torch {torch.__version__}; import "
          f"{time.perf_counter() - t:.2f} s")
    for name, batch, q_len, past in (("llama3-8b", 1, 2048, 0), ("llama3-8b", 1, 1, 1024),
                                     ("mixtral-8x7b", 1, 2048, 0), ("mixtral-8x7b", 1, 1, 1024)):
        base = get_config(name)
        cfg = replace(base, num_hidden_layers=layers)
        t = time.perf_counter()
        model = hf.build_hf_model(cfg)
        built = time.perf_counter() - t
        t = time.perf_counter()
        ep = hf.export_hf(model, batch, q_len, past)
        exported = time.perf_counter() - t
        own = build_model(cfg)
        t = time.perf_counter()
        ep_own = torch.export.export(own, (), kwargs=own.step_inputs(batch, q_len, past))
        own_s = time.perf_counter() - t
        same = signature(ep) == signature(ep_own)
        print(f"    HF {type(model).__name__} {name} x{layers} layers, batch {batch}, q {q_len}, past {past}: build "
              f"{built:.2f} s, export {exported:.2f} s ({len(ep.graph.nodes)} nodes); torchsim's own export "
              f"{own_s:.2f} s; same GEMM/attention/grouped-GEMM shapes: {same}")
    print(f"    peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


def plan_equivalence(layers: int) -> None:
    from dataclasses import replace

    from torchsim.lowering import plan
    from torchsim.models.hf import build_hf_model
    from torchsim.models.hf_segments import HFSegmented
    plan._plan_graph.cache_clear()
    for name, q_len, past in (("llama3-8b", 2048, 0), ("llama3-8b", 1, 1024), ("mixtral-8x7b", 2048, 0),
                              ("mixtral-8x7b", 1, 1024)):
        cfg = replace(get_config(name), num_hidden_layers=layers)
        t = time.perf_counter()
        ours = plan.plan_model(build_model(cfg), batch=1, q_len=q_len, past_len=past)
        own_s = time.perf_counter() - t
        t = time.perf_counter()
        theirs = plan.plan_model(HFSegmented(build_hf_model(cfg)), batch=1, q_len=q_len, past_len=past)
        hf_s = time.perf_counter() - t
        same = [(c.kind, c.params, c.name, c.layer) for c in ours.calls] == [
            (c.kind, c.params, c.name, c.layer) for c in theirs.calls]
        print(f"[5] {name} x{layers}, q {q_len}, past {past}: serving plan {len(ours.calls)} kernels (torchsim "
              f"{own_s:.2f} s) vs {len(theirs.calls)} (HF {hf_s:.2f} s); identical calls: {same}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=32, help="decoder layers to export (default 32)")
    layers = parser.parse_args().layers
    routing_sources()
    hf_capture(layers)
    plan_equivalence(layers)
