"""Capture: a PyTorch model on the meta device -> OpGraphs of ATen ops with shapes, dtypes and origins.

First stage of lowering (capture -> plan -> templates). A model is captured in segments (head, decoder
layers, tail; `capture_segments` on the model). Layers with the same structure are exported once: identity
is proved from the modules' classes, parameter shapes and plain attributes, and by exporting the first and
the last layer of each group and comparing their op signatures.
"""

from __future__ import annotations

import contextlib
import operator
import re
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from torchsim.lowering.opgraph import WINDOW_KEY, OpGraph, OpNode, TensorSpec, spec_of

_SKIP = {torch.ops.aten._assert_tensor_metadata.default}
_TORCH_DIR = str(Path(torch.__file__).parent)
# Plain attributes that index a layer rather than describe it (HF keeps `layer_idx` on attention modules).
_INDEX_ATTRS = frozenset({"layer_idx", "layer_id", "layer_index", "layer_number"})
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')


class CaptureError(RuntimeError):
    """torch.export failed on a segment; the message names the segment and its module class."""


class UnsupportedFamilyError(ValueError):
    """A family built from an HF config.json (models.hf_family) that torchsim cannot capture: the message names
    the file, its model_type and the capture's failure (a limitation for that input, not a crash)."""


@dataclass(frozen=True)
class SegmentCapture:
    """One segment of one step: its module path, layer, op graph and which segment's export it reuses."""

    path: str
    layer: int | None
    graph: OpGraph
    reused_from: str  # path of the segment whose export this is ("" = exported itself)


@dataclass(frozen=True)
class ModelCapture:
    """A whole forward step, captured: segments in execution order plus how layer reuse was justified."""

    batch: int
    q_len: int
    past_len: int
    segments: tuple[SegmentCapture, ...]
    proofs: tuple[str, ...]
    exports: int  # torch.export calls this capture made (0 when every segment came from the memo)
    seconds: float

    @property
    def phase(self) -> str:
        return "decode" if self.q_len == 1 and self.past_len > 0 else "prefill"

    def num_ops(self) -> int:
        return sum(len(s.graph.nodes) for s in self.segments)


def capture_module(module: nn.Module, args: tuple[Any, ...], *, name: str = "") -> OpGraph:
    """Export `module(*args)` (meta tensors) with torch.export and convert it to an OpGraph.

    >>> lin = torch.nn.Linear(8, 4, device="meta")
    >>> g = capture_module(lin, (torch.empty(2, 8, device="meta"),))
    >>> [(n.target.__name__, n.out[0].shape) for n in g.nodes]
    [('linear.default', (2, 4))]
    """
    label = name or type(module).__name__
    try:
        with _signals_held():
            ep = torch.export.export(module, args)
    except Exception as exc:  # torch raises many types; name the segment and keep the cause
        _reraise_interrupt(exc)
        raise CaptureError(f"torch.export of {label} ({type(module).__qualname__}) failed: "
                           f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
    try:
        return _to_opgraph(ep, label, _windows(module))
    except ValueError as exc:  # an op graph torch.export gave that torchsim cannot read (a new higher-order op)
        raise CaptureError(f"converting the export of {label} ({type(module).__qualname__}): {exc}") from exc


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until torch.export returns, then deliver them to the handlers they were meant for.

    A KeyboardInterrupt raised inside torch.export can land in Python code that its C++ dispatcher called, which
    then aborts the process (seen in CI: exit -6, SIGABRT, with the export's stack on stderr) instead of unwinding;
    one export takes about a second, so holding the signal that long keeps the command's stop-within-seconds
    contract. Only in the main thread, and only for Python handlers (a signal ignored or defaulted stays so)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {int(s): signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    pending: list[int] = []
    held = [s for s, h in previous.items() if callable(h)]
    for s in held:
        signal.signal(s, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for s in held:
            signal.signal(s, previous[s])
        if pending:
            handler = previous[pending[0]]
            assert callable(handler)
            handler(pending[0], None)  # raises the command's KeyboardInterrupt / Terminated here


def _reraise_interrupt(exc: BaseException) -> None:
    """Re-raise a Ctrl-C that torch's own cleanup masked.

    A KeyboardInterrupt that lands inside torch.export unwinds through its context managers, and one of them can
    raise on the way out (seen: "AssertionError: Trying to pop empty mode stack"); the interrupt is then only the
    new exception's __context__. That run was interrupted, not a failed capture.
    """
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            raise cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__


# ---- sliding windows ---------------------------------------------------------------------------------------
# SDPA has no window argument, so the window of an attention call is the one its module declares: the int
# attribute `sliding_window` of the innermost module on its path that has the attribute (None there: no
# window). HF attention modules of per-layer families carry it (Qwen2, Gemma-2, gpt-oss); models.hf_segments
# and models.decoder set it from the config per layer. Capture records it on the SDPA node (WINDOW_KEY).
_SDPA = torch.ops.aten.scaled_dot_product_attention.default


def _windows(module: nn.Module) -> dict[str, int | None]:
    """Module path -> declared sliding window (None: declared absent), for every module that has the attribute."""
    out: dict[str, int | None] = {}
    for path, m in module.named_modules():
        if hasattr(m, WINDOW_KEY):
            w = getattr(m, WINDOW_KEY)
            out[path] = w if isinstance(w, int) and not isinstance(w, bool) and w > 0 else None
    return out


def _window_of(windows: dict[str, int | None], path: str) -> int | None:
    """The window of the innermost module on `path` (or above it) that declares one."""
    parts = path.split(".") if path else []
    for i in range(len(parts), -1, -1):
        p = ".".join(parts[:i])
        if p in windows:
            return windows[p]
    return None


# torch.export wraps a region that changes the grad mode (`with torch.no_grad():` inside a forward, as PhiMoE's
# router does) or autocast in a higher-order op whose body is a submodule (a get_attr node); its ops run as if
# inline, so capture inlines the body: its placeholders are the operands, and the HOP's getitem outputs are the
# body's outputs.
_WRAP_HOPS = frozenset({"wrap_with_set_grad_enabled", "wrap_with_autocast"})


def _wrap_body(n: Any, gm: Any) -> tuple[Any, list[Any]] | None:
    """(body graph module, operand nodes) of a grad-mode / autocast wrapper HOP node, or None."""
    target = n.target
    name = target.name() if callable(getattr(target, "name", None)) else getattr(target, "__name__", "")
    if n.op != "call_function" or name not in _WRAP_HOPS:
        return None
    for i, a in enumerate(n.args):
        if isinstance(a, torch.fx.Node) and a.op == "get_attr":
            return getattr(gm, str(a.target)), list(n.args[i + 1:])
    return None


def _to_opgraph(ep: Any, label: str, windows: dict[str, int | None] | None = None) -> OpGraph:
    sig = ep.graph_signature
    params = {**sig.inputs_to_parameters, **sig.inputs_to_buffers}
    nodes: list[OpNode] = []
    inputs: list[str] = []

    def convert(graph: Any, gm: Any, prefix: str, scope: dict[str, str]) -> tuple[str, ...]:
        """Append the OpNodes of `graph` and return its output names. `scope` maps fx names of this graph to
        OpGraph names (a body's placeholders: the operands; a wrapper's outputs: its body's); a body's own nodes
        are named `prefix` + their fx name."""
        def ref(a: Any) -> str:
            return scope.get(a.name) or (prefix + a.name if prefix else params.get(a.name, a.name))

        outs_of: tuple[str, ...] = ()
        wraps: dict[str, tuple[str, ...]] = {}
        for n in graph.nodes:
            if n.op == "placeholder":
                if not prefix and n.name not in params:
                    inputs.append(n.name)
                continue
            if n.op == "output":
                outs_of = tuple(ref(a) for a in _flat(n.args) if isinstance(a, torch.fx.Node))
                continue
            if n.op != "call_function" or n.target in _SKIP:
                continue
            body = _wrap_body(n, gm)
            if body is not None:
                sub, operands = body
                holders = [b for b in sub.graph.nodes if b.op == "placeholder"]
                inner = {h.name: ref(a) for h, a in zip(holders, operands) if isinstance(a, torch.fx.Node)}
                wraps[n.name] = convert(sub.graph, sub, f"{prefix}{n.name}.", inner)
                if len(wraps[n.name]) == 1:
                    scope[n.name] = wraps[n.name][0]
                continue
            if n.target is operator.getitem and isinstance(n.args[0], torch.fx.Node) and n.args[0].name in wraps:
                scope[n.name] = wraps[n.args[0].name][n.args[1]]
                continue
            tensor_args = [a for a in _flat((n.args, n.kwargs)) if isinstance(a, torch.fx.Node)]
            scalars: tuple[tuple[Any, Any], ...] = tuple((i, _freeze(a)) for i, a in enumerate(n.args)
                                                         if not _has_node(a))
            scalars += tuple((k, _freeze(v)) for k, v in sorted(n.kwargs.items()) if not _has_node(v))
            val = n.meta.get("val")
            outs = tuple(spec_of(v) for v in (val if isinstance(val, (tuple, list)) else (val,))
                         if isinstance(v, torch.Tensor))
            stack = list(n.meta.get("nn_module_stack", {}).values())
            path, mtype = (stack[-1][0], stack[-1][1]) if stack else ("", "")
            source, code = _source_of(n.meta.get("stack_trace") or "")
            if windows and n.target is _SDPA and (w := _window_of(windows, _clean_path(path))) is not None:
                scalars += ((WINDOW_KEY, w),)
            nodes.append(OpNode(
                name=prefix + n.name, target=n.target, inputs=tuple(ref(a) for a in tensor_args),
                in_specs=tuple(spec_of(a.meta.get("val")) for a in tensor_args), out=outs, scalars=scalars,
                module_path=_clean_path(path), module_type=str(mtype).rsplit(".", 1)[-1], source=source,
                code=code))
        return outs_of

    outputs = convert(ep.graph, ep.graph_module, "", {})
    return OpGraph(nodes=tuple(nodes), inputs=tuple(inputs), outputs=outputs, params=frozenset(params.values()),
                   label=label)


def _flat(obj: Any) -> list[Any]:
    if isinstance(obj, (list, tuple)):
        return [x for o in obj for x in _flat(o)]
    if isinstance(obj, dict):
        return [x for v in obj.values() for x in _flat(v)]
    return [obj]


def _has_node(obj: Any) -> bool:
    return any(isinstance(x, torch.fx.Node) for x in _flat(obj))


def _freeze(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, torch.dtype):
        return str(v).replace("torch.", "")
    if isinstance(v, (int, float, bool, str)) or v is None:
        return v
    return repr(v)


def _clean_path(path: str) -> str:
    # torch.export names nested modules "L__self__.a.b" in keys but gives plain paths in values; be safe.
    return re.sub(r"^L__self__\.?", "", path)


def _source_of(stack_trace: str) -> tuple[str, str]:
    """`file.py:line` and the code text of the innermost frame outside torch itself."""
    frames = _FRAME.findall(stack_trace)
    for file, line, _fn, code in reversed(frames):
        if not file.startswith(_TORCH_DIR):
            return f"{file.rsplit('/', 1)[-1]}:{line}", code.strip()
    return "", ""


# ---- structural identity and the segment memo ----------------------------------------------------------------


def structure_signature(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """What determines a segment's captured graph: classes, parameter/buffer shapes, plain attributes, inputs."""
    mods = []
    for path, m in module.named_modules():
        attrs = tuple(sorted((k, v) for k, v in vars(m).items() if not k.startswith("_") and k != "training"
                             and k not in _INDEX_ATTRS and isinstance(v, (int, float, bool, str, type(None)))))
        mods.append((path, type(m).__qualname__, type(m).__module__, attrs))
    tensors = tuple((k, tuple(t.shape), str(t.dtype)) for k, t in
                    list(module.named_parameters()) + list(module.named_buffers()))
    arg_specs = tuple(spec_of(a) if isinstance(a, torch.Tensor) else _freeze(a) for a in _flat(args))
    return (tuple(mods), tensors, arg_specs)


_MEMO: OrderedDict[tuple[Any, ...], tuple[OpGraph, str]] = OrderedDict()
_MEMO_SIZE = 64


# The first/last-layer proofs made, by structure without the input shapes: (module structure, parameter shapes,
# input ranks and dtypes, first and last path) -> the shapes it was made at. A group of the same structure at other
# input shapes (the next decode step's KV length) exports its first segment only.
_PROVEN: OrderedDict[tuple[Any, ...], str] = OrderedDict()


def clear_memo() -> None:
    _MEMO.clear()
    _PROVEN.clear()


def _shape_free(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """A structure signature without its input shapes (ranks and dtypes kept)."""
    specs = tuple((len(a.shape), a.dtype, a.contiguous) if isinstance(a, TensorSpec) else a for a in key[2])
    return (key[0], key[1], specs)


def capture_model(model: Any, batch: int, q_len: int, past_len: int, *, reuse: bool = True) -> ModelCapture:
    """Capture one forward step of `q_len` new tokens after `past_len` cached ones, for `batch` sequences.

    `model.capture_segments(batch, q_len, past_len)` lists (path, module, args); segments of equal
    `structure_signature` share one export once the first and last of them export to the same op signature.
    """
    if not hasattr(model, "capture_segments"):
        raise TypeError(f"model {type(model).__qualname__} has no capture_segments(batch, q_len, past_len); "
                        "torchsim captures a model as segments (head, layers, tail): see "
                        "torchsim.models.llama.LlamaForCausalLM.capture_segments")
    t0 = time.perf_counter()
    segs = model.capture_segments(batch, q_len, past_len)
    groups: OrderedDict[tuple[Any, ...], list[int]] = OrderedDict()
    for i, (_path, module, args) in enumerate(segs):
        groups.setdefault(structure_signature(module, args) if reuse else (i,), []).append(i)
    graphs: dict[int, tuple[OpGraph, str]] = {}
    proofs: list[str] = []
    exports = 0
    for key, members in groups.items():
        try:
            graph, proof, n = _capture_group(segs, members, key)
        except CaptureError as exc:
            where = _hf_source(model)
            if where:  # a family transformers builds: name the file, as for any other refusal of it
                raise UnsupportedFamilyError(f"{where}: torchsim cannot capture this family yet: {exc}") from exc
            raise
        exports += n
        first = segs[members[0]][0]
        for j in members:
            graphs[j] = (graph, "" if j == members[0] else first)
        if len(members) > 1:
            proofs.append(f"{first} .. {segs[members[-1]][0]} ({len(members)} segments) reuse one export: {proof}")
    out = tuple(SegmentCapture(path=path, layer=_layer_of(path), graph=graphs[i][0], reused_from=graphs[i][1])
                for i, (path, _m, _a) in enumerate(segs))
    return ModelCapture(batch=batch, q_len=q_len, past_len=past_len, segments=out, proofs=tuple(proofs),
                        exports=exports, seconds=time.perf_counter() - t0)


# the config.json each HF-built config was read from (models.registry.load_config_file notes it), for the message
# of a capture that fails on it; kept here, below models, so the capture needs nothing from models
_CONFIG_FILES: dict[tuple[str, str], str] = {}


def note_config_file(cfg: Any, path: str) -> None:
    """Record the file `cfg` (an HFDecoderConfig: `name`, `hf_json`) was read from."""
    if len(_CONFIG_FILES) > 256:
        _CONFIG_FILES.clear()
    _CONFIG_FILES[(cfg.name, cfg.hf_json)] = path


def _hf_source(model: Any) -> str:
    """'model config file PATH (model_type T)' for a model built from an HF config.json (models.hf_family), else ""."""
    cfg: Any = getattr(model, "config", None)
    hf_json = getattr(cfg, "hf_json", None)
    if not hf_json:
        return ""
    path = _CONFIG_FILES.get((getattr(cfg, "name", ""), hf_json), getattr(cfg, "name", "?"))
    return f"model config file {path!r} (model_type {getattr(cfg, 'model_type', '')!r})"


def _capture_group(segs: list[tuple[str, Any, tuple[Any, ...]]], members: list[int],
                   key: tuple[Any, ...]) -> tuple[OpGraph, str, int]:
    """(graph, proof, exports made) for segments of one structure; the first and last are both exported."""
    if key in _MEMO:
        _MEMO.move_to_end(key)
        graph, proof = _MEMO[key]
        return graph, proof, 0
    first_path, first_mod, first_args = segs[members[0]]
    graph = capture_module(first_mod, first_args, name=first_path)
    proof, exports = "", 1
    last_path = segs[members[-1]][0]
    proven = _PROVEN.get((_shape_free(key), first_path, last_path, len(members))) if len(key) > 1 else None
    if len(members) > 1 and proven is not None:
        proof = (f"same classes, {len(key[1])} parameter/buffer shapes and inputs; {first_path} and {last_path} "
                 f"exported to the same ops at input {proven} (these inputs differ only in shape); "
                 f"{first_path} exports to {len(graph.nodes)} ops here")
    elif len(members) > 1:
        last_path, last_mod, last_args = segs[members[-1]]
        other = capture_module(last_mod, last_args, name=last_path)
        exports += 1
        if other.signature() != graph.signature():
            raise CaptureError(f"segments {first_path} .. {last_path} have equal structure but different op graphs; "
                               "capture them with reuse=False")
        proof = (f"same classes, {len(key[1])} parameter/buffer shapes and inputs; {first_path} and {last_path} "
                 f"export to the same {len(graph.nodes)} ops")
        if len(key) > 1:
            shapes = ", ".join(str(a.shape) for a in key[2] if isinstance(a, TensorSpec))
            _PROVEN[(_shape_free(key), first_path, last_path, len(members))] = f"shapes {shapes}"
            while len(_PROVEN) > _MEMO_SIZE:
                _PROVEN.popitem(last=False)
    if len(key) > 1:  # structure signatures are memoised; reuse=False keys are segment indices
        _MEMO[key] = (graph, proof)
        while len(_MEMO) > _MEMO_SIZE:
            _MEMO.popitem(last=False)
    return graph, proof, exports


def _layer_of(path: str) -> int | None:
    m = re.search(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)(?:\.|$)", path)
    return int(m.group(1)) if m else None


__all__ = ["CaptureError", "UnsupportedFamilyError",
           "ModelCapture", "OpGraph", "OpNode", "SegmentCapture", "TensorSpec", "capture_model",
           "capture_module", "clear_memo", "structure_signature"]
