"""`infbench import --from aiperf` on real AIPerf 0.13 artifacts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pytest

from infbench.imports import BadFile, read_files
from tests.unit.imports.support import BAD, FIXTURES, check_entries, import_one

DIR = FIXTURES / "aiperf"


def _records() -> list[dict]:
    return [json.loads(line) for line in (DIR / "profile_export.jsonl").read_text().splitlines()]


def test_records_become_requests_with_their_schedule_and_chunks(tmp_path: Path) -> None:
    db, run_id, _ = import_one(tmp_path, "aiperf", DIR)
    recs = sorted(_records(), key=lambda r: r["metadata"]["credit_issued_ns"])
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT intended_send_ns, send_ns, prompt_tokens, output_tokens, num_content_chunks "
                           "FROM requests WHERE run_id = ? ORDER BY request_idx", [run_id]).fetchall()
        cfg = json.loads(con.execute("SELECT config FROM runs WHERE run_id = ?", [run_id]).fetchone()[0])
    finally:
        con.close()
    assert len(rows) == len(recs) == 40
    t0 = min(r["metadata"]["request_start_ns"] for r in recs)
    # The schedule (credit issued) and the send keep their ns offsets from the first send.
    assert [r[1] for r in rows] == [x["metadata"]["request_start_ns"] - t0 for x in recs]
    assert [r[0] for r in rows] == [x["metadata"]["credit_issued_ns"] - t0 for x in recs]
    assert [r[2] for r in rows] == [x["metrics"]["usage_prompt_tokens"]["value"] for x in recs]
    assert [r[3] for r in rows] == [x["metrics"]["output_sequence_length"]["value"] for x in recs]
    assert [r[4] for r in rows] == [len(x["metrics"]["inter_chunk_latency"]["value"]) + 1 for x in recs]
    imported = cfg["imported"]
    assert imported["tool_version"] == "0.13.0"
    assert imported["command"].startswith("aiperf profile --model 'tiny'")


def test_recomputed_summary_equals_aiperfs_own(tmp_path: Path) -> None:
    agg = json.loads((DIR / "profile_export_aiperf.json").read_text())
    _, _, summary = import_one(tmp_path, "aiperf", DIR)
    check = check_entries(summary)
    compared = [c for c in check.values() if c["agrees"] is not None]
    assert len(compared) == 31, sorted(check)
    assert all(c["agrees"] for c in compared), [c for c in compared if not c["agrees"]]
    # AIPerf's "inter_token_latency" is infbench's TPOT; its "inter_chunk_latency" the raw ITL.
    assert summary["mean_tpot_ms"] == pytest.approx(agg["inter_token_latency"]["avg"], abs=1e-9)
    assert summary["raw_p99_itl_ms"] == pytest.approx(agg["inter_chunk_latency"]["p99"], abs=2e-3)
    assert summary["p99_e2el_ms"] == pytest.approx(agg["request_latency"]["p99"], abs=1e-6)


def test_warmup_records_are_left_out_and_said(tmp_path: Path) -> None:
    lines = (DIR / "profile_export.jsonl").read_text().splitlines()
    warm = json.loads(lines[0])
    warm["metadata"]["benchmark_phase"] = "warmup"
    d = tmp_path / "a"
    d.mkdir()
    (d / "profile_export.jsonl").write_text("\n".join([json.dumps(warm), *lines[1:]]) + "\n")
    [run] = read_files("aiperf", [d])
    assert len(run.requests) == 39
    assert any("1 warm-up records left out" in n for n in run.notes)
    assert any("no profile_export_aiperf.json" in n for n in run.notes)


def test_an_error_record_is_a_failed_request(tmp_path: Path) -> None:
    d = tmp_path / "a"
    shutil.copytree(DIR, d)
    recs = _records()
    recs[2]["error"] = {"code": 500, "type": "HTTPError", "message": "Internal Server Error"}
    (d / "profile_export.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    [run] = read_files("aiperf", [d])
    failed = [r for r in run.requests if r.error]
    assert [r.error for r in failed] == ["HTTPError Internal Server Error"]
    assert failed[0].ttft_s is None and failed[0].token_gaps_s is None


def test_a_bad_record_names_file_line_and_field() -> None:
    with pytest.raises(BadFile) as err:
        read_files("aiperf", [BAD / "aiperf-negative-ttft"])
    assert err.value.record == "line 5"
    assert err.value.field_name == "metrics.time_to_first_token.value"


def test_a_directory_without_records_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BadFile, match="profile_export.jsonl: missing"):
        read_files("aiperf", [tmp_path])


def test_gaps_are_the_records_inter_chunk_latencies(tmp_path: Path) -> None:
    db, run_id, _ = import_one(tmp_path, "aiperf", DIR)
    con = duckdb.connect(str(db), read_only=True)
    try:
        got = [r[0] for r in con.execute("SELECT sum(raw_itl_ms) FROM itl WHERE run_id = ? "
                                         "GROUP BY request_idx ORDER BY request_idx", [run_id]).fetchall()]
    finally:
        con.close()
    recs = sorted(_records(), key=lambda r: r["metadata"]["credit_issued_ns"])
    np.testing.assert_allclose(got, [sum(r["metrics"]["inter_chunk_latency"]["value"]) for r in recs], atol=1e-5)
