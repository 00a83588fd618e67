"""Stored findings: round trip, replacement per playbook, validation, migration 2 -> 3, and
export/import carrying them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pytest

from infbench.store import (
    MIGRATIONS,
    SCHEMA_VERSION,
    StoreError,
    create_run,
    open_store,
    schema_version,
)
from infbench.store.findings import load_diagnoses, save_diagnosis
from infbench.store.transfer import export_run, import_run

SQL = "SELECT median(itl_ms) AS median_ms FROM itl WHERE run_id = 'r1'"


def _run(con: duckdb.DuckDBPyConnection, run_id: str = "r1") -> None:
    create_run(con, run_id=run_id, config={}, target_url="u", model="m", endpoint="chat",
               t0_monotonic_ns=0)


def _diagnosis(run_id: str = "r1", playbook: str = "stalls", **finding: Any) -> dict[str, Any]:
    f = {"verdict": "periodic_engine_stall", "title": "Periodic engine-wide stall",
         "confidence": 0.9, "severity": "critical", "summary": "pauses every 0.4 s",
         "evidence": [{"name": "period_seconds", "values": {"period": np.float64(0.4),
                                                            "missed": np.int64(1), "unit": "s"},
                       "sql": SQL, "note": None},
                      {"name": "derived", "values": {"ratio": 2.5}, "sql": None, "note": "p99/p50"}],
         "next_actions": ["py-spy dump --native PID during a pause", "check timers"],
         "confidence_label": "high"}
    f.update(finding)
    second = {**f, "verdict": "private_stall", "severity": "info", "confidence": 0.5,
              "evidence": [], "next_actions": []}
    return {"playbook": playbook, "run_id": run_id, "findings": [f, second],
            "data_sources": {"client_timeline": True, "engine_steps": False},
            "context": {"itl_baseline": {"median_ms": 6.0}}, "notes": ["no step log"]}


def test_round_trip_keeps_order_numbers_sql_and_sources(tmp_path: Path) -> None:
    con = open_store(tmp_path / "s.duckdb")
    _run(con)
    assert save_diagnosis(con, _diagnosis()) == 2
    (d,) = load_diagnoses(con, "r1")
    assert (d.run_id, d.playbook, d.notes) == ("r1", "stalls", ["no step log"])
    assert d.data_sources == {"client_timeline": True, "engine_steps": False}
    assert d.context == {"itl_baseline": {"median_ms": 6.0}}
    first, second = d.findings
    assert [first["verdict"], second["verdict"]] == ["periodic_engine_stall", "private_stall"]
    assert (first["severity"], first["confidence"]) == ("critical", 0.9)
    assert first["evidence"][0] == {"name": "period_seconds", "sql": SQL, "note": None,
                                    "values": {"period": 0.4, "missed": 1, "unit": "s"}}
    assert first["evidence"][1]["note"] == "p99/p50" and first["evidence"][1]["sql"] is None
    assert first["next_actions"][0].startswith("py-spy")
    assert first["data_sources"] == d.data_sources
    # The stored SQL reruns against the same store.
    assert con.execute(first["evidence"][0]["sql"]).fetchall() == [(None,)]


def test_diagnosing_again_replaces_only_that_playbook_of_that_run(tmp_path: Path) -> None:
    con = open_store(tmp_path / "s.duckdb")
    _run(con)
    _run(con, "r2")
    save_diagnosis(con, _diagnosis())
    save_diagnosis(con, _diagnosis(playbook="memory"))
    save_diagnosis(con, _diagnosis(run_id="r2"))
    save_diagnosis(con, {**_diagnosis(), "findings": [], "notes": []})
    memory, stalls = load_diagnoses(con, "r1")  # by playbook name
    assert (memory.playbook, len(memory.findings)) == ("memory", 2)
    assert (stalls.playbook, stalls.findings, stalls.notes) == ("stalls", [], [])
    assert len(load_diagnoses(con, "r2", "stalls")[0].findings) == 2
    assert con.execute("SELECT count(*) FROM findings WHERE run_id = 'r1'").fetchone() == (2,)


def test_never_diagnosed_run_has_no_diagnosis(tmp_path: Path) -> None:
    con = open_store(tmp_path / "s.duckdb")
    _run(con)
    assert load_diagnoses(con, "r1") == []


@pytest.mark.parametrize(("change", "field"), [
    ({"severity": "fatal"}, "findings[0].severity"),
    ({"confidence": 1.5}, "findings[0].confidence"),
    ({"confidence": True}, "findings[0].confidence"),
    ({"verdict": None}, "findings[0].verdict"),
    ({"evidence": [{"name": "x", "values": [1]}]}, "findings[0].evidence[0].values"),
])
def test_bad_finding_names_the_field_and_writes_nothing(tmp_path: Path, change: dict[str, Any],
                                                        field: str) -> None:
    con = open_store(tmp_path / "s.duckdb")
    _run(con)
    save_diagnosis(con, _diagnosis())
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        save_diagnosis(con, _diagnosis(**change))
    assert len(load_diagnoses(con, "r1")[0].findings) == 2


def test_unknown_run_is_refused(tmp_path: Path) -> None:
    con = open_store(tmp_path / "s.duckdb")
    with pytest.raises(StoreError, match="'nope': not in this store"):
        save_diagnosis(con, _diagnosis(run_id="nope"))


def test_version_2_file_migrates_to_latest_keeping_its_runs(tmp_path: Path) -> None:
    path = tmp_path / "v2.duckdb"
    old = open_store(path, migrations=MIGRATIONS[:2])
    _run(old)
    assert schema_version(old) == 2
    old.close()
    con = open_store(path)
    assert schema_version(con) == SCHEMA_VERSION
    assert con.execute("SELECT run_id FROM runs").fetchall() == [("r1",)]
    assert load_diagnoses(con, "r1") == []
    save_diagnosis(con, _diagnosis())
    assert [f["verdict"] for f in load_diagnoses(con, "r1")[0].findings][0] == "periodic_engine_stall"


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_findings_travel_with_the_run_through_export_and_import(tmp_path: Path, fmt: str) -> None:
    con = open_store(tmp_path / "s.duckdb")
    _run(con)
    _run(con, "other")
    save_diagnosis(con, _diagnosis())
    save_diagnosis(con, _diagnosis(run_id="other"))
    files = export_run(con, "r1", tmp_path / "out", fmt)
    assert {f.name for f in files} >= {f"findings.{fmt}", f"diagnoses.{fmt}"}
    fresh = open_store(tmp_path / "fresh.duckdb")
    assert import_run(fresh, tmp_path / "out") == ["r1"]
    (before,), (after,) = load_diagnoses(con, "r1"), load_diagnoses(fresh, "r1")
    assert after == before
    assert fresh.execute("SELECT count(*) FROM findings").fetchone() == (2,)


def test_export_without_findings_files_still_imports(tmp_path: Path) -> None:
    con = open_store(tmp_path / "s.duckdb")
    _run(con)
    export_run(con, "r1", tmp_path / "out", "parquet")
    for name in ("findings.parquet", "diagnoses.parquet"):  # as an older infbench wrote it
        (tmp_path / "out" / name).unlink()
    fresh = open_store(tmp_path / "fresh.duckdb")
    assert import_run(fresh, tmp_path / "out") == ["r1"]
    assert load_diagnoses(fresh, "r1") == []
