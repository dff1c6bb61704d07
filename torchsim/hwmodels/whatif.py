"""What-if hardware: a profile derived from a built-in one by overriding fields (from a TOML file or a sweep).

Sits beside the built-in profiles in torchsim.hwmodels; `get_profile("path/to/file.toml")` loads one, so every
command that takes a hardware name takes a what-if file. Overridden numbers carry provenance kind `assumed`
with the file (or the sweep point) as their source.

    base = "h100-sxm"
    name = "h100-fast-hbm"                  # optional
    dram_bytes_per_s = "4.7e12 B/s"         # value and unit in one string ...
    sm_count = {value = 144, unit = "SMs"}  # ... or a table (an optional `note` is kept)

    [provenance.dram_bytes_per_s]           # optional: where an overridden number comes from
    kind = "calibrated"                     # a provenance kind (default `assumed`)
    source = "torchsim calibrate: fitted to published_dev.csv rows GEMM-001, ..."
"""

from __future__ import annotations

import dataclasses
import math
import sys
import unicodedata
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the tomli backport (same API)
    import tomli as tomllib

from torchsim.hwmodels.quantity import KINDS, Quantity

RESERVED = ("base", "name", "description", "provenance")
# knob spellings people use for a field (the issue's `hbm_bandwidth`). `clock` is the max boost clock: predictions
# run each kernel at the highest clock up to clock_max_hz within the power limit (torchsim.sim.sustained);
# clock_hz is only the clock a plain simulate() is given.
ALIASES = {"hbm_bandwidth": "dram_bytes_per_s", "hbm_bytes_per_s": "dram_bytes_per_s",
           "clock": "clock_max_hz", "sms": "sm_count", "l2_bandwidth": "l2_bytes_per_s",
           "power_limit": "power_limit_w", "tdp": "power_limit_w"}
# fields that count things: whole numbers >= 1
COUNTS = frozenset({"sm_count", "subpartitions_per_sm", "max_threads_per_sm", "max_ctas_per_sm", "registers_per_sm",
                    "tensor_inflight_subops", "tensor_datapath_rows", "noc_grid_x", "noc_grid_y", "tensix_enabled",
                    "compute_grid_x", "compute_grid_y"})
# the most a count may be: a few times the largest part of its kind, so a what-if explores designs, while a typo
# (sm_count = 1000000) is refused at load instead of building a million-SM machine for minutes (issue 14)
MAX_COUNT = {"sm_count": 1024, "subpartitions_per_sm": 16, "max_threads_per_sm": 8192, "max_ctas_per_sm": 256,
             "registers_per_sm": 1 << 20, "tensor_inflight_subops": 256, "tensor_datapath_rows": 1024,
             "noc_grid_x": 64, "noc_grid_y": 64, "tensix_enabled": 4096, "compute_grid_x": 64, "compute_grid_y": 64}
# "the part has one or it has none" fields: 0 on a base means its kernels never use the unit (TMEM: sm100 only), so
# a what-if can neither add it to a part without one nor take it from a part whose kernels need it
PRESENCE = {"tmem_bytes_per_sm": "TMEM", "tmem_bytes_per_clk_per_sm": "TMEM"}
# physical orderings of a profile's numbers, (smaller, larger): checked after the overrides, naming both values
ORDERED = (("smem_per_cta_bytes", "smem_per_sm_bytes"), ("clock_min_hz", "clock_max_hz"), ("clock_hz", "clock_max_hz"),
           ("clock_min_hz", "clock_hz"), ("dram_bytes_per_s", "dram_peak_bytes_per_s"),
           ("dram_read_bytes_per_s", "dram_peak_bytes_per_s"), ("dram_write_bytes_per_s", "dram_peak_bytes_per_s"),
           ("dram_copy_bytes_per_s", "dram_peak_bytes_per_s"), ("static_power_w", "power_limit_w"))
# fields that must be > 0 besides the counts (a zero here divides or stalls the engine)
POSITIVE = frozenset({"clock_hz", "dram_bytes_per_s", "dram_peak_bytes_per_s", "l2_bytes_per_s",
                      "tensor_bf16_flop_per_clk_per_sm", "smem_per_sm_bytes", "smem_per_cta_bytes",
                      "fma_flop_per_clk_per_sm", "sfu_ops_per_clk_per_sm", "ldst_bytes_per_clk_per_sm",
                      "tensor_subop_flop", "tensor_latency_cycles", "l2_bytes", "tma_bytes_per_clk_per_sm",
                      "tmem_bytes_per_clk_per_sm", "power_limit_w", "clock_max_hz", "clock_min_hz",
                      "dvfs_voltage_floor", "dram_read_bytes_per_s", "dram_write_bytes_per_s",
                      "dram_copy_bytes_per_s"})
# how far a what-if may move a number from its base (either way): beyond it, a typo (1e-300 B/s) would overflow
# the engine's cycle arithmetic instead of exploring a design
MAX_RATIO = 1e4
# DRAM bandwidth by traffic kind: scaled with dram_bytes_per_s when only that is overridden
STREAMS = ("dram_read_bytes_per_s", "dram_write_bytes_per_s", "dram_copy_bytes_per_s")
_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "m": 1e-3, "u": 1e-6,
           "µ": 1e-6, "n": 1e-9, "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}


class WhatIfError(ValueError):
    """A what-if override is wrong; the message names the field and the file (or sweep point)."""


class WhatIfFileNotFoundError(WhatIfError, FileNotFoundError):
    """The what-if file named is not there (or not a regular file): a WhatIfError, and a FileNotFoundError for
    callers that catch that."""

    __str__ = BaseException.__str__  # the message as written, not OSError's "[Errno ...]" form


def override_fields(base: Any) -> dict[str, Quantity]:
    """The overridable numbers of a profile: every Quantity field, by name."""
    return {f.name: getattr(base, f.name) for f in dataclasses.fields(base)
            if isinstance(getattr(base, f.name), Quantity)}


def canonical(field: str) -> str:
    return ALIASES.get(field, field)


def parse_value(raw: Any, q: Quantity, field: str, where: str, bare_numbers: bool = True) -> tuple[float, str]:
    """(value in the field's own unit, note) from `"5e12 B/s"`, `{value=..., unit=...}` or (when `bare_numbers`)
    a number already in the field's unit."""
    note = ""
    if isinstance(raw, Mapping):
        unknown = set(raw) - {"value", "unit", "note"}
        if unknown or "value" not in raw:
            raise WhatIfError(f"{where}: field {field}: a table needs `value` and `unit` (and an optional `note`), "
                              f"got keys {sorted(raw)}")
        value, unit, note = raw["value"], raw.get("unit"), str(raw.get("note", ""))
    elif isinstance(raw, str):
        parts = raw.strip().split(None, 1)
        if not parts:
            raise WhatIfError(f"{where}: field {field}: empty value; e.g. {field} = \"{q.value:g} {q.unit}\"")
        value, unit = parts[0], parts[1] if len(parts) > 1 else None
    elif isinstance(raw, (int, float)) and not isinstance(raw, bool):
        # sweeps give numbers in the field's unit; a file may give a bare count (sm_count = 66), never a bare rate
        value, unit = raw, q.unit if bare_numbers or field in COUNTS or q.unit == "bool" else None
    elif isinstance(raw, bool) and q.unit == "bool":
        value, unit = raw, q.unit
    else:
        raise WhatIfError(f"{where}: field {field}: expected \"<number> {q.unit}\" or {{value=..., unit=...}}, "
                          f"got {raw!r}")
    example = f"{field} = \"{q.value:g} {q.unit}\""
    if isinstance(value, bool) and q.unit == "bool":  # a 0/1 switch: true/false is its natural spelling
        return float(value), note
    if isinstance(value, bool):
        raise WhatIfError(f"{where}: field {field}: true/false is not a number; e.g. {example}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise WhatIfError(f"{where}: field {field}: {value!r} is not a number; e.g. {example}") from None
    if unit is None:
        raise WhatIfError(f"{where}: field {field}: give a unit, e.g. {field} = \"{value} {q.unit}\"")
    return number * unit_scale(str(unit), q.unit, field, where), note


def unit_scale(unit: str, base_unit: str, field: str, where: str) -> float:
    """Factor from `unit` to the field's unit `base_unit`: the same unit, or it with an SI/binary prefix."""
    unit = unit.strip()
    if unit == base_unit:
        return 1.0
    if unit.endswith(base_unit):
        prefix = unit[: len(unit) - len(base_unit)]
        if prefix in _PREFIX:
            return _PREFIX[prefix]
    raise WhatIfError(f"{where}: field {field}: unit {unit!r} does not match the field's unit {base_unit!r} "
                      f"(valid: {base_unit!r}, optionally with a prefix such as k, M, G, T, Ki, Mi, n, u)")


def check_value(field: str, value: float, unit: str, where: str, base: float | None = None) -> None:
    """One overridden number on its own: finite, near its base, a whole count within MAX_COUNT, 0/1 for a switch."""
    if not math.isfinite(value):
        raise WhatIfError(f"{where}: field {field}: {value} is not a finite number")
    if unit == "bool" and value not in (0, 1):
        raise WhatIfError(f"{where}: field {field}: {value:g} is not a switch value; valid: 0 or 1 (or false/true)")
    if field in MAX_COUNT and value > MAX_COUNT[field]:
        raise WhatIfError(f"{where}: field {field}: {value:g} {unit} is above the limit of {MAX_COUNT[field]} "
                          f"{unit} (a few times the largest part; simulating more would take minutes per kernel)")
    if base is not None and base > 0 and value > 0 and not 1 / MAX_RATIO <= value / base <= MAX_RATIO:
        raise WhatIfError(f"{where}: field {field}: {value:g} {unit} is more than {MAX_RATIO:g}x away from the "
                          f"base's {base:g} {unit}; what-ifs explore designs within that range")
    if value < 0:
        raise WhatIfError(f"{where}: field {field}: {value:g} {unit} is negative")
    if field in COUNTS:
        if value < 1 or value != int(value):
            raise WhatIfError(f"{where}: field {field}: {value:g} {unit} must be a whole number >= 1")
    elif field in POSITIVE and value <= 0 and value != base:
        raise WhatIfError(f"{where}: field {field}: {value:g} {unit} must be > 0")


def derive_profile(base: Any, overrides: Mapping[str, Any], *, where: str, name: str | None = None,
                   description: str | None = None, bare_numbers: bool = True,
                   provenance: Mapping[str, Any] | None = None) -> Any:
    """`base` with `overrides` ({field: "5e12 B/s" | {value, unit} | number in the field's unit}) applied.

    A file must give units (`bare_numbers=False`). Each new number is `assumed` with `where` (the file, the
    sweep point) as its source, unless `provenance` gives the field's {kind, source} (a calibrated what-if
    records the rows it was fitted to). Raising the sustained
    DRAM bandwidth above the base's peak raises the peak by the same factor, so a what-if need not set both.

    >>> from torchsim.hwmodels import get_profile
    >>> hw = derive_profile(get_profile("h100-sxm"), {"dram_bytes_per_s": "4.7 TB/s"}, where="example")
    >>> hw.dram_bytes_per_s.value, hw.dram_bytes_per_s.kind
    (4700000000000.0, 'assumed')
    """
    fields = override_fields(base)
    changes: dict[str, Quantity] = {}
    prov = _check_provenance(provenance or {}, {canonical(f) for f in overrides}, where)
    for raw_field, raw in overrides.items():
        field = canonical(raw_field)
        if field not in fields:
            close = sorted(f for f in fields if raw_field.split("_")[0] in f)[:6]
            hint = f"; similar: {', '.join(close)}" if close else f"; valid fields: {', '.join(sorted(fields))}"
            raise WhatIfError(f"{where}: unknown profile field {raw_field!r} for base {base.name!r}{hint}")
        q = fields[field]
        value, note = parse_value(raw, q, field, where, bare_numbers)
        check_value(field, value, q.unit, where, float(q.value))
        if field in PRESENCE and (value > 0) != (q.value > 0):
            unit_name = PRESENCE[field]
            raise WhatIfError(
                f"{where}: field {field}: {value:g} {q.unit} on base {base.name!r}, which has "
                + (f"no {unit_name} ({field} = 0; {unit_name} is on sm100 parts only, e.g. base = \"b200\")"
                   if q.value <= 0 else f"{unit_name} its kernels need (base value {q.value:g} {q.unit}); "
                   "valid: a value > 0"))
        if field in COUNTS:
            value = int(value)
        src = f"what-if {where}: {field} = {raw if not isinstance(raw, (int, float)) else f'{value:g} {q.unit}'}"
        kind, src = prov.get(field, ("assumed", src))
        changes[field] = Quantity(value, q.unit, kind, src, note or f"was {q.value:g} {q.unit} ({q.kind})")
    sustained, peak = changes.get("dram_bytes_per_s"), fields.get("dram_peak_bytes_per_s")
    if sustained is not None and peak is not None and "dram_peak_bytes_per_s" not in changes:
        base_sustained = fields["dram_bytes_per_s"].value
        if sustained.value > peak.value and base_sustained > 0:
            scaled = peak.value * sustained.value / base_sustained
            changes["dram_peak_bytes_per_s"] = Quantity(
                scaled, peak.unit, "assumed", f"what-if {where}: peak scaled with dram_bytes_per_s "
                f"({sustained.value / base_sustained:.3g}x of {base.name}'s)")
    if sustained is not None and fields["dram_bytes_per_s"].value > 0:  # stream figures scale with the sustained
        ratio = sustained.value / fields["dram_bytes_per_s"].value
        for stream in STREAMS:
            if stream in fields and stream not in changes:
                q = fields[stream]
                cap = changes.get("dram_peak_bytes_per_s", fields.get("dram_peak_bytes_per_s"))
                value = min(q.value * ratio, cap.value) if cap is not None else q.value * ratio
                changes[stream] = Quantity(value, q.unit, "assumed", f"what-if {where}: scaled with "
                                         f"dram_bytes_per_s ({ratio:.3g}x of {base.name}'s, at most the peak)")
    if "smem_per_cta_bytes" not in changes and "smem_per_sm_bytes" in changes and "smem_per_cta_bytes" in fields:
        cta = fields["smem_per_cta_bytes"]
        if cta.value > changes["smem_per_sm_bytes"].value:  # a CTA never gets more than its SM has
            changes["smem_per_cta_bytes"] = Quantity(changes["smem_per_sm_bytes"].value, cta.unit, "assumed",
                                                     f"what-if {where}: capped at smem_per_sm_bytes")
    if "clock_max_hz" in changes and "clock_hz" not in changes and "clock_hz" in fields:
        clk = fields["clock_hz"]
        if clk.value > changes["clock_max_hz"].value:  # a lower max boost clock lowers the sustained one with it
            changes["clock_hz"] = Quantity(changes["clock_max_hz"].value, clk.unit, "assumed",
                                           f"what-if {where}: capped at clock_max_hz")
    _check_order(fields, changes, {canonical(f) for f in overrides}, base.name, where)
    extra: dict[str, Any] = {"name": name or base.name}
    if description is not None and any(f.name == "description" for f in dataclasses.fields(base)):
        extra["description"] = description
    try:
        return dataclasses.replace(base, **changes, **extra)
    except ValueError as exc:
        raise WhatIfError(f"{where}: the overrides make an inconsistent profile: {exc}") from None


def _check_order(fields: Mapping[str, Quantity], changes: Mapping[str, Quantity], overridden: set[str],
                 base_name: str, where: str) -> None:
    """The ORDERED relations between the new numbers: a CTA's shared memory within its SM's, the clock within its
    DVFS range, the sustained DRAM bandwidths within the peak. Checked here, naming both numbers and which ones the
    what-if set, because the engine would otherwise run (or assert) on a part that cannot exist."""
    for small, large in ORDERED:
        if small not in fields or large not in fields or not {small, large} & set(changes):
            continue
        a, b = changes.get(small, fields[small]), changes.get(large, fields[large])
        strict = small == "static_power_w"
        if a.value >= b.value if strict else a.value > b.value:
            def said(f: str, q: Quantity) -> str:
                origin = "set here" if f in overridden else "derived" if f in changes else f"{base_name}'s"
                return f"{f} {q.value:g} {q.unit} ({origin})"
            raise WhatIfError(f"{where}: {said(small, a)} {'is not below' if strict else 'exceeds'} "
                              f"{said(large, b)}; {small} must be "
                              f"{'below' if strict else 'at most'} {large}")


def _check_provenance(provenance: Mapping[str, Any], overridden: set[str], where: str) -> dict[str, tuple[str, str]]:
    out = {}
    for raw_field, entry in provenance.items():
        field = canonical(raw_field)
        if field not in overridden:
            raise WhatIfError(f"{where}: [provenance.{raw_field}] names a field the file does not override")
        if not isinstance(entry, Mapping) or set(entry) - {"kind", "source"} or "source" not in entry:
            raise WhatIfError(f"{where}: [provenance.{raw_field}] needs `source` (and an optional `kind`), got "
                              f"{entry!r}")
        kind = str(entry.get("kind", "assumed"))
        if kind not in KINDS:
            raise WhatIfError(f"{where}: [provenance.{raw_field}] kind {kind!r} is not one of {', '.join(KINDS)}")
        out[field] = (kind, str(entry["source"]))
    return out


def load_whatif(path: str | Path, builtin: Callable[[str], Any]) -> Any:
    """Load a what-if TOML file: `base` names a built-in profile; every other key overrides one of its fields.

    `builtin(name)` looks the base up: `get_profile("file.toml")` passes the registry's own (this module does not
    import the registry, which imports this one to load `.toml` names).
    """
    p = Path(path)
    if not p.is_file():
        what = "is not a regular file" if p.exists() else "does not exist"
        raise WhatIfFileNotFoundError(f"what-if hardware file {str(path)!r} {what}; give a TOML file with "
                                      "`base = \"<profile>\"` and the fields it overrides")
    try:
        doc = tomllib.loads(p.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise WhatIfError(f"{p}: not a text file (byte {exc.start} is not UTF-8); a what-if profile is TOML") from None
    except tomllib.TOMLDecodeError as exc:
        raise WhatIfError(f"{p}: not valid TOML: {exc}") from None
    except RecursionError:
        raise WhatIfError(f"{p}: tables nested too deeply to be a profile (a what-if is flat: field = value)") from None
    base_name = doc.get("base")
    if not isinstance(base_name, str):
        raise WhatIfError(f"{p}: needs `base = \"<profile>\"` naming a built-in profile (e.g. \"h100-sxm\")")
    if base_name.endswith(".toml"):
        raise WhatIfError(f"{p}: base {base_name!r} must be a built-in profile name, not another what-if file")
    try:
        base = builtin(base_name)
    except KeyError as exc:
        raise WhatIfError(f"{p}: base: {exc.args[0]}") from None
    overrides = {k: v for k, v in doc.items() if k not in RESERVED}
    provenance = doc.get("provenance", {})
    if not isinstance(provenance, Mapping):
        raise WhatIfError(f"{p}: `provenance` must be a table of [provenance.<field>] tables")
    if not overrides:
        raise WhatIfError(f"{p}: overrides no field of {base_name!r}; add e.g. dram_bytes_per_s = \"4.7e12 B/s\"")
    name = _check_name(doc["name"], p, builtin) if "name" in doc else f"{base.name}+{p.stem}"
    return derive_profile(base, overrides, where=str(p), name=str(name), description=doc.get("description"),
                          bare_numbers=False, provenance=provenance)


def _check_name(name: Any, p: Path, builtin: Callable[[str], Any]) -> str:
    """A what-if's `name`: a non-empty string without control characters that is no built-in profile's name (the
    columns of `torchsim compare` and the `hw show` header would show two parts as one)."""
    if not isinstance(name, str):
        raise WhatIfError(f"{p}: name must be a string (e.g. name = \"h100-fast-hbm\"), got {type(name).__name__} "
                          f"{name!r:.60}")
    if not name.strip():
        raise WhatIfError(f"{p}: name is empty; give a name (e.g. name = \"h100-fast-hbm\") or leave it out "
                          f"(default: the base's name + the file's stem, {p.stem!r})")
    if any(unicodedata.category(ch) == "Cc" for ch in name):  # a newline or an escape breaks `hw show`'s header
        raise WhatIfError(f"{p}: name {name!r:.60} has control characters; valid: printable characters on one line")
    try:
        builtin(name)
    except (KeyError, ValueError):
        return name
    raise WhatIfError(f"{p}: name {name!r} is a built-in profile's name; a what-if needs its own (e.g. "
                      f"\"{name}-whatif\") so results and comparisons tell the two apart")
