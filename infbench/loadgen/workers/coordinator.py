"""The coordinator of a multi-worker run: plan, start, align clocks, start together, collect.

It stands where the single-process `Runner` stands (`t0_ns`, `stats`, `interrupt`, `run`), so
`execute_run` drives either. It never sends a request: it partitions the schedule
(`plan.py`), measures each worker's clock, hands each its job, waits until every worker has
its connections open, and gives all one t0 a little ahead (each converts it to its own clock).
Batches go from the transport's threads straight to the one store writer; the rest (ready,
progress, done, died) comes to the loop here. A worker that dies marks the run and takes
only what it had not shipped; the others run on.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from infbench.loadgen.run.types import LiveStats, RunOutcome, RunSettings
from infbench.loadgen.workers.clock import ROUNDS, ClockOffset
from infbench.loadgen.workers.plan import Plan, make_plan, planned_requests
from infbench.loadgen.workers.protocol import Message, decode
from infbench.loadgen.workers.worker import WorkerJob
from infbench.loadgen.workloads.base import Workload
from infbench.store.writer import BatchWriter

_READY_TIMEOUT_S = 120.0  # spawned interpreters and Ray actors starting on a busy host
_START_MARGIN_NS = 200_000_000  # t0 this far ahead of the go, so every worker gets it in time


@dataclass
class WorkerState:
    """What the coordinator knows of one worker. Owns nothing shared: written on the loop,
    except `stored` (its transport thread only)."""

    worker: int
    backend: str
    concurrency: int
    share: float
    planned: int | None
    clock: ClockOffset | None = None
    info: dict[str, Any] = field(default_factory=dict)
    ready: bool = False
    progress: dict[str, int] = field(default_factory=dict)
    outcome: dict[str, Any] | None = None
    status: str | None = None  # completed | died | failed, once it ended
    reason: str | None = None
    stored: dict[str, int] = field(default_factory=dict)

    @property
    def sent(self) -> int:
        if self.outcome is not None:
            return int(self.outcome["requests"])
        return int(self.progress.get("sent", 0))

    def lost(self) -> tuple[int, int | None]:
        """(sent and never stored, scheduled and never sent: None when nothing fixed it)."""
        if self.status == "completed":
            return 0, 0
        stored = self.stored.get("requests", 0)
        sent_lost = max(0, self.sent - stored)
        unsent = None if self.planned is None else max(0, self.planned - max(self.sent, stored))
        return sent_lost, unsent

    def describe(self) -> str:
        where = f"{self.backend} {self.info.get('pid', '?')} on {self.info.get('hostname', '?')}"
        sent_lost, unsent = self.lost()
        if unsent is None:
            what = (f"at least {sent_lost} requests lost ({sent_lost} sent and not stored; its share "
                    "of the rest of the schedule never sent)")
        else:
            what = (f"{sent_lost + unsent} requests lost ({sent_lost} sent and not stored, {unsent} "
                    "scheduled and never sent)")
        return f"worker {self.worker} ({where}) {self.status}: {self.reason}; {what}"


class Backend:
    """How workers are made: local processes or Ray actors (`make` returns a handle with
    clock/start/go/stop/close)."""

    name = "process"

    def __init__(self, count: int, make: Callable[[int, Callable[[Message], None], Callable[[Message], None]], Any]) -> None:
        self.count = count
        self.make = make


class Coordinator:
    """One multi-worker run. Owns: the worker handles (closed by `run`), the `WorkerState`s and
    the live `stats`; the caller owns `writer`, which transport threads feed (`_on_batch`)."""

    def __init__(self, settings: RunSettings, workload: Workload, writer: BatchWriter, t0_ns: int,
                 backend: Backend, clock_rounds: int = ROUNDS) -> None:
        settings.validate()
        if settings.replicas or settings.metrics_bind is not None:
            raise ValueError("workers: a fleet (--url A --url B) or --metrics-port needs one process")
        self.settings = settings
        self.workload = workload
        self.writer = writer
        self.t0_ns = t0_ns
        self.stats = LiveStats(started_ns=t0_ns)
        self.backend = backend
        self.plan: Plan = make_plan(settings, workload, backend.count)
        planned = planned_requests(settings, self.plan, workload)
        self.workers = [WorkerState(w, backend.name, self.plan.concurrency[w], self.plan.share(w), planned[w])
                        for w in range(backend.count)]
        self._rounds = clock_rounds
        self._handles: list[Any] = []
        self._interrupt: str | None = None
        self._batch_error: BaseException | None = None

    # -- control -----------------------------------------------------------------------
    def interrupt(self, reason: str) -> None:
        if self._interrupt is None:
            self._interrupt = reason
            for h in self._handles:
                h.stop(reason)

    def handle(self, worker: int) -> Any:
        return self._handles[worker]

    def _on_batch(self, msg: Message) -> None:
        """On a transport thread: one worker's rows to the writer, counted as stored."""
        _, worker, table, data = msg
        try:
            batch = decode(data)
            self.writer.put_table(table, batch)
        except BaseException as exc:  # re-raised by run(): a store that cannot write fails the run
            self._batch_error = exc
            return
        st = self.workers[worker]
        st.stored[table] = st.stored.get(table, 0) + batch.num_rows

    # -- the run -----------------------------------------------------------------------
    async def run(self) -> RunOutcome:
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[Message] = asyncio.Queue()

        def post(msg: Message) -> None:
            loop.call_soon_threadsafe(inbox.put_nowait, msg)

        try:
            for w in range(self.backend.count):
                self._handles.append(self.backend.make(w, post, self._on_batch))
            for st, h in zip(self.workers, self._handles, strict=True):
                st.clock = clock = await loop.run_in_executor(None, h.clock, self._rounds)
                job = WorkerJob(st.worker, self.settings, self.workload, self.plan, clock.applied_ns)
                await loop.run_in_executor(None, h.start, job)
            await self._pump(inbox, until=lambda: all(s.ready or s.status for s in self.workers),
                             timeout_s=_READY_TIMEOUT_S)
            missing = [s.worker for s in self.workers if not s.ready and not s.status]
            if missing:
                raise RuntimeError(f"workers {missing} were not ready within {_READY_TIMEOUT_S:.0f}s")
            self.t0_ns = time.monotonic_ns() + _START_MARGIN_NS
            self.stats.started_ns = self.t0_ns
            for h in self._handles:
                h.go(self.t0_ns)
            if self._interrupt is not None:  # a signal while starting
                for h in self._handles:
                    h.stop(self._interrupt)
            await self._pump(inbox, until=lambda: all(s.status for s in self.workers), timeout_s=None)
        finally:  # every worker at once: each close waits for its process or actor to end
            await asyncio.gather(*(loop.run_in_executor(None, h.close) for h in self._handles))
        if self._batch_error is not None:
            raise RuntimeError(f"store writer failed: {self._batch_error}") from self._batch_error
        self.check_invariants()
        return self._outcome()

    async def _pump(self, inbox: asyncio.Queue[Message], until: Callable[[], bool],
                    timeout_s: float | None) -> None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not until():
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                return
            try:
                msg = await asyncio.wait_for(inbox.get(), timeout=wait)
            except TimeoutError:
                return
            self._handle(msg)

    def _handle(self, msg: Message) -> None:
        kind, worker = msg[0], msg[1]
        st = self.workers[worker]
        if kind == "hello":
            st.info = dict(msg[2])
        elif kind == "ready":
            st.ready = True
        elif kind == "progress":
            st.progress = dict(msg[2])
            self._sum_stats()
        elif st.status is not None:
            return  # a process's exit after its `done`
        elif kind == "done":
            st.outcome = dict(msg[2])
            st.status, st.reason = "completed", st.outcome.get("reason")
            if st.outcome["status"] != "completed" and self._interrupt is None:
                st.reason = st.outcome.get("reason") or "interrupted"
        elif kind in ("died", "error"):
            st.status = "died" if kind == "died" else "failed"
            st.reason = str(msg[2])

    def _sum_stats(self) -> None:
        """The progress display's counters, summed over workers; requests finished since the
        last report are stamped now, so its rate (over seconds) is right to the ship interval."""
        live = [s.progress for s in self.workers]
        finished = self.stats.done + self.stats.errors
        for name in ("sent", "done", "errors", "in_flight"):
            setattr(self.stats, name, sum(p.get(name, 0) for p in live))
        now = time.monotonic_ns()
        self.stats.recent_done_ns.extend([now] * max(0, self.stats.done + self.stats.errors - finished))

    def _outcome(self) -> RunOutcome:
        done = [s.outcome for s in self.workers if s.outcome is not None]
        lost = [s for s in self.workers if s.status in ("died", "failed")]
        interrupted = [o.get("reason") for o in done if o["status"] != "completed"]
        reasons = [s.describe() for s in lost]
        if self._interrupt is not None:
            reasons.insert(0, self._interrupt)
        elif interrupted:
            reasons.extend(sorted({str(r) for r in interrupted if r}))
        sizing: dict[str, int] = {}
        for o in done:
            for k, v in (o.get("sizing") or {}).items():
                sizing[k] = sizing.get(k, 0) + int(v)
        first = self.workers[0].outcome or {}
        return RunOutcome(
            status="interrupted" if (lost or interrupted or self._interrupt) else "completed",
            reason="; ".join(reasons) if reasons else None,
            requests=sum(s.sent for s in self.workers),
            last_send_ns=max((int(o["last_send_ns"]) for o in done), default=0),
            scrape_errors=dict(first.get("scrape_errors") or {}),
            scrapes=dict(first.get("scrapes") or {}),
            sizing=sizing,
        )

    def check_invariants(self) -> None:
        self.plan.check_invariants()
        assert len(self.workers) == self.backend.count
        for s in self.workers:
            assert s.status in (None, "completed", "died", "failed")
            assert (s.status == "completed") == (s.outcome is not None), "done is the only way to complete"
