"""What a run is given (`RunSettings`), what it shows while it goes (`LiveStats`) and what it
ends with (`RunOutcome`); `loadgen.run.runner` drives it."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from infbench.loadgen.arrivals import Arrivals
from infbench.loadgen.fleet.replicas import Replica, RoutePolicy
from infbench.loadgen.http.bodies import ENDPOINTS
from infbench.loadgen.run.client_health import HealthSample
from infbench.loadgen.seeds import Streams, new_salt


@dataclass
class RunSettings:
    url: str  # base URL, no trailing slash
    endpoint: str
    model: str
    arrivals: Arrivals
    api_key: str | None = None  # never stored: the config JSON is built without it
    duration_s: float | None = None
    num_requests: int | None = None
    warmup_s: float = 0.0
    cooldown_s: float = 0.0
    request_timeout_s: float = 300.0
    seed: int = 0
    # Mixed into the prompt text's seed so no run is served from another's prefix cache; a new
    # one per RunSettings. None sends the seed's own text every time (--reuse-prompts).
    prompt_salt: int | None = field(default_factory=new_salt)
    ignore_eos: bool = True
    temperature: float = 0.0
    metrics_url: str | None = None
    steps_url: str | None = None
    steps_after: int = -1
    scrape_interval_s: float = 1.0
    sample_interval_s: float = 1.0
    drain_timeout_s: float | None = None  # wait for in-flight after sending stops
    # A fleet run: the replicas (the first is `url`) and how sessions are routed among them.
    # Empty: one target at `url`, scraped at metrics_url/steps_url, rows without a replica.
    replicas: list[Replica] = field(default_factory=list)
    route: RoutePolicy = field(default_factory=lambda: RoutePolicy("round-robin"))
    # Serve the live run in Prometheus text format here (`--metrics-port`); None: not served.
    metrics_bind: tuple[str, int] | None = None

    def validate(self) -> None:
        self.arrivals.validate()
        if self.endpoint not in ENDPOINTS:
            raise ValueError(f"endpoint: {self.endpoint!r} is not one of {', '.join(ENDPOINTS)}")
        if self.duration_s is None and self.num_requests is None and self.arrivals.kind != "trace":
            raise ValueError("duration/num_requests: give at least one stop condition")
        if self.duration_s is not None and self.duration_s <= 0:
            raise ValueError("duration: must be > 0")
        if self.num_requests is not None and self.num_requests <= 0:
            raise ValueError("num_requests: must be > 0")
        if self.warmup_s < 0 or self.cooldown_s < 0:
            raise ValueError("warmup/cooldown: must be >= 0")
        if self.request_timeout_s <= 0:
            raise ValueError("request_timeout: must be > 0")
        Streams(self.seed, self.prompt_salt)  # raises on a negative seed or a bad salt
        if self.replicas and self.replicas[0].url != self.url:
            raise ValueError("replicas: the first replica must be the run's url")
        if self.route.kind == "share" and len(self.route.weights) != len(self.replicas):
            raise ValueError("route: one share weight per replica")


@dataclass
class LiveStats:
    """What the progress display reads; updated by the runner only."""

    sent: int = 0
    done: int = 0
    errors: int = 0
    in_flight: int = 0
    started_ns: int = 0
    recent_done_ns: deque[int] = field(default_factory=lambda: deque(maxlen=2000))
    recent_ttft_ms: deque[float] = field(default_factory=lambda: deque(maxlen=500))
    recent_itl_ms: deque[float] = field(default_factory=lambda: deque(maxlen=500))
    errors_by_class: dict[str, int] = field(default_factory=dict)
    last_health: HealthSample | None = None
    # Fleet runs: per replica, its finished requests' (mean ITL ms, concurrency at send),
    # newest last: what the live watch compares replicas on.
    replica_recent: dict[str, deque[tuple[float, int]]] = field(default_factory=dict)
    # Finished requests' times to their first chunk: the live watch's yardstick for requests
    # still waiting for a first byte. Not the TTFT: a stream whose tokens all decode to empty
    # text has no first content (a real vLLM's did, in round R72) but did answer; a watch that
    # counted only TTFTs was left without a yardstick when such a request was one of the few
    # finished before a stop. Fleet runs also keep them per replica (a replica that stops
    # between waves is judged on its own queue and prefill, not the slowest peer's).
    recent_first_chunk_ms: deque[float] = field(default_factory=lambda: deque(maxlen=500))
    replica_first_chunk_ms: dict[str, deque[float]] = field(default_factory=dict)

    def rate(self, window_s: float = 5.0) -> float:
        now = time.monotonic_ns()
        cutoff = now - int(window_s * 1e9)
        n = sum(1 for t in self.recent_done_ns if t >= cutoff)
        span = min(window_s, max((now - self.started_ns) / 1e9, 1e-9))
        return n / span

    def finished(self, send_ns: int, first_chunk_ns: int | None, first_content_ns: int | None,
                 mean_itl_ns: float | None, replica: str | None, conc: int) -> None:
        """A request that ended without an error."""
        self.done += 1
        if first_content_ns is not None:
            self.recent_ttft_ms.append((first_content_ns - send_ns) / 1e6)
        if first_chunk_ns is not None:
            first_ms = (first_chunk_ns - send_ns) / 1e6
            self.recent_first_chunk_ms.append(first_ms)
            if replica is not None:
                own = self.replica_first_chunk_ms.get(replica)
                if own is None:
                    own = self.replica_first_chunk_ms[replica] = deque(maxlen=500)
                own.append(first_ms)
        if mean_itl_ns is not None:  # the summary's spread ITL, averaged over this stream
            self.recent_itl_ms.append(mean_itl_ns / 1e6)
            if replica is not None:
                recent = self.replica_recent.get(replica)
                if recent is None:
                    recent = self.replica_recent[replica] = deque(maxlen=64)
                recent.append((mean_itl_ns / 1e6, conc))

    @staticmethod
    def p50(values: deque[float]) -> float | None:
        return float(np.median(values)) if values else None


@dataclass
class RunOutcome:
    status: str  # completed | interrupted
    reason: str | None
    requests: int
    last_send_ns: int  # relative to t0, for the cool-down window
    scrape_errors: dict[str, int]
    scrapes: dict[str, int]
    sizing: dict[str, int] = field(default_factory=dict)  # /tokenize calls on the send path
    # Fleet runs: per replica name, its scrape counts and failures ({"metrics", "steps",
    # "gpu_metrics", "*_errors"}); empty for one target.
    replica_scrapes: dict[str, dict[str, int]] = field(default_factory=dict)
