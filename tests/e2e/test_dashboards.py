"""Every dashboard panel against live series: a real Prometheus scraping the reference engine
under vLLM's names, a second one under SGLang's, a third under the names vLLM used before its
renames (all exporting their simulated GPU in dcgm-exporter's names), and `infbench run
--metrics-port`, while three runs load the engines.

Each template variable is resolved the way Grafana does (its `label_values` query, all values
as a `(a|b)` regex), substituted into every target expression of every panel, and the
expression must run without error and return at least one series with a number; every vLLM
target also against the old-names engine alone, so each `or` fallback is exercised.
"""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from dashboards.build import DASHBOARDS
from dashboards.common import Variable
from tests.e2e.engine_process import running_engine
from tests.support.cli import ROOT, cli_env
from tests.support.prometheus import PrometheusServer, free_port, running_prometheus, tool

pytestmark = pytest.mark.e2e

LABEL_VALUES = re.compile(r"^label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\)$", re.S)
RATE_INTERVAL = "5s"  # 10 scrapes at 0.5 s: what Grafana's $__rate_interval gives here


LEGACY: list[str] = []  # the instance of the engine serving vLLM's pre-rename names
# One evaluation time for every query, inside the load and with every family moving at it:
# "now" would drift past the runs' end on a slow machine, and a rate over 5 s is then 0.
AT: list[str] = []
# The vLLM families count engines, not series: the old-names engine is checked on its own, so
# a moment at which only the new-names engine admitted requests would leave it without data
# (seen on a loaded CI machine: TTFT, queue time and prefix-cache rates empty for it alone).
# Every histogram a panel draws is a family (a round beside a busy neighbour found a moment
# with SGLang's TTFT and e2e moving and its inter-token latency not).
FAMILIES = ("sum(rate(infbench_requests_completed_total[5s])) > 0",
            "count(rate(vllm:time_to_first_token_seconds_count[5s]) > 0) >= 2",
            "count(rate(vllm:request_queue_time_seconds_count[5s]) > 0) >= 2",
            "count(rate(vllm:prefix_cache_queries_total[5s]) > 0"
            " or rate(vllm:gpu_prefix_cache_queries_total[5s]) > 0) >= 2",
            "count(rate(vllm:inter_token_latency_seconds_count[5s]) > 0"
            " or rate(vllm:time_per_output_token_seconds_count[5s]) > 0) >= 2",
            "sum(rate(sglang:time_to_first_token_seconds_count[5s])) > 0",
            "sum(rate(sglang:inter_token_latency_seconds_count[5s])) > 0",
            "sum(rate(vllm:time_per_output_token_seconds_count[5s])) > 0",
            "count(rate(vllm:e2e_request_latency_seconds_count[5s]) > 0) >= 2",
            "sum(rate(sglang:e2e_request_latency_seconds_count[5s])) > 0",
            "DCGM_FI_DEV_SM_CLOCK")


def _legacy_families(prom: PrometheusServer) -> list[str]:
    """Each vLLM histogram an engine panel draws that the old-names engine exports, moving on
    that engine: the old-names test reads that engine alone, so a family counted over both
    vLLM engines can move on the other only (round R31, beside a busy neighbour: the e2e
    latency family moved on the new-names engine, the old one finished nothing in those 5 s,
    and its e2e panels had no data)."""
    from dashboards import engine
    names = sorted({m for spec in engine.LATENCY + engine.LOAD + engine.CACHE for t in spec.targets
                    for m in re.findall(r"(vllm:[A-Za-z0-9_]+)_bucket", t.expr)})
    selectors = [f'{n}_count{{instance="{LEGACY[0]}"}}' for n in names]
    exported = [s for s in selectors if prom.query(s)]
    assert len(exported) >= 4, (names, exported)  # TTFT, per-token, e2e, queue time at least
    return [f"rate({s}[5s]) > 0" for s in exported]


def _moment_with_every_family(prom: PrometheusServer, timeout_s: float, families: list[str],
                              ) -> str | None:
    """A recent evaluation time at which every family has data, or None after the timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        at = f"{time.time() - 0.5:.3f}"
        if all(prom.api("query", query=e, time=at)["data"]["result"] for e in families):
            return at
        time.sleep(0.5)
    return None


def _run(url: str, db: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "infbench", "run", "--url", url, "--db", str(db), "--quiet",
         "--arrival", "poisson", "--rate", "4", "--duration", "45", "--input-tokens",
         "uniform:128:384", "--output-tokens", "uniform:16:64", "--scrape-interval", "2", *extra],
        cwd=ROOT, env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusServer, str]]:
    tmp = tmp_path_factory.mktemp("dash")
    with running_engine() as vllm_engine, running_engine("--metrics-names", "sglang") as sg_engine, \
            running_engine("--metrics-names", "vllm-legacy") as old_engine:
        port = free_port()
        engines = (vllm_engine, sg_engine, old_engine)
        targets = [f"{h}:{p}" for h, p in (e.host_port for e in engines)]
        LEGACY[:] = [targets[2]]
        with running_prometheus({"engine": targets, "infbench": [f"127.0.0.1:{port}"]},
                                tmp / "prom", interval_s=0.5) as prom:
            runs = [_run(vllm_engine.url, tmp / "a.duckdb", "--metrics-port", str(port)),
                    _run(sg_engine.url, tmp / "b.duckdb"), _run(old_engine.url, tmp / "c.duckdb")]
            try:
                # Data in every family before checking: latency histograms need two scrapes
                # with observations in between.
                for expr in FAMILIES:
                    assert prom.wait_for(expr, timeout_s=40), (
                        expr, [r.poll() for r in runs], prom.log.read_text()[-1500:])
                families = [*FAMILIES, *_legacy_families(prom)]
                at = _moment_with_every_family(prom, timeout_s=30, families=families)
                assert at, ([r.poll() for r in runs], prom.log.read_text()[-1500:])
                AT[:] = [at]
                yield prom, sg_engine.url
            finally:
                for r in runs:
                    if r.poll() is None:
                        r.send_signal(signal.SIGINT)  # stored as interrupted; nothing to wait for
                for r in runs:
                    try:
                        r.wait(timeout=20)
                    except subprocess.TimeoutExpired:
                        r.kill()
                        r.wait()


def _label_values(prom: PrometheusServer, query: str) -> list[str]:
    m = LABEL_VALUES.match(query.strip())
    assert m, f"not a label_values query: {query}"
    selector, label = m.group(1).strip(), m.group(2)
    doc = prom.api(f"label/{label}/values", **{"match[]": selector})
    assert doc["status"] == "success", doc
    return sorted(doc["data"])


def _resolve(prom: PrometheusServer, variables: list[Variable]) -> dict[str, str]:
    """Each variable in order, as Grafana's multi-value regex of all its values."""
    values: dict[str, str] = {}
    for v in variables:
        query = _substitute(v.query, values)
        found = _label_values(prom, query)
        assert found, f"variable {v.name}: {query} found no values"
        values[v.name] = "(" + "|".join(re.escape(x) for x in found) + ")"
    return values


def _substitute(expr: str, values: dict[str, str]) -> str:
    expr = expr.replace("$__rate_interval", RATE_INTERVAL)
    for name, value in sorted(values.items(), key=lambda kv: -len(kv[0])):
        # Inside a PromQL string a regex backslash must itself be escaped.
        expr = expr.replace(f"${name}", value.replace("\\", "\\\\"))
    return expr


def test_every_panel_expression_returns_data(live: tuple[PrometheusServer, str]) -> None:
    prom, _ = live
    problems: list[str] = []
    checked = 0
    for dash_name, (_, specs, variables) in DASHBOARDS.items():
        values = _resolve(prom, variables)
        for spec in specs:
            for target in spec.targets:
                expr = _substitute(target.expr, values)
                assert "$" not in expr, expr
                checked += 1
                problem = _problem(prom, expr)
                if problem:
                    problems.append(f"{dash_name} / {spec.title} / {target.legend}: {problem}")
    assert problems == [], "\n".join(problems)
    assert checked >= 60
    # The check itself tells data from none: a misspelt series, a NaN-only quantile, a typo.
    assert _problem(prom, 'sum(rate(vllm:time_to_first_token_second_bucket[5s]))')
    assert _problem(prom, 'histogram_quantile(0.9, sum by (le) (rate(vllm:num_requests_running[5s])))')
    assert "error" in (_problem(prom, "sum(rate(vllm:num_requests_running{[5s]))") or "")


def _problem(prom: PrometheusServer, expr: str) -> str | None:
    """None when the expression ran and gave at least one number at the module's evaluation
    time; else what went wrong."""
    try:
        doc = prom.api("query", query=expr, time=AT[0])
    except urllib.error.HTTPError as err:  # Prometheus answers 400 for a parse error
        doc = json.loads(err.read())
    if doc["status"] != "success":
        return f"error {doc.get('error')}"
    numbers = [float(r["value"][1]) for r in doc["data"]["result"]]
    if not [x for x in numbers if not math.isnan(x)]:
        return f"no data ({expr})"
    return None


def test_variables_chain_and_name_both_engines(live: tuple[PrometheusServer, str]) -> None:
    prom, _ = live
    from dashboards import engine, gpu
    values = _resolve(prom, engine.VARIABLES)
    # The engines serve the same model; the instance variable holds all three of them.
    assert values["instance"].count("|") == 2, values
    gpu_values = _resolve(prom, gpu.VARIABLES)
    assert gpu_values["gpu"] == "(0)" and gpu_values["instance"].count("|") == 2, gpu_values


def test_every_vllm_target_works_on_a_server_with_the_old_names(
        live: tuple[PrometheusServer, str]) -> None:
    """The same panels against only the engine exposing vLLM's pre-rename names: the `or`
    fallbacks (ITL, KV usage, prefix cache) must carry them, and nothing else may rely on a
    new name."""
    prom, _ = live
    from dashboards import engine
    (instance,) = LEGACY
    values = {"model": ".*", "instance": re.escape(instance)}
    problems, checked = [], 0
    for spec in engine.LATENCY + engine.LOAD + engine.CACHE:
        for target in spec.targets:
            if "vllm:" not in target.expr:
                continue
            checked += 1
            problem = _problem(prom, _substitute(target.expr, values))
            if problem:
                problems.append(f"{spec.title} / {target.legend}: {problem}")
    assert problems == [] and checked >= 15, "\n".join(problems)
    # ...and the old names alone are what that engine has.
    assert not prom.query(f'vllm:kv_cache_usage_perc{{instance="{instance}"}}')
    assert prom.query(f'vllm:gpu_cache_usage_perc{{instance="{instance}"}}')


def test_sglang_names_are_valid_exposition(live: tuple[PrometheusServer, str]) -> None:
    _, sg_url = live
    import urllib.request
    with urllib.request.urlopen(sg_url + "/metrics", timeout=10) as r:
        body = r.read()
    r = subprocess.run([tool("promtool"), "check", "metrics"], input=body, capture_output=True,
                       timeout=60)
    lint = [ln.strip() for ln in (r.stdout + r.stderr).decode().splitlines() if ln.strip()]
    # Only the colon in the engines' own names (SGLang and vLLM share it), and what
    # dcgm-exporter itself does on the simulated GPU's series (camelCase modelName/Hostname
    # labels, counters named ..._VOL_TOTAL); nothing else.
    allowed = (r"^(sglang|reference_engine):\S+ metric names should not contain ':'$",
               r"^DCGM_\w+ label names should be written in 'snake_case' not 'camelCase'$",
               r'^DCGM_\w+_TOTAL counter metrics should have "_total" suffix$')
    assert lint and all(any(re.match(a, ln) for a in allowed) for ln in lint), lint
    assert any(ln.startswith("sglang:") for ln in lint)
    assert b"vllm:" not in body and b"sglang:time_to_first_token_seconds_bucket" in body


def test_rules_file_of_every_expression_passes_promtool(tmp_path: Path) -> None:
    """promtool parses every expression (variables substituted with plain values), without a
    server: catches a syntax error even where the live check could not reach (old names)."""
    rules = []
    for dash_name, (_, specs, variables) in DASHBOARDS.items():
        values = {v.name: ".*" for v in variables}
        for i, spec in enumerate(specs):
            for j, t in enumerate(spec.targets):
                rules.append({"record": f"check:{dash_name.split('.')[0].replace('-', '_')}:{i}_{j}",
                              "expr": _substitute(t.expr, values)})
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboards", "rules": rules}]}))
    r = subprocess.run([tool("promtool"), "check", "rules", str(path)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(rules)} rules found" in r.stdout, r.stdout


def test_label_values_parser() -> None:
    assert LABEL_VALUES.match('label_values({__name__=~"a|b", x="y"}, model_name)').groups() == (
        '{__name__=~"a|b", x="y"}', "model_name")
    assert urllib.parse.quote("a") == "a"
