"""`infbench sweep` takes every target option `infbench run` takes: a sweep over a fleet
(`--url NAME=URL` repeated, or `--targets FILE`, with `--route`) runs each point over the
whole fleet, routed as asked, and refuses what `run` refuses, in one line, before any load."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from tests.support.cli import infbench
from tests.support.process import sse_server

pytestmark = pytest.mark.e2e


def _points(db: Path) -> list[dict]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT r.summary FROM sweep_points p JOIN runs r USING (run_id) "
                           "ORDER BY p.point_idx").fetchall()
    finally:
        con.close()
    return [json.loads(s) for (s,) in rows]


@pytest.mark.parametrize(("how", "route", "num_requests", "expected"), [
    ("urls", "share:3,1", 16, [12, 4]),
    ("file", None, 10, [5, 5]),
])
def test_each_point_runs_over_the_whole_fleet_routed_as_asked(
        tmp_path: Path, how: str, route: str | None, num_requests: int, expected: list[int]) -> None:
    db = tmp_path / "f.duckdb"
    with sse_server("--ttft-ms", "2", "--itl-ms", "1") as a, \
            sse_server("--ttft-ms", "2", "--itl-ms", "1") as b:
        if how == "urls":
            target = ["--url", f"left={a}", "--url", f"right={b}"]
        else:
            (tmp_path / "fleet.txt").write_text(f"left={a}\nright={b}\n")
            target = ["--targets", str(tmp_path / "fleet.txt")]
        r = infbench("sweep", *target, *(["--route", route] if route else []), "--db", str(db),
                     "--mode", "concurrency", "--points", "1,2", "--duration", "30",
                     "--num-requests", str(num_requests), "--input-tokens", "32",
                     "--output-tokens", "4", "--no-watch", "--json", timeout=120)
    assert r.returncode == 0, r.stderr
    assert [p["value"] for p in json.loads(r.stdout)["points"]] == [1, 2]
    points = _points(db)
    assert len(points) == 2
    for summary in points:
        replicas = summary["fleet"]["replicas"]
        assert [x["name"] for x in replicas] == ["left", "right"]
        assert [x["requests_sent"] for x in replicas] == expected, replicas
        assert summary["completed"] == num_requests


@pytest.mark.parametrize(("args", "words"), [
    (["--url", "http://127.0.0.1:9", "--route", "round-robin"], "route: routing needs a fleet"),
    (["--url", "http://127.0.0.1:9", "--targets", "fleet.txt"], "targets: give the replicas"),
    (["--url", "a=http://127.0.0.1:9", "--url", "b=http://127.0.0.1:8", "--metrics-url",
      "http://127.0.0.1:7/metrics"], "metrics-url: a fleet scrapes"),
])
def test_a_fleet_sweep_refuses_what_a_fleet_run_refuses(
        tmp_path: Path, args: list[str], words: str) -> None:
    db = tmp_path / "no.duckdb"
    for verb in ("run", "sweep"):
        r = infbench(verb, *args, "--db", str(db), cwd=tmp_path, timeout=60)
        assert r.returncode == 2, (verb, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], (verb, r.stderr)
    assert not db.exists()
