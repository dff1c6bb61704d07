"""The measurement file of `torchsim calibrate`, read strictly: every row the fit uses is checked before any work.

Beside torchsim.validation.published.read_rows (same schema, same Row) because the validation reports skip the
published file's few odd rows, while a fit takes logs and ratios of every value it reads: a value of 0 divided by
zero deep in the loss, -5 or inf was a "math domain error", all-NaN values fitted nothing and still wrote a
profile, a unit the metric does not have ("parsecs") was ignored, {"M": "x"} reached the GEMM template. Each is
now an error naming the file, the line, the row id and the column, with what would be valid. The file's size and
each field's length are resource limits checked before parsing (a megabyte of nested params_json is not a shape).
A UTF-8 byte-order mark (Excel's "CSV UTF-8") is accepted.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

from torchsim.calibration.params import CalibrationError
from torchsim.models.jsonfile import FieldError, loads_fields
from torchsim.validation.predict_row import KERNEL_CATEGORIES
from torchsim.validation.published import COLUMNS, Row

MAX_FILE_BYTES = 16 << 20  # a measurement file is a few hundred rows (published_dev.csv: 60 kB)
MAX_FIELD_CHARS = 10_000  # one cell (published_dev.csv's longest: under 400)
MAX_DIM = 1 << 24  # a shape dimension above this is a typo (as torchsim kernel's limit)
# the unit each metric is stated in (published_dev.csv's metrics); a row of another metric is not fitted
UNITS = {"tflops": ("TFLOPS",), "tops": ("TOPS",), "time_us": ("us", "µs"), "time_ms": ("ms",),
         "bandwidth_gbps": ("GB/s",), "bandwidth_gibps": ("GiB/s",), "latency_cycles": ("cycles",),
         "board_power_w": ("W",), "ttft_ms": ("ms",), "tokens_per_s_per_user": ("tokens/s/user",),
         "output_tokens_per_s": ("tokens/s",)}
# the largest plausible measurement per metric (far above any part: 100 PFLOPS in one kernel, a day-long kernel)
MAX_VALUE = {"tflops": 1e5, "tops": 1e5, "time_us": 1e11, "time_ms": 1e8, "bandwidth_gbps": 1e6,
             "bandwidth_gibps": 1e6, "board_power_w": 1e5}
OTHER_MAX_VALUE = 1e15
# params_json keys the kernel predictors read as a shape dimension (torchsim.validation.predict_row)
SHAPE_KEYS = ("M", "N", "K", "batch", "groups", "M_per_group", "heads", "heads_q", "heads_kv", "head_dim",
              "hidden_dim", "seqlen")
# the categories of the schema (a row of another is read by no predictor: an error in a calibration's input)
CATEGORIES = ("gemm", "attention", "moe_grouped_gemm", "microbenchmark", "e2e_inference")
METRICS = (*UNITS, "sm_clock_mhz")  # published_dev.csv's metrics and `torchsim microbench`'s
# params_json keys of the kernel categories (published_dev.csv's and `torchsim microbench`'s); another is a typo
PARAM_KEYS = {"gemm": ("M", "N", "K", "batch", "grid", "layout", "math_fidelity", "use_trace"),
              "moe_grouped_gemm": ("groups", "M_per_group", "N", "K"),
              "attention": ("batch", "causal", "head_dim", "heads", "heads_kv", "heads_q", "hidden_dim", "kv_len",
                            "mode", "n_kv_heads", "n_q_heads", "note", "seqlen", "seqlen_q", "seqlen_kv")}
# words a kernel row's dtype text must name one of (torchsim.validation.published.dtype_of reads anything else as
# bf16, so `int3` would be fitted as a bf16 kernel)
DTYPE_WORDS = ("bf16", "bfloat16", "fp16", "float16", "16-bit", "fp8", "f8e4m3", "e4m3", "fp4", "bfp8", "bfp4",
               "bfloat8_b", "bfloat4_b", "fp32", "tf32")


def read_measurements(path: str | Path, profile: str | None = None) -> list[Row]:
    """Every row of `path` (published_dev.csv schema); the rows on `profile` (those a fit uses) fully checked."""
    p = Path(path)
    if p.is_dir():
        raise CalibrationError(f"--measurements {str(path)!r} is a directory; give the CSV file itself "
                               "(published_dev.csv schema)")
    if p.exists() and not p.is_file():
        raise CalibrationError(f"--measurements {str(path)!r} is not a regular file (a device or a pipe); give the "
                               "CSV file itself (published_dev.csv schema)")
    if not p.is_file():
        raise FileNotFoundError(f"measurement file {str(path)!r} does not exist")
    size = p.stat().st_size
    if size > MAX_FILE_BYTES:
        raise CalibrationError(f"{p}: {size:,} bytes is above the {MAX_FILE_BYTES:,}-byte limit for a measurement "
                               "file (a few hundred rows); split it or keep the rows of one profile")
    try:
        text = p.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CalibrationError(f"{p}: not a text file (byte {exc.start} is not UTF-8); measurements are a CSV in "
                               "the published_dev.csv schema") from None
    previous = csv.field_size_limit(MAX_FILE_BYTES)  # our own per-field limit below names the column instead
    try:
        return _parse(p, text, profile)
    except csv.Error as exc:
        raise CalibrationError(f"{p}: not a readable CSV ({exc})") from None
    finally:
        csv.field_size_limit(previous)


def _parse(p: Path, text: str, profile: str | None) -> list[Row]:
    reader = csv.reader(io.StringIO(text, newline=""))
    header = [h.strip() for h in next(reader, [])]
    missing = [c for c in COLUMNS if c not in header]
    unknown = [c for c in header if c not in COLUMNS]
    if missing or unknown:
        listed = ", ".join(unknown[:8]) + (f" and {len(unknown) - 8} more" if len(unknown) > 8 else "")
        raise CalibrationError(f"{p}: not in the published_dev.csv schema: "
                               + "; ".join(x for x in (f"missing column(s) {', '.join(missing)}" if missing else "",
                                                       f"unknown column(s) {listed}" if unknown else "")
                                           if x) + f" (expected: {', '.join(COLUMNS)})")
    out: list[Row] = []
    seen: dict[str, int] = {}
    start = reader.line_num + 1
    for cells in reader:
        line, start = start, reader.line_num + 1
        if not cells:  # a blank line
            continue
        if len(cells) > len(header):
            raise CalibrationError(f"{p}:{line}: {len(cells)} fields, the header has {len(header)} columns (a comma "
                                   "inside a field needs the field in double quotes)")
        r = dict(zip(header, cells + [""] * (len(header) - len(cells))))
        where = f"{p}:{line}: row {r['id'][:40] or '(no id)'}"
        for col, cell in r.items():
            if len(cell) > MAX_FIELD_CHARS:
                raise CalibrationError(f"{where}: {col}: {len(cell):,} characters, above the limit of "
                                       f"{MAX_FIELD_CHARS:,} for one field (a cell of a measurement row is short)")
        try:
            value = float(r["value"])
        except ValueError:
            raise CalibrationError(f"{where}: value {r['value']!r} is not a number") from None
        try:
            params = loads_fields(r["params_json"] or "{}")
        except json.JSONDecodeError as exc:
            raise CalibrationError(f"{where}: params_json is not JSON: {exc}") from None
        except FieldError as exc:
            raise CalibrationError(f"{where}: params_json: {exc}") from None
        except RecursionError:
            raise CalibrationError(f"{where}: params_json is nested too deeply; it is a flat object such as "
                                   '{"M": 4096, "N": 4096, "K": 4096}') from None
        if not isinstance(params, dict):
            raise CalibrationError(f"{where}: params_json must be a JSON object such as "
                                   f'{{"M": 4096, "N": 4096, "K": 4096}}, got a {type(params).__name__}')
        row = Row(r["id"], r["category"], r["hardware"], r["workload"], r["dtype"], params, r["metric"], value,
                  r["unit"], r["notes"], r["source"])
        if profile is not None and row.profile is not None and row.profile[0] == profile:
            _check_used(row, r["value"], where)
            if row.id in seen:
                raise CalibrationError(f"{where}: id {row.id!r} is also the id of line {seen[row.id]}; each row "
                                       "needs its own id (the fit and its report key rows by it)")
            seen[row.id] = line
        out.append(row)
    return out


def _check_used(row: Row, raw: str, where: str) -> None:
    """A row the fit reads: a positive, finite, plausible value in its metric's unit, and whole-number shapes."""
    metric = row.metric.strip()
    if not row.id.strip():
        raise CalibrationError(f"{where}: empty id; each row needs its own id (the fit and its report cite rows by "
                               "it)")
    if row.category not in CATEGORIES:
        raise CalibrationError(f"{where}: category {row.category!r} is not one of the schema's; valid: "
                               f"{', '.join(CATEGORIES)}")
    if metric not in METRICS:
        raise CalibrationError(f"{where}: metric {row.metric!r} is not one torchsim reads; valid: {', '.join(METRICS)}")
    keys = PARAM_KEYS.get(row.category)
    unknown = sorted(set(row.params) - set(keys)) if keys is not None else []
    if unknown:
        raise CalibrationError(f"{where}: params_json key {unknown[0]!r} is not a {row.category} parameter; valid: "
                               f"{', '.join(keys or ())}")
    if row.category in KERNEL_CATEGORIES and not any(w in row.dtype.lower() for w in DTYPE_WORDS):
        raise CalibrationError(f"{where}: dtype {row.dtype!r} names no format the {row.category} predictor models; "
                               "valid: text naming bf16, fp16, fp8 (e4m3), fp4 (nvfp4), fp32 or tf32")
    high = MAX_VALUE.get(metric, OTHER_MAX_VALUE)
    if not (math.isfinite(row.value) and 0 < row.value <= high):
        raise CalibrationError(f"{where}: value {raw.strip()!r}: a {metric or 'measured'} value must be a finite "
                               f"number > 0 and at most {high:g}")
    units = UNITS.get(metric)
    if units is not None and row.unit.strip().lower() not in {u.lower() for u in units}:
        raise CalibrationError(f"{where}: unit {row.unit!r} is not the unit of metric {metric}; valid: "
                               f"{', '.join(units)}")
    for key in SHAPE_KEYS if row.category in KERNEL_CATEGORIES else ():  # a microbenchmark's N counts bytes
        v: Any = row.params.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_DIM:
            raise CalibrationError(f"{where}: params_json {key} = {json.dumps(v)[:40]} is not a shape dimension; "
                                   f"valid: a whole number from 1 to {MAX_DIM}, written without a decimal point or "
                                   "exponent")
