"""The report's Diagnosis section shows what `infbench diagnose` stored, self-contained."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

from infbench.report.diagnosis import diagnosis_section
from infbench.report.html import build_html
from infbench.store import create_run, finish_run, get_run
from infbench.store.findings import save_diagnosis
from tests.support.stores import new_store

SQL = "SELECT count(*) AS events FROM itl WHERE itl_ms > 50 AND run_id = 'r1'"


def _store(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    con = new_store(tmp_path / "s.duckdb")
    create_run(con, run_id="r1", config={}, target_url="u", model="m", endpoint="chat",
               t0_monotonic_ns=0)
    finish_run(con, "r1", status="completed", summary={"completed": 0})
    return con


def _save(con: duckdb.DuckDBPyConnection, findings: list[dict[str, object]]) -> None:
    save_diagnosis(con, {"playbook": "stalls", "run_id": "r1", "findings": findings,
                         "data_sources": {"client_timeline": True, "engine_steps": False},
                         "context": {}, "notes": ["No engine step log: inferred <alone>"]})


FINDING = {"verdict": "preemption_stall", "title": "Preemption stalls", "confidence": 0.85,
           "severity": "warning", "summary": "3 requests stopped <while> others streamed",
           "evidence": [{"name": "private_stalls", "values": {"events": 3, "median_gap_ms": 412.345},
                         "sql": SQL, "note": "per event"}],
           "next_actions": ["lower max_num_seqs", "raise gpu_memory_utilization"]}


def test_section_shows_verdict_numbers_sql_and_next_action(tmp_path: Path) -> None:
    con = _store(tmp_path)
    _save(con, [FINDING])
    page = diagnosis_section(con, "r1")
    assert "preemption_stall" in page and "Preemption stalls" in page
    assert "class='finding warning'" in page and "confidence 0.85" in page
    assert "median_gap_ms = <b>412.3</b>" in page and "events = <b>3</b>" in page
    sql = re.search(r"<details><summary>SQL</summary><pre>(.*?)</pre></details>", page)
    assert sql is not None and sql.group(1) == SQL.replace("'", "&#x27;").replace(">", "&gt;")
    assert "<li>lower max_num_seqs</li>" in page
    assert "data used: client_timeline (missing: engine_steps)" in page
    # Text from the store is escaped, never markup.
    assert "&lt;while&gt;" in page and "&lt;alone&gt;" in page and "<while>" not in page


def test_run_never_diagnosed_says_how_to_diagnose(tmp_path: Path) -> None:
    con = _store(tmp_path)
    page = diagnosis_section(con, "r1")
    assert "not been diagnosed" in page and "infbench diagnose r1" in page


def test_diagnosed_run_without_findings_says_so(tmp_path: Path) -> None:
    con = _store(tmp_path)
    _save(con, [])
    page = diagnosis_section(con, "r1")
    assert "No findings" in page and "class='finding" not in page


def test_full_report_carries_the_section_and_stays_self_contained(tmp_path: Path) -> None:
    con = _store(tmp_path)
    _save(con, [FINDING, {**FINDING, "verdict": "head_of_line_blocking", "severity": "critical"}])
    page = build_html(con, get_run(con, "r1"))
    assert page.index("id='diagnosis'") < page.index("<h2>Plots</h2>")
    assert "head_of_line_blocking" in page and "class='finding critical'" in page
    # The page's only scripts are inline (the charts); the section itself is static HTML.
    assert not re.search(r"""(src|href)\s*=|<link|@import|url\(""", page)
    assert "<script" not in diagnosis_section(con, "r1")
