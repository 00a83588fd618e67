"""`infbench import --from guidellm` on a real guidellm 0.8.1 benchmarks.json."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
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
