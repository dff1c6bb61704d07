"""On-disk cache of a prediction's captured-and-planned kernel plans, so a warm rerun of `torchsim predict` does
not import torch, build the model or capture anything.

Used by torchsim.prediction.pipeline beside the kernel cache (torchsim.prediction.cache), under the same root
(`plans/<key>.pkl`): the key covers every argument the plans depend on (the model, a config file's content, the
device profile's numbers, the system, batch, prompt/KV lengths and sampled decode steps, preset, dtype, KV cache,
quantisation, routing, fallback, tp/ep/pp/micro-batches, weights, tune), torchsim's version and a fingerprint of
its whole source, and the installed torch and transformers versions (torch.export decides the captured graph).
An entry is a pickle of torch-free objects (`PlanEntry`: kernel calls, weight bytes, model facts) behind a
SHA-256 checksum, checked before it is unpickled; a damaged entry is reported once, deleted and recomputed.
Models given as an nn.Module or a config object, and routing given as an object, are not cached (no stable
identity). Loading a pickle runs code: the cache directory is trusted like the installed package.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import tempfile
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

import torchsim
from torchsim.graph.kinds import DType
from torchsim.lowering.kernel_call import KernelCall
from torchsim.lowering.quant import QuantFormat
from torchsim.prediction.cache import CacheWarning, default_root, warn_unwritable

PLAN_CACHE_VERSION = 1
_PKG = Path(torchsim.__file__).parent


@dataclass(frozen=True)
class StepPlan:
    """The part of a lowering.plan.KernelPlan the rest of a prediction reads (its calls, in stream order, and
    the proofs that let layers share one capture)."""

    calls: tuple[KernelCall, ...]
    proofs: tuple[str, ...] = ()


@dataclass(frozen=True)
class PlanEntry:
    """What the capture stage of one prediction hands the simulation stage."""

    name: str  # the model's name
    preset: str  # Preset value
    fp8: bool  # WeightPrecision.FP8 (an FP8 checkpoint, or quant fp8)
    kv_dtype: DType | None
    fmt: QuantFormat | None
    keep: tuple[str, ...]
    plans: tuple[StepPlan, ...]  # prefill, then the sampled decode steps
    weight_bytes: float
    facts: dict[str, Any]  # pipeline._model_facts
    approximations: tuple[str, ...]
    layers: int
    # per-kernel extrapolation threshold -> call key -> its estimated node events (torchsim.prediction.limits), so
    # that a warm rerun reports the same estimate without laying out the calls' kernels again
    events: dict[int, dict[tuple[Any, ...], int]] = field(default_factory=dict)

    def check_entry(self, steps: int) -> None:
        if len(self.plans) != steps or not all(isinstance(p, StepPlan) and p.calls for p in self.plans):
            raise ValueError(f"{len(self.plans)} plans, expected {steps} non-empty ones")
        if not all(isinstance(c, KernelCall) for p in self.plans for c in p.calls):
            raise ValueError("a plan holds something other than kernel calls")
        if not (math.isfinite(self.weight_bytes) and self.weight_bytes >= 0):
            raise ValueError(f"weight bytes {self.weight_bytes!r}")


@lru_cache(maxsize=1)
def source_fingerprint() -> str:
    """Hash of every torchsim source file and the torch/transformers versions (once per process)."""
    h = hashlib.sha256()
    for f in sorted(_PKG.rglob("*.py")):
        h.update(str(f.relative_to(_PKG)).encode())
        h.update(f.read_bytes())
    for dist in ("torch", "transformers"):
        try:
            h.update(f"{dist}={metadata.version(dist)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{dist}=none".encode())
    return h.hexdigest()[:16]


def _identity(value: Any) -> Any:
    """A string argument, with the content of the file it names (a config.json, a routing or what-if file)."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if not isinstance(value, (str, Path)):
        raise TypeError(type(value).__name__)
    p = Path(value)
    if p.is_dir():
        p = p / "config.json"
    if p.is_file():
        return [str(p.resolve()), hashlib.sha256(p.read_bytes()).hexdigest()]
    return str(value)


def plan_key(model: Any, prof: Any, hw_hash: str, samples: list[int], **args: Any) -> str | None:
    """The cache key of a prediction's plans, or None when an argument has no stable identity (an nn.Module or
    config object as the model, routing counts given as an object)."""
    try:
        ident = {k: _identity(v) for k, v in sorted(args.items())}
        ident["model"] = _identity(model)
    except TypeError:
        return None
    blob = json.dumps([torchsim.__version__, PLAN_CACHE_VERSION, source_fingerprint(), str(prof.name), hw_hash,
                       samples, ident], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


class PlanCache:
    """Plan entries under `root/plans/<key>.pkl` (root: torchsim.prediction.cache.default_root).

    >>> import tempfile
    >>> PlanCache(Path(tempfile.mkdtemp())).get("nothing", 1) is None
    True
    """

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or default_root()) / "plans"
        self.hits = 0
        self.writes = 0
        self.discarded = 0

    def get(self, key: str, steps: int) -> PlanEntry | None:
        """The entry, or None on a miss. Checked before use: the checksum of the pickled bytes (before they are
        unpickled), the type, and `PlanEntry.check_entry`; a damaged entry is reported once (a warning naming the
        file and what was wrong), deleted, and counts as a miss."""
        path = self.root / f"{key}.pkl"
        try:
            blob = path.read_bytes()
        except OSError:
            return None
        try:
            digest, sep, payload = blob.partition(b"\n")
            if not sep or digest.decode("ascii", "replace") != hashlib.sha256(payload).hexdigest():
                raise ValueError("checksum does not match the content")
            entry = pickle.loads(payload)
            if not isinstance(entry, PlanEntry):
                raise ValueError(f"holds a {type(entry).__name__}, not a PlanEntry")
            entry.check_entry(steps)
        except (ValueError, TypeError, AttributeError, EOFError, pickle.UnpicklingError, ImportError) as exc:
            warnings.warn(f"torchsim plan cache: discarded damaged entry {path} ({exc}); it will be recomputed",
                          CacheWarning, stacklevel=2)
            self.discarded += 1
            try:
                path.unlink()
            except OSError:
                pass
            return None
        self.hits += 1
        return entry

    def put(self, key: str, entry: PlanEntry) -> None:
        """Write atomically (temporary file + rename); a full or read-only disk only loses the entry."""
        tmp = ""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            payload = pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
            fd, tmp = tempfile.mkstemp(dir=self.root, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
            os.replace(tmp, self.root / f"{key}.pkl")
            self.writes += 1
        except (OSError, pickle.PicklingError) as exc:
            if isinstance(exc, OSError):
                warn_unwritable(self.root, exc)
            if tmp:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
