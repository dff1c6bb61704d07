"""Probe every class of bad input issue 14 names, as a user would: real `python -m torchsim` processes, with
hostile files made in a scratch directory, and the library entry points called directly.

Each case passes when torchsim answers within its time limit with exit code 2 (130/143 for signals) and one or
two lines on stderr that name the input, no traceback, and leaves every existing file byte-identical. Prints a
Markdown table (class, case, exit, seconds, first stderr line, verdict) and a summary; exit status 1 when any case
fails.

    python benchmarks/robustness_probe.py [--jobs 2] [--only WORD]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

LLAMA = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 2,
         "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 4096, "max_position_embeddings": 4096,
         "rms_norm_eps": 1e-5, "rope_theta": 500000.0}


@dataclass
class Case:
    group: str
    name: str
    argv: list[str] | None = None            # a CLI command line (after `python -m torchsim`)
    lib: Callable[[], None] | None = None    # or a library call that must raise torchsim's own error
    words: list[str] = field(default_factory=list)   # each must appear in the message
    codes: tuple[int, ...] = (2,)
    limit_s: float = 30.0
    keep: list[Path] = field(default_factory=list)    # existing files that must stay byte-identical
    stdin_pipe_head: bool = False            # stdout piped into a reader that closes after one line
    signal_at_s: float | None = None         # send SIGINT/SIGTERM this long after start
    signum: int = signal.SIGINT
    env: dict[str, str] = field(default_factory=dict)
    absent: list[Path] = field(default_factory=list)  # paths that must not exist afterwards


@dataclass
class Outcome:
    case: Case
    code: int | None
    seconds: float
    message: str
    ok: bool
    why: str


def _digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def run_cli(case: Case) -> Outcome:
    before = {p: _digest(p) for p in case.keep}
    listed = {q.name for p in case.keep for q in p.parent.iterdir()}
    env = {**os.environ, "TORCHSIM_NO_PROGRESS": "1", **case.env}
    t0 = time.perf_counter()
    assert case.argv is not None
    if case.stdin_pipe_head:
        cmd = " ".join(map(_quote, [sys.executable, "-m", "torchsim", *case.argv])) + " | head -n 1 >/dev/null"
        proc = subprocess.Popen(["bash", "-o", "pipefail", "-c", cmd], stderr=subprocess.PIPE, text=True, env=env)
    else:
        proc = subprocess.Popen([sys.executable, "-m", "torchsim", *case.argv], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    if case.signal_at_s is not None:
        time.sleep(case.signal_at_s)
        os.kill(proc.pid, case.signum)
    try:
        _, err = proc.communicate(timeout=case.limit_s)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        code = None
    seconds = time.perf_counter() - t0
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    message = " / ".join(lines[:2])
    why = _verdict(case, code, lines, err)
    if not why:
        changed = [str(p) for p in case.keep if _digest(p) != before[p]]
        present = [str(p) for p in case.absent if p.exists()]
        new_files = sorted({q.name for p in case.keep for q in p.parent.iterdir()} - listed)
        left = _session_processes(proc.pid)
        why = (f"changed {changed}" if changed else f"left {present}" if present else
               f"left files {new_files}" if new_files else f"left processes {left}" if left else "")
    return Outcome(case, code, seconds, message, not why, why)


def _session_processes(sid: int) -> list[int]:
    """Processes still alive in the session the command was started in (its worker processes, orphaned)."""
    out = subprocess.run(["ps", "-eo", "pid=,sid="], capture_output=True, text=True).stdout.split()
    return [int(p) for p, s in zip(out[::2], out[1::2]) if int(s) == sid and int(p) != sid]


def _verdict(case: Case, code: int | None, lines: list[str], err: str) -> str:
    if code is None:
        return f"no answer in {case.limit_s:.0f} s"
    if code not in case.codes:
        return f"exit {code}, expected {case.codes}"
    if "Traceback" in err:
        return "traceback"
    if case.codes == (0,):
        return ""
    if not lines or len(lines) > 2:
        return f"{len(lines)} stderr lines"
    missing = [w for w in case.words if w.lower() not in " ".join(lines).lower()]
    return f"does not name {missing}" if missing else ""


def run_lib(case: Case) -> Outcome:
    from torchsim.graph import GraphError
    from torchsim.sim.result import DeadlockError

    assert case.lib is not None
    t0 = time.perf_counter()

    def alarm(*_: object) -> None:
        raise TimeoutError(f"no answer in {case.limit_s:.0f} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, case.limit_s)
    try:
        case.lib()
        message, why = "accepted", "no error raised"
    except (GraphError, DeadlockError, ValueError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else ""
        kind = type(exc).__module__.split(".")[0]
        missing = [w for w in case.words if w.lower() not in str(exc).lower()]
        why = ("not torchsim's error type" if kind != "torchsim" and type(exc) is not ValueError else
               f"does not name {missing}" if missing else "" if message else "empty message")
    except TimeoutError as exc:
        message, why = str(exc), str(exc)
    except Exception as exc:  # noqa: BLE001 - a bare KeyError/IndexError is what the probe looks for
        message, why = f"{type(exc).__name__}: {exc}"[:160], f"bare {type(exc).__name__}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return Outcome(case, 2 if not why else 1, time.perf_counter() - t0, message, not why, why)


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def _config(tmp: Path, name: str, **changes: object) -> str:
    path = tmp / f"{name}.json"
    path.write_text(json.dumps({**LLAMA, **changes}, allow_nan=True))
    return str(path)


def _toml(tmp: Path, name: str, body: str) -> str:
    path = tmp / f"{name}.toml"
    path.write_text('base = "h100-sxm"\n' + body + "\n")
    return str(path)


def _graph_doc() -> dict[str, object]:
    from torchsim.graph import DType
    from torchsim.hwmodels import get_profile
    from torchsim.lowering.templates.norms import rmsnorm

    return json.loads(rmsnorm(4, 256, DType.BF16, get_profile("h100-sxm")).dumps())


def _graph_case(change: Callable[[dict], None], run: bool = False) -> Callable[[], None]:
    def call() -> None:
        from torchsim.graph import KernelGraph

        doc = _graph_doc()
        change(doc)
        kg = KernelGraph.loads(json.dumps(doc))
        if run:
            from torchsim.hwmodels import get_profile
            from torchsim.sim import simulate

            simulate(kg, get_profile("h100-sxm"))
    return call


def _node(doc: dict, key: str, value: object, i: int = 0) -> None:
    doc["classes"][0]["graph"]["nodes"][i][key] = value


def cases(tmp: Path) -> list[Case]:
    good = tmp / "good.json"
    good.write_text('{"kept": true}\n')
    existing = tmp / "existing.parquet"
    existing.write_bytes(b"PAR1 an earlier result PAR1")
    fifo = tmp / "fifo.parquet"
    os.mkfifo(fifo)
    binary = tmp / "binary.json"
    binary.write_bytes(b"\x80\x81\xff\x00garbage")
    pickled = tmp / "pickled.toml"
    pickled.write_bytes(pickle.dumps({"sm_count": 66}))
    empty_parquet = tmp / "empty_routing.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"layer": pa.array([], pa.int64()), "expert": pa.array([], pa.int64()),
                             "tokens": pa.array([], pa.int64())}), empty_parquet)
    cfg = _config(tmp, "base")
    ckpt = tmp / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({**LLAMA, "model_type": "mixtral", "num_local_experts": 4,
                                                  "num_experts_per_tok": 2}))
    nested = "x = " + "{a = " * 2000 + "1" + "}" * 2000
    gemm = ["kernel", "gemm", "--m", "256", "--n", "256", "--k", "256"]
    return [
        # -- tracebacks before
        Case("traceback", "config head_dim 0", ["predict", _config(tmp, "hd0", head_dim=0)], words=["head_dim"]),
        Case("traceback", "config head_dim -64", ["predict", _config(tmp, "hdneg", head_dim=-64)], words=["head_dim"]),
        Case("traceback", "config head_dim \"64\"", ["predict", _config(tmp, "hdstr", head_dim="64")],
             words=["head_dim"]),
        Case("traceback", "config rope_theta \"big\"", ["predict", _config(tmp, "rtstr", rope_theta="big")],
             words=["rope_theta"]),
        Case("traceback", "config rms_norm_eps NaN", ["predict", _config(tmp, "epsnan", rms_norm_eps=math.nan)],
             words=["rms_norm_eps"]),
        Case("traceback", "what-if 1e-300 bandwidth", ["predict", "--hw", _toml(tmp, "tiny_bw",
             'dram_bytes_per_s = "1e-300 B/s"')], words=["dram_bytes_per_s"]),
        Case("traceback", "what-if nested inline tables", ["hw", "show", _toml(tmp, "nested", nested)],
             words=["nested.toml"]),
        Case("traceback", "what-if zero TMA rate", [*gemm, "--hw", _toml(tmp, "tma0",
             'tma_bytes_per_clk_per_sm = "0 B/clk/SM"')], words=["tma_bytes_per_clk_per_sm"]),
        Case("traceback", "--decode 10^9", ["predict", "--decode", "1000000000"], words=["--decode"]),
        Case("traceback", "kernel rmsnorm huge hidden", ["kernel", "rmsnorm", "--rows", "4", "--hidden",
             str(10**12)], words=["--hidden"]),
        Case("traceback", "routing record --checkpoint without transformers", ["routing", "record", "--checkpoint",
             str(ckpt), "-o", str(tmp / "r.json")],
             words=["hf"], env={"PYTHONPATH": str(tmp / "no_transformers")}, absent=[tmp / "r.json"]),
        # -- hangs before
        Case("hang", "GEMM M = 2^31-1", ["kernel", "gemm", "--m", str(2**31 - 1), "--n", "4096", "--k", "4096"],
             words=["--m"]),
        Case("hang", "GEMM K = 2^31-1", ["kernel", "gemm", "--m", "128", "--n", "128", "--k", str(2**31 - 1)],
             words=["k"]),
        Case("hang", "--batch 10^6", ["predict", "--batch", "1000000"], words=["--batch"]),
        Case("hang", "config 10^5 layers", ["predict", _config(tmp, "layers5", num_hidden_layers=10**5)],
             words=["num_hidden_layers"]),
        Case("hang", "config 10^9 layers", ["predict", _config(tmp, "layers9", num_hidden_layers=10**9)],
             words=["num_hidden_layers"]),
        Case("hang", "10^4-point kernel sweep without --yes", ["sweep", "kernel", "gemm", "--m", "256", "--n",
             "256", "--k", "256", "--vary", "dram_bytes_per_s=1e12:4e12:10000", "--out", str(tmp / "sw.parquet")],
             words=["--yes"], absent=[tmp / "sw.parquet"]),
        # -- wrong output accepted before
        Case("accepted", "--workers -2", ["predict", "--workers", "-2"], words=["--workers"]),
        Case("accepted", "--top -1", ["predict", "--top", "-1"], words=["--top"]),
        Case("accepted", "--detail -1", ["predict", "--detail", "-1"], words=["--detail"]),
        Case("accepted", "--stages 0", [*gemm, "--stages", "0"], words=["--stages"]),
        Case("accepted", "--stages 10^6", [*gemm, "--stages", "1000000"], words=["--stages"]),
        Case("accepted", "--tiles-per-cta 0", [*gemm, "--tiles-per-cta", "0"], words=["--tiles-per-cta"]),
        Case("accepted", "unknown elementwise op", ["kernel", "elementwise", "--numel", "4096", "--op", "frobnicate"],
             words=["frobnicate"]),
        Case("accepted", "compare --hw a,,b", ["compare", "--hw", "h100-sxm,,b200"], words=["--hw"]),
        Case("accepted", "config rope_theta -1", ["predict", _config(tmp, "rtneg", rope_theta=-1.0)],
             words=["rope_theta"]),
        Case("accepted", "2-knob sweep of 10^4 points", ["sweep", "kernel", "gemm", "--m", "256", "--n", "256",
             "--k", "256", "--vary", "sm_count=" + ",".join(map(str, range(33, 133))), "--vary",
             "dram_bytes_per_s=1e12:3e12:100", "--out",
             str(tmp / "sw2.parquet")], words=["--yes"]),
        Case("accepted", "boolean numeric field", ["hw", "show", _toml(tmp, "boolf", "sm_count = true")],
             words=["sm_count"]),
        Case("accepted", "config hidden_size true", ["predict", _config(tmp, "hsbool", hidden_size=True)],
             words=["hidden_size"]),
        # -- refusals that name nothing before
        Case("naming", "binary config.json", ["predict", str(binary)], words=[str(binary)]),
        Case("naming", "pickle as what-if TOML", ["hw", "show", str(pickled)], words=[str(pickled)]),
        Case("naming", "empty Parquet routing", ["predict", "mixtral-tiny", "--routing", str(empty_parquet)],
             words=[str(empty_parquet)]),
        Case("naming", "NaN sweep parameter", ["sweep", "kernel", "rmsnorm", "--param", "rows=nan", "--vary",
             "sm_count=66", "--out", str(tmp / "sw3.parquet")], words=["rows"]),
        Case("naming", "graph: unknown op", lib=_graph_case(lambda d: _node(d, "op", "FROBNICATE")),
             words=["FROBNICATE"]),
        Case("naming", "graph: unknown unit", lib=_graph_case(lambda d: _node(d, "unit", "WARPDRIVE")),
             words=["WARPDRIVE"]),
        Case("naming", "graph: unknown dtype", lib=_graph_case(lambda d: d["classes"][0]["graph"].__setitem__(
             "dtype", "bf17")), words=["bf17"]),
        Case("naming", "graph: unknown tile space", lib=_graph_case(
             lambda d: d["classes"][0]["graph"]["tiles"][0].__setitem__("space", "ether")), words=["ether"]),
        Case("naming", "graph: unknown edge kind", lib=_graph_case(_bad_edge_kind), words=["TELEPATHY"]),
        Case("naming", "graph: params of the wrong length", lib=_graph_case(
             lambda d: d["classes"][0].__setitem__("params", [[*row, 1] for row in d["classes"][0]["params"]])),
             words=["param"]),
        # -- files damaged or lost before
        Case("files", "routing record failing keeps good.json", ["routing", "record", "--model", "no-such-moe",
             "-o", str(good)], words=["no-such-moe"], keep=[good]),
        Case("files", "--parquet FIFO", ["predict", "--parquet", str(fifo)], words=[str(fifo)]),
        Case("files", "--parquet x --perfetto x", ["predict", "--parquet", str(tmp / "x"), "--perfetto",
             str(tmp / "x"), "--force-format"], words=["same"]),
        Case("files", "--parquet k.parquet --perfetto k.nodes.parquet", ["kernel", *gemm[1:], "--parquet",
             str(tmp / "k.parquet"), "--perfetto", str(tmp / "k.nodes.parquet")], words=["k.nodes.parquet"]),
        Case("files", "sweep --out s --plot s", ["sweep", "kernel", "gemm", "--m", "256", "--n", "256", "--k",
             "256", "--vary", "sm_count=66,132", "--out", str(tmp / "s.parquet"), "--plot", str(tmp / "s.parquet"),
             "--force-format"], words=["s.parquet"]),
        Case("files", "--parquet config.json (the input)", ["predict", cfg, "--parquet", cfg, "--force-format"],
             words=["input"], keep=[Path(cfg)]),
        Case("files", "--parquet out.csv", ["predict", "--parquet", str(tmp / "out.csv")], words=["out.csv"]),
        Case("signals", "SIGINT at 2 s", ["predict", "--no-cache", "--workers", "2", "--parquet", str(existing)],
             codes=(130,), signal_at_s=2.0, keep=[existing], limit_s=40),
        Case("signals", "SIGTERM at 2 s", ["predict", "--no-cache", "--workers", "2", "--parquet", str(existing)],
             codes=(143,), signal_at_s=2.0, signum=signal.SIGTERM, keep=[existing], limit_s=40),
        Case("signals", "SIGINT while workers simulate", ["predict", "--no-cache", "--workers", "2", "--parquet",
             str(existing)], codes=(130,), signal_at_s=8.0, keep=[existing], limit_s=40),
        Case("signals", "SIGTERM while workers simulate", ["predict", "--no-cache", "--workers", "2", "--parquet",
             str(existing)], codes=(143,), signal_at_s=8.0, signum=signal.SIGTERM, keep=[existing], limit_s=40),
        # -- graphs the engine used to fail on
        Case("graph", "node group out of range", lib=_graph_case(lambda d: _node(d, "group", 99)),
             words=["group 99"]),
        Case("graph", "node tile out of range", lib=_graph_case(lambda d: _node(d, "tile", 10**6)),
             words=["1000000"]),
        Case("graph", "fractional edge index", lib=_graph_case(_fractional_edge), words=["edge"]),
        Case("graph", "empty template", lib=_graph_case(lambda d: d["classes"][0]["graph"]["nodes"].clear()),
             words=["no nodes"]),
        Case("graph", "work 1e300", lib=_graph_case(lambda d: _node(d, "work", 1e300)), words=["work"]),
        Case("graph", "cluster of 1000", lib=_graph_case(lambda d: d["attrs"].__setitem__("cluster_size", 1000),
             run=True), words=["cluster"]),
        # -- rough edges
        Case("rough", "`hw list | head -1`", ["hw", "list"], codes=(0,), stdin_pipe_head=True),
        Case("rough", "missing --checkpoint directory", ["routing", "record", "--checkpoint", str(tmp / "nope"),
             "-o", str(tmp / "r2.json")], words=["nope", "directory"]),
        Case("rough", "what-if sm_count = \"lots\"", ["hw", "show", _toml(tmp, "lots", 'sm_count = "lots"')],
             words=["sm_count"]),
        Case("rough", "what-if bare sm_count = 66 accepted", ["hw", "show", _toml(tmp, "bare", "sm_count = 66")],
             codes=(0,)),
        *third_pass(tmp, gemm),
    ]


def third_pass(tmp: Path, gemm: list[str]) -> list[Case]:
    """What a second hostile probe found after the first fixes (tests/test_robustness_s8.py, _hf.py, _whatif.py)."""
    nodes_dir = tmp / "k.nodes.parquet"
    nodes_dir.mkdir()
    kept = tmp / "k.parquet"
    kept.write_bytes(b"PAR1 an earlier kernel table PAR1")
    measured = tmp / "m.csv"
    measured.write_text("id,category,hardware,workload,dtype,params_json,metric,value,unit,notes,source\n"
                        'R0,gemm,h100-sxm,w,bf16,"{""M"": 4096, ""N"": 4096, ""K"": 4096}",time_us,0,us,,\n')
    ct = {"quant_method": "compressed-tensors", "config_groups": "int8"}
    return [
        Case("internal", "compressed-tensors config_groups a string", ["predict", _config(
            tmp, "ct", quantization_config=ct)], words=["config_groups"]),
        Case("internal", "qwen2 hidden_size \"64\"", ["predict", _config(
            tmp, "q2", model_type="qwen2", hidden_size="64")], words=["hidden_size"]),
        Case("internal", "rope_scaling \"linear\"", ["predict", _config(tmp, "rs", rope_scaling="linear")],
             words=["rope_scaling"]),
        Case("internal", "model_type gpt2", ["predict", _config(tmp, "gpt2", model_type="gpt2")],
             words=["gpt2", "not supported"]),
        Case("internal", "what-if TMEM on an H100", [*gemm, "--hw", _toml(
            tmp, "tmem", 'tmem_bytes_per_sm = "256 KiB"')], words=["tmem_bytes_per_sm", "sm100"]),
        Case("internal", "calibrate value 0", ["calibrate", "--hw", "h100-sxm", "--measurements", str(measured),
                                               "--out", str(tmp / "cal.toml")], words=["m.csv", "value"]),
        Case("internal", "serve JSONL nested 10^5 deep", ["serve", "llama-tiny", "--requests", _text(
            tmp, "deep.jsonl", "[" * 100_000 + "]" * 100_000)], words=["deep.jsonl", "nested"]),
        Case("internal", "routing record --seq past the context", ["routing", "record", "--seq", "100000", "-o",
                                                                    str(tmp / "r.json")], words=["--seq", "4096"]),
        Case("hang", "what-if sm_count 10^6", ["predict", "--hw", _toml(tmp, "sm6", 'sm_count = "1000000 SMs"')],
             words=["sm_count", "1024"]),
        Case("hang", "elementwise --inputs 10^18", ["kernel", "elementwise", "--numel", "16", "--inputs",
                                                    str(10**18)], words=["--inputs"]),
        Case("hang", "compare --top 10^12", ["compare", "llama-tiny", "--hw", "h100-sxm,h200", "--top",
                                             str(10**12), "--prompt", "16", "--decode", "2"], codes=(0,)),
        Case("hang", "routing record of mixtral-8x22b on CPU", ["routing", "record", "--model", "mixtral-8x22b",
                                                                "-o", str(tmp / "r.json")], words=["GiB"]),
        Case("files", "--parquet k.parquet with k.nodes.parquet a directory", [*gemm, "--parquet", str(kept)],
             words=["k.nodes.parquet", "directory"], keep=[kept]),
        Case("naming", "file name of 258 bytes", [*gemm, "--parquet", str(tmp / ("a" * 250 + ".parquet"))],
             words=["258 bytes"]),
        Case("naming", "hidden_act unknown", ["predict", _config(tmp, "act", hidden_act="nonexistent_act")],
             words=["hidden_act"]),
        Case("accepted", "serve --rate 1e-300", ["serve", "llama-tiny", "--rate", "1e-300"], words=["--rate"]),
        Case("accepted", "predict --dtype fp8 on an A100", ["predict", "--dtype", "fp8", "--hw", "a100-sxm"],
             words=["a100-sxm", "FP8"]),
        Case("accepted", "what-if smem_per_cta above smem_per_sm", ["hw", "show", _toml(
            tmp, "smem", 'smem_per_cta_bytes = "300 KiB"')], words=["smem_per_cta_bytes", "smem_per_sm_bytes"]),
        Case("accepted", "grouped-gemm --top-k 0", ["kernel", "grouped-gemm", "--routing", "balanced", "--tokens",
                                                    "64", "--top-k", "0", "--n", "256", "--k", "256"],
             words=["--top-k"]),
        Case("accepted", "--detail without --perfetto", ["predict", "--detail", "3"], words=["--perfetto"]),
        Case("accepted", "--program mcast on a GPU", [*gemm, "--program", "mcast"], words=["--program"]),
        Case("accepted", "duplicate key in config.json", ["predict", _text(
            tmp, "dup.json", '{"model_type": "llama", "hidden_size": 512, "hidden_size": 1024}')],
             words=["hidden_size", "twice"]),
        Case("refused", "elementwise of 2^25 elements", ["kernel", "elementwise", "--numel", str(1 << 25)],
             codes=(0,)),
        Case("refused", "quantization_config null", ["predict", _config(tmp, "qnull", quantization_config=None),
                                                     "--prompt", "16", "--decode", "2"], codes=(0,)),
        Case("early", "sweep --ray-address without --executor ray", ["sweep", "llama-tiny", "--vary",
                                                                     "sm_count=66,132", "--out",
                                                                     str(tmp / "s.parquet"), "--ray-address",
                                                                     "1.2.3.4:1"], words=["--executor ray"]),
    ]


def _text(tmp: Path, name: str, content: str) -> str:
    path = tmp / name
    path.write_text(content)
    return str(path)


def _bad_edge_kind(doc: dict) -> None:
    g = doc["classes"][0]["graph"]
    g["edges"][0] = [*g["edges"][0][:2], "TELEPATHY"]


def _fractional_edge(doc: dict) -> None:
    g = doc["classes"][0]["graph"]
    g["edges"][0] = [0.5, *g["edges"][0][1:]]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2, help="CLI cases run at once (default 2)")
    ap.add_argument("--only", default="", help="run only cases whose group or name contains this word")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="torchsim-probe-") as d:
        tmp = Path(d)
        blocker = tmp / "no_transformers" / "transformers"
        blocker.mkdir(parents=True)
        (blocker / "__init__.py").write_text("raise ImportError('transformers hidden by the probe')\n")
        todo = [c for c in cases(tmp) if args.only in c.group or args.only in c.name]
        t0 = time.perf_counter()
        lib = [run_lib(c) for c in todo if c.lib is not None]
        signalled = [c for c in todo if c.argv is not None and c.signal_at_s is not None]
        plain = [c for c in todo if c.argv is not None and c.signal_at_s is None]
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            cli = list(pool.map(run_cli, plain))
        cli += [run_cli(c) for c in signalled]  # alone: their timing is part of the case
        wall = time.perf_counter() - t0
    order = {id(c): i for i, c in enumerate(todo)}
    results = sorted(lib + cli, key=lambda o: order[id(o.case)])
    print("| class | case | exit | s | message (first stderr line) | verdict |")
    print("|---|---|---:|---:|---|---|")
    for o in results:
        msg = o.message.replace("|", "\\|").replace(str(Path(tempfile.gettempdir())), "$TMP")[:150]
        print(f"| {o.case.group} | {o.case.name} | {o.code} | {o.seconds:.2f} | {msg} | "
              f"{'ok' if o.ok else 'FAIL: ' + o.why} |")
    bad = [o for o in results if not o.ok]
    print(f"\n{len(results) - len(bad)}/{len(results)} cases answered as they should; wall {wall:.0f} s "
          f"({args.jobs} at once)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
