"""The `torchsim` command: one subcommand module per noun (hw, kernel, predict, compare, sweep, ...).

Each module in COMMANDS defines `register(subparsers)`, adding its parser with `set_defaults(func=...)`;
`func(args)` returns the exit status. Errors a user caused (bad shapes, unknown names) are `UsageError`s
or `ValueError`s and print as one clear line, exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = ("hw", "kernel", "routing", "predict", "compare", "sweep", "calibrate")


class UsageError(ValueError):
    """Bad input from the command line; printed without a traceback."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="torchsim", description="Predict PyTorch model and kernel performance "
                                     "on GPUs and Tensix accelerators without the hardware.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"torchsim.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (UsageError, ValueError, KeyError, OSError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"torchsim {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
