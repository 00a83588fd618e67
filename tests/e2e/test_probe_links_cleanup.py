"""A link probe that cannot finish in time is stopped: the launcher raises one line and no
rank process survives (rank 3 slowed 1000x here, so the sweep outlasts a 25 s timeout)."""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import uuid

import pytest

from probes.links import LinkProbeError, ProbeConfig, SlowLink
from probes.links.launcher import run_probe
from tests.e2e.links_support import processes_with_env

pytestmark = pytest.mark.e2e


def test_a_probe_past_its_timeout_is_stopped_and_reaped(monkeypatch: pytest.MonkeyPatch) -> None:
    marker = uuid.uuid4().hex
    monkeypatch.setenv("INFBENCH_LINKS_CLEANUP", marker)  # inherited by the spawned ranks
    t = time.monotonic()
    with pytest.raises(LinkProbeError, match="did not finish within 25 s") as e:
        run_probe(ProbeConfig(ranks=4, ops=["all_reduce"], sizes=[1 << 20], iters=50, repeats=3,
                              bisect=False, inject=SlowLink(3, 1000.0), timeout_s=25))
    assert "\n" not in str(e.value)
    assert time.monotonic() - t < 60
    assert mp.active_children() == []
    time.sleep(0.5)
    assert [p for p in processes_with_env(marker) if p != os.getpid()] == []
