"""The Prometheus API client against servers that answer well and badly, and the window's
step and target selection."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from probes.prometheus.client import (
    PrometheusClient,
    PrometheusError,
    connect,
    read_token,
)
from probes.prometheus.window import _promql_regex, choose_step, select_target
from tests.support.http_stub import QuietHandler, serve

MATRIX = {"status": "success", "warnings": ["partial: one store down"], "data": {
    "resultType": "matrix", "result": [
        {"metric": {"__name__": "vllm:num_requests_running", "instance": "a:1"},
         "values": [[100.0, "3"], [101.5, "NaN"]]}]}}


class Handler(QuietHandler):
    answers: dict[str, tuple[int, Any, float]] = {}
    seen: list[tuple[str, str, str]] = []

    def _answer(self) -> None:
        path = self.path.split("?")[0]
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else self.path.partition("?")[2]
        type(self).seen.append((path, self.headers.get("Authorization", ""), body))
        status, doc, delay = self.answers.get(path, (404, "nope", 0.0))
        time.sleep(delay)
        self.send_body(status, doc)

    do_GET = do_POST = _answer


@pytest.fixture
def server() -> Iterator[tuple[str, type[Handler]]]:
    with serve(Handler, answers={}, seen=[]) as url_and_handler:
        yield url_and_handler


def test_range_query_parses_series_and_keeps_warnings(server) -> None:  # type: ignore[no-untyped-def]
    url, h = server
    h.answers["/api/v1/query_range"] = (200, MATRIX, 0.0)
    c = PrometheusClient(url, token="tok-123")
    res = c.query_range('{__name__=~"vllm:.+"}', 100.0, 160.0, 0.5)
    (s,) = res.series
    assert s.name == "vllm:num_requests_running" and s.labels == {"instance": "a:1"}
    assert s.values[0] == (100.0, 3.0) and str(s.values[1][1]) == "nan"
    assert res.warnings == ["partial: one store down"]
    path, auth, body = h.seen[-1]
    assert auth == "Bearer tok-123" and "step=0.5" in body and "start=100.000" in body
    assert "tok-123" not in repr(c)


@pytest.mark.parametrize(("status", "doc", "kind", "words"), [
    (400, {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"},
     "api", "bad_data: parse error"),
    (503, "Service Unavailable", "http", "HTTP 503"),
    (200, "<html>login</html>", "bad_response", "not Prometheus API JSON"),
    (200, {"status": "success", "data": {"resultType": "vector", "result": []}},
     "bad_response", "expected a matrix"),
])
def test_errors_are_classified(server, status, doc, kind, words) -> None:  # type: ignore[no-untyped-def]
    url, h = server
    h.answers["/api/v1/query_range"] = (status, doc, 0.0)
    with pytest.raises(PrometheusError) as err:
        PrometheusClient(url).query_range("up", 0, 10, 1)
    assert err.value.kind == kind and words in str(err.value)


def test_a_slow_server_times_out_and_a_closed_port_is_unreachable(server) -> None:  # type: ignore[no-untyped-def]
    url, h = server
    h.answers["/api/v1/query_range"] = (200, MATRIX, 1.5)
    t = time.monotonic()
    with pytest.raises(PrometheusError) as err:
        PrometheusClient(url, timeout_s=0.3).query_range("up", 0, 10, 1)
    assert err.value.kind == "timeout" and time.monotonic() - t < 1.4
    with pytest.raises(PrometheusError) as err:
        PrometheusClient("http://127.0.0.1:1").query("1")
    assert err.value.kind == "unreachable"


def test_tls_refuses_an_unverifiable_server(server) -> None:  # type: ignore[no-untyped-def]
    url, _ = server  # plain HTTP spoken to as https: the handshake fails, never silently
    with pytest.raises(PrometheusError) as err:
        PrometheusClient(url.replace("http://", "https://"), timeout_s=2).query("1")
    assert err.value.kind in ("tls", "unreachable")


def test_tokens_come_from_env_or_file_and_never_appear(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROM_T", " s3cret \n")
    assert read_token(env="PROM_T") == "s3cret"
    (tmp_path / "t").write_text("from-file\n")
    assert read_token(path=tmp_path / "t") == "from-file"
    for kwargs, words in (({"token_env": "UNSET_VAR_X"}, "UNSET_VAR_X is not set"),
                          ({"token_file": tmp_path / "missing"}, "token file"),
                          ({"token_env": "PROM_T", "token_file": tmp_path / "t"}, "not both"),
                          ({"ca_file": tmp_path / "nope.pem"}, "CA file")):
        with pytest.raises(ValueError, match=words) as err:
            connect("https://prom:9090", **kwargs)
        assert "s3cret" not in str(err.value)
    with pytest.raises(ValueError, match="credentials"):
        connect("http://user:pw@prom:9090")
    with pytest.raises(ValueError, match="http"):
        connect("prom:9090")


@pytest.mark.parametrize(("duration", "interval", "want"), [
    (10, 0.5, 0.5),      # short run: every scrape
    (30, None, 15.0),    # scrape interval unknown: Prometheus's default
    (3600, 15, 15.0),    # an hour at 15 s: 240 points
    (86400, 15, 120.0),  # a day: coarser, at most ~1000 points
    (7 * 86400, 1, 900.0),
])
def test_step_follows_the_run_length(duration: float, interval: float | None, want: float) -> None:
    step = choose_step(duration, interval)
    assert step == want and duration / step <= 10_000


def test_target_selected_by_its_scrape_url(server) -> None:  # type: ignore[no-untyped-def]
    url, h = server
    h.answers["/api/v1/targets"] = (200, {"status": "success", "data": {"activeTargets": [
        {"scrapeUrl": "http://10.0.0.7:8000/metrics", "labels": {"instance": "10.0.0.7:8000"},
         "scrapeInterval": "15s", "lastScrape": "2026-01-01T00:00:00Z"},
        {"scrapeUrl": "http://10.0.0.8:8000/metrics", "labels": {"instance": "other:8000"}}]}}, 0.0)
    sel = select_target(PrometheusClient(url), "http://10.0.0.7:8000", None)
    assert sel.target == 'instance=~"10\\\\.0\\\\.0\\\\.7:8000"'
    assert sel.host == 'instance=~"10\\\\.0\\\\.0\\\\.7:[0-9]+"' and len(sel.targets) == 1
    both = select_target(PrometheusClient(url), ["http://10.0.0.7:8000", "http://10.0.0.8:8000"], None)
    assert both.target == 'instance=~"10\\\\.0\\\\.0\\\\.7:8000|other:8000"' and len(both.targets) == 2
    none = select_target(PrometheusClient(url), "http://vllm.svc:80", None)
    assert none.target == "" and none.host is None and "no scrape target" in none.how
    given = select_target(PrometheusClient(url), "http://x", 'pod=~"vllm-.*"')
    assert given.target == given.host == 'pod=~"vllm-.*"'


def test_promql_regex_escapes_for_the_string_literal() -> None:
    assert _promql_regex("a.b:80") == "a\\\\.b:80"
