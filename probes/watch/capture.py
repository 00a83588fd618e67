"""Capture an incident's evidence while it lasts: what `infbench run`'s live watch calls when
it sees an engine stop, an error burst or a replica departing from its peers.

At each trigger, in a worker thread (the load loop never waits on it), bounded in count
(`max_captures` per run, `spacing_s` apart), bytes (`metrics_bytes` per page) and time
(every read has a timeout):
- every target's `/metrics` page as it is now (a counter's value at the stall, a gauge that
  is gone a minute later);
- stacks of the engine's processes: the ranks an engine lists at `GET /debug/ranks` (the
  bundled engine: its pid, and its Flight Recorder dumps when it runs ranks with
  `--dump-dir`), else the pids given (`--engine-pid`: vLLM's API server and EngineCore),
  read by py-spy (probes/hang/capture.py);
- a GPU sample when the run's GPU probe is running.
What could not be taken is kept with the reason. Results stay in memory until the run has
been stored (`probes/watch/store.py`).
"""

from __future__ import annotations

import base64
import contextlib
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from infbench.http_client import NoAnswer, request
from probes.hang.capture import capture_pids, capture_url
from probes.hang.errors import CaptureError
from probes.hang.model import Capture

METRICS_TIMEOUT_S = 3.0
METRICS_BYTES = 2 * 1024 * 1024
RANKS_TIMEOUT_S = 3.0
DUMP_WAIT_S = 5.0


@dataclass(frozen=True)
class WatchTarget:
    name: str | None          # the replica's name (None: the run's one target)
    url: str                  # its base URL
    metrics_url: str | None   # its /metrics, where it has one


@dataclass
class MetricsPage:
    target: str | None
    url: str
    t_ns: int
    status: str               # ok | failed
    body: str | None = None
    bytes: int = 0
    truncated: bool = False
    error: str | None = None


@dataclass
class CaptureRecord:
    """Owns: one trigger's evidence, filled by the worker thread, read after `close()`."""

    kind: str
    at_ns: int                # monotonic, when the watch saw it
    replica: str | None
    summary: str
    detail: dict[str, Any]
    captured: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)
    metrics: list[MetricsPage] = field(default_factory=list)
    stacks: Capture | None = None
    capture_s: float | None = None

    def fail(self, what: str, why: str) -> None:
        self.failed.append({"what": what, "why": why})


def public_url(url: str) -> str:
    """The URL without user:password (a target given as http://user:pw@host keeps its
    credentials out of the store)."""
    p = urlsplit(url)
    if p.username is None and p.password is None:
        return url
    host = p.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if p.port is not None:
        netloc += f":{p.port}"
    return urlunsplit((p.scheme, netloc, p.path, p.query, p.fragment))


def read_metrics(target: WatchTarget, headers: dict[str, str], limit: int = METRICS_BYTES,
                 timeout_s: float = METRICS_TIMEOUT_S) -> MetricsPage:
    url = target.metrics_url or target.url.rstrip("/") + "/metrics"
    at = time.monotonic_ns()
    parts = urlsplit(url)
    if parts.username is not None and "Authorization" not in headers:
        # http://user:password@host: the credentials go in a header, never in the URL sent
        token = base64.b64encode(f"{unquote(parts.username)}:{unquote(parts.password or '')}"
                                 .encode()).decode()
        headers = {**headers, "Authorization": f"Basic {token}"}
    try:
        answer = request("GET", public_url(url), timeout_s=timeout_s, headers=headers, limit=limit)
    except NoAnswer as exc:
        return MetricsPage(target.name, public_url(url), at, "failed", error=f"no answer ({exc})")
    if not 200 <= answer.status < 300:
        return MetricsPage(target.name, public_url(url), at, "failed", error=f"HTTP {answer.status}")
    return MetricsPage(target.name, public_url(url), at, "ok", answer.body.decode("utf-8", "replace"),
                       len(answer.body), answer.cut)


class IncidentCapturer:
    """Owns: the capture records and the worker thread that fills them. `submit` is called
    on the load loop and returns at once."""

    def __init__(self, targets: list[WatchTarget], pids: list[int], *,
                 api_key: str | None = None, gpu_sample: Any = None, max_captures: int = 3,
                 spacing_s: float = 10.0, metrics_bytes: int = METRICS_BYTES,
                 stacks: bool = True) -> None:
        if max_captures < 0:
            raise ValueError(f"watch-captures: must be >= 0, not {max_captures}")
        self.targets, self.pids = targets, pids
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._gpu_sample = gpu_sample
        self._max, self._spacing_ns = max_captures, int(spacing_s * 1e9)
        self._metrics_bytes, self._stacks = metrics_bytes, stacks
        self.records: list[CaptureRecord] = []
        self._last_ns: int | None = None
        self._taken = 0
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="infbench-watch")
        self._futures: list[Future[None]] = []

    def submit(self, trigger: Any) -> None:
        """A trigger (`loadgen.telemetry.watch.Trigger`: kind, at_ns, replica, detail, describe())."""
        rec = CaptureRecord(trigger.kind, trigger.at_ns, trigger.replica, trigger.describe(),
                            dict(trigger.detail))
        with self._lock:
            self.records.append(rec)
            if self._taken >= self._max:
                rec.fail("capture", f"the run's budget of {self._max} captures was spent")
                return
            if self._last_ns is not None and trigger.at_ns - self._last_ns < self._spacing_ns:
                rec.fail("capture", f"{(trigger.at_ns - self._last_ns) / 1e9:.1f} s after the "
                         f"last capture (spacing {self._spacing_ns / 1e9:g} s)")
                return
            self._taken += 1
            self._last_ns = trigger.at_ns
        self._futures.append(self._pool.submit(self._capture, rec))

    def close(self, timeout_s: float = 60.0) -> list[CaptureRecord]:
        """Wait (bounded) for the captures under way; the records, in trigger order."""
        deadline = time.monotonic() + timeout_s
        for fut in self._futures:
            # _capture keeps its own failures; a timeout leaves the record as far as it got
            with contextlib.suppress(Exception):
                fut.result(timeout=max(deadline - time.monotonic(), 0.0))
        self._pool.shutdown(wait=False, cancel_futures=True)
        return self.records

    def _capture(self, rec: CaptureRecord) -> None:
        start = time.monotonic()
        try:
            self._take(rec)
        except Exception as exc:  # noqa: BLE001 - evidence capture must never fail the run
            rec.fail("capture", f"{type(exc).__name__}: {exc}"[:300])
        rec.capture_s = round(time.monotonic() - start, 3)

    def _take(self, rec: CaptureRecord) -> None:
        # Stacks first: a stuck engine's threads are the evidence most likely to change.
        if self._stacks:
            self._take_stacks(rec)
        for t in self.targets:
            page = read_metrics(t, self._headers, self._metrics_bytes)
            rec.metrics.append(page)
            where = f"/metrics of {t.name}" if t.name else "/metrics"
            if page.status == "ok":
                rec.captured.append({"what": where, "bytes": page.bytes, "truncated": page.truncated})
            else:
                rec.fail(where, page.error or "failed")
        if self._gpu_sample is not None:
            try:
                rows = self._gpu_sample(time.monotonic_ns())
                rec.captured.append({"what": "gpu sample", "gpus": len(rows), "rows": rows})
            except Exception as exc:  # noqa: BLE001 - NVML errors are reported, not raised
                rec.fail("gpu sample", f"{type(exc).__name__}: {exc}"[:200])

    def _take_stacks(self, rec: CaptureRecord) -> None:
        # The replica the trigger concerns, else every target (one target: that one).
        targets = [t for t in self.targets if rec.replica is None or t.name == rec.replica]
        cap: Capture | None = None
        why: list[str] = []
        for t in targets:
            try:
                cap = capture_url(t.url, dump_wait_s=DUMP_WAIT_S, http_timeout_s=RANKS_TIMEOUT_S)
                break
            except CaptureError as exc:
                why.append(str(exc))
        if cap is None and self.pids:
            try:
                cap = capture_pids(self.pids)
            except CaptureError as exc:
                why.append(str(exc))
        if cap is None:
            rec.fail("stacks", "; ".join(why) + ("" if self.pids else
                     "; give --engine-pid PID (the engine's processes on this host) for py-spy"))
            return
        cap.target = public_url(cap.target) if cap.source == "url" else cap.target
        cap.notes.append(f"taken by the live watch of the run: {rec.kind} ({rec.summary})")
        rec.stacks = cap
        ok = [r for r in cap.ranks if r.stacks.status == "ok"]
        dumps = [r for r in cap.ranks if r.dump is not None]
        rec.captured.append({"what": "stacks", "capture_id": cap.capture_id, "source": cap.source,
                             "processes": len(cap.ranks), "with_stacks": len(ok),
                             "flight_recorder_dumps": len(dumps)})
        for r in cap.ranks:
            if r.stacks.status != "ok":
                rec.fail(f"stacks of pid {r.pid}", r.stacks.error or r.stacks.status)
