"""`infbench import --from inference-perf` on a real per-request lifecycle report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pytest

from infbench.imports import BadFile, read_files
from tests.unit.imports.support import BAD, FIXTURES, check_entries, import_one

DIR = FIXTURES / "inference-perf"


def test_entries_become_requests_with_their_token_times(tmp_path: Path) -> None:
    entries = sorted(json.loads((DIR / "per_request_lifecycle_metrics.json").read_text()),
                     key=lambda e: e["start_time"])
    db, run_id, _ = import_one(tmp_path, "inference-perf", DIR)
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT (first_content_ns - send_ns) / 1e9, prompt_tokens, output_tokens "
                           "FROM requests WHERE run_id = ? ORDER BY request_idx", [run_id]).fetchall()
        cfg = json.loads(con.execute("SELECT config FROM runs WHERE run_id = ?", [run_id]).fetchone()[0])
    finally:
        con.close()
    np.testing.assert_allclose([r[0] for r in rows],
                               [e["computed_metrics"]["time_to_first_token"] for e in entries], atol=2e-9)
    assert [r[1] for r in rows] == [e["computed_metrics"]["input_tokens"] for e in entries]
    # The server's count, not inference-perf's re-tokenized one (13-16 here).
    assert [r[2] for r in rows] == [e["info"]["response_metrics"]["server_usage"]["completion_tokens"]
                                    for e in entries] == [16] * 40
    assert {e["computed_metrics"]["output_tokens"] for e in entries} != {16}
    assert "base_url: http://127.0.0.1:18123" in cfg["imported"]["tool_config"]["config_yaml"]
    assert cfg["target"] == {"url": "http://127.0.0.1:18123", "model": "tiny", "endpoint": None}


def test_recomputed_summary_equals_inference_perfs_own(tmp_path: Path) -> None:
    _, _, summary = import_one(tmp_path, "inference-perf", DIR)
    check = check_entries(summary)
    compared = {k: c for k, c in check.items() if c["agrees"] is not None}
    assert len(compared) == 15, sorted(compared)  # TTFT, ITL x 6 statistics, 3 counts
    assert all(c["agrees"] for c in compared.values()), [c for c in compared.values() if not c["agrees"]]
    assert check["request_latency.p99"]["differs"] and check["time_per_output_token.mean"]["differs"]


def test_info_only_entries_are_read_from_the_token_times(tmp_path: Path) -> None:
    # per_request_fields.computed_metrics is off by default: the token times in `info` remain.
    d = tmp_path / "r"
    shutil.copytree(DIR, d)
    entries = json.loads((d / "per_request_lifecycle_metrics.json").read_text())
    for e in entries:
        del e["computed_metrics"]
    (d / "per_request_lifecycle_metrics.json").write_text(json.dumps(entries))
    _, _, summary = import_one(tmp_path, "inference-perf", d)
    check = check_entries(summary)
    # The times in `info` are the ones computed_metrics came from: TTFT and ITL still agree.
    assert check["time_to_first_token.mean"]["agrees"] and check["inter_token_latency.p99"]["agrees"]


def test_a_credential_in_the_config_is_not_stored(tmp_path: Path) -> None:
    d = tmp_path / "r"
    shutil.copytree(DIR, d)
    text = (d / "config.yaml").read_text().replace("  api_key: null", "  api_key: sk-SECRET")
    assert "sk-SECRET" in text
    (d / "config.yaml").write_text(text)
    [run] = read_files("inference-perf", [d])
    assert "SECRET" not in json.dumps(run.tool_config)


def test_a_bad_gap_names_its_request() -> None:
    with pytest.raises(BadFile) as err:
        read_files("inference-perf", [BAD / "inference-perf-bad-gap"])
    assert (err.value.record, err.value.field_name) == ("request 4", "computed_metrics.inter_token_latencies[2]")


def test_its_request_latency_is_e2e_plus_the_trailing_time(tmp_path: Path) -> None:
    agg = json.loads((DIR / "summary_lifecycle_metrics.json").read_text())
    db, run_id, _ = import_one(tmp_path, "inference-perf", DIR)
    con = duckdb.connect(str(db), read_only=True)
    try:
        stream = [r[0] for r in con.execute("SELECT e2e_ms + trailing_ms FROM request_latency "
                                            "WHERE run_id = ? AND error_class IS NULL", [run_id]).fetchall()]
    finally:
        con.close()
    want = agg["successes"]["latency"]["request_latency"]
    assert np.mean(stream) == pytest.approx(want["mean"] * 1e3, abs=2e-6)
    assert np.median(stream) == pytest.approx(want["median"] * 1e3, abs=2e-6)
