"""The gate on imported runs: the requests themselves are the workload (an imported run has
no infbench workload configuration), lengths position by position and, where both runs have
one, the schedule."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.support.cli import infbench
from tests.unit.imports.support import FIXTURES


def _import(db: Path, tool: str, path: Path) -> str:
    r = infbench("import", "--from", tool, str(path), "--db", str(db))
    assert r.returncode == 0, r.stderr
    return r.stdout.split("imported run ", 1)[1].split()[0]


def _aiperf_copy(tmp_path: Path, name: str, shift_ms: float) -> Path:
    """The AIPerf fixture with the 10th record's schedule and send moved by `shift_ms`."""
    d = tmp_path / name
    shutil.copytree(FIXTURES / "aiperf", d)
    recs = [json.loads(x) for x in (d / "profile_export.jsonl").read_text().splitlines()]
    recs.sort(key=lambda r: r["metadata"]["credit_issued_ns"])
    for key in ("credit_issued_ns", "request_start_ns"):
        recs[9]["metadata"][key] += int(shift_ms * 1e6)
    (d / "profile_export.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return d


def test_the_same_requests_pair(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    a = _import(db, "aiperf", FIXTURES / "aiperf")
    b = _import(db, "aiperf", _aiperf_copy(tmp_path, "b", 2.0))  # within the 5 ms tolerance
    r = infbench("gate", "--baseline", a, "--candidate", b, "--db", str(db), "--json")
    assert r.returncode in (0, 1), r.stderr
    assert json.loads(r.stdout)["paired"] is True


def test_another_schedule_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    a = _import(db, "aiperf", FIXTURES / "aiperf")
    b = _import(db, "aiperf", _aiperf_copy(tmp_path, "b", 40.0))
    r = infbench("gate", "--baseline", a, "--candidate", b, "--db", str(db))
    assert r.returncode == 2
    assert "schedules differ: scheduled offsets up to 40.0 ms apart (> 5 ms)" in r.stderr
    r = infbench("gate", "--baseline", a, "--candidate", b, "--db", str(db), "--json",
                 "--allow-different-workloads")
    assert r.returncode in (0, 1) and json.loads(r.stdout)["paired"] is False


def test_other_lengths_are_refused(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    a = _import(db, "aiperf", FIXTURES / "aiperf")
    v = _import(db, "vllm-bench", FIXTURES / "vllm-bench" / "vllm-bench-serve.json")
    r = infbench("gate", "--baseline", v, "--candidate", a, "--db", str(db))
    assert r.returncode == 2 and "input tokens differ in" in r.stderr, r.stderr
