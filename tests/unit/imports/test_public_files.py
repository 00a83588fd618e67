"""Real files from the tools' public repositories (sources in tests/fixtures/imports/public)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from tests.unit.imports.support import FIXTURES, import_one

AIPERF_EXAMPLE = FIXTURES / "public" / "aiperf-0.1-examples"


def test_aiperf_repository_example_with_cancelled_requests(tmp_path: Path) -> None:
    recs = [json.loads(x) for x in (AIPERF_EXAMPLE / "profile_export.jsonl").read_text().splitlines()]
    db, run_id, summary = import_one(tmp_path, "aiperf", AIPERF_EXAMPLE)
    assert summary["completed"] == 14 and summary["failed"] == 11
    assert summary["errors"] == {"tool_error": 11}
    con = duckdb.connect(str(db), read_only=True)
    try:
        status = con.execute("SELECT status, status_reason FROM runs WHERE run_id = ?", [run_id]).fetchone()
        errors = con.execute("SELECT DISTINCT error_message FROM requests WHERE run_id = ? "
                             "AND error_class IS NOT NULL", [run_id]).fetchall()
        ttft = con.execute("SELECT ttft_ms FROM request_latency WHERE run_id = ? AND error_class IS NULL "
                           "ORDER BY request_idx", [run_id]).fetchall()
        chunks = con.execute("SELECT count(*) FROM chunks WHERE run_id = ?", [run_id]).fetchone()
    finally:
        con.close()
    assert status == ("completed_with_errors", "11 of 25 requests failed in aiperf (tool_error)")
    assert errors == [("RequestCancellationError Request was cancelled after 0.000 seconds",)]
    good = sorted((r for r in recs if r["error"] is None), key=lambda r: r["metadata"]["timestamp_ns"])
    assert [round(t[0], 6) for t in ttft] == [round(r["metrics"]["ttft"]["value"], 6) for r in good]
    assert chunks == (sum(len(r["metrics"]["inter_chunk_latency"]["value"]) + 1 for r in good),)
