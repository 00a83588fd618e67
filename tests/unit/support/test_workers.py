"""The first part's worker count (tests/support/workers.py): two per CPU, one more on a quiet
host, read from /proc/stat; a busy or unreadable host gets the smaller number."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.workers import busy_fraction, cpu_times, sample_busy, workers

# user nice system idle iowait irq softirq steal guest guest_nice
BEFORE = "cpu  100 0 50 800 50 0 0 0 7 0\ncpu0 50 0 25 400 25 0 0 0 7 0\nintr 1 2 3\n"


def _after(user: int, idle: int, iowait: int = 0, steal: int = 0) -> str:
    return f"cpu  {100 + user} 0 50 {800 + idle} {50 + iowait} 0 0 {steal} 7 0\n"


def test_busy_and_total_come_from_the_aggregate_line_guest_counted_once() -> None:
    assert cpu_times(BEFORE) == (150, 1000)  # guest time is already inside user


def test_idle_and_iowait_are_not_busy_steal_is() -> None:
    assert busy_fraction(BEFORE, _after(user=30, idle=60, iowait=10)) == pytest.approx(0.30)
    assert busy_fraction(BEFORE, _after(user=0, idle=50, steal=50)) == pytest.approx(0.50)


@pytest.mark.parametrize("bad", ["", "intr 1 2\n", "cpu0 1 2 3 4\n"])
def test_a_stat_without_the_aggregate_line_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="aggregate"):
        cpu_times(bad)


def test_counters_that_did_not_advance_are_refused() -> None:
    with pytest.raises(ValueError, match="did not advance"):
        busy_fraction(BEFORE, BEFORE)


@pytest.mark.parametrize(("cpus", "busy", "n"), [
    (2, 0.0, 5), (2, 0.24, 5), (2, 0.25, 4), (2, 0.5, 4), (2, None, 4),
    (1, 0.1, 3), (1, 0.9, 2), (4, 0.1, 9), (8, 0.0, 12), (8, 0.6, 12),
])
def test_two_per_cpu_one_more_when_quiet_capped(cpus: int, busy: float | None, n: int) -> None:
    assert workers(cpus, busy) == n


def test_an_unreadable_host_is_none(tmp_path: Path) -> None:
    assert sample_busy(0.01, tmp_path / "missing") is None
    frozen = tmp_path / "stat"
    frozen.write_text(BEFORE)
    assert sample_busy(0.01, frozen) is None


def test_a_process_spinning_one_cpu_reads_as_busy() -> None:
    """The real counters: a child that spins for the whole sample is at least 1/ncpu of all
    CPU time, whatever else the host does."""
    cpus = len(os.sched_getaffinity(0))
    spin = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()+5\nwhile time.time()<t: pass"])
    try:
        time.sleep(0.3)
        busy = sample_busy(1.0)
    finally:
        spin.kill()
        spin.wait()
    assert busy is not None and busy >= 0.9 / cpus
    if cpus <= 3:
        assert workers(cpus, busy) == 2 * cpus
