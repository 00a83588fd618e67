"""A real Prometheus scraping a real vLLM: `infbench run --prometheus` stores the run's window
of vLLM's series, and every vLLM-named target of the engine dashboard returns data (variables
resolved as Grafana does), evaluated at one moment inside the load."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import duckdb

from dashboards.build import DASHBOARDS
from tests.e2e import test_dashboards as dash
from tests.e2e.test_dashboards import _problem, _resolve, _substitute
from tests.support.cli import ROOT, cli_env
from tests.support.prometheus import running_prometheus
from tools.real_vllm.server import VllmServer

# What a moment needs before the vLLM panels can all show data: requests admitted and
# finished in the last 5 s (latency histograms), and prefix-cache lookups.
FAMILIES = ("sum(rate(vllm:time_to_first_token_seconds_count[5s])) > 0",
            "sum(rate(vllm:request_queue_time_seconds_count[5s])) > 0",
            "sum(rate(vllm:e2e_request_latency_seconds_count[5s])) > 0",
            "sum(rate(vllm:inter_token_latency_seconds_count[5s])) > 0",
            "sum(rate(vllm:prefix_cache_queries_total[5s])) > 0")


def test_prometheus_pull_and_every_vllm_panel(vllm: VllmServer, tmp_path: Path) -> None:
    host_port = vllm.url.removeprefix("http://")
    db = tmp_path / "p.duckdb"
    with running_prometheus({"engine": [host_port]}, tmp_path / "prom", interval_s=0.5) as prom:
        run = subprocess.Popen(
            [sys.executable, "-m", "infbench", "run", "--url", vllm.url, "--db", str(db),
             "--quiet", "--arrival", "poisson", "--rate", "4", "--duration", "30",
             "--input-tokens", "uniform:128:384", "--output-tokens", "uniform:16:64",
             "--prometheus", prom.url], cwd=ROOT, env=cli_env(), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        try:
            at = None
            deadline = time.monotonic() + 60
            while at is None and time.monotonic() < deadline and run.poll() is None:
                moment = f"{time.time() - 0.5:.3f}"
                if all(prom.api("query", query=e, time=moment)["data"]["result"]
                       for e in FAMILIES):
                    at = moment
                time.sleep(0.5)
            assert at, prom.log.read_text()[-1500:]
            dash.AT[:] = [at]
            _, specs, variables = DASHBOARDS["engine-overview.json"]
            values = _resolve(prom, variables)
            problems, checked = [], 0
            for spec in specs:
                for target in spec.targets:
                    if "vllm:" not in target.expr:
                        continue  # SGLang's own targets
                    checked += 1
                    problem = _problem(prom, _substitute(target.expr, values))
                    if problem:
                        problems.append(f"{spec.title} / {target.legend}: {problem}")
            assert problems == [], "\n".join(problems)
            assert checked >= 15
            out, err = run.communicate(timeout=120)
            assert run.returncode == 0, err[-2000:]
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
    con = duckdb.connect(str(db), read_only=True)
    names = {r[0] for r in con.execute(
        "SELECT DISTINCT name FROM metric_samples WHERE source = 'prometheus'").fetchall()}
    con.close()
    for want in ("vllm:num_requests_running", "vllm:generation_tokens_total",
                 "vllm:kv_cache_usage_perc"):
        assert any(n.startswith(want) for n in names), sorted(names)[:50]
