"""`infbench import --from sglang-bench` on a real `bench_serving --output-details` line."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from infbench.imports import BadFile, read_files
from tests.unit.imports.support import BAD, FIXTURES, check_entries, import_one

FILE = FIXTURES / "sglang-bench" / "sglang-bench-serving.jsonl"


def test_requests_and_their_token_gaps(tmp_path: Path) -> None:
    doc = json.loads(FILE.read_text())
    db, run_id, summary = import_one(tmp_path, "sglang-bench", FILE)
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT prompt_tokens, output_tokens, num_content_chunks, send_ns "
                           "FROM requests WHERE run_id = ? ORDER BY request_idx", [run_id]).fetchall()
    finally:
        con.close()
    assert [r[0] for r in rows] == doc["input_lens"] and [r[1] for r in rows] == doc["output_lens"]
    assert [r[2] for r in rows] == [len(i) + 1 for i in doc["itls"]]
    assert {r[3] for r in rows} == {0}  # no send times in the file: said in the notes
    assert any("no send times" in n for n in summary["imported"]["notes"])


def test_recomputed_summary_equals_sglangs_own(tmp_path: Path) -> None:
    _, _, summary = import_one(tmp_path, "sglang-bench", FILE)
    check = check_entries(summary)
    compared = {k: c for k, c in check.items() if c["agrees"] is not None}
    # TTFT and ITL (mean, median, std, p90, p95, p99) and the three counts.
    assert len(compared) == 15, sorted(compared)
    assert all(c["agrees"] for c in compared.values()), [c for c in compared.values() if not c["agrees"]]
    # e2e and TPOT end at [DONE] in SGLang and the details keep no latency: named, not compared.
    assert check["mean_e2e_latency_ms"]["differs"] and check["p99_tpot_ms"]["differs"]


def test_a_short_list_is_refused() -> None:
    with pytest.raises(BadFile) as err:
        read_files("sglang-bench", [BAD / "sglang-bench-short-itls.jsonl"])
    assert (err.value.record, err.value.field_name) == ("line 1", "itls")
    assert "39 entries where ttfts has 40" in str(err.value)
