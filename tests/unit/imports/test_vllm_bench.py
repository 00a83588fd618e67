"""`infbench import --from vllm-bench` on a real `vllm bench serve --save-detailed` file."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pytest

from infbench.imports import BadFile, read_files
from tests.unit.imports.support import BAD, FIXTURES, check_entries, import_one

FILE = FIXTURES / "vllm-bench" / "vllm-bench-serve.json"


def test_requests_and_chunks_are_the_files(tmp_path: Path) -> None:
    doc = json.loads(FILE.read_text())
    db, run_id, _ = import_one(tmp_path, "vllm-bench", FILE)
    con = duckdb.connect(str(db), read_only=True)
    try:
        reqs = con.execute("SELECT prompt_tokens, output_tokens, (first_content_ns - send_ns) / 1e9, "
                           "(last_choices_ns - send_ns) / 1e9, num_content_chunks FROM requests "
                           "WHERE run_id = ? ORDER BY request_idx", [run_id]).fetchall()
        gaps = con.execute("SELECT raw_itl_ms FROM itl WHERE run_id = ? AND raw_itl_ms IS NOT NULL "
                           "ORDER BY request_idx, seq", [run_id]).fetchall()
        cfg = json.loads(con.execute("SELECT config FROM runs WHERE run_id = ?", [run_id]).fetchone()[0])
    finally:
        con.close()
    assert len(reqs) == 40
    assert [r[0] for r in reqs] == doc["input_lens"]
    assert [r[1] for r in reqs] == doc["output_lens"]
    np.testing.assert_allclose([r[2] for r in reqs], doc["ttfts"], atol=1e-9)
    np.testing.assert_allclose([r[3] for r in reqs], doc["latencies"], atol=1e-9)
    assert [r[4] for r in reqs] == [len(i) + 1 for i in doc["itls"]]
    np.testing.assert_allclose([g[0] for g in gaps], [x * 1e3 for i in doc["itls"] for x in i], atol=2e-6)
    imported = cfg["imported"]
    assert imported["tool"] == "vllm-bench" and imported["tool_config"]["request_rate"] == 8.0
    assert imported["definitions"]["itl"].startswith("gap between consecutive events")
    assert imported["tool_summary"]["mean_ttft_ms"] == doc["mean_ttft_ms"]


def test_recomputed_summary_equals_vllms_own(tmp_path: Path) -> None:
    doc = json.loads(FILE.read_text())
    _, _, summary = import_one(tmp_path, "vllm-bench", FILE)
    check = check_entries(summary)
    compared = {k for k, c in check.items() if c["agrees"] is not None}
    # Every latency statistic vLLM wrote (4 metrics x mean/median/std/p50/p90/p95/p99) and the counts.
    assert compared == {k for k in doc if k.endswith("_ms") and not k.startswith("probe")} | {
        "completed", "failed", "total_input_tokens", "total_output_tokens"}
    assert all(check[k]["agrees"] for k in compared), [check[k] for k in compared if not check[k]["agrees"]]
    assert summary["p99_ttft_ms"] == pytest.approx(doc["p99_ttft_ms"], abs=1e-6)
    assert summary["raw_p99_itl_ms"] == pytest.approx(doc["p99_itl_ms"], abs=2e-3)
    assert summary["mean_e2el_ms"] == pytest.approx(doc["mean_e2el_ms"], abs=1e-6)
    assert {k for k, c in check.items() if c.get("differs")} == {
        "duration", "request_throughput", "output_throughput", "total_token_throughput"}


@pytest.mark.parametrize(("name", "record", "field"), [
    ("vllm-bench-latency-string.json", "request 7", "latencies"),
    ("vllm-bench-no-detail.json", "whole file", "ttfts"),
    ("vllm-bench-truncated.json", "line 1", "column 5001"),
])
def test_a_bad_file_names_file_record_and_field(name: str, record: str, field: str) -> None:
    with pytest.raises(BadFile) as err:
        read_files("vllm-bench", [BAD / name])
    assert (err.value.path, err.value.record, err.value.field_name) == (str(BAD / name), record, field)
    assert "\n" not in str(err.value)


def test_a_failed_request_is_stored_as_a_tool_error(tmp_path: Path) -> None:
    doc = json.loads(FILE.read_text())
    doc["errors"][3] = "Bad Request"
    doc["ttfts"][3], doc["latencies"][3], doc["itls"][3], doc["output_lens"][3] = 0.0, 0.0, [], 0
    path = tmp_path / "one-failed.json"
    path.write_text(json.dumps(doc))
    db, run_id, summary = import_one(tmp_path, "vllm-bench", path)
    assert summary["completed"] == 39 and summary["failed"] == 1
    assert summary["errors"] == {"tool_error": 1}
    con = duckdb.connect(str(db), read_only=True)
    try:
        status = con.execute("SELECT status FROM runs WHERE run_id = ?", [run_id]).fetchone()
        msg = con.execute("SELECT error_message FROM requests WHERE run_id = ? AND request_idx = 3",
                          [run_id]).fetchone()
    finally:
        con.close()
    assert status == ("completed_with_errors",) and msg == ("Bad Request",)


def test_real_failed_requests(tmp_path: Path) -> None:
    """vLLM's own file from a run where the server refused 13 prompts (HTTP 400)."""
    path = FIXTURES / "vllm-bench" / "vllm-bench-serve-errors.json"
    doc = json.loads(path.read_text())
    db, run_id, summary = import_one(tmp_path, "vllm-bench", path)
    assert (summary["completed"], summary["failed"]) == (doc["completed"], doc["failed"]) == (27, 13)
    check = check_entries(summary)
    assert all(c["agrees"] for c in check.values() if c["agrees"] is not None)
    assert check["mean_ttft_ms"]["agrees"] and check["failed"]["agrees"]
    con = duckdb.connect(str(db), read_only=True)
    try:
        failed = con.execute("SELECT DISTINCT error_class, error_message, first_content_ns FROM requests "
                             "WHERE run_id = ? AND error_class IS NOT NULL", [run_id]).fetchall()
    finally:
        con.close()
    assert failed == [("tool_error", "Bad Request", None)]
