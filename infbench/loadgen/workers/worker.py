"""One worker: the single-process runner on its share of the schedule, shipping its rows.

Transport-free: `run_worker` is given `send(message)` (a pipe, or a Ray actor's outbox) and a
`Control` the coordinator's go/stop reach it through. The runner is the one `infbench run`
uses alone (its own event loop, connection pool, kernel stamps); here it sends only the
sessions `plan.owner` gives this worker, waits for the run's shared t0 once its connections
are open, numbers requests as one process would, and hands its rows to a `Shipper` instead of
the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from infbench.loadgen.http.client import run_timed
from infbench.loadgen.run.runner import Runner, RunOutcome
from infbench.loadgen.run.types import RunSettings
from infbench.loadgen.seeds import Streams
from infbench.loadgen.workers.plan import Plan, index_hook, owned_sessions, worker_settings
from infbench.loadgen.workers.protocol import SHIP_INTERVAL_S, Message, encode
from infbench.loadgen.workloads.base import Session, Workload
from infbench.store.writer import ArrayBuffer, ColumnBuffer, to_arrow

Send = Callable[[Message], None]
_STOP = object()
_WITH_WORKER = ("requests", "client_samples")  # tables whose rows name their worker


@dataclass
class WorkerJob:
    worker: int
    settings: RunSettings  # the run's, not the worker's share (derived here)
    workload: Workload
    plan: Plan
    clock_offset_ns: int = 0  # added to the coordinator's t0: this worker's clock minus its


class Control:
    """The coordinator's go and stop, delivered from another thread. Owns: `_t0`, `_reason`."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._t0: int | None = None
        self._reason: str | None = None
        self._on_stop: Callable[[str], None] | None = None
        self._lock = threading.Lock()

    def go(self, t0_ns: int) -> None:
        self._t0 = t0_ns
        self._event.set()

    def stop(self, reason: str) -> None:
        with self._lock:
            self._reason = reason
            callback = self._on_stop
        self._event.set()
        if callback is not None:
            callback(reason)

    def on_stop(self, callback: Callable[[str], None]) -> None:
        with self._lock:
            self._on_stop = callback
            reason = self._reason
        if reason is not None:
            callback(reason)

    def wait_go(self) -> int | None:
        """The coordinator's t0, or None when the run was stopped before it began."""
        self._event.wait()
        return self._t0 if self._reason is None else None


class Shipper:
    """The worker's store writer: column buffers -> Arrow IPC -> `send`, on its own thread.

    Ownership: the runner's loop calls `put_buffer`; the thread alone converts and sends. The
    queue is bounded, so a coordinator that falls behind slows this worker, not its memory.
    """

    def __init__(self, worker: int, send: Send, max_pending: int = 8) -> None:
        self.worker = worker
        self._send = send
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max_pending)
        self._error: BaseException | None = None
        self.rows_shipped: dict[str, int] = {}
        self._thread = threading.Thread(target=self._loop, name=f"infbench-ship-{worker}", daemon=True)
        self._thread.start()

    def put_buffer(self, buf: ColumnBuffer | ArrayBuffer) -> None:
        if self._error is not None:
            raise RuntimeError(f"shipping rows failed: {self._error}") from self._error
        if len(buf):
            self._queue.put((buf.table.name, buf.take()))

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            if self._error is not None:
                continue
            table, columns = item
            try:
                n = len(next(iter(columns.values())))
                if table in _WITH_WORKER:
                    columns["worker"] = [self.worker] * n
                self._send(("batch", self.worker, table, encode(to_arrow(table, columns))))
                self.rows_shipped[table] = self.rows_shipped.get(table, 0) + n
            except BaseException as exc:  # re-raised on the runner's side
                self._error = exc

    def close(self) -> None:
        self._queue.put(_STOP)
        self._thread.join()
        if self._error is not None:
            raise RuntimeError(f"shipping rows failed: {self._error}") from self._error


class _Share:
    """The workload as this worker's runner sees it: only its sessions, in schedule order."""

    def __init__(self, job: WorkerJob, tags: dict[int, int]) -> None:
        self._job = job
        self._tags = tags

    def __getattr__(self, name: str) -> Any:
        return getattr(self._job.workload, name)

    def sessions(self, streams: Streams) -> Iterator[Session]:
        j = self._job
        return owned_sessions(j.workload, streams, j.settings.arrivals, j.plan, j.worker, self._tags)


async def _work(job: WorkerJob, send: Send, control: Control, shipper: Shipper) -> RunOutcome:
    loop = asyncio.get_running_loop()
    tags: dict[int, int] = {}
    runner: Runner | None = None

    async def start() -> int:
        send(("ready", job.worker))
        t0 = await loop.run_in_executor(None, control.wait_go)
        if t0 is None:
            assert runner is not None
            runner.interrupt("stopped by the coordinator before the run began")
            return time.monotonic_ns()
        t0 += job.clock_offset_ns
        delay = (t0 - time.monotonic_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        return t0

    settings = worker_settings(job.settings, job.plan, job.worker)
    runner = Runner(settings, _Share(job, tags), shipper, time.monotonic_ns(),  # type: ignore[arg-type]  # _Share and the shipper are duck-typed Workload and BatchWriter
                    start=start, index=index_hook(tags, job.plan.turns))

    def stop(reason: str) -> None:
        loop.call_soon_threadsafe(runner.interrupt, reason)

    control.on_stop(stop)
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:  # a terminal's Ctrl-C reaches every worker: each stops as one process would
            loop.add_signal_handler(sig, runner.interrupt, f"{sig.name} received")
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass  # not the main thread (a Ray actor): the coordinator's stop reaches it

    async def ship() -> None:
        while True:
            await asyncio.sleep(SHIP_INTERVAL_S)
            runner.flush_rows()
            st = runner.stats
            send(("progress", job.worker, {"sent": st.sent, "done": st.done, "errors": st.errors,
                                           "in_flight": st.in_flight}))

    ticker = asyncio.create_task(ship())
    try:
        return await runner.run()
    finally:
        ticker.cancel()
        await asyncio.gather(ticker, return_exceptions=True)
        for sig in installed:
            loop.remove_signal_handler(sig)


def run_worker(job: WorkerJob, send: Send, control: Control) -> None:
    """Run one worker to its end; the last message is `done` or `error`."""
    shipper = Shipper(job.worker, send)
    try:
        outcome = run_timed(_work(job, send, control, shipper))
        shipper.close()
    except BaseException as exc:  # the coordinator records it; no traceback on a terminal
        with contextlib.suppress(RuntimeError):
            shipper.close()
        send(("error", job.worker, f"{type(exc).__name__}: {exc}"[:500]))
        return
    send(("done", job.worker, dataclasses.asdict(outcome)))
