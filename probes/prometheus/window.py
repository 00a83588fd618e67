"""A run's window on the Unix clock, the query step, and which series are the target's.

The window starts one step before the run (the counters' values before the first request,
so an increase over the run is complete) and ends after Prometheus has scraped the target
once more since the run ended (else the last requests' observations are missing).
"""

from __future__ import annotations

import math
import re
import time
import urllib.parse
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from probes.prometheus.client import FATAL, PrometheusClient, PrometheusError

# Prometheus refuses a range query of more than 11,000 points per series.
MAX_POINTS = 10_000
# Steps are rounded up to one of these (seconds), so windows of similar length query alike.
_NICE_STEPS = (0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)
DEFAULT_SCRAPE_INTERVAL_S = 15.0  # Prometheus's own default
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")


def choose_step(duration_s: float, scrape_interval_s: float | None = None,
                target_points: int = 1000) -> float:
    """The step for a window of `duration_s`: the scrape interval (a finer step only repeats
    samples) unless that gives more than `target_points` points, then coarser; never more
    than MAX_POINTS points."""
    if duration_s <= 0 or not math.isfinite(duration_s):
        raise ValueError(f"step: window of {duration_s} s")
    base = scrape_interval_s if scrape_interval_s and scrape_interval_s > 0 else DEFAULT_SCRAPE_INTERVAL_S
    want = max(base, duration_s / target_points, duration_s / MAX_POINTS)
    for nice in _NICE_STEPS:
        if nice >= want - 1e-9:
            return float(nice)
    return float(math.ceil(want / 3600) * 3600)


def parse_duration(text: str) -> float | None:
    m = _DURATION.match(text or "")
    if m is None:
        return None
    return float(m.group(1)) * {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}[m.group(2)]


def utc_seconds(ts: datetime) -> float:
    """A store TIMESTAMP (naive UTC) as Unix seconds."""
    return (ts if ts.tzinfo else ts.replace(tzinfo=UTC)).timestamp()


def _rfc3339(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True)
class Selection:
    """Label matchers for the target's own series and for its host's (GPU, node)."""

    target: str          # e.g. instance="10.0.0.7:8000"; "" = no filter
    host: str | None     # None: host families are not pulled (we cannot tell which host)
    how: str             # one line: how the selection was made
    targets: list[dict[str, Any]]  # the scrape targets it matched (for the scrape wait)


def _host_port(url: str) -> tuple[str, int | None]:
    parts = urllib.parse.urlsplit(url)
    return (parts.hostname or "", parts.port or {"http": 80, "https": 443}.get(parts.scheme))


def _promql_regex(literal: str) -> str:
    r"""A literal as a regex inside a PromQL double-quoted string, whose own escapes come
    first: `\.` there is the regex `\.`, and a bare `\.` is a parse error."""
    return re.escape(literal).replace("\\", "\\\\")


_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


def _addresses(urls: list[str]) -> set[tuple[str, int | None]]:
    out = set()
    for url in urls:
        host, port = _host_port(url)
        for h in (_LOOPBACK if host in _LOOPBACK else {host}):
            out.add((h, port))
    return out


def select_target(client: PrometheusClient, target_urls: str | list[str],
                  selector: str | None) -> Selection:
    """The user's matchers, or the scrape targets whose URLs are the run's target (every
    replica of a fleet run).

    In Kubernetes a Service URL is not the pod a scrape target names; then nothing matches,
    host series are skipped and the caller says to pass a selector."""
    if selector:
        return Selection(selector, selector, "the given selector", [])
    urls = [target_urls] if isinstance(target_urls, str) else list(target_urls)
    wanted = _addresses(urls)
    try:
        active = client.targets()
    except PrometheusError as exc:
        if exc.kind in FATAL:
            raise
        active = []  # e.g. a proxy that serves queries only: select by model_name instead
    matched = [t for t in active if _host_port(str(t.get("scrapeUrl", ""))) in wanted]
    instances = sorted({str(t.get("labels", {}).get("instance", "")) for t in matched} - {""})
    if not instances:
        shown = ", ".join(f"{h}:{p}" for h, p in (_host_port(u) for u in urls))
        return Selection("", None, f"no scrape target has the run's address {shown}", [])
    inst_re = "|".join(_promql_regex(i) for i in instances)
    # The same machine's exporters (dcgm-exporter, node_exporter) share the instance's host.
    inst_hosts = sorted({i.rsplit(":", 1)[0] for i in instances})
    host_re = "|".join(_promql_regex(h) + ":[0-9]+" for h in inst_hosts)
    return Selection(f'instance=~"{inst_re}"', f'instance=~"{host_re}"',
                     f"scrape target {', '.join(instances)}", matched)


def wait_for_scrape(client: PrometheusClient, sel: Selection, after_unix_s: float,
                    max_wait_s: float) -> float | None:
    """Wait until every matched target was scraped after `after_unix_s` (at most
    `max_wait_s`); returns the largest scrape interval seen, for the step."""
    interval: float | None = None
    deadline = time.monotonic() + max_wait_s
    targets = sel.targets
    while True:
        intervals = [parse_duration(str(t.get("scrapeInterval", ""))) for t in targets]
        known = [i for i in intervals if i]
        interval = max(known) if known else interval
        last = [_rfc3339(str(t.get("lastScrape", ""))) for t in targets]
        if all(ls is not None and ls >= after_unix_s for ls in last):
            return interval
        if time.monotonic() >= deadline:
            return interval
        time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
        try:
            ids = {t.get("scrapeUrl") for t in targets}
            targets = [t for t in client.targets() if t.get("scrapeUrl") in ids]
        except PrometheusError:
            return interval
