"""`--ray ADDRESS`: the workers as Ray actors on a real (local) cluster, against the bundled engine.

The cluster is two real Ray nodes on loopback (a head and one more, each its own raylet and
object store), started by `ray start` as on a cluster of hosts. The CLI run places one actor
per node, measures each node's clock through Ray calls, and stores a complete run; an actor
killed mid-run (`ray.kill`) and a node lost mid-run (its processes SIGKILLed) leave the run
marked with the loss and the other actor's share stored whole. Every process of the cluster
is ended afterwards.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from infbench.loadgen.arrivals import Arrivals
from infbench.loadgen.preflight import preflight
from infbench.loadgen.run.execute import execute_run
from infbench.loadgen.run.runner import RunSettings
from infbench.loadgen.workers import ray_backend
from infbench.loadgen.workloads import Synthetic
from infbench.loadgen.workloads.lengths import LengthDist
from tests.e2e.engine_process import EngineProcess, running_engine
from tests.e2e.test_run_workers import CapturingScale
from tests.support.cli import infbench
from tests.support.ray_cluster import cluster_pids, lose_node, ray_cluster, ray_env

pytestmark = pytest.mark.e2e

_RAY_VARS = {k: v for k, v in ray_env().items() if k.startswith("RAY_")}


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    saved = {k: os.environ.get(k) for k in _RAY_VARS}
    os.environ.update(_RAY_VARS)  # this process joins the cluster as a driver in one test
    try:
        with ray_cluster(extra_nodes=1, cpus_per_node=2) as address:
            yield address
            ray_backend.disconnect()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert cluster_pids() == []


@pytest.fixture(scope="module")
def engine() -> Iterator[EngineProcess]:
    with running_engine() as e:
        yield e


def test_a_run_through_ray_is_complete_with_each_nodes_clock(cluster: str, engine: EngineProcess,
                                                              tmp_path: Path) -> None:
    db = tmp_path / "ray.duckdb"
    r = infbench("run", "--url", engine.url, "--ray", cluster, "--num-requests", "30", "--arrival", "closed",
                 "--concurrency", "6", "--input-tokens", "64", "--output-tokens", "12", "--seed", "4",
                 "--db", str(db), "--json", "--quiet", timeout=180, **_RAY_VARS)
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads(r.stdout)
    assert s["completed"] == 30 and s["status"] == "completed"
    assert s["workers"]["backend"] == "ray" and s["workers"]["count"] == 2
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT worker, node, status, concurrency, planned_requests, stored_requests, "
                           "clock_rounds, clock_uncertainty_ns, clock_offset_ns, clock_shared "
                           "FROM run_workers ORDER BY worker").fetchall()
        by_worker = con.execute("SELECT worker, count(*), sum(output_tokens) FROM requests "
                                "GROUP BY 1 ORDER BY 1").fetchall()
    finally:
        con.close()
    assert len({row[1] for row in rows}) == 2  # one actor on each node
    for _worker, _node, status, conc, planned, stored, rounds, unc, offset, shared in rows:
        assert (status, conc, planned, stored, rounds) == ("completed", 3, 15, 15, 64), rows
        # Loopback Ray calls: well under 50 ms, never 0; one host, so one clock within it.
        assert 0 < unc < 50_000_000 and shared and abs(offset) <= unc, rows
    assert by_worker == [(0, 15, 15 * 12), (1, 15, 15 * 12)]


def test_an_actor_killed_mid_run_marks_the_run_and_keeps_the_other(cluster: str, engine: EngineProcess,
                                                                   tmp_path: Path) -> None:
    nodes = ray_backend.connect(cluster)
    scale = CapturingScale(workers=1, ray_address=cluster, ray_nodes=tuple(n["NodeID"] for n in nodes))
    object.__setattr__(scale, "made", [])
    killed: list[int] = []

    def killer() -> None:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if scale.made and scale.made[0].workers[1].progress.get("sent", 0) >= 4:
                scale.made[0].handle(1).kill()
                killed.append(1)
                return
            time.sleep(0.02)

    target = asyncio.run(preflight(engine.url, "completions", None, None))
    settings = RunSettings(url=target.url, endpoint="completions", model=target.model,
                           arrivals=Arrivals("constant", rate=16.0), num_requests=48, seed=9)
    wl = Synthetic(LengthDist.parse("48", "in"), LengthDist.parse("uniform:8:24", "out"), target.tokens)
    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    r = execute_run(settings, wl, tmp_path / "kill.duckdb", {"ray": "kill"}, scale=scale)
    thread.join()
    assert killed
    assert r.status.status == "interrupted" and "worker 1" in (r.status.reason or "")
    assert "Ray actor" in r.status.reason and "requests lost" in r.status.reason
    con = duckdb.connect(str(tmp_path / "kill.duckdb"), read_only=True)
    try:
        w = con.execute("SELECT worker, status, planned_requests, stored_requests, lost_requests "
                        "FROM run_workers ORDER BY worker").fetchall()
        stored = dict(con.execute("SELECT worker, count(*) FROM requests GROUP BY 1").fetchall())
        orphans = con.execute("SELECT count(*) FROM chunks WHERE request_idx NOT IN "
                              "(SELECT request_idx FROM requests)").fetchone()[0]
    finally:
        con.close()
    assert w[0] == (0, "completed", 24, 24, 0), w
    assert w[1][1] == "died" and w[1][3] == stored.get(1, 0) and w[1][4] == 24 - w[1][3] > 0, w
    assert stored[0] == 24 and orphans == 0


def test_a_lost_node_marks_the_run_and_keeps_the_other_nodes_share(cluster: str, engine: EngineProcess,
                                                                   tmp_path: Path) -> None:
    """The extra node's processes are SIGKILLed mid-run (its raylet, store and the actor on
    it): the run names the worker on that node and its loss; the head's worker's share and
    everything the lost one shipped are stored. Last in this file: the cluster has one node after."""
    nodes = ray_backend.connect(cluster)
    extra = [n["NodeID"] for n in nodes if "node:__internal_head__" not in n.get("Resources", {})]
    assert len(nodes) == 2 and len(extra) == 1
    scale = CapturingScale(workers=1, ray_address=cluster, ray_nodes=tuple(n["NodeID"] for n in nodes))
    object.__setattr__(scale, "made", [])
    lost: list[int] = []

    def killer() -> None:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not lost:
            for st in scale.made[0].workers if scale.made else []:
                if st.info.get("node") == extra[0] and st.progress.get("sent", 0) >= 5:
                    lose_node(cluster)
                    lost.append(st.worker)
                    return
            time.sleep(0.02)

    target = asyncio.run(preflight(engine.url, "completions", None, None))
    settings = RunSettings(url=target.url, endpoint="completions", model=target.model,
                           arrivals=Arrivals("poisson", rate=6.0), num_requests=40, seed=21)
    wl = Synthetic(LengthDist.parse("uniform:32:96", "in"), LengthDist.parse("uniform:6:18", "out"), target.tokens)
    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    r = execute_run(settings, wl, tmp_path / "node.duckdb", {"ray": "node"}, scale=scale)
    thread.join()
    assert lost, "the worker on the extra node never sent 5 requests"
    gone, kept = lost[0], 1 - lost[0]
    assert r.status.status == "interrupted" and f"worker {gone}" in (r.status.reason or "")
    con = duckdb.connect(str(tmp_path / "node.duckdb"), read_only=True)
    try:
        w = {row[0]: row[1:] for row in con.execute(
            "SELECT worker, status, node, planned_requests, stored_requests, lost_requests FROM run_workers "
            "ORDER BY worker").fetchall()}
        stored = dict(con.execute("SELECT worker, count(*) FROM requests GROUP BY 1").fetchall())
    finally:
        con.close()
    assert w[gone][0] == "died" and w[gone][1] == extra[0] and w[gone][3] == stored.get(gone, 0) >= 4, w
    assert w[gone][4] == w[gone][2] - w[gone][3] > 0
    assert w[kept][0] == "completed" and w[kept][3] == w[kept][2] == stored[kept] == 20, w
