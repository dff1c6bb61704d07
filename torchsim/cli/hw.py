"""`torchsim hw list` and `torchsim hw show NAME`: the hardware profiles and the provenance of every number."""

from __future__ import annotations

import argparse
import json
from typing import Any

from torchsim.cli import COMMAND_HELP
from torchsim.hwmodels import get_profile, profile_names


def register(sub: Any) -> None:
    p = sub.add_parser("hw", help=COMMAND_HELP["hw"])
    hs = p.add_subparsers(dest="hw_command", required=True)
    ls = hs.add_parser("list", help="list the built-in profiles (single devices, then multi-GPU systems)")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(func=_list)
    show = hs.add_parser("show", help="print one profile: value, unit, kind and source of each field")
    show.add_argument("name", help="profile name, e.g. h100-sxm, or a system, e.g. dgx-h100")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=_show)


def _quantities(hw: Any) -> dict[str, Any]:
    q = getattr(hw, "quantities", None)
    return q() if callable(q) else {}


def _list(args: argparse.Namespace) -> int:
    rows = []
    for name in profile_names():
        hw = get_profile(name)
        rows.append({"name": name, "arch": hw.arch.value, "description": getattr(hw, "description", "")})
    # -- multi-GPU systems (torchsim.hwmodels.systems): a device profile x a count + the interconnect --
    from torchsim.hwmodels.systems import get_system, system_names

    for name in system_names():
        sysp = get_system(name)
        rows.append({"name": name, "arch": sysp.arch.value, "description": sysp.description, "system": True,
                     "device": sysp.device.name, "devices": sysp.devices})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(f"{r['name']:<16} {r['arch']:<7} {r['description']}")
    return 0


def _show(args: argparse.Namespace) -> int:
    from torchsim.hwmodels.systems import SYSTEM_DEVICES, get_system, is_system

    system = get_system(args.name) if is_system(args.name) else None
    device = SYSTEM_DEVICES.get(args.name.strip().lower())  # a device profile derived only for a system
    hw = system if system is not None else device if device is not None else get_profile(args.name)
    qs = _quantities(hw)
    fitted = [k for k, q in qs.items() if q.kind == "calibrated"]
    if args.json:
        out = {"name": hw.name, "arch": hw.arch.value, "numbers_hash": hw.numbers_hash(), "calibrated": fitted,
               "fields": {k: {"value": q.value, "unit": q.unit, "kind": q.kind, "source": q.source}
                          for k, q in qs.items()}}
        if system is not None:
            out.update(device=system.device.name, link=system.link, fabric=system.fabric,
                       in_network_reduction=system.in_network_reduction, ll128=system.ll128)
        print(json.dumps(out, indent=2))
        return 0
    print(f"{hw.name}: {getattr(hw, 'description', '')} [{hw.arch.value}]  numbers hash {hw.numbers_hash()}")
    if system is not None:
        print(f"  {system.devices} x {system.device.name} (`torchsim hw show {system.device.name}` for its numbers), "
              f"link {system.link}, fabric {system.fabric}, "
              f"in-network reduction (NVLS) {'yes' if system.in_network_reduction else 'no'}, "
              f"LL128 {'yes' if system.ll128 else 'no'}")
    print(f"  {len(fitted)} calibrated (fitted to measurements; each source names the rows): "
          f"{', '.join(fitted) if fitted else 'none'}")
    width = max((len(k) for k in qs), default=10)
    for k, q in qs.items():
        print(f"  {k:<{width}}  {q.value:>14.6g} {q.unit:<14} {q.kind:<10} {q.source}")
    return 0
