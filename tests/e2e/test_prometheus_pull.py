"""`infbench run --prometheus` and `infbench metrics pull` against a real Prometheus scraping
the reference engine under vLLM's and SGLang's names (servers that are down, fail or are
slow: test_prometheus_failures.py).

The truth for the server-side percentiles is the engine's own histogram over the same run,
as the run's own `/metrics` scrapes recorded it (same buckets): the quantile read from
Prometheus's stored buckets must fall in the same bucket or the next one.
"""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from probes.prometheus.histogram import WindowHistogram, window_histogram
from tests.e2e.engine_process import EngineProcess, running_engine
from tests.support.cli import infbench
from tests.support.process import stop_process
from tests.support.prometheus import PrometheusServer, free_port, running_prometheus, tool
from tests.support.store_rows import store_rows

pytestmark = pytest.mark.e2e


SGLANG: list[EngineProcess] = []  # the SGLang-named engine the stack also runs


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EngineProcess, PrometheusServer]]:
    with running_engine() as engine, running_engine("--metrics-names", "sglang") as sg, \
            node_exporter() as node:
        targets = [f"{h}:{p}" for h, p in (engine.host_port, sg.host_port)]
        with running_prometheus({"engine": targets, "node": [node]},
                                tmp_path_factory.mktemp("prom"), interval_s=0.5) as prom:
            assert len(prom.wait_for("up == 1", series=3)) == 3, prom.log.read_text()[-2000:]
            # The pull reads every counter one step (0.5 s) before a run's start, which
            # Prometheus has only if it scraped the target by then: on a quiet machine the
            # first run began within a step of the first scrape (its window's first sample
            # 0.22 ms after t0).
            prom.wait_scraped_after(time.time() + 0.5)
            SGLANG[:] = [sg]
            yield engine, prom


@contextlib.contextmanager
def node_exporter() -> Iterator[str]:
    """Debian's prometheus-node-exporter (installed with prometheus) on a loopback port, with
    only the collectors the pull reads."""
    port = free_port()
    proc = subprocess.Popen(
        [tool("prometheus-node-exporter"), f"--web.listen-address=127.0.0.1:{port}",
         "--collector.disable-defaults", "--collector.cpu", "--collector.loadavg",
         "--collector.meminfo"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop_process(proc, timeout_s=10)


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
    before = _engine_histogram(engine, "vllm:time_to_first_token_seconds")
    summary, _ = _run(engine, db, "--arrival", "closed", "--concurrency", "24",
                      "--num-requests", "72", "--prometheus", prom.url)
    own = _engine_histogram(engine, "vllm:time_to_first_token_seconds", minus=before)
    assert summary["completed"] == 72
    p = summary["prometheus"]
    assert p["status"] == "ok" and p["warning"] is None, p
    assert p["families"]["vllm"] > 20 and p["step_s"] == 0.5
    # The host's series too: the engine's simulated GPU (dcgm-exporter names) and the node
    # exporter on the same host (127.0.0.1, another port).
    assert p["families"]["dcgm"] > 5 and p["families"]["node"] >= 3, p
    assert not [w for w in summary["warnings"] if "Prometheus" in w]
    (run_id,) = store_rows(db, "SELECT run_id FROM runs")[0]
    names = {n for (n,) in store_rows(db, "SELECT DISTINCT name FROM metric_samples "
                                     "WHERE source = 'prometheus'")}
    for n in ("node_load1", "node_memory_MemAvailable_bytes", "node_cpu_seconds_total",
              "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_PROF_DRAM_ACTIVE",
              "vllm:time_to_first_token_seconds_bucket", "vllm:num_requests_running",
              "vllm:kv_cache_usage_perc", "vllm:generation_tokens_total",
              "vllm:prefix_cache_hits_total", "vllm:num_preemptions_total"):
        assert n in names, sorted(names)
    # The window covers the run: samples before t0 and after the last request ended.
    lo, hi = store_rows(db, "SELECT min(t_ns), max(t_ns) FROM metric_samples WHERE source = 'prometheus'")[0]
    (last_end,) = store_rows(db, "SELECT max(end_ns) FROM requests")[0]
    assert lo < 0 < last_end < hi
    con = duckdb.connect(str(db), read_only=True)
    try:
        server = window_histogram(con, run_id, "vllm:time_to_first_token_seconds")
        gen = window_histogram(con, run_id, "vllm:inter_token_latency_seconds")
        # The run's own /metrics scrapes hold the same histogram (from its first scrape on).
        scraped = window_histogram(con, run_id, "vllm:time_to_first_token_seconds",
                                   source="metrics")
    finally:
        con.close()
    # The engine's own count (read before and after) also has preflight's 1-token probe(s),
    # sent before t0: the pulled window holds them only if Prometheus scraped after them
    # within one step of t0. Every request of the run is in both.
    assert 72 <= server.count <= own.count <= 74, (own, server)
    assert server.bounds == own.bounds == scraped.bounds and 60 <= scraped.count <= 72
    assert len(set(own.cumulative)) > 2, own  # spread over several buckets
    # The summary's server-side TTFT percentiles (from the pulled buckets) name the bucket
    # the engine's own histogram puts each quantile in, or the next.
    lat = p["server_latency"]["ttft"]
    assert lat["name"] == "vllm:time_to_first_token_seconds" and 72 <= lat["count"] <= own.count
    for q in (0.5, 0.9, 0.99):
        lo, hi = lat[f"p{round(q * 100)}_bucket_s"]
        hi = math.inf if hi is None else hi
        assert lo < lat[f"p{round(q * 100)}_s"] <= hi
        assert abs(own.bounds.index(hi) - own.bucket_index(q)) <= 1, (q, lat, own)
    assert {"itl", "e2e", "queue_time"} <= set(p["server_latency"])
    for q in (0.5, 0.9, 0.99):
        a, b = server.bucket_index(q), own.bucket_index(q)
        assert a is not None and b is not None and abs(a - b) <= 1, (q, server, own)
    assert gen.count > 72  # one observation per generated token after the first
    # Prometheus itself agrees with the stored buckets: its histogram_quantile over the run.
    (pulled,) = store_rows(db, "SELECT start_unix_s, end_unix_s FROM prometheus_pulls")
    span = int(pulled[1] - pulled[0]) + 1
    got = prom.query(f"histogram_quantile(0.9, sum by (le) (increase("
                     f"vllm:time_to_first_token_seconds_bucket[{span}s] @ {pulled[1]:.3f})))")
    assert got and float(got[0]["value"][1]) > 0


def test_sglang_series_are_pulled_for_their_target_only(
        stack: tuple[EngineProcess, PrometheusServer], tmp_path: Path) -> None:
    _, prom = stack
    (sg,) = SGLANG
    db = tmp_path / "s.duckdb"
    before = _engine_histogram(sg, "sglang:time_to_first_token_seconds")
    # Long prompts from 32 slots queue behind each other's prefill, so TTFTs spread past
    # SGLang's first edge (0.1 s) instead of all landing in it.
    summary, _ = _run(sg, db, "--arrival", "closed", "--concurrency", "32", "--num-requests", "40",
                      "--input-tokens", "uniform:1500:3500", "--prometheus", prom.url)
    own = _engine_histogram(sg, "sglang:time_to_first_token_seconds", minus=before)
    p = summary["prometheus"]
    assert p["status"] == "ok" and p["families"]["sglang"] > 10, p
    # Selected by the run's scrape target: the vLLM-named engine's series are not here.
    assert p["families"].get("vllm", 0) == 0 and sg.host_port[1] and str(sg.host_port[1]) in p["selector"]
    (run_id,) = store_rows(db, "SELECT run_id FROM runs")[0]
    con = duckdb.connect(str(db), read_only=True)
    try:
        server = window_histogram(con, run_id, "sglang:time_to_first_token_seconds")
    finally:
        con.close()
    # The engine's own count also has preflight's probe (1-token request, before t0), which
    # the pulled window holds only if Prometheus scraped after it within one step of t0.
    assert 40 <= server.count <= own.count <= 42, (own, server)
    assert server.bounds == own.bounds and server.bounds[0] == 0.1  # SGLang's own edges
    assert len({c for c in own.cumulative}) > 2, own  # spread over several buckets
    for q in (0.5, 0.9, 0.99):
        a, b = server.bucket_index(q), own.bucket_index(q)
        assert a is not None and b is not None and abs(a - b) <= 1, (q, server, own)


def _engine_histogram(engine: EngineProcess, name: str,
                      minus: WindowHistogram | None = None) -> WindowHistogram:
    """The engine's own histogram from its /metrics now (less `minus`, an earlier reading)."""
    per_le: dict[float, float] = {}
    for key, value in engine.metrics().items():
        if key.startswith(name + "_bucket{"):
            per_le[float(key.split('le="')[1].split('"')[0])] = value
    bounds = tuple(sorted(per_le))
    cum = tuple(per_le[b] - (minus.cumulative[i] if minus else 0.0) for i, b in enumerate(bounds))
    return WindowHistogram(name, bounds, cum)


def test_metrics_pull_afterwards_replaces_the_samples(
        stack: tuple[EngineProcess, PrometheusServer], tmp_path: Path) -> None:
    engine, prom = stack
    db = tmp_path / "m.duckdb"
    _run(engine, db, "--rate", "30", "--num-requests", "20")
    assert store_rows(db, "SELECT count(*) FROM metric_samples WHERE source = 'prometheus'")[0][0] == 0
    for idx in (0, 1):
        r = infbench("metrics", "pull", "last", "--prometheus", prom.url, "--db", str(db), "--json")
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["status"] == "ok" and out["series"] > 20
        assert out["step_s"] == 0.5  # the target's scrape interval, read from Prometheus
        n = store_rows(db, "SELECT count(*) FROM metric_samples WHERE source = 'prometheus'")[0][0]
        assert n == out["samples"]  # the second pull replaced the first's rows
        assert store_rows(db, "SELECT max(pull_idx) FROM prometheus_pulls")[0][0] == idx
    summary = json.loads(store_rows(db, "SELECT summary FROM runs")[0][0])
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


def test_each_sweep_point_pulls_its_own_window(stack: tuple[EngineProcess, PrometheusServer],
                                               tmp_path: Path) -> None:
    """A sweep point is recorded as a run is, the Prometheus pull included: each point's run
    gets its own pull over its own window, not the sweep's and not another point's."""
    engine, prom = stack
    db = tmp_path / "s.duckdb"
    r = infbench("sweep", "--url", engine.url, "--db", str(db), "--mode", "concurrency",
                 "--points", "1,3", "--duration", "1.5", "--input-tokens", "64",
                 "--output-tokens", "uniform:8:24", "--scrape-interval", "0.5",
                 "--prometheus", prom.url, "--json", timeout=240)
    assert r.returncode == 0, r.stderr
    points = store_rows(db, "SELECT p.point_idx, p.run_id, r.summary FROM sweep_points p "
                            "JOIN runs r USING (run_id) ORDER BY p.point_idx")
    assert len(points) == 2
    windows = []
    for _, run_id, summary in points:
        assert json.loads(summary)["prometheus"]["status"] == "ok", summary
        (pull,) = store_rows(db, "SELECT start_unix_s, end_unix_s FROM prometheus_pulls "
                                 "WHERE run_id = ?", [run_id])
        windows.append(pull)
        names = {n for (n,) in store_rows(db, "SELECT DISTINCT name FROM metric_samples WHERE "
                                             "source = 'prometheus' AND run_id = ?", [run_id])}
        assert {"vllm:num_requests_running", "vllm:generation_tokens_total"} <= names, sorted(names)
        # The window covers this point's requests.
        lo, hi = store_rows(db, "SELECT min(t_ns), max(t_ns) FROM metric_samples WHERE "
                                "source = 'prometheus' AND run_id = ?", [run_id])[0]
        (last_end,) = store_rows(db, "SELECT max(end_ns) FROM requests WHERE run_id = ?", [run_id])[0]
        assert lo < 0 < last_end < hi
    # One window per point, the second point's later than the first's.
    assert windows[1][0] > windows[0][0] and windows[1][1] > windows[0][1]
