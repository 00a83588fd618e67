"""Real host stalls of a process: SIGSTOP, then SIGCONT after a fixed pause, at a fixed period,
from a process of its own beside the test. The schedule is what the test knows and the playbook
does not.

The pauser runs at real-time priority (SCHED_FIFO) where the host allows it: the tests that use
it saturate both CPUs (a spinning neighbour, the real vLLM, the client), and a pauser that waits
its turn behind them stops the engine late, off its own grid (one pause 80-90 ms late was the
rule with a thread in the test process), so the "periodic" cause the test injects would not be
periodic. A timer-driven host stall (cron, a kernel timer, a daemon's flush) is on time; so is
this one. `account()` says, for a failure message, which pauses the client saw and what else it
saw."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np

_RT_PRIORITY = 50


@dataclass
class PeriodicPauser:
    """Pauses `pid` for `pause_s` every `period_s` seconds until stopped. Owns: the pauser
    process, and the list of (stop, resume) `time.monotonic()` times it actually produced
    (read when it stops)."""

    pid: int
    period_s: float
    pause_s: float
    pauses: list[tuple[float, float]] = field(default_factory=list)
    priority: str = ""  # the scheduling the pauser got: "SCHED_FIFO", "nice -10" or "normal"
    _proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> PeriodicPauser:
        self._proc = subprocess.Popen(
            [sys.executable, __file__, str(self.pid), repr(self.period_s), repr(self.pause_s)],
            stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        self.priority = self._proc.stdout.readline().strip()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        self._proc.send_signal(signal.SIGTERM)  # it finishes a pause in progress, then exits
        out, _ = self._proc.communicate(timeout=self.pause_s + 10)
        os.kill(self.pid, signal.SIGCONT)
        self.pauses = [tuple(json.loads(line)) for line in out.splitlines() if line.strip()]

    def lateness_ms(self) -> list[float]:
        """Each pause's delay from its due time (the pauser's own grid), in ms."""
        if not self.pauses:
            return []
        s = np.array([p[0] for p in self.pauses])
        late = s - s[0] - self.period_s * np.arange(len(s))
        return [round(float(v), 1) for v in (late - min(late.min(), 0.0)) * 1e3]


def account(db: Path, pauses: list[tuple[float, float]], threshold_s: float = 0.05) -> str:
    """What the client saw around each injected pause (streams with a gap across it) and the
    gaps at no pause, clustered by their end: the first thing to read when a stall test fails."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        t0 = con.sql("SELECT t0_monotonic_ns FROM runs").fetchall()[0][0]
        g = con.sql(f"""
            WITH c AS (SELECT request_idx, t_ns, lag(t_ns) OVER (PARTITION BY request_idx ORDER BY seq) AS prev
                       FROM chunks WHERE content)
            SELECT prev / 1e9 AS s, t_ns / 1e9 AS e FROM c
            WHERE prev IS NOT NULL AND t_ns - prev > {int(threshold_s * 1e9)} ORDER BY e""").fetchnumpy()
    finally:
        con.close()
    s, e = np.asarray(g["s"], dtype=float), np.asarray(g["e"], dtype=float)
    seen = np.zeros(len(s), dtype=bool)
    lines = []
    for i, (a, b) in enumerate(pauses):
        a, b = a - t0 / 1e9, b - t0 / 1e9
        across = (s <= a + threshold_s) & (e >= b - threshold_s) & (e <= b + 0.5)
        seen |= across
        lines.append(f"pause {i} at {a:.3f} s ({(b - a) * 1e3:.0f} ms): {int(across.sum())} streams "
                     f"stalled across it")
    rest_s, rest_e = s[~seen], e[~seen]
    breaks = np.concatenate([[0], np.cumsum(np.diff(rest_e) > 0.004)]) if len(rest_e) else []
    for k in np.unique(breaks):
        m = breaks == k
        lines.append(f"gap at no pause, {rest_s[m].max():.3f}-{rest_e[m].min():.3f} s: {int(m.sum())} "
                     f"streams, median {np.median(rest_e[m] - rest_s[m]) * 1e3:.0f} ms")
    return "\n".join(lines)


def _pause_loop(pid: int, period_s: float, pause_s: float) -> None:
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(_RT_PRIORITY))
        priority = "SCHED_FIFO"
    except (PermissionError, OSError):
        try:
            os.nice(-10)
            priority = "nice -10"
        except (PermissionError, OSError):
            priority = "normal"
    busy = False  # True from the SIGSTOP until its pause is written: SIGTERM waits for that

    class _Stop(Exception):
        pass

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True
        if not busy:
            raise _Stop

    stopping = False
    signal.signal(signal.SIGTERM, stop)
    print(priority, flush=True)
    t0 = time.monotonic()
    k = 1
    try:
        while not stopping:
            time.sleep(max(0.0, t0 + k * period_s - time.monotonic()))
            busy = True
            stopped = time.monotonic()
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(pause_s)
            finally:
                os.kill(pid, signal.SIGCONT)
            print(json.dumps([stopped, time.monotonic()]), flush=True)
            busy = False
            k += 1
    except _Stop:
        pass


if __name__ == "__main__":
    _pause_loop(int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]))
