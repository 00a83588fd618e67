"""A slow link on the multi-rank engine as a user meets it: `infbench run` against two ranks
(torch executor, gloo) whose rank 1 link is slow, a link probe on the same host, and
`infbench diagnose RUN` naming the rank as the cause of the pauses the clients saw."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import closed_loop, infbench, triage

# Rank groups timed against each other: beside other xdist workers their timings are the
# neighbours' (a 3x slow link measured 1.4x, a probe's verdict "cannot tell"), so this file
# runs in the README's second, one-process part (`-m serial`).
pytestmark = [pytest.mark.e2e, pytest.mark.serial]


def _head(doc: dict) -> dict:
    return doc["context"]["headline"]


def test_slow_link_measured_on_the_hosts_is_the_cause_of_the_pauses(tmp_path: Path) -> None:
    """Two ranks (torch executor, gloo) whose rank 1 link is slow: the run sees pauses; a link
    probe on the same host (emulating the same slow link, `--inject`, with four ranks so the
    bisection can name one; 6x, so that beside the suite's other rank processes the probe's
    own verdict is not "cannot tell", which its own tests cover) is linked to the run. The triage joins the lasting cause with the
    pauses, and the headline names the rank."""
    pytest.importorskip("torch")
    db = tmp_path / "sl.duckdb"
    engine = [f"--engine-arg={a}" for a in ("--executor", "torch", "--tensor-parallel-size", "2",
                                             "--fault", "slow-link:rank=1,factor=4")]
    r = infbench("run", "--db", str(db), "--quiet", *closed_loop(7, 2, "26", "36"), *engine, timeout=400)
    assert r.returncode == 0, r.stderr[-2000:]
    r = infbench("probe", "links", "--ranks", "4", "--sizes", "64K,256K", "--repeats", "2", "--iters", "4",
                 "--warmup", "1", "--inject", "slow-link:rank=1,factor=6", "--run", "last", "--db", str(db),
                 timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rc, doc = triage(db)
    head = _head(doc)
    assert rc == 1 and head["verdict"] == "slow_link" and head["playbook"] == "links", head
    assert head["text"].startswith("Slow link: rank 1"), head
    assert "links" in doc["context"]["playbooks_run"]
