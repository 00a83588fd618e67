"""The live run in Prometheus text format (`infbench run --metrics-port N`), so a long soak can
be watched on the same dashboards as the server.

Cost on the hot path: none. Sends, reads and stamps are untouched; a finished request is
observed by the recorder (the task that already parses it, after the stream ended) with one
bucket search each for TTFT and e2e, and its ITL columns are kept by reference until a scrape
(or 256 streams) bins them all in one vectorised pass: ~11 us of CPU per 128-token stream.
Counters the runner keeps anyway (sent, in flight, errors by class, client health) are read
from `LiveStats` only when Prometheus scrapes. The text is rendered on the run's event loop
at scrape time: ~0.2 ms once per scrape interval (benchmarks/results/client_exposition.md).

Served on loopback by default: the exposition names the target and the model, which a
shared network need not see. ITL follows the store's `itl` view (each read's gap since the
previous content read spread over the events it delivered), so the histogram and the
summary agree.
"""

from __future__ import annotations

import bisect
import math
import socket
import sys
import time
from typing import Any

import numpy as np
from aiohttp import web

from infbench.loadgen.run.types import LiveStats
from infbench.loadgen.sse.events import ParsedStream

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# vLLM's own TTFT and ITL edges (reference_engine.metrics mirrors them), so infbench's view
# and the server's quantise alike on one dashboard.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
               0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
FOLD_EVERY = 256  # streams held before their ITL is binned (bounds the memory held)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
               60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: list[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in pairs) + "}"


def _num(v: float) -> str:
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


class _Histogram:
    def __init__(self, name: str, doc: str, bounds: tuple[float, ...]) -> None:
        self.name, self.doc = name, doc
        self.bounds = bounds
        self._edges = np.asarray(bounds)
        self.counts = np.zeros(len(bounds) + 1, dtype=np.int64)  # last: above every bound
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1  # le is inclusive
        self.sum += value

    def observe_many(self, values: np.ndarray, weights: np.ndarray) -> None:
        idx = np.searchsorted(self._edges, values, side="left")
        self.counts += np.bincount(idx, weights=weights, minlength=len(self.counts)).astype(np.int64)
        # Multiply and sum, not np.dot: dot is ~50x slower here (no BLAS for this shape).
        self.sum += float((values * weights).sum())

    def render(self, labels: list[tuple[str, str]]) -> list[str]:
        out = [f"# HELP {self.name} {self.doc}", f"# TYPE {self.name} histogram"]
        cum = np.cumsum(self.counts)
        for bound, c in zip((*self.bounds, math.inf), cum, strict=True):
            out.append(f"{self.name}_bucket{_labels([*labels, ('le', _num(bound))])} {int(c)}")
        out.append(f"{self.name}_sum{_labels(labels)} {_num(self.sum)}")
        out.append(f"{self.name}_count{_labels(labels)} {int(cum[-1])}")
        return out


def spread_itl(streams: list[tuple[Any, Any, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """(gap per event in seconds, events with that gap) for each content read after the
    first of its stream, as the `itl` view spreads them, over many streams in one pass.

    `streams` holds each stream's (t_ns, read_idx, content) columns as the parser left them;
    events of one read share its arrival stamp."""
    streams = [s for s in streams if len(s[0])]
    if not streams:
        return np.empty(0), np.empty(0, dtype=np.int64)
    lens = [len(s[0]) for s in streams]
    content = np.concatenate([np.asarray(s[2], dtype=bool) for s in streams])
    req = np.repeat(np.arange(len(streams)), lens)[content]
    reads = np.concatenate([np.asarray(s[1], dtype=np.int64) for s in streams])[content]
    times = np.concatenate([np.asarray(s[0], dtype=np.int64) for s in streams])[content]
    if len(reads) < 2:
        return np.empty(0), np.empty(0, dtype=np.int64)
    # The first event of each (stream, read); the gap before it, if the previous start is
    # in the same stream, is spread over the events of its read.
    starts = np.flatnonzero(np.r_[True, (reads[1:] != reads[:-1]) | (req[1:] != req[:-1])])
    n = np.diff(np.r_[starts, len(reads)])
    same = req[starts][1:] == req[starts][:-1]
    gaps = np.diff(times[starts])[same] / 1e9
    weights = n[1:][same]
    return gaps / weights, weights


class LiveExposition:
    """Owned by the runner: `observe` from its recorder, `render` from the scrape handler,
    both on the run's event loop (no locking)."""

    def __init__(self, stats: LiveStats, *, model: str, target: str, endpoint: str) -> None:
        self.stats = stats
        self._labels = [("model_name", model)]
        self._info = [("model_name", model), ("target", target), ("endpoint", endpoint)]
        self.ttft = _Histogram("infbench_time_to_first_token_seconds",
                               "Client-side TTFT of successful requests (first content event - send).",
                               TTFT_BUCKETS)
        self.itl = _Histogram("infbench_inter_token_latency_seconds",
                              "Client-side ITL per content event (a read's gap spread over its events).",
                              ITL_BUCKETS)
        self.e2e = _Histogram("infbench_e2e_request_latency_seconds",
                              "Client-side end-to-end latency of successful requests.", E2E_BUCKETS)
        self.output_tokens = 0
        self._pending: list[tuple[Any, Any, Any]] = []  # streams whose ITL is not binned yet
        self._runner: web.AppRunner | None = None
        self.url: str | None = None

    def observe(self, p: ParsedStream, send_ns: int, end_ns: int | None, ok: bool) -> None:
        if not ok:
            return  # errors are counted by class in LiveStats
        if p.first_content_ns is not None:
            self.ttft.observe((p.first_content_ns - send_ns) / 1e9)
        last = p.last_content_ns if p.last_content_ns is not None else end_ns
        if last is not None:
            self.e2e.observe((last - send_ns) / 1e9)
        # ITL is binned in batches (at a scrape, or every FOLD_EVERY streams): one
        # vectorised pass over many streams instead of a dozen small array calls per stream.
        self._pending.append((p.t_ns, p.read_idx, p.content))
        if len(self._pending) >= FOLD_EVERY:
            self._fold()
        self.output_tokens += p.output_tokens[0]

    def _fold(self) -> None:
        if self._pending:
            values, weights = spread_itl(self._pending)
            self._pending = []
            if len(values):
                self.itl.observe_many(values, weights)

    def render(self) -> str:
        self._fold()
        st, lab = self.stats, self._labels
        lines: list[str] = []

        def family(name: str, kind: str, doc: str, rows: list[tuple[list[tuple[str, str]], float]]) -> None:
            lines.extend([f"# HELP {name} {doc}", f"# TYPE {name} {kind}"])
            lines.extend(f"{name}{_labels(ls)} {_num(v)}" for ls, v in rows)

        family("infbench_run_info", "gauge", "The run being driven (value 1).", [(self._info, 1)])
        family("infbench_requests_sent_total", "counter", "Requests handed to the socket.",
               [(lab, st.sent)])
        family("infbench_requests_completed_total", "counter", "Requests that succeeded.",
               [(lab, st.done)])
        family("infbench_request_errors_total", "counter", "Failed requests by error class.",
               [([*lab, ("error_class", c)], n) for c, n in sorted(st.errors_by_class.items())]
               or [([*lab, ("error_class", "none")], 0)])
        family("infbench_requests_in_flight", "gauge", "Requests sent and not yet finished.",
               [(lab, st.in_flight)])
        family("infbench_output_tokens_total", "counter", "Output tokens of successful requests.",
               [(lab, self.output_tokens)])
        h = st.last_health
        family("infbench_client_loop_lag_seconds", "gauge",
               "Worst event-loop lag in the last health interval (client saturation).",
               [(lab, (h.loop_lag_ms if h else 0.0) / 1e3)])
        family("infbench_client_schedule_lag_seconds", "gauge",
               "Worst send delay behind the arrival schedule in the last health interval.",
               [(lab, (h.schedule_lag_ms if h else 0.0) / 1e3)])
        family("infbench_client_cpu_percent", "gauge", "Client CPU use, percent of one core.",
               [(lab, h.cpu_percent if h else 0.0)])
        family("infbench_client_resident_memory_bytes", "gauge", "Client resident memory.",
               [(lab, h.rss_bytes if h else 0)])
        family("infbench_run_elapsed_seconds", "gauge", "Seconds since the run's start.",
               [(lab, max(0.0, (time.monotonic_ns() - st.started_ns) / 1e9))])
        for hist in (self.ttft, self.itl, self.e2e):
            lines += hist.render(lab)
        return "\n".join(lines) + "\n"

    # -- serving -------------------------------------------------------------------------
    async def start(self, host: str, port: int) -> str:
        """Serve /metrics on host:port (0: any free port); returns the URL."""
        async def handle(_: web.Request) -> web.Response:
            return web.Response(body=self.render().encode(), headers={"Content-Type": CONTENT_TYPE})

        sock = bind_socket(host, port)
        app = web.Application()
        app.router.add_get("/metrics", handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{sock.getsockname()[1]}/metrics"
        # Said once, on stderr (stdout may carry --json): where to point Prometheus.
        print(f"INFO: live metrics on {self.url}", file=sys.stderr, flush=True)
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def check_invariants(self) -> None:
        self._fold()
        for hist in (self.ttft, self.itl, self.e2e):
            assert (hist.counts >= 0).all() and hist.sum >= 0, hist.name
        assert self.ttft.counts.sum() <= self.stats.done, "TTFT observed for more than succeeded"

    def __repr__(self) -> str:
        return f"LiveExposition(url={self.url!r})"


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening socket on host:port; OSError (in use, no such address) as the OS says."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(64)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def parse_bind(text: str) -> tuple[str, int]:
    """`PORT` (loopback) or `HOST:PORT` -> (host, port); ValueError naming the problem."""
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]") if sep else "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"metrics-port: {text!r} is not PORT or HOST:PORT") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"metrics-port: {port} is not a port (0..65535)")
    return host, port
