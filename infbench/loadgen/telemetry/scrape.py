"""Scraping the target while a run goes on: Prometheus `/metrics` and the reference engine's
per-step log (`/engine/steps?after=N`). Failures are counted, never fatal to the run."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

# (name, labels as printed between the braces, value) per sample line; lenient. The name
# stays for the callers that imported it from here.
from infbench.promtext import parse_raw as parse_prometheus
from infbench.store.specdec_schema import SPEC_STEP_COLUMNS
from infbench.store.structured_schema import STRUCTURED_STEP_COLUMNS
from infbench.store.tenants_schema import LORA_STEP_COLUMNS

HEALTH_METRIC = "infbench:health_status"
STEP_FIELDS = ("step_id", "start", "end", "prefill_tokens", "decode_seqs", "num_running",
               "num_waiting", "preemptions", "kv_blocks_used", "kv_blocks_total", "fault",
               *(name for name, _ in STRUCTURED_STEP_COLUMNS),
               *(name for name, _ in SPEC_STEP_COLUMNS),
               *(name for name, _ in LORA_STEP_COLUMNS))


@dataclass
class Scraper:
    """Owned by the runner. Rows go out through the two callbacks as column dicts."""

    session: aiohttp.ClientSession
    metrics_url: str | None
    steps_url: str | None
    headers: dict[str, str]
    interval_s: float = 1.0
    on_metrics: Callable[[dict[str, list[Any]]], None] = lambda cols: None
    on_steps: Callable[[dict[str, list[Any]]], None] = lambda cols: None
    errors: dict[str, int] = field(default_factory=lambda: {"metrics": 0, "steps": 0})
    scrapes: dict[str, int] = field(default_factory=lambda: {"metrics": 0, "steps": 0})
    t0_ns: int = 0
    _last_step: int = -1

    async def run(self) -> None:
        while True:
            await self.scrape_once()
            await asyncio.sleep(self.interval_s)

    async def scrape_once(self) -> None:
        timeout = aiohttp.ClientTimeout(total=max(2.0, self.interval_s * 2))
        if self.metrics_url:
            try:
                async with self.session.get(self.metrics_url, headers=self.headers, timeout=timeout) as r:
                    if r.status == 200:
                        text = await r.text(errors="replace")
                        t = time.monotonic_ns() - self.t0_ns
                        rows = parse_prometheus(text)
                        self.on_metrics({
                            "t_ns": [t] * len(rows), "source": ["metrics"] * len(rows),
                            "name": [r_[0] for r_ in rows], "labels": [r_[1] for r_ in rows],
                            "value": [r_[2] for r_ in rows]})
                        self.scrapes["metrics"] += 1
                    else:
                        self.errors["metrics"] += 1
            except (TimeoutError, aiohttp.ClientError):
                self.errors["metrics"] += 1
        if self.metrics_url and self.metrics_url.endswith("/metrics"):
            await self._probe_health(self.metrics_url[: -len("/metrics")] + "/health", timeout)
        if self.steps_url:
            await self._scrape_steps(timeout)

    async def _probe_health(self, url: str, timeout: aiohttp.ClientTimeout) -> None:
        """The liveness answer beside each scrape (`infbench:health_status`: the HTTP status,
        0 for none): a server whose /health says 200 while its step loop is stuck (vLLM's
        engine core stopped) is what an orchestrator's liveness probe cannot see."""
        try:
            async with self.session.get(url, headers=self.headers, timeout=timeout) as r:
                status = r.status
                await r.read()
        except (TimeoutError, aiohttp.ClientError):
            status = 0
        self.on_metrics({"t_ns": [time.monotonic_ns() - self.t0_ns], "source": ["health"],
                         "name": [HEALTH_METRIC], "labels": [""], "value": [float(status)]})

    async def _scrape_steps(self, timeout: aiohttp.ClientTimeout) -> None:
        try:
            url = f"{self.steps_url}?after={self._last_step}"
            async with self.session.get(url, headers=self.headers, timeout=timeout) as r:
                if r.status != 200:
                    self.errors["steps"] += 1
                    return
                data = await r.json(content_type=None)
        except (TimeoutError, aiohttp.ClientError, ValueError):
            self.errors["steps"] += 1
            return
        steps = data.get("steps", []) if isinstance(data, dict) else data
        if not isinstance(steps, list):
            self.errors["steps"] += 1
            return
        self.scrapes["steps"] += 1
        steps = [s for s in steps if isinstance(s, dict) and s.get("step_id", -1) > self._last_step]
        if not steps:
            return
        self._last_step = max(int(s["step_id"]) for s in steps)
        cols: dict[str, list[Any]] = {k: [s.get(k) for s in steps] for k in STEP_FIELDS}
        cols["start_s"] = cols.pop("start")
        cols["end_s"] = cols.pop("end")
        cols["fault"] = [None if f is None else str(f) for f in cols["fault"]]
        self.on_steps(cols)


class ScrapeGroup:
    """The run's scrapers: one target's /metrics and step log, or in a fleet run each
    replica's (and its dcgm-exporter endpoint, given one), every row tagged with its replica.

    Ownership: owned by the runner; the scrapers' counters are read only after `run()` ends.
    """

    def __init__(self, session: aiohttp.ClientSession, replicas: list[Any], headers: dict[str, str],
                 interval_s: float, t0_ns: int, on_metrics: Callable[[dict[str, list[Any]]], None],
                 on_steps: Callable[[dict[str, list[Any]]], None], fleet: bool) -> None:
        self.fleet = fleet
        self.scrapers: list[tuple[str | None, str, Scraper]] = []  # (replica, kind, scraper)
        for r in replicas:
            name = r.name if fleet else None
            self.scrapers.append((name, "engine", Scraper(
                session, r.metrics_url, r.steps_url, headers, interval_s,
                on_metrics=_tagged(on_metrics, name, "metrics"), on_steps=_tagged(on_steps, name, None),
                t0_ns=t0_ns, _last_step=r.steps_after)))
            if getattr(r, "gpu_metrics_url", None):
                self.scrapers.append((name, "gpu", Scraper(
                    session, r.gpu_metrics_url, None, headers, interval_s,
                    on_metrics=_tagged(on_metrics, name, "dcgm"), t0_ns=t0_ns)))
        self.scrapers = [s for s in self.scrapers if s[2].metrics_url or s[2].steps_url]

    def tasks(self) -> list[Any]:
        return [s.run() for _, _, s in self.scrapers]

    async def scrape_once(self) -> None:
        await asyncio.gather(*(s.scrape_once() for _, _, s in self.scrapers))

    def totals(self) -> tuple[dict[str, int], dict[str, int]]:
        """(scrapes, errors) summed over the engines' scrapers, as one target's were."""
        scrapes = {"metrics": 0, "steps": 0}
        errors = {"metrics": 0, "steps": 0}
        for _, kind, s in self.scrapers:
            if kind == "engine":
                for k in scrapes:
                    scrapes[k] += s.scrapes[k]
                    errors[k] += s.errors[k]
        return scrapes, errors

    def per_replica(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        if not self.fleet:
            return out
        for name, kind, s in self.scrapers:
            d = out.setdefault(str(name), {})
            if kind == "engine":
                d.update({"metrics": s.scrapes["metrics"], "metrics_errors": s.errors["metrics"],
                          "steps": s.scrapes["steps"], "steps_errors": s.errors["steps"]})
            else:
                d.update({"gpu_metrics": s.scrapes["metrics"], "gpu_metrics_errors": s.errors["metrics"]})
        return out


def _tagged(sink: Callable[[dict[str, list[Any]]], None], replica: str | None,
            source: str | None) -> Callable[[dict[str, list[Any]]], None]:
    """Rows go on with their replica (fleet runs) and source; one target's rows unchanged."""
    if replica is None and source in (None, "metrics"):
        return sink

    def put(cols: dict[str, list[Any]]) -> None:
        n = len(next(iter(cols.values()), []))
        if replica is not None:
            cols["replica"] = [replica] * n
        if source is not None and "source" in cols:
            cols["source"] = [source] * n
        sink(cols)

    return put
