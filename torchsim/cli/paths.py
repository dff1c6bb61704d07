"""Output and input paths of a command, checked before any work starts (cli.main calls `check_outputs`).

Light on purpose (no pyarrow, no torch): it runs for every command.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from torchsim.exports.atomic import OutputError, check_destination, resolved

# output option -> (format, extensions it may have); --force-format skips the extension check
OUTPUT_FORMATS = {"parquet": ("Parquet", (".parquet", ".pq")),
                  "perfetto": ("Perfetto trace", (".pftrace", ".perfetto-trace", ".perfetto", ".trace", ".pb")),
                  "plot": ("PNG", (".png",))}
OUT_FORMATS = {"sweep": ("Parquet", (".parquet", ".pq")), "calibrate": ("what-if TOML", (".toml",)),
               "microbench": ("CSV", (".csv",))}  # --out
INPUT_OPTIONS = ("model", "hw", "routing", "measurements", "checkpoint", "requests")
# options whose empty value (`--grid ''`, a shell variable left unset) would otherwise mean "the default" silently
NON_EMPTY = (*INPUT_OPTIONS, "grid", "tile", "text", "seqs", "kv_lens", "tokens_per_expert", "ray_address")


def check_outputs(args: argparse.Namespace) -> None:
    """Before any work: each output path can be written (its directory exists and is writable), has its format's
    extension, is a regular file if it exists (a device, FIFO or socket is refused), and no two outputs, or an
    output and an input, are one file. Raises OutputError naming the option and the path."""
    for opt in NON_EMPTY:
        value = getattr(args, opt, None)
        if isinstance(value, (str, Path)) and not str(value).strip():
            name = "the model argument" if opt == "model" else f"--{opt.replace('_', '-')}"
            raise OutputError(f"{name} is empty; give a value or leave it out")
    outputs: list[tuple[str, Path]] = []
    formats = dict(OUTPUT_FORMATS)
    if getattr(args, "command", "") in OUT_FORMATS:
        formats["out"] = OUT_FORMATS[args.command]
    for opt, (fmt, exts) in formats.items():
        value = getattr(args, opt, None)
        if value is None:
            continue
        if not str(value).strip():
            raise OutputError(f"--{opt}: the path is empty; give a file name or leave the option out")
        path = Path(value)
        if path.suffix.lower() not in exts and not getattr(args, "force_format", False):
            raise OutputError(f"--{opt} {value}: writes {fmt}, so the name should end in {' or '.join(exts)} "
                              f"(or pass --force-format)")
        check_destination(resolved(path))
        outputs.append((f"--{opt}", path))
        companion = {"kernel": ("nodes", nodes_path), "serve": ("iterations", iterations_path)}.get(
            getattr(args, "command", ""))
        if opt == "parquet" and companion is not None:
            table, sibling = companion[0], Path(companion[1](value))
            try:  # the second table is written beside the first: a directory there must fail before any work
                check_destination(resolved(sibling))
            except OutputError as exc:
                raise OutputError(f"--parquet {value} also writes {sibling}: {exc}") from None
            outputs.append((f"--parquet (its {table} table)", sibling))
    inputs = [(f"--{opt}" if opt != "model" else "the model config", Path(v)) for opt in INPUT_OPTIONS
              if isinstance(v := getattr(args, opt, None), str) and v and Path(v).exists()]
    seen: dict[Path, str] = {}
    for what, path in outputs + inputs:
        key = path.resolve()
        if key in seen:
            raise OutputError(f"{what} and {seen[key]} are the same file ({path}); give each output its own path, "
                              f"never an input's")
        seen[key] = what


def nodes_path(parquet_path: str) -> str:
    """`run.parquet` -> `run.nodes.parquet`: where a single kernel's nodes table goes."""
    return _sibling(parquet_path, "nodes")


def iterations_path(parquet_path: str) -> str:
    """`run.parquet` -> `run.iterations.parquet`: where `torchsim serve` writes its per-iteration table."""
    return _sibling(parquet_path, "iterations")


def _sibling(parquet_path: str, table: str) -> str:
    p = Path(parquet_path)
    stem = p.name[: -len(".parquet")] if p.name.endswith(".parquet") else p.name
    return str(p.with_name(f"{stem}.{table}.parquet"))
