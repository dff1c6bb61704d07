"""Routing files: RoutingCounts to and from JSON or Parquet (the format is documented in docs/routing.md).

Read by models.routing.resolve_routing and the `torchsim routing` command; written by `torchsim routing record`.
Every field is checked on load and errors name the file and the field.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchsim.models.jsonfile import FieldError, loads_fields
from torchsim.models.routing_counts import RoutingCounts

FORMAT_NAME = "torchsim.routing"
FORMAT_VERSION = 1
_PARQUET_META_KEY = b"torchsim.routing"
FIELDS = frozenset({"format", "version", "model", "source", "num_experts", "top_k", "tokens", "tokens_per_expert"})


def routing_to_dict(counts: RoutingCounts, *, model: str = "") -> dict[str, Any]:
    """The JSON object of a routing file (see docs/routing.md)."""
    return {"format": FORMAT_NAME, "version": FORMAT_VERSION, "model": model, "source": counts.source,
            "num_experts": counts.num_experts, "top_k": counts.top_k, "tokens": counts.tokens,
            "tokens_per_expert": [list(row) for row in counts.counts]}


def routing_from_dict(obj: Any, *, where: str) -> RoutingCounts:
    """Parse and check a routing object; `where` (the file name) prefixes every error."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object with 'tokens_per_expert', got {type(obj).__name__}")
    unknown = sorted(set(obj) - FIELDS)
    if unknown:  # a typo ('top-k', 'token_per_expert') would otherwise be dropped without a word
        raise ValueError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}; a routing file has "
                         f"{', '.join(sorted(FIELDS))}")
    if obj.get("format", FORMAT_NAME) != FORMAT_NAME:
        raise ValueError(f"{where}: field 'format' is {obj['format']!r}, expected {FORMAT_NAME!r}")
    if obj.get("version", FORMAT_VERSION) != FORMAT_VERSION:
        raise ValueError(f"{where}: field 'version' is {obj['version']!r}; this torchsim reads version "
                         f"{FORMAT_VERSION}")
    missing = [k for k in ("top_k", "tokens", "tokens_per_expert") if k not in obj]
    if missing:
        raise ValueError(f"{where}: missing field(s) {missing}; a routing file needs top_k, tokens and "
                         f"tokens_per_expert (a list per layer of tokens per expert)")
    rows = obj["tokens_per_expert"]
    if not isinstance(rows, list) or not rows or not all(isinstance(r, list) for r in rows):
        raise ValueError(f"{where}: field 'tokens_per_expert' must be a non-empty list of lists "
                         f"(one list of tokens per expert for each MoE layer)")
    widths = {len(r) for r in rows}
    if len(widths) != 1:
        raise ValueError(f"{where}: layers list different numbers of experts {sorted(widths)}; "
                         f"every layer must list all experts")
    num_experts = widths.pop()
    if "num_experts" in obj and obj["num_experts"] != num_experts:
        raise ValueError(f"{where}: field 'num_experts' is {obj['num_experts']!r} but each layer lists "
                         f"{num_experts} experts")
    try:
        return RoutingCounts(tuple(tuple(r) for r in rows), num_experts=num_experts, top_k=obj["top_k"],
                             tokens=obj["tokens"], source=f"file:{where}")
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def routing_file_bytes(counts: RoutingCounts, suffix: str, *, model: str = "") -> bytes:
    """The bytes of a routing file in the format `suffix` names (.json or .parquet)."""
    obj = routing_to_dict(counts, model=model)
    suffix = suffix.lower()
    if suffix == ".json":
        return (json.dumps(obj, indent=1) + "\n").encode()
    if suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = [(layer, expert, c) for layer, row in enumerate(counts.counts) for expert, c in enumerate(row)]
        meta = {k: v for k, v in obj.items() if k != "tokens_per_expert"}
        table = pa.table({"layer": pa.array([r[0] for r in rows], pa.int32()),
                          "expert": pa.array([r[1] for r in rows], pa.int32()),
                          "tokens": pa.array([r[2] for r in rows], pa.int64())},
                         metadata={_PARQUET_META_KEY: json.dumps(meta).encode()})
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        return bytes(sink.getvalue().to_pybytes())
    raise ValueError(f"routing file suffix {suffix!r} is not .json or .parquet")


def save_routing(counts: RoutingCounts, path: str | Path, *, model: str = "",
                 write: Callable[[Path, bytes], Any] | None = None) -> Path:
    """Write `counts` as .json or .parquet (chosen by the suffix); returns the path. `write(path, data)` does the
    writing (the command line passes its atomic writer, so a failed run leaves an existing file as it was)."""
    path = Path(path)
    try:
        data = routing_file_bytes(counts, path.suffix, model=model)
    except ValueError:
        raise ValueError(f"routing file {str(path)!r}: suffix {path.suffix!r} is not .json or .parquet") from None
    (write or (lambda p, d: p.write_bytes(d)))(path, data)
    return path


def load_routing(path: str | Path) -> RoutingCounts:
    """Read a routing file (.json or .parquet) and check it; errors name the file and the field."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"routing file {str(path)!r} does not exist")
    suffix = path.suffix.lower()
    if suffix == ".json":
        try:
            obj = loads_fields(path.read_bytes().decode("utf-8"))
        except FieldError as exc:
            raise ValueError(f"{path}: {exc}") from None
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}: not a text file (byte {exc.start} is not UTF-8); a routing file is JSON "
                             f"or Parquet") from None
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ValueError(f"{path}: not valid JSON ({exc})") from None
        return routing_from_dict(obj, where=str(path))
    if suffix == ".parquet":
        return routing_from_dict(_parquet_to_dict(path), where=str(path))
    raise ValueError(f"routing file {str(path)!r}: suffix {path.suffix!r} is not .json or .parquet")


def _parquet_to_dict(path: Path) -> dict[str, Any]:
    """Long table (layer, expert, tokens) + key-value metadata -> the JSON object form."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises its own ArrowInvalid/OSError kinds for a file that is not Parquet
        raise ValueError(f"{path}: not a readable Parquet file ({type(exc).__name__}: {exc})") from None
    need = {"layer", "expert", "tokens"}
    if not need <= set(table.column_names):
        raise ValueError(f"{path}: columns {table.column_names}; a routing table needs columns {sorted(need)}")
    raw = (table.schema.metadata or {}).get(_PARQUET_META_KEY)
    if raw is None:
        raise ValueError(f"{path}: no {_PARQUET_META_KEY.decode()!r} key-value metadata (top_k, tokens)")
    try:
        obj: dict[str, Any] = loads_fields(raw)
    except ValueError:
        raise ValueError(f"{path}: its {_PARQUET_META_KEY.decode()!r} metadata is not JSON") from None
    layers, experts, tokens = (table.column(c).to_pylist() for c in ("layer", "expert", "tokens"))
    if any(v is None for v in layers + experts + tokens):
        raise ValueError(f"{path}: null values in layer/expert/tokens columns")
    if not layers:
        raise ValueError(f"{path}: the routing table has no rows; it needs one (layer, expert, tokens) row per expert "
                         f"of every MoE layer")
    for col, values in (("layer", layers), ("expert", experts), ("tokens", tokens)):
        bad = next((v for v in values if isinstance(v, bool) or not isinstance(v, int)), None)
        if bad is not None:
            raise ValueError(f"{path}: column {col!r} holds {bad!r}; layer, expert and tokens are whole numbers")
    seen: dict[tuple[int, int], int] = {}
    for layer, expert, count in zip(layers, experts, tokens, strict=True):
        if layer < 0 or expert < 0:
            raise ValueError(f"{path}: negative layer or expert index ({layer}, {expert})")
        if (layer, expert) in seen:
            raise ValueError(f"{path}: layer {layer} expert {expert} appears twice")
        seen[layer, expert] = count
    num_layers, num_experts = max(layers) + 1, max(experts) + 1
    if num_layers * num_experts != len(seen):  # found without building the grid: a typo'd index (layer 10**12)
        # is a table with holes, not a trillion-cell allocation
        cells = ((i, e) for i in range(num_layers) for e in range(num_experts) if (i, e) not in seen)
        holes = list(itertools.islice(cells, 6))
        raise ValueError(f"{path}: no row for (layer, expert) {holes[:5]}{' ...' if len(holes) > 5 else ''} "
                         f"({num_layers * num_experts - len(seen):,} missing for the largest indices, layer "
                         f"{num_layers - 1} and expert {num_experts - 1}); every layer needs a count for every expert "
                         f"(0 is allowed)")
    grid = [[seen[i, e] for e in range(num_experts)] for i in range(num_layers)]
    obj["tokens_per_expert"] = grid
    return obj
