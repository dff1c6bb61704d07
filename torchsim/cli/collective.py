"""`torchsim collective COLLECTIVE --system NAME --ranks N --bytes SIZE`: the cost of one NCCL collective.

    torchsim collective all-reduce --system dgx-h100 --ranks 8 --bytes 1MiB
    torchsim collective all-to-all --system dgx-b200 --ranks 8 --bytes 8B..8GiB --json

A size range `LOW..HIGH` sweeps like nccl-tests' `-b LOW -e HIGH -f 2` (`--factor` sets the step). Prints the
time, algorithm and bus bandwidth, the algorithm and protocol NCCL would pick and the SMs (channels) it
occupies (torchsim.sim.collectives).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from torchsim.cli import COMMAND_HELP, UsageError, int_in


def register(sub: Any) -> None:
    from torchsim.sim.collectives import ALGORITHMS, COLLECTIVES, PROTOCOLS

    p = sub.add_parser("collective", help=COMMAND_HELP["collective"])
    p.add_argument("name", metavar="COLLECTIVE", help=f"one of {', '.join(COLLECTIVES)}")
    p.add_argument("--system", required=True, help="system profile, e.g. dgx-h100 or t3000 (`torchsim hw list`), "
                   "or a what-if .toml based on a GPU system")
    p.add_argument("--ranks", type=int_in(1, 4096, "GPUs taking part"), default=None,
                   help="GPUs taking part (default: all of the system's)")
    p.add_argument("--bytes", dest="size", default="1MiB", help="message size (8B, 64KiB, 1MiB, 1GB; nccl-tests' "
                   "sizes: all-reduce per rank, all-gather output, reduce-scatter input, all-to-all send buffer) "
                   "or a sweep LOW..HIGH (default 1MiB)")
    p.add_argument("--factor", type=int_in(2, 1024, "size step of a sweep"), default=None,
                   help="multiplier between sizes of a sweep (default 2)")
    p.add_argument("--algo", choices=[*ALGORITHMS, "p2p", "line", "oneshot", "twoshot"],
                   help="force an algorithm (like NCCL_ALGO; on a Tenstorrent mesh ring or line; with --engine "
                   "serving the custom all-reduce's oneshot or twoshot)")
    p.add_argument("--proto", choices=[*PROTOCOLS, "p2p"], help="force a protocol (like NCCL_PROTO; p2p: the "
                   "custom all-reduce's peer reads)")
    p.add_argument("--engine", choices=("nccl", "serving"), default="nccl",
                   help="who runs the all-reduce: nccl (default), or a serving engine (vLLM, TensorRT-LLM), which "
                   "also has its custom one-/two-stage all-reduce on NVLink up to 8 MiB and runs the faster "
                   "(as predictions under the serving preset do)")
    p.add_argument("--eager", action="store_true", help="time back-to-back launches from the host without CUDA "
                   "graphs, as nccl-tests does by default (at least the system's host_enqueue_s); default: the "
                   "device time, as a CUDA graph replays it")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_run)


def _sizes(text: str) -> list[int]:
    from torchsim.sim.collectives import parse_bytes

    if ".." in text:
        low, _, high = text.partition("..")
        return [parse_bytes(low), parse_bytes(high)]
    return [parse_bytes(text)]


def _run(args: argparse.Namespace) -> int:
    from torchsim.hwmodels.systems import SystemProfile, get_system, system_names
    from torchsim.sim.collectives import CollectiveError, canonical, collective_cost, message_sizes

    try:
        coll = canonical(args.name)
        try:
            system = get_system(args.system)
        except KeyError:
            raise UsageError(f"unknown system {args.system!r}; known: {', '.join(system_names())} (a single GPU "
                             "such as h100-sxm is not a system: a collective needs several)") from None
        ranks = args.ranks if args.ranks is not None else getattr(system, "ccl_ranks", system.devices)
        if args.engine == "serving" and not isinstance(system, SystemProfile):
            raise UsageError(f"--engine serving weighs a GPU serving engine's custom all-reduce; {system.name} runs "
                             "tt-metal's CCL ops (drop --engine)")
        if args.eager and not isinstance(system, SystemProfile):
            raise UsageError(f"--eager times CUDA launches from the host; {system.name} runs tt-metal's CCL ops, "
                             f"timed as traced on the device (drop --eager)")
        bounds = _sizes(args.size)
        split = {"all-gather": "output", "reduce-scatter": "input", "all-to-all": "send buffer"}.get(coll)
        if split and len(bounds) == 1 and bounds[0] % ranks:
            raise UsageError(f"--bytes {args.size}: {coll}'s {split} of {bounds[0]} B does not split evenly over "
                             f"{ranks} ranks; give a multiple of {ranks} B")
        sizes = message_sizes(bounds[0], bounds[1], args.factor or 2) if len(bounds) == 2 else bounds
        costs = [collective_cost(coll, system, ranks, s, algorithm=args.algo, protocol=args.proto,
                                 eager=args.eager, custom_ar=args.engine == "serving") for s in sizes]
    except CollectiveError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        rows = [{k: v for k, v in c.as_dict().items() if k != "candidates" or len(costs) == 1} for c in costs]
        print(json.dumps(rows[0] if len(rows) == 1 else rows, indent=2))
        return 0
    gpu = isinstance(system, SystemProfile)
    timing = ('eager launches (>= host enqueue time)' if args.eager else 'device time (CUDA graph)') if gpu else \
        "device time (tt-metal's CCL ops, traced)"
    engine = "; a serving engine's (its custom all-reduce where faster)" if args.engine == "serving" else ""
    print(f"{coll} on {system.name}: {ranks} ranks of {system.device.name}, {system.link} ({system.fabric}"
          f"{', NVLS' if system.in_network_reduction else ''}); {timing}{engine}")
    print(f"{'size (B)':>12} {'time (us)':>11} {'algbw GB/s':>11} {'busbw GB/s':>11}  {'algorithm':<9} "
          f"{'protocol':<8} {'SMs' if gpu else 'workers':>4}")
    for c in costs:
        print(f"{c.nbytes:>12} {c.time_s * 1e6:>11.2f} {_gbs(c.algbw_bytes_per_s):>11} "
              f"{_gbs(c.busbw_bytes_per_s):>11}  {c.algorithm:<9} {c.protocol:<8} {c.channels:>4}")
    return 0


def _gbs(v: float) -> str:
    return f"{v / 1e9:.2f}"
