"""tests/support/cpu_by_test.py counts a tree's CPU: reaped children and live ones included."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests.support.cpu_by_test import tree_cpu

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def test_a_reaped_child_and_its_reaped_grandchild_count() -> None:
    before = tree_cpu(os.getpid())
    # the child burns 0.3 s and runs a grandchild that burns 0.3 s; both are reaped
    code = BURN.format(s=0.3) + f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {BURN.format(s=0.3)!r}])\n"
    subprocess.run([sys.executable, "-c", code], check=True)
    assert tree_cpu(os.getpid()) - before >= 0.55


def test_a_live_child_counts_while_it_runs_and_no_more_once_reaped() -> None:
    p = subprocess.Popen([sys.executable, "-c", BURN.format(s=0.4) + "import time\ntime.sleep(30)\n"])
    try:
        before, own = tree_cpu(os.getpid()), time.process_time()
        # the live child's burn shows before it ends (this loop's own CPU taken out)
        while tree_cpu(os.getpid()) - before - (time.process_time() - own) < 0.3:
            assert p.poll() is None
        p.kill()
        alive = tree_cpu(os.getpid())
        p.wait()  # reaped: its time moves into cutime, so the total does not jump
        assert abs(tree_cpu(os.getpid()) - alive) < 0.1
    finally:
        p.kill()
        p.wait()
