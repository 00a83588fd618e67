"""What the live watch captures at a trigger (probes/watch/capture.py) and how it is stored
(probes/watch/store.py): a real HTTP target on loopback, a real process read by py-spy."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from infbench.loadgen.telemetry.watch import Trigger
from infbench.store import create_run
from infbench.store.transfer import export_run, import_run
from probes.watch.capture import IncidentCapturer, WatchTarget, public_url
from probes.watch.store import store_watch
from tests.support.http_stub import StubServer
from tests.support.stores import new_store

METRICS = "".join(f"vllm:num_requests_running{{engine=\"{i}\"}} {i}\n" for i in range(4000))


@pytest.fixture()
def sleeper() -> Iterator[int]:
    proc = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.05)"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def serve(ranks_pid: int | None) -> tuple[StubServer, str]:
    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/metrics":
                body = METRICS.encode()
            elif self.path == "/debug/ranks" and ranks_pid is not None:
                body = json.dumps({"tensor_parallel_size": 1, "ranks": [
                    {"rank": 0, "pid": ranks_pid, "dump": None, "stacks": None}]}).encode()
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    srv = StubServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


def trig(at_s: float, kind: str = "engine_stopped") -> Trigger:
    detail = {"open_streams": 3, "silent_s": 1.2, "waiting_for_first_byte": 0}
    return Trigger(kind, int(at_s * 1e9), None, detail)


needs_pyspy = pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy not installed")


@needs_pyspy
def test_a_trigger_captures_metrics_and_the_stacks_the_engine_lists(sleeper: int) -> None:
    srv, url = serve(sleeper)
    try:
        cap = IncidentCapturer([WatchTarget(None, url, url + "/metrics")], [], max_captures=2)
        cap.submit(trig(3.0))
        (rec,) = cap.close(timeout_s=60)
    finally:
        srv.shutdown()
        srv.server_close()
    assert rec.kind == "engine_stopped" and rec.failed == []
    assert [c["what"] for c in rec.captured] == ["stacks", "/metrics"]
    assert rec.metrics[0].status == "ok" and rec.metrics[0].body == METRICS
    assert rec.stacks is not None and rec.stacks.ranks[0].pid == sleeper
    frames = [f for t in rec.stacks.ranks[0].stacks.threads for f in t.frames]
    assert any(f.function == "<module>" for f in frames), frames


@needs_pyspy
def test_without_debug_ranks_the_given_pids_are_read(sleeper: int) -> None:
    srv, url = serve(None)  # /debug/ranks answers 404, as vLLM's server does
    try:
        cap = IncidentCapturer([WatchTarget(None, url, None)], [sleeper])
        cap.submit(trig(1.0))
        (rec,) = cap.close(timeout_s=60)
    finally:
        srv.shutdown()
        srv.server_close()
    assert rec.stacks is not None and rec.stacks.source == "pids"
    assert rec.stacks.ranks[0].stacks.status == "ok"


def test_without_debug_ranks_or_pids_the_stacks_fail_with_what_to_give() -> None:
    srv, url = serve(None)
    try:
        cap = IncidentCapturer([WatchTarget(None, url, None)], [])
        cap.submit(trig(1.0))
        (rec,) = cap.close(timeout_s=30)
    finally:
        srv.shutdown()
        srv.server_close()
    (why,) = [f["why"] for f in rec.failed if f["what"] == "stacks"]
    assert "HTTP 404" in why and "--engine-pid" in why
    assert [c["what"] for c in rec.captured] == ["/metrics"]


@pytest.mark.parametrize(("budget", "spacing_s", "at", "taken"), [
    (1, 0.0, [1.0, 2.0, 3.0], [True, False, False]),
    (5, 10.0, [1.0, 4.0, 12.0], [True, False, True]),
    (0, 0.0, [1.0], [False]),
])
def test_captures_are_bounded_in_count_and_spacing(budget: int, spacing_s: float,
                                                   at: list[float], taken: list[bool]) -> None:
    srv, url = serve(None)
    try:
        cap = IncidentCapturer([WatchTarget(None, url, None)], [], max_captures=budget,
                               spacing_s=spacing_s, stacks=False)
        for t in at:
            cap.submit(trig(t))
        recs = cap.close(timeout_s=30)
    finally:
        srv.shutdown()
        srv.server_close()
    assert [bool(r.metrics) for r in recs] == taken
    for r, ok in zip(recs, taken, strict=True):
        if not ok:
            assert r.failed and r.failed[0]["what"] == "capture", r.failed


def test_a_long_page_is_cut_at_the_cap_and_credentials_never_kept() -> None:
    srv, url = serve(None)
    try:
        secret_url = url.replace("http://", "http://ops:hunter2@")
        cap = IncidentCapturer([WatchTarget("r0", secret_url, None)], [], metrics_bytes=1000,
                               stacks=False)
        cap.submit(trig(1.0))
        (rec,) = cap.close(timeout_s=30)
    finally:
        srv.shutdown()
        srv.server_close()
    page = rec.metrics[0]
    assert page.truncated and page.bytes == 1000 and len(page.body or "") == 1000
    assert "hunter2" not in page.url and page.url == url + "/metrics"
    assert public_url("https://a:b@[::1]:8443/x") == "https://[::1]:8443/x"


def test_records_are_stored_with_the_run_and_travel_with_an_export(tmp_path: Path) -> None:
    srv, url = serve(None)
    try:
        cap = IncidentCapturer([WatchTarget(None, url, None)], [], stacks=False)
        cap.submit(trig(2.5))
        cap.submit(Trigger("error_burst", int(40e9), None, {
            "errors": 7, "ended": 9, "window_s": 5.0, "top_class": "http_500", "by_class": {}}))
        recs = cap.close(timeout_s=30)
    finally:
        srv.shutdown()
        srv.server_close()
    con = new_store(tmp_path / "a.duckdb")
    create_run(con, run_id="r1", config={}, target_url=url, model="m", endpoint="completions",
               t0_monotonic_ns=int(1e9))
    assert store_watch(con, "r1", int(1e9), recs) == 2
    rows = con.execute("SELECT seq, kind, t_s, summary FROM watch_triggers ORDER BY seq").fetchall()
    assert rows == [(0, "engine_stopped", 1.5, recs[0].summary),
                    (1, "error_burst", 39.0, "7 of 9 requests failed within 5 s (http_500)")]
    assert con.execute("SELECT count(*), sum(bytes) FROM watch_metrics").fetchone() == (2, 2 * len(METRICS))
    export_run(con, "r1", tmp_path / "out", "parquet")
    con.close()
    fresh = new_store(tmp_path / "b.duckdb")
    assert import_run(fresh, tmp_path / "out") == ["r1"]
    assert fresh.execute("SELECT count(*) FROM watch_triggers").fetchone() == (2,)
    assert fresh.execute("SELECT DISTINCT body FROM watch_metrics").fetchall() == [(METRICS,)]
    fresh.close()


def test_a_running_gpu_probe_adds_a_sample_and_its_failure_is_kept() -> None:
    srv, url = serve(None)
    seen: list[int] = []

    def sample(t_ns: int) -> list[dict]:
        seen.append(t_ns)
        return [{"gpu": 0, "sm_clock_mhz": 1980.0, "t_ns": t_ns}]

    def broken(t_ns: int) -> list[dict]:
        raise RuntimeError("NVML_ERROR_GPU_IS_LOST")

    try:
        ok = IncidentCapturer([WatchTarget(None, url, None)], [], gpu_sample=sample, stacks=False)
        ok.submit(trig(1.0))
        (rec,) = ok.close(timeout_s=30)
        bad = IncidentCapturer([WatchTarget(None, url, None)], [], gpu_sample=broken, stacks=False)
        bad.submit(trig(1.0))
        (rec2,) = bad.close(timeout_s=30)
    finally:
        srv.shutdown()
        srv.server_close()
    gpu = next(c for c in rec.captured if c["what"] == "gpu sample")
    assert gpu["gpus"] == 1 and gpu["rows"][0]["t_ns"] == seen[0]
    assert rec2.failed == [{"what": "gpu sample", "why": "RuntimeError: NVML_ERROR_GPU_IS_LOST"}]
