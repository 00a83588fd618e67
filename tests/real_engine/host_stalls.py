"""Real host stalls of a process: SIGSTOP, then SIGCONT after a fixed pause, at a fixed period,
from a thread beside the test. The schedule is what the test knows and the playbook does not."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field


@dataclass
class PeriodicPauser:
    """Pauses `pid` for `pause_s` every `period_s` seconds until stopped. Owns: the thread and
    the list of (stop, resume) monotonic times it actually produced."""

    pid: int
    period_s: float
    pause_s: float
    pauses: list[tuple[float, float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> PeriodicPauser:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(timeout=self.period_s + 5)
        os.kill(self.pid, signal.SIGCONT)

    def _loop(self) -> None:
        t0 = time.monotonic()
        k = 1
        while not self._stop.wait(max(0.0, t0 + k * self.period_s - time.monotonic())):
            stopped = time.monotonic()
            os.kill(self.pid, signal.SIGSTOP)
            try:
                time.sleep(self.pause_s)
            finally:
                os.kill(self.pid, signal.SIGCONT)
            self.pauses.append((stopped, time.monotonic()))
            k += 1
