"""Drive a workload against a target and stream every request and chunk into the store.

The runner schedules sessions (closed loop: N slots that send as soon as they are free;
open loop: intended send times from an arrival process or a trace), sends each request on
the hot path in `client.py`, and hands each finished stream to the `recorder`, which parses
it off the send path into column buffers that go to the store writer in batches while the
run goes on.

Each request is sized just before it is sent (`loadgen.workloads.sizing`): conversation turns always,
other requests where the target counts tokens differently from the model. Stopping: a run
stops starting sessions at --duration or once --num-requests are committed (a conversation
commits all its turns when it starts, so the count is never cut mid-conversation); sessions
already begun run all their turns. The drain after sending stops waits for them, bounded by
(request timeout + 5 s) per turn a session can have; what is still in flight then is
cancelled and the run is stored as interrupted. Only an interruption (a signal, a target
that stopped answering) stops a conversation between turns.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import aiohttp

from infbench.loadgen.calibrate import Counter
from infbench.loadgen.fleet.replicas import Replica, Router
from infbench.loadgen.http.bodies import ENDPOINTS, auth_headers, build_body
from infbench.loadgen.http.client import RawResponse, make_pool, stream_post
from infbench.loadgen.run.buffers import RunRows
from infbench.loadgen.run.client_health import HealthMonitor, HealthSample
from infbench.loadgen.run.pacer import Pacer
from infbench.loadgen.run.recorder import Recorder
from infbench.loadgen.run.types import LiveStats, RunOutcome, RunSettings
from infbench.loadgen.seeds import Streams
from infbench.loadgen.telemetry.exposition import LiveExposition
from infbench.loadgen.telemetry.scrape import ScrapeGroup
from infbench.loadgen.telemetry.watch import Watch, Watcher, start_watcher
from infbench.loadgen.workloads.base import RequestSpec, Session, Workload
from infbench.loadgen.workloads.prompts import TokenModel
from infbench.loadgen.workloads.sizing import Sizer
from infbench.store.writer import BatchWriter

_SPIN_S = 0.002
_PREWARM_OPEN_LOOP = 32
_PREWARM_MAX = 1024  # connections opened before the clock starts
_CONNECTION_ERRORS = {"connection_refused", "connection_reset", "connection_error"}
# Young-generation GC threshold during the load: collections of the many short-lived
# per-request objects are rarer and, after gc.freeze(), scan only what the run allocated.
_GC_GEN0_DURING_RUN = 50_000


class Runner:
    """One run. Ownership: the runner owns its HTTP session, tasks and column buffers; the
    caller owns `writer` (and the DuckDB connection behind it) and closes it after `run()`."""

    def __init__(self, settings: RunSettings, workload: Workload, writer: BatchWriter, t0_ns: int, *,
                 start: Callable[[], Awaitable[int]] | None = None,
                 index: Callable[[RequestSpec], int] | None = None,
                 watch: Watch | None = None) -> None:
        """`start` and `index` are for a worker of a multi-worker run (`loadgen.workers`): the
        run's shared t0 (awaited once connections are open) and each request's stored index."""
        settings.validate()
        self._start = start
        self._index = index
        self.settings = settings
        self.workload = workload
        self.writer = writer
        self.t0_ns = t0_ns
        self.stats = LiveStats(started_ns=t0_ns)
        self.health = HealthMonitor(settings.sample_interval_s)
        self._path = ENDPOINTS[settings.endpoint]  # under the URL's own path, if it has one
        self._headers = auth_headers(settings.api_key)
        self._next_idx = 0
        # Requests sent or still to come from sessions begun: the count the stop-by-count
        # check sees, so a conversation is never started that the count would cut short.
        self._committed = 0
        self._turns = max(1, int(getattr(workload, "turns", 1)))  # requests a session can have
        self._sizer = Sizer(getattr(workload, "tokens", None) or TokenModel(), None)
        self._last_send_ns = 0
        self._stop = asyncio.Event()
        self._stop_reason: str | None = None
        self._interrupted = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._consecutive_conn_errors = 0
        self._streams = Streams(settings.seed, settings.prompt_salt)
        self._pacer = Pacer()
        # One target, or the fleet's replicas: the router picks each session's replica and
        # counts what is in flight on each (a request's concurrency at send is recorded).
        self._fleet = bool(settings.replicas)
        self._replicas = settings.replicas or [Replica(
            name="", url=settings.url, metrics_url=settings.metrics_url,
            steps_url=settings.steps_url, steps_after=settings.steps_after)]
        self._router = Router(settings.route, len(self._replicas))
        self._pools: list[Any] = []
        # The live run in Prometheus text format (`--metrics-port`), fed by the recorder.
        self._expo = (LiveExposition(self.stats, model=settings.model, target=settings.url,
                                     endpoint=settings.endpoint) if settings.metrics_bind else None)
        self._watch = watch
        self.watcher: Watcher | None = None  # the live watch, once the run has started
        self._recorder = Recorder(RunRows(writer), self.stats, self._sizer, self._pacer, self._expo,
                                  needs_text=workload.needs_text, warmup_s=settings.warmup_s,
                                  api_key=settings.api_key)

    # -- control -----------------------------------------------------------------------
    def interrupt(self, reason: str) -> None:
        """Stop sending and cancel in-flight requests; what was received is kept."""
        if self._interrupted:
            return
        self._interrupted = True
        self._stop_reason = reason
        self._stop.set()
        for task in list(self._tasks):
            task.cancel()

    def _deadline_passed(self) -> bool:
        if self._stop.is_set():
            return True
        count_done = self.settings.num_requests is not None and self._committed >= self.settings.num_requests
        elapsed_s = (time.monotonic_ns() - self.t0_ns) / 1e9
        time_done = self.settings.duration_s is not None and elapsed_s >= self.settings.duration_s
        if count_done or time_done:
            self._stop.set()
        return self._stop.is_set()

    # -- the run -----------------------------------------------------------------------
    async def run(self) -> RunOutcome:
        self._pools = [make_pool(r.url, self.settings.request_timeout_s) for r in self._replicas]
        # Scrapes go over their own connections, so they never queue behind a stream.
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        background: list[asyncio.Task[Any]] = []
        gc_threshold = gc.get_threshold()
        try:
            await self._prewarm()
            # Everything allocated so far (modules, workload, session) lives for the whole run:
            # keep it out of the collector's scans, and collect young objects less often.
            gc.collect()
            gc.freeze()
            gc.set_threshold(_GC_GEN0_DURING_RUN, gc_threshold[1], gc_threshold[2])
            background.append(asyncio.create_task(self._recorder.run()))
            # The run's clock starts once connections are open: opening hundreds of them is
            # client work that would otherwise land in the first requests' TTFT.
            self.t0_ns = await self._start() if self._start is not None else time.monotonic_ns()
            self.stats.started_ns = self._recorder.t0_ns = self.t0_ns
            if self._expo is not None and self.settings.metrics_bind is not None:
                await self._expo.start(*self.settings.metrics_bind)
            background.append(asyncio.create_task(self.health.run(self._on_health)))
            if self._watch is not None:
                self.watcher = start_watcher(self._watch, self._pools,
                                             [r.name or None for r in self._replicas], self.stats,
                                             self._fleet)
                background.append(asyncio.create_task(self.watcher.run()))
            scrapers = ScrapeGroup(session, self._replicas, self._headers, self.settings.scrape_interval_s,
                                   self.t0_ns, self._recorder.scrape_rows, self._recorder.step_rows,
                                   self._fleet)
            background.extend(asyncio.create_task(t) for t in scrapers.tasks())
            if self._sizer.model.source == "tokenize":  # the target counts: size against it
                st = self.settings
                counter = Counter(session, st.url, st.endpoint, st.model, self._headers, tokenize=True)

                def count(spec: RequestSpec) -> Any:
                    if spec.messages is not None:
                        return counter.messages(spec.messages)
                    return counter.prompt(spec.prompt or "")

                self._sizer.count = count
            sessions = self.workload.sessions(self._streams)
            if self.settings.arrivals.kind == "closed":
                await self._closed_loop(sessions)
            else:
                await self._open_loop(sessions)
            await self._drain()
            await scrapers.scrape_once()  # the state at the end of the run
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            if self._expo is not None:
                await self._expo.stop()
            for pool in self._pools:
                await pool.close()
            await session.close()
            gc.set_threshold(*gc_threshold)
            gc.unfreeze()
            self._recorder.flush_all()
            if self.watcher is not None:  # errors of the run's last moments, parsed only now
                self.watcher.check(time.monotonic_ns())
        self._router.check_invariants()
        scrapes, scrape_errors = scrapers.totals()
        return RunOutcome(
            status="interrupted" if self._interrupted else "completed",
            reason=self._stop_reason,
            requests=self._next_idx,
            last_send_ns=self._last_send_ns,
            scrape_errors=scrape_errors,
            scrapes=scrapes,
            sizing=dict(vars(self._sizer.stats)),
            replica_scrapes=scrapers.per_replica(),
        )

    async def _prewarm(self) -> None:
        """Open the connection pools before the clock starts, one cheap GET per connection (a
        target without /v1/models answers 404, which warms the connection just as well)."""
        n = min(self.settings.arrivals.concurrency or _PREWARM_OPEN_LOOP, _PREWARM_MAX)
        for pool in self._pools:
            await pool.open(n, pool.request_bytes("/v1/models", b"", self._headers, method="GET"))

    async def _drain(self) -> None:
        if not self._tasks:
            return
        # Sessions begun run all their turns: each turn gets the request timeout and a margin.
        timeout = (self.settings.drain_timeout_s if self.settings.drain_timeout_s is not None
                   else (self.settings.request_timeout_s + 5) * self._turns)
        _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
        if pending:
            self.interrupt(f"{len(pending)} requests still in flight {timeout:.0f}s after sending stopped")
            await asyncio.wait(pending)

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _closed_loop(self, sessions: Iterator[Session]) -> None:
        async def slot() -> None:
            for sess in sessions:
                if self._deadline_passed():
                    return
                await self._run_session(sess, first_intended_ns=None)
                if self._deadline_passed():
                    return

        slots = [self._spawn(slot()) for _ in range(self.settings.arrivals.concurrency)]
        await asyncio.gather(*slots, return_exceptions=True)

    async def _open_loop(self, sessions: Iterator[Session]) -> None:
        a = self.settings.arrivals
        offsets = a.offsets(self._streams.arrivals()) if a.kind != "trace" else None
        cap = asyncio.Semaphore(a.concurrency) if a.concurrency > 0 else None
        for sess in sessions:
            spec = next(sess, None)
            if spec is None:
                continue
            if offsets is not None:
                at = next(offsets)
            else:
                at = (spec.at or 0.0) * (a.time_scale if a.kind != "trace" else 1.0)
            due_ns = self.t0_ns + int(at * 1e9)
            if self.settings.duration_s is not None and at >= self.settings.duration_s:
                self._stop.set()
            if self._deadline_passed():
                break
            # Sized while waiting for its time, so a count the target makes delays no send
            # unless it takes longer than the gap to this arrival.
            idx = self._claim(spec)
            await self._sizer.size(spec)
            if await self._sleep_until(due_ns):
                break  # stopped while waiting
            if cap is not None:
                await cap.acquire()
                if self._stop.is_set():
                    cap.release()
                    break
            self._committed += self._turns
            self._spawn(self._run_session(sess, due_ns, first=(spec, idx), cap=cap))

    async def _sleep_until(self, due_ns: int) -> bool:
        """Wait for `due_ns`; True if the run was stopped meanwhile.

        The loop's timers round up to whole milliseconds, so the last stretch is spent
        yielding (other streams keep being served) to send within tens of microseconds.
        """
        coarse = (due_ns - time.monotonic_ns()) / 1e9 - _SPIN_S
        if coarse > 0:
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=coarse)
                return True
            except TimeoutError:
                pass
        while time.monotonic_ns() < due_ns:
            if self._stop.is_set():
                return True
            await asyncio.sleep(0)
        return self._stop.is_set()

    async def _run_session(
        self,
        sess: Session,
        first_intended_ns: int | None,
        first: tuple[RequestSpec, int] | None = None,
        cap: asyncio.Semaphore | None = None,
    ) -> None:
        """Send a session's requests in turn. `first` (open loop: the spec and its index) was
        sized and committed by the dispatcher; otherwise the session is committed here, before
        its first await."""
        if first is None:
            self._committed += self._turns
        sent = 0
        conversation: int | None = None
        replica: int | None = None  # picked at the first send; the session's turns stay there
        try:
            spec, idx = first if first is not None else (next(sess, None), None)
            intended = first_intended_ns
            while spec is not None:
                conversation = spec.conversation_id
                if idx is None:
                    # the index is the session's place in the workload's order: claimed before
                    # the sizer's count, which other slots' counts can overtake
                    idx = self._claim(spec)
                    await self._sizer.size(spec)
                if replica is None:  # no await between the pick and the count it changes
                    replica = self._router.pick()
                reply = await self._send(spec, idx, intended if intended is not None else time.monotonic_ns(),
                                         replica)
                idx = None
                sent += 1
                intended = None  # later turns follow the previous reply at once
                if self._interrupted:  # the end of --duration does not stop a begun session
                    return
                try:
                    spec = sess.send(reply)
                except StopIteration:
                    return
        finally:
            self._committed -= self._turns - sent  # turns that will not come after all
            if conversation is not None:
                self._sizer.forget(conversation)
            if cap is not None:
                cap.release()

    def _claim(self, spec: RequestSpec) -> int:
        """The request's stored index, claimed before any await (sizing, the pacer), so the
        stop-by-count check sees it and the order is the workload's, not the event loop's."""
        idx = self._next_idx if self._index is None else self._index(spec)
        self._next_idx += 1
        return idx

    async def _send(self, spec: RequestSpec, idx: int, intended_ns: int, replica: int = 0) -> str | None:
        # Counted on its replica from here, before the pacer's turn, so the next session's
        # pick (least outstanding) already sees it.
        conc = self._router.started(replica)
        try:
            await self._pacer.turn()
        except asyncio.CancelledError:
            self._router.finished(replica)
            raise
        body = build_body(spec, endpoint=self.settings.endpoint, model=self.settings.model,
                          ignore_eos=self.settings.ignore_eos, temperature=self.settings.temperature)
        pool = self._pools[replica]
        request = pool.request_bytes(self._path, body, self._headers)
        raw = RawResponse(send_ns=0)
        finished = (idx, spec, intended_ns, raw, self._replicas[replica].name if self._fleet else None, conc)
        self.stats.sent += 1
        self.stats.in_flight += 1
        try:
            await stream_post(pool, request, raw, pace=self._pacer.enqueue)
        except asyncio.CancelledError:
            self.stats.in_flight -= 1
            self._router.finished(replica)
            self._recorder.keep(finished)
            raise
        self.stats.in_flight -= 1
        self._router.finished(replica)
        self._last_send_ns = max(self._last_send_ns, raw.send_ns - self.t0_ns)
        self.health.note_schedule_lag((raw.send_ns - intended_ns) / 1e6)
        self._note_connection(raw.error_class)
        if not self.workload.needs_text:
            # Parsing waits for the recorder task: when many streams end together, doing it
            # here would hold the loop while other streams' reads wait to be stamped.
            self._recorder.submit(finished)
            return None
        parsed = await self._recorder.record_now(finished)  # the next turn needs the text now
        ok = raw.error_class is None and parsed.error_class is None
        return parsed.text if ok else None

    def _note_connection(self, error_class: str | None) -> None:
        if error_class is None or error_class not in _CONNECTION_ERRORS:
            self._consecutive_conn_errors = 0
            return
        self._consecutive_conn_errors += 1
        if self._consecutive_conn_errors >= max(16, 2 * self.settings.arrivals.concurrency):
            self.interrupt(f"target stopped answering ({self._consecutive_conn_errors} "
                           f"connection failures in a row, last: {error_class})")

    def _on_health(self, s: HealthSample) -> None:
        self.stats.last_health = s
        self._recorder.rows.health(s, self.t0_ns, self.stats.in_flight, self.stats.done, self.stats.errors)

    def flush_rows(self) -> None:
        """Hand the rows recorded so far to the writer (a worker ships them every interval, so
        a worker that dies loses only what it recorded since)."""
        self._recorder.rows.flush()
