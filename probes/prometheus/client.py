"""A small Prometheus HTTP API client: range and instant queries, targets, with auth and TLS.

Why not `prometheus-api-client` (0.7.2, checked): it pulls in `requests` and `dateparser`
for what is one GET per query; it retries through urllib3 by default, so a slow Prometheus
costs several timeouts before the caller hears of it; and its errors are one exception class
wrapping the body, which drops the API's `errorType` and its `warnings` (the partial-data
signal we must surface). The HTTP API (`/api/v1/query_range`, documented and stable since
Prometheus 2.0) is a JSON envelope read in a few lines over httpx (`infbench.http_client`),
with one timeout we choose and errors we can classify.

Secrets: a bearer token is read from an environment variable or a file at construction
and lives only in the request header. It is never part of a URL, a message, `repr()` or
anything returned, so nothing downstream (the store, logs, the summary) can leak it.
"""

from __future__ import annotations

import json
import math
import os
import ssl
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infbench.http_client import TIMEOUT, TLS, UNREACHABLE, NoAnswer, request, tls_context

# Failure kinds, so a caller can say what went wrong in one line without parsing messages;
# unreachable (refused, DNS, reset), timeout (no answer within the client's timeout) and tls
# (certificate or handshake failure) are the transport's (`infbench.http_client`).
HTTP = "http"                # a status other than 200 without an API error body
API = "api"                  # Prometheus answered status=error (bad_data, execution, ...)
BAD_RESPONSE = "bad_response"  # not the API's JSON envelope
AUTH = "auth"                # the token could not be read (missing variable or file)
# Kinds after which asking the same server again is pointless within one pull.
FATAL = frozenset({UNREACHABLE, TIMEOUT, TLS, AUTH})


class PrometheusError(Exception):
    """A query that did not produce data; `kind` is one of the constants above."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Series:
    """One series of a range query: its labels (``__name__`` apart) and (unix_s, value)."""

    name: str
    labels: dict[str, str]
    values: list[tuple[float, float]]


@dataclass(frozen=True)
class QueryResult:
    series: list[Series]
    warnings: list[str] = field(default_factory=list)  # Prometheus's own partial-data notes


def read_token(env: str | None = None, path: str | Path | None = None) -> str | None:
    """The bearer token from an environment variable or a file (first line, stripped).

    Raises PrometheusError(AUTH) naming the variable or file, never the value."""
    if env and path:
        raise PrometheusError(AUTH, "give the token as an environment variable or a file, not both")
    if env:
        value = os.environ.get(env)
        if not value:
            raise PrometheusError(AUTH, f"token variable {env} is not set or empty")
        return value.strip()
    if path:
        try:
            value = Path(path).read_text().strip()
        except OSError as exc:
            raise PrometheusError(AUTH, f"token file {path}: {exc.strerror or exc}") from None
        if not value:
            raise PrometheusError(AUTH, f"token file {path} is empty")
        return value
    return None


def _ssl_context(ca_file: str | Path | None, insecure: bool) -> ssl.SSLContext:
    try:
        return tls_context(ca_file, insecure)
    except (OSError, ssl.SSLError) as exc:
        raise PrometheusError(TLS, f"CA file {ca_file}: {exc}") from None


def _fmt_time(t: float) -> str:
    return f"{t:.3f}"


def _parse_value(raw: Any) -> float:
    # The API sends sample values as strings ("1", "NaN", "+Inf") to keep float precision.
    return float(raw)


class PrometheusClient:
    """One Prometheus server. Thread-compatible (no shared mutable state between calls)."""

    def __init__(self, url: str, *, token: str | None = None, ca_file: str | Path | None = None,
                 insecure: bool = False, timeout_s: float = 10.0) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"prometheus: {url!r} is not an http(s) URL")
        if parsed.username or parsed.password:
            # Credentials in the URL would be stored with it; the token options exist instead.
            raise ValueError("prometheus: put credentials in the token options, not in the URL")
        if timeout_s <= 0:
            raise ValueError("prometheus timeout: must be > 0")
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._headers = {"Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._ssl = _ssl_context(ca_file, insecure) if parsed.scheme == "https" else None

    def __repr__(self) -> str:  # never the header
        return f"PrometheusClient({self.url!r}, timeout_s={self.timeout_s})"

    # -- transport -----------------------------------------------------------------------
    def _get(self, path: str, params: list[tuple[str, str]], post: bool = False,
             ) -> tuple[Any, list[str]]:
        """Call an API path; returns the envelope's `data` and its `warnings`."""
        form = urllib.parse.urlencode(params)
        try:
            if post:
                # A form body, as Grafana sends long selectors: the URL stays short (the
                # query endpoints accept POST; others, like /targets, only GET).
                answer = request("POST", self.url + path, timeout_s=self.timeout_s,
                                 headers={**self._headers,
                                          "Content-Type": "application/x-www-form-urlencoded"},
                                 content=form.encode(), verify=self._ssl)
            else:
                answer = request("GET", f"{self.url}{path}?{form}", timeout_s=self.timeout_s,
                                 headers=self._headers, verify=self._ssl)
        except NoAnswer as err:
            if err.kind == TIMEOUT:
                raise PrometheusError(TIMEOUT, f"no answer within {self.timeout_s:g}s") from None
            if err.kind == TLS:
                raise PrometheusError(TLS, f"TLS: {err}") from None
            raise PrometheusError(UNREACHABLE, str(err)) from None
        envelope = _envelope(answer.body)
        if not 200 <= answer.status < 300:
            if envelope is not None and envelope.get("status") == "error":
                raise PrometheusError(API, f"{envelope.get('errorType', 'error')}: "
                                           f"{envelope.get('error', '')}")
            raise PrometheusError(HTTP, f"HTTP {answer.status} {answer.reason}")
        if envelope is None:
            raise PrometheusError(BAD_RESPONSE, "the answer is not Prometheus API JSON")
        if envelope.get("status") != "success":
            raise PrometheusError(API, f"{envelope.get('errorType', 'error')}: "
                                       f"{envelope.get('error', '')}")
        return envelope.get("data"), [str(w) for w in envelope.get("warnings") or []]

    # -- API -----------------------------------------------------------------------------
    def query_range(self, query: str, start_s: float, end_s: float, step_s: float) -> QueryResult:
        """`/api/v1/query_range` over [start_s, end_s] (Unix seconds) at `step_s`."""
        if not (math.isfinite(start_s) and math.isfinite(end_s)) or end_s < start_s:
            raise ValueError(f"query_range: bad window [{start_s}, {end_s}]")
        if step_s <= 0:
            raise ValueError("query_range: step must be > 0")
        data, warnings = self._get("/api/v1/query_range", [
            ("query", query), ("start", _fmt_time(start_s)), ("end", _fmt_time(end_s)),
            ("step", f"{step_s:g}"), ("timeout", f"{self.timeout_s:g}s")], post=True)
        return QueryResult(_matrix(data, "matrix"), warnings)

    def query(self, query: str, at_s: float | None = None) -> QueryResult:
        """`/api/v1/query` (instant); a vector's one value per series, a matrix's all."""
        params = [("query", query), ("timeout", f"{self.timeout_s:g}s")]
        if at_s is not None:
            params.append(("time", _fmt_time(at_s)))
        data, warnings = self._get("/api/v1/query", params, post=True)
        kind = (data or {}).get("resultType") if isinstance(data, dict) else None
        if kind == "vector":
            out = []
            for item in data.get("result") or []:
                metric = dict(item.get("metric") or {})
                t, v = item["value"]
                out.append(Series(metric.pop("__name__", ""), metric,
                                  [(float(t), _parse_value(v))]))
            return QueryResult(out, warnings)
        if kind == "scalar":
            t, v = data["result"]
            return QueryResult([Series("", {}, [(float(t), _parse_value(v))])],
                               warnings)
        return QueryResult(_matrix(data, "matrix"), warnings)

    def targets(self) -> list[dict[str, Any]]:
        """Active scrape targets: `labels`, `scrapeUrl`, `health`, `lastScrape`,
        `scrapeInterval` as `/api/v1/targets` gives them."""
        data, _ = self._get("/api/v1/targets", [("state", "active")])
        return list((data or {}).get("activeTargets") or [])

    def ready(self) -> None:
        """Raise PrometheusError when the server cannot answer a trivial query."""
        self.query("1")


def _envelope(raw: bytes) -> dict[str, Any] | None:
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc, dict) and "status" in doc else None


def _matrix(data: Any, expected: str) -> list[Series]:
    if not isinstance(data, dict) or data.get("resultType") != expected:
        got = data.get("resultType") if isinstance(data, dict) else type(data).__name__
        raise PrometheusError(BAD_RESPONSE, f"expected a {expected} result, got {got}")
    out = []
    for item in data.get("result") or []:
        metric = dict(item.get("metric") or {})
        values = [(float(t), _parse_value(v)) for t, v in item.get("values") or []]
        out.append(Series(metric.pop("__name__", ""), metric, values))
    return out


def connect(url: str, *, token_env: str | None = None, token_file: str | Path | None = None,
            ca_file: str | Path | None = None, insecure: bool = False,
            timeout_s: float = 10.0) -> PrometheusClient:
    """A client from command-line options; ValueError (one line) for anything the user must
    fix: a bad URL, an unset token variable, an unreadable token or CA file."""
    if ca_file is not None and not Path(ca_file).is_file():
        raise ValueError(f"prometheus CA file: {ca_file} is not a file")
    if insecure and ca_file is not None:
        raise ValueError("prometheus: --prometheus-insecure and a CA file contradict each other")
    try:
        token = read_token(token_env, token_file)
        return PrometheusClient(url, token=token, ca_file=ca_file, insecure=insecure,
                                timeout_s=timeout_s)
    except PrometheusError as exc:
        raise ValueError(f"prometheus: {exc}") from None
