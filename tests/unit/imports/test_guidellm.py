"""`infbench import --from guidellm` on a real guidellm 0.8.1 benchmarks.json."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pytest

from infbench.imports import BadFile, read_files
from tests.unit.imports.support import BAD, FIXTURES, check_entries, import_one

FILE = FIXTURES / "guidellm" / "benchmarks.json"


def test_requests_without_chunks_and_what_is_missing_is_said(tmp_path: Path) -> None:
    doc = json.loads(FILE.read_text())
    ok = doc["benchmarks"][0]["requests"]["successful"]
    db, run_id, summary = import_one(tmp_path, "guidellm", FILE)
    con = duckdb.connect(str(db), read_only=True)
    try:
        n_req, n_chunks, n_sched = con.execute(
            "SELECT count(*), (SELECT count(*) FROM chunks WHERE run_id = $r), count(intended_send_ns) "
            "FROM requests WHERE run_id = $r", {"r": run_id}).fetchone()
        cfg = json.loads(con.execute("SELECT config FROM runs WHERE run_id = ?", [run_id]).fetchone()[0])
    finally:
        con.close()
    assert (n_req, n_chunks, n_sched) == (len(ok), 0, len(ok)) == (40, 0, 40)
    assert cfg["imported"]["tool_version"] == "0.8.1"
    assert cfg["imported"]["tool_config"]["spec"]["profile"]["kind"] == "constant"
    assert any("no per-token times" in n for n in summary["imported"]["notes"])
    # Per request, guidellm's inter_token_latency_ms is infbench's TPOT (e2e ends at the last token).
    tpot = sorted(r["inter_token_latency_ms"] for r in ok)
    assert summary["max_tpot_ms"] == pytest.approx(tpot[-1], abs=1e-3)
    assert summary["mean_itl_ms"] is None


def test_recomputed_summary_equals_guidellms_own_where_defined_alike(tmp_path: Path) -> None:
    _, _, summary = import_one(tmp_path, "guidellm", FILE)
    check = check_entries(summary)
    compared = {k: c for k, c in check.items() if c["agrees"] is not None}
    assert set(compared) == {"time_to_first_token_ms.mean", "time_to_first_token_ms.std_dev",
                             "time_to_first_token_ms.max", "request_totals.successful",
                             "prompt_token_count.total_sum", "output_token_count.total_sum"}
    assert all(c["agrees"] for c in compared.values()), compared


def test_a_bad_request_names_its_place() -> None:
    with pytest.raises(BadFile) as err:
        read_files("guidellm", [BAD / "guidellm-missing-start.json"])
    assert err.value.record == "benchmarks[0].requests.successful[2]"
    assert err.value.field_name == "request_start_time"


def test_another_tools_file_is_refused() -> None:
    with pytest.raises(BadFile, match="benchmarks: missing"):
        read_files("guidellm", [FIXTURES / "vllm-bench" / "vllm-bench-serve.json"])


def test_the_documented_differences_account_for_guidellms_other_numbers(tmp_path: Path) -> None:
    """What is not compared is still in the imported rows: guidellm's own definitions
    recomputed from them give its numbers back."""
    doc = json.loads(FILE.read_text())
    metrics = doc["benchmarks"][0]["metrics"]
    db, run_id, _ = import_one(tmp_path, "guidellm", FILE)
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT ttft_ms, tpot_ms, e2e_ms, trailing_ms, output_tokens FROM request_latency "
                           "WHERE run_id = ? AND error_class IS NULL", [run_id]).fetchall()
    finally:
        con.close()
    ttft = np.array([r[0] for r in rows])
    # Percentiles: the smallest value whose cumulative share reaches p (no interpolation).
    ordered = np.sort(ttft)
    for p in (50, 90, 95, 99):
        nearest = ordered[np.searchsorted(np.arange(1, ttft.size + 1) / ttft.size, p / 100 - 1e-6)]
        assert nearest == pytest.approx(metrics["time_to_first_token_ms"]["successful"]["percentiles"][f"p{p}"], abs=2e-6)
    # ITL: infbench's per-request TPOT, weighted by output tokens - 1.
    tpot, n = np.array([r[1] for r in rows]), np.array([r[4] for r in rows])
    weighted = float(np.sum(tpot * (n - 1)) / np.sum(n - 1))
    assert weighted == pytest.approx(metrics["inter_token_latency_ms"]["successful"]["mean"], abs=2e-6)
    # e2e: guidellm's runs to the end of the stream; infbench's e2e plus the trailing time.
    stream = np.array([r[2] + r[3] for r in rows])
    assert stream.mean() == pytest.approx(metrics["request_latency"]["successful"]["mean"] * 1e3, abs=2e-6)
