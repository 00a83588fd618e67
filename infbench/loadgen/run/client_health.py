"""The client watching itself: event-loop lag, CPU use, memory, schedule lag.

A 10 ms ticker measures how late the event loop wakes it (time the loop spent on other work);
once per interval a sample of the worst lag, CPU share of one core, resident memory and the
worst schedule lag of requests sent in the interval goes to `client_samples`.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_TICK_S = 0.010
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


@dataclass
class HealthSample:
    t_ns: int
    loop_lag_ms: float
    schedule_lag_ms: float
    cpu_percent: float
    rss_bytes: int


@dataclass
class HealthMonitor:
    """Owned by the runner; `run()` is one task, `note_schedule_lag()` is called per send."""

    interval_s: float = 1.0
    _lag_max_ms: float = 0.0
    _sched_max_ms: float = 0.0
    samples: list[HealthSample] = field(default_factory=list)

    def note_schedule_lag(self, lag_ms: float) -> None:
        if lag_ms > self._sched_max_ms:
            self._sched_max_ms = lag_ms

    async def _ticker(self) -> None:
        while True:
            t = time.monotonic()
            await asyncio.sleep(_TICK_S)
            lag_ms = (time.monotonic() - t - _TICK_S) * 1e3
            if lag_ms > self._lag_max_ms:
                self._lag_max_ms = lag_ms

    async def run(self, on_sample: Callable[[Any], None]) -> None:
        ticker = asyncio.create_task(self._ticker())
        try:
            wall, cpu = time.monotonic(), time.process_time()
            while True:
                await asyncio.sleep(self.interval_s)
                wall2, cpu2 = time.monotonic(), time.process_time()
                sample = HealthSample(
                    t_ns=time.monotonic_ns(),
                    loop_lag_ms=max(0.0, self._lag_max_ms),
                    schedule_lag_ms=self._sched_max_ms,
                    cpu_percent=100.0 * (cpu2 - cpu) / max(wall2 - wall, 1e-9),
                    rss_bytes=rss_bytes(),
                )
                wall, cpu = wall2, cpu2
                self._lag_max_ms = self._sched_max_ms = 0.0
                self.samples.append(sample)
                on_sample(sample)
        finally:
            ticker.cancel()
