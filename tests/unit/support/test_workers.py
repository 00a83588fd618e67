"""The first part's worker count (tests/support/workers.py): two per CPU, one more on a quiet
host, read from /proc/stat; a busy or unreadable host gets the smaller number."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.workers import (
    busy_fraction,
    cpu_times,
    is_own_install,
    sample,
    sample_busy,
    workers,
)

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


def _spinner(marker: str) -> subprocess.Popen:
    """A process in a session of its own spinning one CPU for up to 5 s, `marker` in its argv."""
    code = "import time\nt=time.time()+5\nwhile time.time()<t: pass"
    return subprocess.Popen([sys.executable, "-c", code, marker], start_new_session=True)


def test_a_process_spinning_one_cpu_reads_as_busy_unless_it_is_our_own_install() -> None:
    """The real counters: a neighbour that spins for the whole sample is busy; the same
    spinner recognised as the suite's own background install is counted by its session's
    ticks and taken off. (On a saturated host the spinner gets less than a CPU, but a
    fair share of one is far above nothing.)"""
    cpus = len(os.sched_getaffinity(0))
    spin = _spinner("neighbour-or-install")
    try:
        time.sleep(0.3)
        busy, ours = sample(1.0)
        busy_own, ours_own = sample(1.0, own=lambda cmdline: b"neighbour-or-install" in cmdline)
    finally:
        spin.kill()
        spin.wait()
    assert ours == 0.0 and busy >= 0.2 / cpus
    assert 0.2 / cpus <= ours_own <= busy_own
    if cpus <= 3:
        assert workers(cpus, busy) == 2 * cpus


def test_the_install_is_recognised_by_its_detached_command_line() -> None:
    assert is_own_install(b"/usr/bin/python3\0-m\0tools.real_vllm.install\0--holding-lock\0")
    assert not is_own_install(b"/usr/bin/python3\0-m\0tools.real_vllm.install\0--background\0")
    assert not is_own_install(b"bash\0-c\0echo tools.real_vllm.install --holding-lock\0")
