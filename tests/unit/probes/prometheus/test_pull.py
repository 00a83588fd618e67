"""`pull_run` against a server whose answers differ per family: partial pulls, server
warnings, empty windows and failures end as one warning; the samples land on the run's axis;
a re-pull replaces samples and the summary's warning instead of adding to them."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from infbench.store import create_run, finish_run
from probes.prometheus import PrometheusClient, pull_run
from tests.support.http_stub import QuietHandler, serve
from tests.support.stores import new_store

T0_UNIX = 1_800_000_000.0  # the run's start on the Unix clock


def _matrix(name: str, labels: dict[str, str], start: float, n: int) -> dict[str, Any]:
    return {"metric": {"__name__": name, **labels},
            "values": [[start + 0.5 * k, str(float(k))] for k in range(n)]}


class Fake(QuietHandler):
    mode: dict[str, str] = {}  # family prefix -> ok | error | empty | warn
    queries: list[str] = []

    def do_GET(self) -> None:  # /api/v1/targets
        self.send_body(200, {"status": "success", "data": {"activeTargets": [
            {"scrapeUrl": "http://10.1.2.3:8000/metrics",
             "labels": {"instance": "10.1.2.3:8000", "job": "vllm"}, "scrapeInterval": "500ms",
             "lastScrape": "2100-01-01T00:00:00Z"}]}})

    def do_POST(self) -> None:
        form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
        query, start = form["query"][0], float(form["start"][0])
        type(self).queries.append(query)
        prefix = query.split('__name__=~"')[1][:4]
        mode = self.mode.get(prefix, "empty")
        if mode == "error":
            self.send_body(422, {"status": "error", "errorType": "execution",
                                 "error": "query processing would load too many samples"})
            return
        result = [] if mode == "empty" else [
            _matrix(f"{prefix}_series", {"instance": "10.1.2.3:8000", "le": "0.1"}, start, 4)]
        doc: dict[str, Any] = {"status": "success", "data": {"resultType": "matrix", "result": result}}
        if mode == "warn":
            doc["warnings"] = ["some store was unreachable: results may be partial"]
        self.send_body(200, doc)


@pytest.fixture
def fake() -> Iterator[tuple[str, type[Fake]]]:
    with serve(Fake, mode={}, queries=[]) as url_and_handler:
        yield url_and_handler


@pytest.fixture
def con(tmp_path: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    c = new_store(tmp_path / "p.duckdb")
    create_run(c, run_id="r1", config={}, target_url="http://10.1.2.3:8000", model="m",
               endpoint="completions", t0_monotonic_ns=0)
    finish_run(c, "r1", status="completed", summary={"warnings": ["earlier warning"]})
    c.execute("UPDATE runs SET t0_unix_ns = ?, finished_at = to_timestamp(?)::TIMESTAMP "
              "WHERE run_id = 'r1'", [int(T0_UNIX * 1e9), T0_UNIX + 20])
    yield c
    c.close()


def _summary(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    return json.loads(con.execute("SELECT summary FROM runs").fetchone()[0])


def test_a_failing_family_makes_a_partial_pull_with_one_warning(fake, con) -> None:  # type: ignore[no-untyped-def]
    url, h = fake
    h.mode.update({"vllm": "ok", "sgla": "error", "DCGM": "warn", "node": "empty"})
    report = pull_run(con, "r1", PrometheusClient(url))
    assert report.status == "partial" and report.failed_queries == 1 and report.queries == 4
    assert report.families == {"vllm": 1, "dcgm": 1, "node": 0}
    assert report.selector == 'instance=~"10\\\\.1\\\\.2\\\\.3:8000"'
    assert all('instance=~"10' in q for q in h.queries)  # every family chosen by the target
    w = report.warning
    assert w is not None and w.count("Prometheus") == 1 and "execution: query processing" in w
    assert "server warning: some store was unreachable" in w
    # Samples on the run's axis: the window starts one step (0.5 s) before t0.
    rows = con.execute("SELECT min(t_ns), count(*) FROM metric_samples WHERE source = "
                       "'prometheus'").fetchone()
    assert rows == (-500_000_000, 8)
    s = _summary(con)
    assert s["warnings"] == ["earlier warning", w] and s["prometheus"]["status"] == "partial"
    (pull,) = con.execute("SELECT status, series, samples, step_s, warnings FROM prometheus_pulls").fetchall()
    assert pull[:4] == ("partial", 2, 8, 0.5) and len(json.loads(pull[4])) == 2


def test_a_repull_replaces_samples_and_its_warning(fake, con) -> None:  # type: ignore[no-untyped-def]
    url, h = fake
    h.mode.update({"vllm": "ok", "sgla": "error"})
    first = pull_run(con, "r1", PrometheusClient(url))
    h.mode.update({"sgla": "ok"})
    second = pull_run(con, "r1", PrometheusClient(url))
    assert first.status == "partial" and second.status == "ok" and second.warning is None
    assert _summary(con)["warnings"] == ["earlier warning"]  # the first pull's warning is gone
    n = con.execute("SELECT count(*) FROM metric_samples WHERE source = 'prometheus'").fetchone()[0]
    assert n == second.samples == 8
    assert [r[0] for r in con.execute("SELECT pull_idx FROM prometheus_pulls ORDER BY 1").fetchall()] == [0, 1]


def test_nothing_matching_is_empty_and_a_dead_server_fails_without_losing_samples(fake, con) -> None:  # type: ignore[no-untyped-def]
    url, h = fake
    h.mode.update({"vllm": "ok"})
    pull_run(con, "r1", PrometheusClient(url))
    h.mode.clear()
    empty = pull_run(con, "r1", PrometheusClient(url))
    assert empty.status == "empty" and "no series matched" in (empty.warning or "")
    h.mode.update({"vllm": "ok"})
    pull_run(con, "r1", PrometheusClient(url))
    dead = pull_run(con, "r1", PrometheusClient("http://127.0.0.1:1", timeout_s=1))
    assert dead.status == "failed" and "unreachable" in (dead.warning or "")
    # A failed pull keeps what the previous pull stored.
    assert con.execute("SELECT count(*) FROM metric_samples WHERE source = 'prometheus'").fetchone()[0] == 4
