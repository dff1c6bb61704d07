"""The `torchsim` command: one subcommand module per noun (hw, kernel, predict, compare, sweep, ...).

Each module in COMMANDS defines `register(subparsers)`, adding its parser with `set_defaults(func=...)`;
`func(args)` returns the exit status. Errors a user caused (bad shapes, unknown names) are `UsageError`s
or `ValueError`s and print as one clear line, exit status 2. Ctrl-C and SIGTERM stop the command within a
second (worker processes are terminated, temporary files removed, existing outputs left as they were) and
exit 130 / 143 with one line; a closed stdout (`| head`) ends quietly. Anything else is a bug: one line asking
for a report, the traceback with `--debug`.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import signal
import sys
import threading
from typing import Any, NoReturn

from torchsim import MissingExtraError

COMMANDS = ("hw", "kernel", "routing", "predict", "serve", "compare", "sweep", "calibrate", "microbench", "collective")


class UsageError(ValueError):
    """Bad input from the command line; printed without a traceback."""


class Terminated(BaseException):
    """SIGTERM, raised in the main thread so that `with` blocks (atomic writes, worker pools) clean up."""


REPORT_URL = "the torchsim issue tracker"
# The collector's older generations while a command runs. Importing torch and torch.export allocates ~1M objects
# that live as long as the process (modules, their functions, the operator registry). The collector's full passes
# over them while they pile up (six in a cold default predict, 0.03-0.25 s each as the heap grows, ~0.8 s of the main
# process's ~4.5 s of CPU on this project's 2-core machine) free nothing, nor do the middle generation's (every 10
# young passes by Python's default: 85 in a cold default predict, 0.1 s, each going over every survivor of torch's
# import since the last; at 100 young passes apart, 13 of them cost 0.18-0.24 s, as each goes over more). So a command
# runs the middle generation's passes MIDDLE_COLLECTION_EVERY young passes apart (about 700k net allocations: a cold
# default predict makes ~1,000 young passes in its main process) and its full passes FULL_COLLECTION_EVERY middle
# ones apart (Python: 10). The young generation keeps Python's threshold, so the cyclic garbage of each export and
# simulation is still reclaimed young; what survives it is kept longer (peak memory of the default: +2 MB).
MIDDLE_COLLECTION_EVERY = 1000
FULL_COLLECTION_EVERY = 100
# the commands with subcommands, and the attribute their subparsers store the subcommand's name in
_NESTED = {"kernel": "kernel", "routing": "routing_command", "hw": "hw_command"}


def int_in(low: int, high: int | None = None, what: str = "") -> Any:
    """An argparse `type` for an integer in [low, high]: `--top -1` is an error naming the option and the range
    (the bounds above are resource limits: far beyond any real scenario, they stop a typo from running for hours).
    """
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f">= {low}"
            raise argparse.ArgumentTypeError(f"must be {bound}{' (' + what + ')' if what else ''}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


class Parser(argparse.ArgumentParser):
    """argparse's parser with a one-line usage error: `torchsim predict: error: argument --decode: ...` and a
    pointer to --help, instead of the whole usage block (19 lines for predict) above the line that matters.
    A parser given its own short `usage` (one line) keeps printing it above the error."""

    def error(self, message: str) -> NoReturn:
        head = f"{self.format_usage().strip()}\n" if self.usage else ""
        self.exit(2, f"{head}{self.prog}: error: {message} (`{self.prog} --help` lists the options)\n")


# each command's line in `torchsim --help` (its parser's help: the commands' modules take it from here)
COMMAND_HELP = {
    "hw": "list hardware profiles or show one with the provenance of every number",
    "kernel": "simulate one kernel",
    "routing": "record or show MoE routing counts (tokens per expert per layer)",
    "predict": "predict prefill and decode latency of a model on a GPU",
    "serve": "serve a model under a request load (continuous batching, latency percentiles)",
    "compare": "predict one model on several hardware profiles, side by side",
    "sweep": "sweep hardware knobs over a model step or one kernel",
    "calibrate": "fit a few named physical parameters of a profile to measurements",
    "microbench": "measure this machine's GPU into a file `torchsim calibrate` reads",
    "collective": "cost of an NCCL collective on a multi-GPU system, or of a tt-metal CCL op on a Tenstorrent mesh "
                  "(time, algbw, busbw)",
}


def build_parser(command: str | None = "") -> argparse.ArgumentParser:
    """The `torchsim` parser. `command` "" (the default) builds every command's options; a command's name builds
    that one's alone, the others listed by name and help line only (what `main` does with the command line, so that
    `--help` and an argument error import no more than the command named needs); None lists them all that way."""
    parser = Parser(prog="torchsim", description="Predict PyTorch model and kernel performance "
                                     "on GPUs and Tensix accelerators without the hardware.")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an internal error")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        if command == "" or name == command:
            importlib.import_module(f"torchsim.cli.{name}").register(sub)
        else:
            sub.add_parser(name, help=COMMAND_HELP[name])
    return parser


def command_of(argv: list[str]) -> str | None:
    """The command a command line names (its first word that is not an option), or None."""
    for word in argv:
        if len(word) > 2 and "--debug".startswith(word):  # the root option, or its abbreviation (`--deb`)
            continue
        return word if word in COMMANDS else None
    return None


QUANT_HELP = ("decoder-layer GEMMs in a quantised format: w8a16 / w4a16 (int weights, group-wise scales, dequantised "
              "in the main loop as Marlin/Machete do), w8a8 (int8 tensor cores), fp8 (per-tensor), fp8-block (128x128 "
              "block scales, DeepGEMM on sm90), nvfp4 / mxfp4 (block-scaled FP4, B200); none = the model dtype "
              "(default: a config's quantization_config, else none)")


def add_quant_option(p: argparse.ArgumentParser, help_text: str = QUANT_HELP) -> None:
    """--quant FORMAT (torchsim.lowering.quant), shared by predict, compare, sweep and the GEMM kernels."""
    from torchsim.lowering.quant import FORMATS

    p.add_argument("--quant", default=None, choices=(*FORMATS, "none"), help=help_text)


def approximated(args: argparse.Namespace) -> Any:
    """The model argument: with --approximate, a config file read accepting the fields torchsim cannot model."""
    if not getattr(args, "approximate", False):
        return args.model
    from torchsim.models.registry import get_config

    return get_config(args.model, approximate=True)


def run() -> None:
    """The `torchsim` command: main(), then exit. After Ctrl-C or SIGTERM the process ends at once (os._exit):
    the `with` blocks have already left the outputs as they were and stopped the worker processes, and the
    interpreter's teardown (torch, the pool's threads) takes seconds on a loaded machine. A signal arriving in
    that teardown after a command succeeded ends it with the command's status."""
    code = main()
    if code in (130, 143):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    # the command has finished (its outputs are written): a signal during the interpreter's teardown ends the
    # process at once with the command's own status, not as killed by the signal (which reads as "nothing changed")
    def finished(signum: int, frame: Any) -> None:
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            pass
        os._exit(code)

    signal.signal(signal.SIGINT, finished)
    signal.signal(signal.SIGTERM, finished)
    if _skip_teardown():
        os._exit(code)
    sys.exit(code)


def _skip_teardown() -> bool:
    """True when the process may end without the interpreter's teardown, which frees every object one by one
    (a cold `predict` holds torch, its export caches and the simulated graphs: ~1 s on this project's 2-core
    development machine) and changes nothing outside the process: the command's outputs are written and closed
    (torchsim.exports.atomic renames each into place before the command returns), its worker processes have been
    stopped by their `with` blocks, and standard output and error flush here. Not when Ray is loaded (its exit
    hook disconnects this driver from the cluster) or when a flush fails (a closed pipe: the normal exit reports
    it as Python does)."""
    if "ray" in sys.modules:
        return False
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(command_of(argv))
    try:
        args, extra = parser.parse_known_args(argv)
        if getattr(args, "command", None) in COMMANDS and not hasattr(args, "func"):  # the command came after an
            # abbreviated root option (`--deb`): parse again with its own parser
            parser = build_parser(args.command)
            args, extra = parser.parse_known_args(argv)
        if extra:  # named with the command they were given to (the root parser would say `torchsim: error`)
            nested = getattr(args, _NESTED.get(args.command, ""), None)
            command = " ".join(["torchsim", args.command, *([nested] if isinstance(nested, str) else [])])
            parser.exit(2, f"{command}: error: unrecognized arguments: {' '.join(extra)} (`{command} --help` lists "
                        "the options)\n")
    except SystemExit as exc:  # --help (0) or a usage error argparse has printed (2): a status, not an exit
        return exc.code if isinstance(exc.code, int) else 2
    import warnings

    from torchsim.exports.atomic import WRITTEN
    from torchsim.prediction.records import MemoryWarning

    written = len(WRITTEN)  # outputs replaced before this command (an in-process caller's earlier commands)
    # the commands print a prediction's warnings themselves (once, without a Python source line)
    warnings.filterwarnings("ignore", category=MemoryWarning)
    previous_show, warnings.showwarning = warnings.showwarning, _one_line_cache_warnings(warnings.showwarning)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    previous_int = signal.signal(signal.SIGINT, _on_sigint) if _default_sigint() else None
    previous_hook, sys.unraisablehook = sys.unraisablehook, _redeliver_if_signal(sys.unraisablehook)
    thresholds = gc.get_threshold()
    gc.set_threshold(thresholds[0], max(thresholds[1], MIDDLE_COLLECTION_EVERY),
                     max(thresholds[2], FULL_COLLECTION_EVERY))
    try:
        from torchsim.cli.paths import check_outputs

        check_outputs(args)  # before any work: a bad output path fails in a second, not after the simulation
        check_combinations(args)
        return int(args.func(args) or 0)
    except (UsageError, ValueError, KeyError, OSError, MissingExtraError) as exc:
        if isinstance(exc, BrokenPipeError):
            return _quiet_after_broken_pipe()
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        name = getattr(exc, "filename", None)
        if isinstance(exc, OSError) and isinstance(name, str) and len(name) > 80:  # ENAMETOOLONG echoes it whole
            msg = f"{exc.strerror or type(exc).__name__}: {name[:60]!r}... ({len(name):,} characters)"
        print(f"torchsim {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"torchsim {args.command}: interrupted; {_changed(written)}", file=sys.stderr)
        return 130
    except Terminated:
        print(f"torchsim {args.command}: terminated; {_changed(written)}", file=sys.stderr)
        return 143
    except Exception as exc:  # a bug: say so in one line, keep the traceback for --debug
        if args.debug:
            raise
        print(f"torchsim {args.command}: internal error ({type(exc).__name__}: {exc}); please report it to "
              f"{REPORT_URL} with the command line (rerun with --debug for the traceback)", file=sys.stderr)
        return 70
    finally:
        _WATCHDOG.cancel()
        gc.set_threshold(*thresholds)
        warnings.showwarning = previous_show
        sys.unraisablehook = previous_hook
        signal.signal(signal.SIGTERM, previous)
        if previous_int is not None:
            signal.signal(signal.SIGINT, previous_int)


def check_combinations(args: argparse.Namespace) -> None:
    """Options that do nothing without another are an error before any work (cli.main), not silently ignored:
    a user who typed them expected them to change the result."""
    needs = [("detail", "perfetto", "--detail N adds the N slowest kernels' node views to the --perfetto trace; "
              "give --perfetto PATH too"),
             ("sp", "tp", "--sp splits the sequence around the norms over the --tp ranks; give --tp N (N > 1)"),
             ("tune_budget", "tune", "--tune-budget sets how many candidates --tune simulates; add --tune"),
             ("micro_batches", "pp", "--micro-batches splits each step's batch through the --pp pipeline stages; give "
              "--pp N (N > 1)"),
             ("kv", "decode", "--kv sets the KV length at the first decode step; with --decode 0 there is none"),
             ("decode_samples", "decode", "--decode-samples sets how many decode steps are simulated; with --decode 0 "
              "there are none")]
    for option, other, message in needs:
        value, partner = getattr(args, option, None), getattr(args, other, None)
        if option == "sp" and (not isinstance(value, bool) or getattr(args, "command", "") == "compare"):
            continue  # serve's --sp is refused by name there (not served); compare's --hw items carry their own tp
        inactive = partner is None or partner is False or (other in ("tp", "pp") and partner == 1) \
            or (other == "decode" and partner == 0)
        if hasattr(args, other) and value is not None and value is not False and value != 0 and inactive:
            raise UsageError(message)
    samples, steps = getattr(args, "decode_samples", None), getattr(args, "decode", None)
    if isinstance(samples, int) and isinstance(steps, int) and 0 < steps < samples:
        raise UsageError(f"--decode-samples {samples} is more than the {steps} decode steps (--decode); give "
                         f"1..{steps}")
    outputs = [o for o in ("parquet", "perfetto", "plot", "out") if getattr(args, o, None) is not None]
    if getattr(args, "force_format", False) and not outputs:
        raise UsageError("--force-format writes an output whose name has another format's extension; no output path "
                         "(--parquet, --perfetto, --plot, --out) was given")
    if getattr(args, "command", "") == "collective" and getattr(args, "factor", None) is not None \
            and ".." not in str(getattr(args, "size", "")):
        raise UsageError(f"--factor {args.factor} is the step of a size sweep; give --bytes LOW..HIGH (e.g. "
                         f"8B..1GiB) to sweep, or drop --factor")


class _Watchdog:
    """Ends the process if the command has not stopped STOP_WITHIN_S after Ctrl-C or SIGTERM: the `with` blocks
    normally clean up in well under a second, but a cleanup stuck in a library (a pool's lock taken when the
    signal arrived) must not keep the command alive. Cancelled when main() returns."""

    def __init__(self) -> None:
        self.timer: threading.Timer | None = None

    def start(self, code: int, word: str) -> None:
        if self.timer is None:
            self.timer = threading.Timer(STOP_WITHIN_S, self._fire, (code, word))
            self.timer.daemon = True
            self.timer.start()

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    @staticmethod
    def _fire(code: int, word: str) -> None:
        print(f"torchsim: {word}; stopping took over {STOP_WITHIN_S:.0f} s, ended without waiting for the cleanup",
              file=sys.stderr, flush=True)
        os._exit(code)


STOP_WITHIN_S = 5.0
_WATCHDOG = _Watchdog()


def _default_sigint() -> bool:
    """Ctrl-C is ours to handle only where Python's own handler is in place (not ignored, not a caller's)."""
    return signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _redeliver_if_signal(hook: Any) -> Any:
    """An unraisable-exception hook that does not lose Ctrl-C or SIGTERM. A signal's exception raised while Python
    runs a weakref callback or a __del__ (a worker pool's bookkeeping, measured: a SIGINT landing in
    WeakValueDictionary's remove callback) is only printed as "Exception ignored in ..." and the command went on to
    finish and write its outputs. The hook sends the signal again from a timer thread a few milliseconds later
    (sent at once, its handler would raise inside the hook, where the exception is lost again), so it is raised in
    the code that runs then; anything else goes to the previous hook."""
    def redeliver(unraisable: Any) -> None:
        exc = unraisable.exc_value
        if isinstance(exc, (KeyboardInterrupt, Terminated)):
            signum = signal.SIGINT if isinstance(exc, KeyboardInterrupt) else signal.SIGTERM
            timer = threading.Timer(0.01, os.kill, (os.getpid(), signum))
            timer.daemon = True
            timer.start()
            return
        hook(unraisable)
    return redeliver


def _changed(before: int) -> str:
    """What an interrupted command changed: nothing, or the outputs it had already replaced whole."""
    from torchsim.exports.atomic import WRITTEN

    done = WRITTEN[before:]
    return f"{', '.join(done)} had been written (complete); no other output was changed" if done else \
        "no output was changed"


def _one_line_cache_warnings(show: Any) -> Any:
    """A damaged cache entry (discarded and recomputed) is one line on stderr, not Python's two-line warning with
    the source line that read it; other warnings go to `show`."""
    def one_line(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
                 line: str | None = None) -> None:
        from torchsim.prediction.cache import CacheWarning

        if issubclass(category, CacheWarning):
            print(f"warning: {message}", file=file or sys.stderr)
            return
        show(message, category, filename, lineno, file, line)
    return one_line


def _on_sigint(signum: int, frame: Any) -> None:
    _WATCHDOG.start(130, "interrupted")
    raise KeyboardInterrupt()


def _on_sigterm(signum: int, frame: Any) -> None:
    _WATCHDOG.start(143, "terminated")
    raise Terminated()


def _quiet_after_broken_pipe() -> int:
    """The reader of stdout went away (`| head`): stop quietly; point stdout at /dev/null so the interpreter's
    final flush does not complain."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout without a file descriptor: nothing to redirect
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
