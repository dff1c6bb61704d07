"""The request load of a serving run: requests read from a file, or drawn from a synthetic load.

A request is (arrival time, input tokens, output tokens). Files are JSONL (one object a line), CSV (a header
row) or Parquet, with the columns `arrival_s` (also `arrival_time`, `timestamp`), `input_len` (also
`input_tokens`, `prompt_len`) and `output_len` (also `output_tokens`); a bad line is an error naming the file
and the line. Synthetic loads draw lengths from a distribution (`LengthDist`) and arrivals from a process
(`offline`: all at t = 0; `rate`: Poisson at QPS; closed-loop `concurrency` clients send the next request when
their previous one finishes, so their arrival times are set by the engine, torchsim.serving.engine) with
numpy's PCG64 generator seeded by `seed`: the same seed gives the same requests.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from torchsim.models.jsonfile import FieldError, loads_fields

ARRIVAL = ("arrival_s", "arrival_time", "timestamp")
INPUT = ("input_len", "input_tokens", "prompt_len")
OUTPUT = ("output_len", "output_tokens")
MAX_TOKENS = 1 << 24
# the latest arrival a run takes, in seconds (about 116 days): a serving run simulates every iteration between
# arrivals, and a time past this is a unit mistake (ms or us for s), not a load
MAX_ARRIVAL_S = 1e7
MIN_RATE = 1e-4  # requests per second (one every ~3 hours): below, a run of any size spans beyond MAX_ARRIVAL_S


@dataclass(frozen=True, slots=True)
class Request:
    """One request: when it arrives (s from the start of the run) and how many tokens it reads and writes."""

    id: int
    arrival_s: float
    input_len: int
    output_len: int


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution: `fixed:N` (or just N), `uniform:LO:HI` (inclusive), `normal:MEAN:STD`,
    `lognormal:MEDIAN:SIGMA` (sigma of the log), `exponential:MEAN`; samples are rounded and kept in
    [1, `limit`] (clipped, which the name says)."""

    kind: str
    args: tuple[float, ...]

    @staticmethod
    def parse(text: str, what: str = "length") -> LengthDist:
        spec = str(text).strip().lower()
        parts = spec.split(":")
        shapes = {"fixed": 1, "uniform": 2, "normal": 2, "lognormal": 2, "exponential": 1}
        if len(parts) == 1:
            parts = ["fixed", parts[0]]
        kind, raw = parts[0], parts[1:]
        if kind not in shapes:
            raise ValueError(f"{what} {text!r}: unknown distribution {kind!r}; valid: N, fixed:N, uniform:LO:HI, "
                             "normal:MEAN:STD, lognormal:MEDIAN:SIGMA, exponential:MEAN")
        if len(raw) != shapes[kind]:
            raise ValueError(f"{what} {text!r}: {kind} takes {shapes[kind]} parameter(s), got {len(raw)}")
        try:
            args = tuple(float(a) for a in raw)
        except ValueError:
            raise ValueError(f"{what} {text!r}: parameters must be numbers") from None
        if not all(math.isfinite(a) for a in args):
            raise ValueError(f"{what} {text!r}: parameters must be finite")
        if kind in ("fixed", "uniform") and any(a != int(a) or a < 1 for a in args):
            raise ValueError(f"{what} {text!r}: token counts must be whole numbers >= 1")
        if kind == "uniform" and args[0] > args[1]:
            raise ValueError(f"{what} {text!r}: LO {int(args[0])} is above HI {int(args[1])}")
        if kind in ("normal", "lognormal", "exponential") and (args[0] <= 0 or (len(args) > 1 and args[1] < 0)):
            raise ValueError(f"{what} {text!r}: the mean/median must be > 0 and the spread >= 0")
        return LengthDist(kind, args)

    def sample(self, rng: np.random.Generator, n: int, limit: int) -> np.ndarray:
        a = self.args
        if self.kind == "fixed":
            x = np.full(n, a[0])
        elif self.kind == "uniform":
            x = rng.integers(int(a[0]), int(a[1]) + 1, size=n).astype(float)
        elif self.kind == "normal":
            x = rng.normal(a[0], a[1], size=n)
        elif self.kind == "lognormal":
            x = np.exp(rng.normal(math.log(a[0]), a[1], size=n))
        else:
            x = rng.exponential(a[0], size=n)
        return np.clip(np.rint(x), 1, limit).astype(np.int64)

    def describe(self) -> str:
        return f"{self.kind}:" + ":".join(f"{v:g}" for v in self.args)


def synthetic(n: int, input_len: LengthDist, output_len: LengthDist, *, rate: float | None = None, seed: int = 0,
              limit: int = MAX_TOKENS) -> list[Request]:
    """`n` requests with lengths drawn from the distributions; arrivals Poisson at `rate` per second, or all at
    t = 0 when `rate` is None (offline, and closed-loop loads, whose arrivals the engine sets)."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"the number of requests must be a whole number >= 1, got {n!r}")
    if rate is not None and (not math.isfinite(rate) or rate < MIN_RATE):
        raise ValueError(f"the request rate must be a finite number >= {MIN_RATE:g} requests per second, got {rate!r}")
    rng = np.random.Generator(np.random.PCG64(seed))
    ins, outs = input_len.sample(rng, n, limit), output_len.sample(rng, n, limit)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, size=n)) if rate else np.zeros(n)
    if n and arrivals[-1] > MAX_ARRIVAL_S:
        raise ValueError(f"{n:,} requests at {rate:g} requests/s arrive over {arrivals[-1]:,.0f} s, beyond the "
                         f"{MAX_ARRIVAL_S:,.0f} s (about 116 days) a serving run spans; raise the rate or draw fewer "
                         f"requests")
    return [Request(i, float(arrivals[i]), int(ins[i]), int(outs[i])) for i in range(n)]


def read_requests(path: str | Path) -> list[Request]:
    """Requests from a JSONL, CSV or Parquet file (by suffix), sorted by arrival; errors name the line."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"request file {str(p)!r} does not exist or is not a file")
    suffix = p.suffix.lower()
    rows: list[tuple[str, dict[str, object]]] = []
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(p)
        except Exception as exc:  # pyarrow raises several types for damaged files
            raise ValueError(f"request file {str(p)!r} is not a readable Parquet file: {exc}") from None
        rows = [(f"row {i + 1}", r) for i, r in enumerate(table.to_pylist())]
    else:
        try:
            text = p.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"request file {str(p)!r} is not UTF-8 text (byte {exc.start}); give JSONL, CSV or "
                             "Parquet") from None
        if suffix == ".csv":
            lines = text.lstrip("\ufeff").splitlines()  # a spreadsheet's UTF-8 byte-order mark
            reader = csv.DictReader(lines)
            header = list(reader.fieldnames or [])
            if len(set(header)) != len(header):
                twice = sorted({c for c in header if header.count(c) > 1})
                raise ValueError(f"{p}: the header names column(s) {', '.join(twice)} twice; keep one of each")
            try:
                rows = [(f"line {i + 2}", dict(r)) for i, r in enumerate(reader)]
            except csv.Error as exc:
                raise ValueError(f"{p}: not a readable CSV file ({exc})") from None
            for where, r in rows:
                extra: Any = r.get(None)  # type: ignore[call-overload]  # DictReader's key for cells past the header
                if extra is not None:
                    raise ValueError(f"{p}: {where} has {len(r) - 1 + len(extra)} cells but the header names "
                                     f"{len(r) - 1} columns ({', '.join(map(str, reader.fieldnames or []))})")
        elif suffix in (".jsonl", ".json", ".ndjson"):
            for i, line in enumerate(text.splitlines()):
                if not line.strip():
                    continue
                try:
                    obj = loads_fields(line)
                except FieldError as exc:
                    raise ValueError(f"{p}: line {i + 1}: {exc}") from None
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{p}: line {i + 1} is not a JSON object: {exc.msg}") from None
                except RecursionError:
                    raise ValueError(f"{p}: line {i + 1} is nested too deeply to be a request") from None
                except ValueError as exc:  # a number past int_max_str_digits
                    raise ValueError(f"{p}: line {i + 1}: {exc}") from None
                if not isinstance(obj, dict):
                    raise ValueError(f"{p}: line {i + 1} is not a JSON object (got {type(obj).__name__})")
                rows.append((f"line {i + 1}", obj))
        else:
            raise ValueError(f"request file {str(p)!r}: unknown format {suffix or '(no suffix)'!r}; give .jsonl, "
                             ".csv or .parquet")
    if not rows:
        raise ValueError(f"request file {str(p)!r} holds no requests")
    out = [_request(i, where, r, p, text_cells=suffix == ".csv") for i, (where, r) in enumerate(rows)]
    return [Request(i, r.arrival_s, r.input_len, r.output_len)
            for i, r in enumerate(sorted(out, key=lambda r: (r.arrival_s, r.id)))]


def _request(i: int, where: str, row: dict[str, object], path: Path, *, text_cells: bool) -> Request:
    """One request from a row; `text_cells`: a CSV row, whose cells are strings (JSON and Parquet carry numbers)."""
    def field(names: tuple[str, ...], default: object = None) -> object:
        given = [n for n in names if n in row]
        if len(given) > 1:
            raise ValueError(f"{path}: {where} gives {' and '.join(given)}, names of one column; keep one")
        if given:
            value = row[given[0]]
            if value is None or value == "":
                raise ValueError(f"{path}: {where}: {given[0]} is empty (null); give a number")
            if isinstance(value, str) and not text_cells:
                raise ValueError(f"{path}: {where}: {given[0]} is the string {value[:20]!r}; give a number")
            return value
        if default is None:
            raise ValueError(f"{path}: {where} has no {names[0]} (columns: {', '.join(map(str, row)) or 'none'}; "
                             f"accepted names: {', '.join(names)})")
        return default

    arrival = _number(field(ARRIVAL, 0.0), f"{path}: {where}: {ARRIVAL[0]}")
    if not math.isfinite(arrival) or not 0 <= arrival <= MAX_ARRIVAL_S:
        raise ValueError(f"{path}: {where}: {ARRIVAL[0]} must be a time in seconds in 0..{MAX_ARRIVAL_S:g} (about 116 "
                         f"days), got {arrival!r}")
    lens = []
    for names in (INPUT, OUTPUT):
        v = _number(field(names), f"{path}: {where}: {names[0]}")
        if v != int(v) or not 1 <= v <= MAX_TOKENS:
            raise ValueError(f"{path}: {where}: {names[0]} must be a whole number of tokens in 1..{MAX_TOKENS}, "
                             f"got {v!r}")
        lens.append(int(v))
    return Request(i, arrival, lens[0], lens[1])


def _number(v: object, what: str) -> float:
    if isinstance(v, bool):
        raise ValueError(f"{what} must be a number, got {v!r}")
    try:
        x = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {v!r}") from None
    if not math.isfinite(x):
        raise ValueError(f"{what} must be finite, got {v!r}")
    return x
