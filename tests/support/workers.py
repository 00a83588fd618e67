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
worker starts: less than a quarter of all CPU time busy, not counting the real vLLM's own
install, which the test command started in the background a minute earlier and which ends in
the part's first minute (round Q11: still installing when the sample ran, the host read 50%
busy with nothing else on it). That install is a session of its own
(`python -m tools.real_vllm.install --holding-lock` leads it); its processes' CPU, and that of
the children it reaped, is read from /proc/PID/stat and taken off. A host that cannot be read
counts as busy (the smaller number). The count changes how many tests run at once, never
which run or what they check.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
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


def _stat_fields(pid_dir: Path) -> list[str]:
    """/proc/PID/stat after the command name (which may hold spaces and parentheses)."""
    return (pid_dir / "stat").read_text().rsplit(")", 1)[1].split()


def is_own_install(cmdline: bytes) -> bool:
    return b"tools.real_vllm.install\0--holding-lock" in cmdline


def own_sessions(proc: Path = Path("/proc"), own: Callable[[bytes], bool] = is_own_install) -> set[int]:
    """Session ids led by a process `own` recognises by its command line."""
    found = set()
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            if own((d / "cmdline").read_bytes()) and int(_stat_fields(d)[3]) == int(d.name):
                found.add(int(d.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def session_ticks(sessions: set[int], proc: Path = Path("/proc")) -> int:
    """CPU ticks of every process in `sessions`: its own user+system time and that of the
    children it reaped (a pip step that ended moves from its own line to its parent's)."""
    total = 0
    if not sessions:
        return 0
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = _stat_fields(d)
            if int(fields[3]) in sessions:
                total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
        except (OSError, ValueError, IndexError):
            continue
    return total


def sample(seconds: float = SAMPLE_S, stat: Path = Path("/proc/stat"), proc: Path = Path("/proc"),
           own: Callable[[bytes], bool] = is_own_install) -> tuple[float, float]:
    """(the busy share of all CPU time over `seconds`, the share of it the sessions `own`
    recognises spent). Raises OSError or ValueError when the counters cannot be read."""
    sessions = own_sessions(proc, own)
    before, own_before = stat.read_text(), session_ticks(sessions, proc)
    time.sleep(seconds)
    after, own_after = stat.read_text(), session_ticks(sessions, proc)
    busy = busy_fraction(before, after)
    span = cpu_times(after)[1] - cpu_times(before)[1]
    # a session leader that exits mid-sample takes its ticks with it: then nothing is taken off
    return busy, min(busy, max(0, own_after - own_before) / span)


def sample_busy(seconds: float = SAMPLE_S, stat: Path = Path("/proc/stat"), proc: Path = Path("/proc"),
                own: Callable[[bytes], bool] = is_own_install) -> float | None:
    """The busy share of the host over `seconds`, less what the sessions `own` recognises
    spent in it; None when the counters cannot be read."""
    try:
        busy, ours = sample(seconds, stat, proc, own)
    except (OSError, ValueError):
        return None
    return busy - ours


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
