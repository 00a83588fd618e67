"""How many xdist workers the suite's first part runs: two per CPU, and one more when the host
is quiet.

    python -m pytest -n "$(python -m tests.support.workers)" --dist loadfile -m 'not serial'

Most of the first part's wall time is waiting on engines that step in real time (the dilution
file 342 s of wall for ~25 CPU-seconds, the engine gate 252 for ~26), so two workers per CPU
keep the machine busy. On an idle 2-vCPU host that still left it ~81% busy on average (round
Q10, sampled every 5 s: 60-80% for minutes while the longest units waited side by side), and a
fifth worker fills that. Beside a CPU-busy neighbour the machine is saturated with four, and a
fifth was measured to starve a timing client (round R41: the client's event loop lagged 24 ms
on average against 9 ms in its stored twin), so a busy host keeps four.

"Quiet" is read from the kernel's own counters (/proc/stat) over a short sample before any
worker starts: less than a quarter of all CPU time busy. A host that cannot be read counts as
busy (the smaller number). The count changes how many tests run at once, never which run or
what they check.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

QUIET_BELOW = 0.25
PER_CPU = 2
MAX_WORKERS = 12
SAMPLE_S = 2.0


def cpu_times(stat_text: str) -> tuple[int, int]:
    """(busy, total) jiffies from the aggregate `cpu` line of /proc/stat. Idle and iowait are
    not busy; steal is (a neighbour VM had the CPU)."""
    for line in stat_text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(v) for v in fields[1:]]
            # user nice system idle iowait irq softirq steal [guest guest_nice: already in user]
            total = sum(values[:8])
            idle = values[3] + (values[4] if len(values) > 4 else 0)
            return total - idle, total
    raise ValueError("no aggregate 'cpu' line in /proc/stat")


def busy_fraction(before: str, after: str) -> float:
    """The share of all CPU time that was busy between two readings of /proc/stat."""
    busy0, total0 = cpu_times(before)
    busy1, total1 = cpu_times(after)
    if total1 <= total0:
        raise ValueError("/proc/stat did not advance between the two readings")
    return (busy1 - busy0) / (total1 - total0)


def workers(cpus: int, busy: float | None) -> int:
    """Two workers per CPU, one more when less than QUIET_BELOW of the machine is busy;
    `busy=None` (unknown) counts as busy."""
    quiet = busy is not None and busy < QUIET_BELOW
    return max(1, min(MAX_WORKERS, PER_CPU * cpus + (1 if quiet else 0)))


def sample_busy(seconds: float = SAMPLE_S, stat: Path = Path("/proc/stat")) -> float | None:
    try:
        before = stat.read_text()
        time.sleep(seconds)
        return busy_fraction(before, stat.read_text())
    except (OSError, ValueError):
        return None


def main() -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    busy = sample_busy()
    n = workers(cpus, busy)
    seen = "unreadable" if busy is None else f"{busy:.0%} busy"
    print(f"tests.support.workers: {cpus} CPUs, host {seen} over {SAMPLE_S:.0f} s: {n} workers",
          file=sys.stderr)
    print(n)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
