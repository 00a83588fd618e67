"""Fleet runs and `infbench diagnose replicas` against real reference engines on loopback.

Four sim engines: three healthy, one whose GPU is thermally throttled (`throttle` fault: SM
clock 1000 of 1980 MHz, the clock-event reason and the heat on its dcgm-named /metrics).
Three fleet runs of three replicas each, through the CLI:
- healthy, healthy, throttled, round robin: the throttled replica is named slower at equal
  load, with its share of the fleet's p99 and the cause from its telemetry;
- three healthy, `--route share:2,1,1`: the first is busier (twice the requests), not slower;
- three healthy, round robin: no finding.
Small runs (short outputs, ~5 s each) keep the file well under 90 s on two shared cores.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from infbench.store import open_store
from tests.e2e.engine_process import FAST_FLAGS, EngineProcess, launch, stop
from tests.support.cli import infbench

pytestmark = pytest.mark.e2e

THROTTLE = ("--fault", "throttle:reason=thermal,sm_clock_mhz=1000")
LOAD = ("--rate", "30", "--num-requests", "180", "--input-tokens", "uniform:128:512",
        "--output-tokens", "uniform:16:64", "--seed", "3", "--quiet", "--json")


@pytest.fixture(scope="module")
def engines() -> Iterator[dict[str, EngineProcess]]:
    started: dict[str, EngineProcess] = {}
    try:
        for name, extra in (("h1", ()), ("h2", ()), ("h3", ()), ("hot", THROTTLE)):
            started[name] = launch([sys.executable, "-m", "reference_engine", "--port", "0",
                                    *FAST_FLAGS, *extra])
        yield started
    finally:
        for e in started.values():
            stop(e)


def _fleet_run(db: Path, replicas: dict[str, EngineProcess], *extra: str) -> dict:
    urls = [a for name, e in replicas.items() for a in ("--url", f"{name}={e.url}")]
    r = infbench("run", *urls, "--db", str(db), *LOAD, *extra, timeout=90)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def _diagnose(db: Path) -> dict:
    r = infbench("diagnose", "replicas", "last", "--db", str(db), "--json", timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_throttled_replica_is_named_slower_with_its_share_of_p99_and_the_cause(
        engines: dict[str, EngineProcess], tmp_path: Path) -> None:
    db = tmp_path / "fleet.duckdb"
    summary = _fleet_run(db, {"a": engines["h1"], "b": engines["h2"], "c": engines["hot"]})
    fleet = summary["fleet"]
    assert [r["name"] for r in fleet["replicas"]] == ["a", "b", "c"]
    assert [r["requests_sent"] for r in fleet["replicas"]] == [60, 60, 60]  # round robin
    assert fleet["fleet"]["requests_sent"] == 180
    con = open_store(db, read_only=True)
    try:
        per = dict(con.execute("SELECT replica, count(*) FROM requests GROUP BY 1").fetchall())
        conc = con.execute("SELECT min(replica_concurrency) FROM requests").fetchone()
        gpu = dict(con.execute("SELECT instance, median(sm_clock_mhz) FROM gpu_samples "
                               "GROUP BY 1").fetchall())
        steps = dict(con.execute("SELECT replica, count(*) FROM engine_steps GROUP BY 1").fetchall())
    finally:
        con.close()
    assert per == {"a": 60, "b": 60, "c": 60}
    assert conc is not None and conc[0] >= 1
    assert gpu["c"] == pytest.approx(1000, abs=1) and gpu["a"] > 1900  # telemetry per replica
    assert set(steps) == {"a", "b", "c"}

    diag = _diagnose(db)
    by = {f["verdict"]: f for f in diag["findings"]}
    slow = by["replica_slower"]
    assert slow["title"].startswith("Replica c ")
    assert [r["replica"] for r in diag["context"]["replicas"] if r["slower"]] == ["c"]
    tail = {e["name"]: e["values"] for e in slow["evidence"]}
    assert tail["fleet_p99_tpot"]["share_above_fleet_p99"] >= 0.5  # a third of requests, most of the tail
    assert tail["fleet_p99_tpot"]["p99_without_replica_ms"] < tail["fleet_p99_tpot"]["fleet_p99_ms"]
    assert all(e["sql"] for e in slow["evidence"])
    cause = by["gpu_thermal_throttle"]
    assert "1,000 of 1,980 MHz" in cause["title"] and "sw_thermal_slowdown" in cause["title"]
    assert diag["findings"][0]["verdict"] == "replica_slower"  # the slowdown first, then its cause


def test_twice_the_load_is_busier_not_slower(engines: dict[str, EngineProcess], tmp_path: Path) -> None:
    db = tmp_path / "share.duckdb"
    summary = _fleet_run(db, {"x": engines["h1"], "y": engines["h2"], "z": engines["h3"]},
                         "--route", "share:2,1,1")
    sent = [r["requests_sent"] for r in summary["fleet"]["replicas"]]
    assert sent == [90, 45, 45]
    diag = _diagnose(db)
    assert [f["verdict"] for f in diag["findings"]] == ["replica_busier"]
    assert diag["findings"][0]["title"].startswith("Replica x ")


def test_healthy_fleet_has_no_finding(engines: dict[str, EngineProcess], tmp_path: Path) -> None:
    db = tmp_path / "healthy.duckdb"
    _fleet_run(db, {"x": engines["h1"], "y": engines["h2"], "z": engines["h3"]},
               "--route", "least-outstanding")
    diag = _diagnose(db)
    assert diag["findings"] == [], [f["title"] for f in diag["findings"]]
    assert len(diag["context"]["replicas"]) == 3
