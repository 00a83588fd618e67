"""Worker processes on this host (`infbench run --workers N`), each on a pipe to the coordinator.

Processes are spawned, not forked: the coordinator holds a DuckDB connection and a writer
thread, which a fork would copy half-way. A worker's pipe is read by one thread here; batches
go from that thread straight to the store writer, everything else to the coordinator's
`inbox`. A worker whose process ends without its `done` (killed, out of memory) is reported
as `("died", worker, reason)` once its pipe closes.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from infbench.loadgen.workers.clock import ClockOffset, measure
from infbench.loadgen.workers.protocol import Message, boot_id, host_info
from infbench.loadgen.workers.worker import Control, WorkerJob, run_worker

Inbox = Callable[[Message], None]
_HELLO_TIMEOUT_S = 60.0  # a spawned interpreter importing the load generator on a busy host


def _process_main(conn: Connection, worker: int) -> None:
    """The worker process: hello, clock pings, then the job it is sent; `stop` at any time."""
    lock = threading.Lock()

    def send(msg: Message) -> None:
        with lock:
            conn.send(msg)

    control = Control()
    jobs: list[WorkerJob] = []
    job_ready = threading.Event()

    def listen() -> None:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):  # the coordinator is gone: stop as if told to
                control.stop("the coordinator went away")
                job_ready.set()
                return
            if msg[0] == "ping":
                send(("pong", worker, time.monotonic_ns()))
            elif msg[0] == "job":
                jobs.append(msg[1])
                job_ready.set()
            elif msg[0] == "go":
                control.go(msg[1])
            elif msg[0] == "stop":
                control.stop(msg[1])
                job_ready.set()

    send(("hello", worker, host_info()))
    threading.Thread(target=listen, name="infbench-worker-control", daemon=True).start()
    job_ready.wait()
    if jobs:
        run_worker(jobs[0], send, control)
    conn.close()


class ProcessWorker:
    """A worker process seen from the coordinator. Owns: its process and the parent's pipe end."""

    backend = "process"

    def __init__(self, worker: int, inbox: Inbox, on_batch: Callable[[Message], None]) -> None:
        self.worker = worker
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe(duplex=True)
        self._proc = ctx.Process(target=_process_main, args=(child, worker), name=f"infbench-worker-{worker}",
                                 daemon=True)
        self._proc.start()
        child.close()  # only the child holds its end: its exit closes the pipe
        self._inbox = inbox
        self._on_batch = on_batch
        self._send_lock = threading.Lock()
        self._pongs: list[int] = []
        self._pong = threading.Condition()
        self.info: dict[str, Any] = {}
        self._hello = threading.Event()
        self._reader = threading.Thread(target=self._read, name=f"infbench-coord-{worker}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def _send(self, msg: Message) -> None:
        # A worker that is gone raises here; its reader reports that.
        with self._send_lock, contextlib.suppress(OSError, ValueError):
            self._conn.send(msg)

    def _read(self) -> None:
        while True:
            try:
                msg = self._conn.recv()
            except (EOFError, OSError):
                break
            kind = msg[0]
            if kind == "batch":
                self._on_batch(msg)
            elif kind == "pong":
                with self._pong:
                    self._pongs.append(msg[2])
                    self._pong.notify_all()
            else:
                if kind == "hello":
                    self.info = msg[2]
                    self._hello.set()
                self._inbox(msg)
        self._proc.join(timeout=5)
        code = self._proc.exitcode
        if code is not None and code < 0:
            how = f"killed by {signal.Signals(-code).name}"
        else:
            how = f"exit code {code}" if code is not None else "its pipe closed"
        self._hello.set()
        self._inbox(("died", self.worker, f"worker process {self.pid} ended ({how})"))

    def clock(self, rounds: int) -> ClockOffset:
        if not self._hello.wait(_HELLO_TIMEOUT_S) or not self.info:
            raise RuntimeError(f"worker {self.worker} did not start within {_HELLO_TIMEOUT_S:.0f}s")

        def ask() -> int:
            with self._pong:
                n = len(self._pongs)
                self._send(("ping",))
                if not self._pong.wait_for(lambda: len(self._pongs) > n, timeout=10):
                    raise RuntimeError(f"worker {self.worker} did not answer a clock ping")
                return self._pongs[-1]

        mine = boot_id()
        return measure(ask, shared=mine is not None and self.info.get("boot_id") == mine,
                       rounds=rounds)

    def start(self, job: WorkerJob) -> None:
        self._send(("job", job))

    def go(self, t0_ns: int) -> None:
        self._send(("go", t0_ns))

    def stop(self, reason: str) -> None:
        self._send(("stop", reason))

    def close(self, timeout_s: float = 30.0) -> None:
        """Wait for the process to end (it ends after `done`, though an interpreter's exit on a
        busy host takes seconds); end it if it does not."""
        self._proc.join(timeout_s)
        if self._proc.is_alive():
            self._proc.terminate()
            self._proc.join(5)
        if self._proc.is_alive() and self._proc.pid is not None:
            with contextlib.suppress(ProcessLookupError):  # it ended just now after all
                os.kill(self._proc.pid, signal.SIGKILL)
            self._proc.join(5)
        self._reader.join(timeout=5)
        self._conn.close()
