"""Sample at a fixed interval on a background thread while something else (a run) goes on.

NVML calls are short C calls that release the GIL (ctypes), so a thread beside the load
generator's event loop costs it little; `benchmarks/bench_gpu_probe_overhead.py` measures
that. Ticks are on an absolute monotonic schedule (a slow read delays one sample, it does
not shift the rest), and a tick that falls more than one interval behind is skipped rather
than bunched.

Owns: the thread and the rows it collected; `stop()` joins the thread and hands them over.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

SampleFn = Callable[[int], list[dict[str, Any]]]


class PeriodicSampler:
    def __init__(self, sample: SampleFn, interval_s: float, *, clock: Callable[[], int] = time.monotonic_ns) -> None:
        if not interval_s > 0:
            raise ValueError(f"gpu interval: must be > 0 seconds, not {interval_s}")
        self._sample = sample
        self.interval_s = interval_s
        self._interval_ns = int(interval_s * 1e9)
        self._clock = clock
        self._rows: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []
        self.samples = 0
        self.cpu_s = 0.0  # CPU time the sampling thread used (its own clock): the probe's cost

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("PeriodicSampler already started")
        self._thread = threading.Thread(target=self._loop, name="infbench-gpu-probe", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        cpu0 = time.thread_time()
        try:
            self._run()
        finally:
            self.cpu_s = time.thread_time() - cpu0

    def _run(self) -> None:
        due = self._clock()
        while not self._stop.is_set():
            now = self._clock()
            try:
                self._rows.extend(self._sample(now))
                self.samples += 1
            except Exception as exc:  # a failing read ends sampling, never the run
                self.errors.append(f"{type(exc).__name__}: {exc}")
                return
            due += self._interval_ns
            now = self._clock()
            if now > due + self._interval_ns:
                due = now  # fell behind: restart the schedule instead of bursting
            self._stop.wait(max(0.0, (due - now) / 1e9))

    def stop(self) -> list[dict[str, Any]]:
        """Take one last sample's worth of waiting off, join, and return every row (monotonic t_ns)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        rows, self._rows = self._rows, []
        return rows

    def check_invariants(self) -> None:
        ts = [r["t_ns"] for r in self._rows]
        assert ts == sorted(ts), "rows out of time order"


def to_run_axis(rows: list[dict[str, Any]], t0_monotonic_ns: int) -> list[dict[str, Any]]:
    """Rows stamped with the monotonic clock -> the run's time axis (ns since its t0)."""
    return [{**r, "t_ns": int(r["t_ns"]) - int(t0_monotonic_ns)} for r in rows]
