"""`infbench run --prometheus` and `infbench metrics pull` against a real Prometheus scraping
the reference engine, and against Prometheus servers that are down, fail or are slow.

The truth for the server-side percentiles is the engine's own histogram over the same run,
as the run's own `/metrics` scrapes recorded it (same buckets): the quantile read from
Prometheus's stored buckets must fall in the same bucket or the next one.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import duckdb
import pytest

from probes.prometheus.histogram import window_histogram
from tests.e2e.engine_process import EngineProcess, running_engine
from tests.support.cli import infbench
from tests.support.prometheus import PrometheusServer, free_port, running_prometheus

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EngineProcess, PrometheusServer]]:
    with running_engine() as engine:
        host, port = engine.host_port
        with running_prometheus({"engine": [f"{host}:{port}"]},
                                tmp_path_factory.mktemp("prom"), interval_s=0.5) as prom:
            assert prom.wait_for('up{job="engine"} == 1'), prom.log.read_text()[-2000:]
            yield engine, prom


def _rows(db: Path, sql: str, params: list | None = None) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def _run(engine: EngineProcess, db: Path, *args: str) -> tuple[dict, str]:
    r = infbench("run", "--url", engine.url, "--db", str(db), "--json", "--quiet",
                 "--input-tokens", "uniform:128:512", "--output-tokens", "uniform:8:48",
                 "--scrape-interval", "0.5", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), r.stderr


def test_run_pulls_the_window_and_ttft_percentiles_agree_with_the_engine(
        stack: tuple[EngineProcess, PrometheusServer], tmp_path: Path) -> None:
    engine, prom = stack
    db = tmp_path / "p.duckdb"
    # Closed loop with more slots than the engine's fast steps clear at once, so TTFT spreads
    # over several buckets (queueing) rather than all landing in one.
    summary, _ = _run(engine, db, "--arrival", "closed", "--concurrency", "24",
                      "--num-requests", "72", "--prometheus", prom.url)
    assert summary["completed"] == 72
    p = summary["prometheus"]
    assert p["status"] == "ok" and p["warning"] is None, p
    assert p["families"]["vllm"] > 20 and p["step_s"] == 0.5
    assert not [w for w in summary["warnings"] if "Prometheus" in w]
    (run_id,) = _rows(db, "SELECT run_id FROM runs")[0]
    names = {n for (n,) in _rows(db, "SELECT DISTINCT name FROM metric_samples "
                                     "WHERE source = 'prometheus'")}
    for n in ("vllm:time_to_first_token_seconds_bucket", "vllm:num_requests_running",
              "vllm:kv_cache_usage_perc", "vllm:generation_tokens_total",
              "vllm:prefix_cache_hits_total", "vllm:num_preemptions_total"):
        assert n in names, sorted(names)
    # The window covers the run: samples before t0 and after the last request ended.
    lo, hi = _rows(db, "SELECT min(t_ns), max(t_ns) FROM metric_samples WHERE source = 'prometheus'")[0]
    (last_end,) = _rows(db, "SELECT max(end_ns) FROM requests")[0]
    assert lo < 0 < last_end < hi
    con = duckdb.connect(str(db), read_only=True)
    try:
        # From the run's start: Prometheus's value at t0 is its last scrape before t0.
        server = window_histogram(con, run_id, "vllm:time_to_first_token_seconds", start_ns=0)
        own = window_histogram(con, run_id, "vllm:time_to_first_token_seconds", source="metrics")
        gen = window_histogram(con, run_id, "vllm:inter_token_latency_seconds", start_ns=0)
    finally:
        con.close()
    # Preflight's one 1-token probe ends just before t0; whether Prometheus scraped it
    # before t0 (0.5 s interval) decides whether its window holds it. Nothing else differs.
    assert own.count == 72 and server.count in (72, 73), (own, server)
    assert server.bounds == own.bounds
    for q in (0.5, 0.9, 0.99):
        a, b = server.bucket_index(q), own.bucket_index(q)
        assert a is not None and b is not None and abs(a - b) <= 1, (q, server, own)
    assert gen.count > 72  # one observation per generated token after the first
    # Prometheus itself agrees with the stored buckets: its histogram_quantile over the run.
    (pulled,) = _rows(db, "SELECT start_unix_s, end_unix_s FROM prometheus_pulls")
    span = int(pulled[1] - pulled[0]) + 1
    got = prom.query(f"histogram_quantile(0.9, sum by (le) (increase("
                     f"vllm:time_to_first_token_seconds_bucket[{span}s] @ {pulled[1]:.3f})))")
    assert got and float(got[0]["value"][1]) > 0


def test_metrics_pull_afterwards_replaces_the_samples(
        stack: tuple[EngineProcess, PrometheusServer], tmp_path: Path) -> None:
    engine, prom = stack
    db = tmp_path / "m.duckdb"
    _run(engine, db, "--rate", "30", "--num-requests", "20")
    assert _rows(db, "SELECT count(*) FROM metric_samples WHERE source = 'prometheus'")[0][0] == 0
    for idx in (0, 1):
        r = infbench("metrics", "pull", "last", "--prometheus", prom.url, "--db", str(db), "--json")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["status"] == "ok" and out["series"] > 20
        n = _rows(db, "SELECT count(*) FROM metric_samples WHERE source = 'prometheus'")[0][0]
        assert n == out["samples"]  # the second pull replaced the first's rows
        assert _rows(db, "SELECT max(pull_idx) FROM prometheus_pulls")[0][0] == idx
    summary = json.loads(_rows(db, "SELECT summary FROM runs")[0][0])
    assert summary["prometheus"]["status"] == "ok"
    # A selector that matches nothing: an empty pull warns, exits 1, and keeps the samples.
    r = infbench("metrics", "pull", "last", "--prometheus", prom.url, "--db", str(db),
                 "--selector", 'instance="nowhere:1"')
    assert r.returncode == 1
    assert "no series matched the run's window" in r.stderr, r.stderr


def test_a_selector_matching_nothing_warns_in_the_run_summary(
        stack: tuple[EngineProcess, PrometheusServer], tmp_path: Path) -> None:
    engine, prom = stack
    db = tmp_path / "e.duckdb"
    summary, _ = _run(engine, db, "--rate", "30", "--num-requests", "10", "--prometheus",
                      prom.url, "--prometheus-selector", 'job="no-such-job"')
    assert summary["completed"] == 10 and summary["status"] == "completed"
    (warning,) = [w for w in summary["warnings"] if "Prometheus" in w]
    assert "no series matched" in warning and "client data is complete" in warning


class _FakePrometheus(BaseHTTPRequestHandler):
    """Answers every API call the way a broken server would (mode set per server)."""

    mode = "error"
    seen_auth: list[str] = []

    def _answer(self) -> None:
        type(self).seen_auth.append(self.headers.get("Authorization", ""))
        if self.mode == "slow":
            time.sleep(3.0)
        if self.mode == "error":
            body = json.dumps({"status": "error", "errorType": "execution",
                               "error": "query processing would load too many samples"})
            self.send_response(422)
        else:
            body = json.dumps({"status": "success", "data": {"activeTargets": []}})
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_prometheus(request: pytest.FixtureRequest) -> Iterator[str]:
    handler = type("H", (_FakePrometheus,), {"mode": request.param, "seen_auth": []})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", handler
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("fake_prometheus", ["error", "slow"], indirect=True)
def test_a_failing_prometheus_only_warns(stack: tuple[EngineProcess, PrometheusServer],
                                         fake_prometheus: tuple[str, type], tmp_path: Path) -> None:
    engine, _ = stack
    url, handler = fake_prometheus
    secret = "s3cr3t-token-value"
    (tmp_path / "tok").write_text(secret + "\n")
    db = tmp_path / "f.duckdb"
    summary, stderr = _run(engine, db, "--rate", "30", "--num-requests", "12", "--prometheus", url,
                           "--prometheus-token-file", str(tmp_path / "tok"),
                           "--prometheus-timeout", "1")
    assert summary["completed"] == 12 and summary["status"] == "completed"
    (warning,) = [w for w in summary["warnings"] if "Prometheus" in w]
    expect = "execution: query processing" if handler.mode == "error" else "timeout"
    assert expect in warning and "client data is complete" in warning, warning
    assert _rows(db, "SELECT count(*) FROM requests")[0][0] == 12
    assert _rows(db, "SELECT status FROM prometheus_pulls") == [("failed",)]
    # The token went to the server and nowhere else.
    assert f"Bearer {secret}" in handler.seen_auth
    assert secret not in db.read_bytes().decode("latin-1") and secret not in stderr
    assert secret not in json.dumps(summary)


def test_an_unreachable_prometheus_only_warns(stack: tuple[EngineProcess, PrometheusServer],
                                              tmp_path: Path) -> None:
    engine, _ = stack
    db = tmp_path / "u.duckdb"
    summary, _ = _run(engine, db, "--rate", "30", "--num-requests", "12",
                      "--prometheus", f"http://127.0.0.1:{free_port()}")
    assert summary["completed"] == 12 and summary["status"] == "completed"
    (warning,) = [w for w in summary["warnings"] if "Prometheus" in w]
    assert "unreachable" in warning and "no server series stored" in warning, warning
    assert _rows(db, "SELECT count(*) FROM requests WHERE error_class IS NULL")[0][0] == 12
