"""Where the suite's CPU goes: each test's CPU seconds, its own process tree included.

    python -m pytest -p tests.support.cpu_by_test ...   # writes cpu_by_test.<worker>.csv

A test's CPU is the change, from its setup's start to its teardown's end, of the CPU of the
pytest process's whole tree: its own user+system time, that of the children it has reaped
(the kernel's cutime/cstime, which carry their own reaped descendants), and, recursively, that
of every child still running. So an engine a fixture started and stopped, and every CLI
process the fork server (tests/support/cli_zygote.py) ran and reaped, land on the test during
which they ran. A module-scoped engine's CPU lands on the tests it served; what a process
still running spends between tests lands on the next one. Wall time beside it tells waiting
from work. The directory is `$INFBENCH_CPU_LOG_DIR` (default: the current one).

One blind spot, seen in the README's second part: a process orphaned inside the tree (its
parent stopped without waiting for it, as vLLM's engine-core process is when its API server is
killed) is reaped by init, and the time it had spent leaves the tree; the test during which
that happens gets a negative figure (the second part's last test, which tears down the
session's vLLM servers: -247 s in round R31). The totals of the tests it ran beside are
right; the part's total is not, so take a part's total from `/usr/bin/time` around it.

Linux only (/proc). Reads, never changes, what the tests do.
"""

from __future__ import annotations

import csv
import os
import time
from pathlib import Path

import pytest

_TICK = os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            out += [int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split()]
        except OSError:
            continue
    return out


def _own(pid: int) -> float:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = raw[raw.rindex(")") + 2:].split()
    # fields[11:15] are utime, stime, cutime, cstime (stat fields 14-17)
    return sum(int(x) for x in fields[11:15]) / _TICK


def tree_cpu(pid: int) -> float:
    """CPU seconds of `pid`, its reaped descendants and its live ones."""
    return _own(pid) + sum(tree_cpu(c) for c in _children(pid))


class _Recorder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: list[tuple[str, float, float]] = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
        cpu0, wall0 = tree_cpu(os.getpid()), time.monotonic()
        yield
        self.rows.append((item.nodeid, tree_cpu(os.getpid()) - cpu0, time.monotonic() - wall0))

    def pytest_sessionfinish(self) -> None:
        with self.path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["nodeid", "cpu_s", "wall_s"])
            w.writerows((n, f"{c:.3f}", f"{s:.3f}") for n, c, s in self.rows)


def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    out = Path(os.environ.get("INFBENCH_CPU_LOG_DIR", ".")) / f"cpu_by_test.{worker}.csv"
    config.pluginmanager.register(_Recorder(out), "cpu_by_test_recorder")
