"""`infbench import --from guidellm` on a real guidellm 0.8.1 benchmarks.json, and the same
report as guidellm writes it in YAML (benchmarks.yaml)."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pytest

from infbench.imports import BadFile, read_files
from infbench.imports.dumped_yaml import loads
from tests.support.cli import infbench
from tests.unit.imports.support import BAD, FIXTURES, check_entries, import_one

FILE = FIXTURES / "guidellm" / "benchmarks.json"
YAML_FILE = FIXTURES / "guidellm" / "benchmarks.yaml"
RUN_YAML = FIXTURES / "guidellm" / "run-20-requests.yaml"  # another run, written by `--output kind=yaml`


def _document(path: Path) -> dict:
    return loads(path.read_text()) if path.suffix == ".yaml" else json.loads(path.read_text())


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


@pytest.mark.parametrize("path", [FILE, RUN_YAML], ids=["json", "yaml-run"])
def test_recomputed_summary_equals_guidellms_own_where_defined_alike(tmp_path: Path, path: Path) -> None:
    _, _, summary = import_one(tmp_path, "guidellm", path)
    check = check_entries(summary)
    compared = {k: c for k, c in check.items() if c["agrees"] is not None}
    assert set(compared) == {"time_to_first_token_ms.mean", "time_to_first_token_ms.std_dev",
                             "time_to_first_token_ms.max", "request_totals.successful",
                             "prompt_token_count.total_sum", "output_token_count.total_sum"}
    assert all(c["agrees"] for c in compared.values()), compared
    n_ok = len(_document(path)["benchmarks"][0]["requests"]["successful"])
    assert check["request_totals.successful"]["tool"] == n_ok == (40 if path == FILE else 20)


def test_a_bad_request_names_its_place() -> None:
    with pytest.raises(BadFile) as err:
        read_files("guidellm", [BAD / "guidellm-missing-start.json"])
    assert err.value.record == "benchmarks[0].requests.successful[2]"
    assert err.value.field_name == "request_start_time"


def test_another_tools_file_is_refused() -> None:
    with pytest.raises(BadFile, match="benchmarks: missing"):
        read_files("guidellm", [FIXTURES / "vllm-bench" / "vllm-bench-serve.json"])


@pytest.mark.parametrize("path", [FILE, RUN_YAML], ids=["json", "yaml-run"])
def test_the_documented_differences_account_for_guidellms_other_numbers(tmp_path: Path, path: Path) -> None:
    """What is not compared is still in the imported rows: guidellm's own definitions
    recomputed from them give its numbers back."""
    doc = _document(path)
    metrics = doc["benchmarks"][0]["metrics"]
    db, run_id, _ = import_one(tmp_path, "guidellm", path)
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT ttft_ms, tpot_ms, e2e_ms, trailing_ms, output_tokens FROM request_latency "
                           "WHERE run_id = ? AND error_class IS NULL", [run_id]).fetchall()
    finally:
        con.close()
    ttft = np.array([r[0] for r in rows])
    # Percentiles: the smallest value whose cumulative share reaches p (no interpolation). guidellm
    # sums the shares as floats (np.cumsum of 1/n each), so at an exact boundary the sum can fall
    # a hair short and the next sample is taken: of 20 requests, p50 is the 11th, not the 10th.
    ordered = np.sort(ttft)
    cumulative = np.cumsum(np.full(ttft.size, 1.0 / ttft.size))
    for p in (25, 50, 75, 90, 95, 99):
        nearest = ordered[np.searchsorted(cumulative, p / 100, side="left")]
        assert nearest == pytest.approx(metrics["time_to_first_token_ms"]["successful"]["percentiles"][f"p{p}"], abs=2e-6)
    # ITL: infbench's per-request TPOT, weighted by output tokens - 1.
    tpot, n = np.array([r[1] for r in rows]), np.array([r[4] for r in rows])
    weighted = float(np.sum(tpot * (n - 1)) / np.sum(n - 1))
    assert weighted == pytest.approx(metrics["inter_token_latency_ms"]["successful"]["mean"], abs=2e-6)
    # e2e: guidellm's runs to the end of the stream; infbench's e2e plus the trailing time.
    stream = np.array([r[2] + r[3] for r in rows])
    assert stream.mean() == pytest.approx(metrics["request_latency"]["successful"]["mean"] * 1e3, abs=2e-6)


def _rows(db: Path, run_id: str) -> tuple[list[tuple], list[tuple], int]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        requests = con.execute(
            "SELECT * EXCLUDE (run_id) FROM requests WHERE run_id = ? ORDER BY request_idx", [run_id]).fetchall()
        latency = con.execute(
            "SELECT * EXCLUDE (run_id) FROM request_latency WHERE run_id = ? ORDER BY request_idx",
            [run_id]).fetchall()
        chunks = con.execute("SELECT count(*) FROM chunks WHERE run_id = ?", [run_id]).fetchone()[0]
    finally:
        con.close()
    return requests, latency, chunks


def _imported_config(db: Path, run_id: str) -> dict:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return json.loads(con.execute("SELECT config FROM runs WHERE run_id = ?", [run_id]).fetchone()[0])["imported"]
    finally:
        con.close()


@pytest.mark.parametrize("suffix", [".yaml", ".yml"])
def test_the_yaml_report_imports_as_the_json_one(tmp_path: Path, suffix: str) -> None:
    """benchmarks.yaml is guidellm's own YAML of the same report (its save_file), so the
    import is the same run: every request row, the summary and the check against guidellm's."""
    assert loads(YAML_FILE.read_text()) == json.loads(FILE.read_text())
    path = tmp_path / f"benchmarks{suffix}"
    path.write_bytes(YAML_FILE.read_bytes())
    (tmp_path / "j").mkdir()
    (tmp_path / "y").mkdir()
    jdb, jrun, jsummary = import_one(tmp_path / "j", "guidellm", FILE)
    ydb, yrun, ysummary = import_one(tmp_path / "y", "guidellm", path)
    jreq, jlat, jchunks = _rows(jdb, jrun)
    yreq, ylat, ychunks = _rows(ydb, yrun)
    assert len(yreq) == 40 and yreq == jreq and ylat == jlat and ychunks == jchunks == 0
    assert (ysummary.pop("run_id"), jsummary.pop("run_id")) == (yrun, jrun)
    assert ysummary == jsummary
    yimported, jimported = _imported_config(ydb, yrun), _imported_config(jdb, jrun)
    assert (yimported.pop("source"), jimported.pop("source")) == (str(path), str(FILE))
    assert yimported == jimported and yimported["tool_version"] == "0.8.1"
    check = check_entries(ysummary)
    compared = {k: c for k, c in check.items() if c["agrees"] is not None}
    assert len(compared) == 6 and all(c["agrees"] for c in compared.values()), compared
    assert ysummary["mean_ttft_ms"] == pytest.approx(
        json.loads(FILE.read_text())["benchmarks"][0]["metrics"]["time_to_first_token_ms"]["successful"]["mean"],
        abs=2e-6)


@pytest.mark.parametrize(("text", "line", "what"), [
    ("benchmarks:\n- config: {a: 1}\n", "line 2", "flow collection"),
    ("benchmarks:\n  a: 1\n b: 2\n", "line 3", "indented deeper"),
    ("benchmarks:\n  - x\n   y: 1\n", "line 3", "a plain string with ': '"),
    ("benchmarks: &b []\n", "line 1", "anchor"),
    ("benchmarks:\n- 'never closed\n", "line 2", "never closed"),
])
def test_bad_yaml_names_file_and_line(tmp_path: Path, text: str, line: str, what: str) -> None:
    path = tmp_path / "benchmarks.yaml"
    path.write_text(text)
    with pytest.raises(BadFile) as err:
        read_files("guidellm", [path])
    assert (err.value.path, err.value.record) == (str(path), line) and what in err.value.problem
    assert "\n" not in str(err.value)


def test_bad_yaml_on_the_command_line_is_one_line_exit_2_and_stores_nothing(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_bytes(YAML_FILE.read_bytes())
    lines = YAML_FILE.read_text().splitlines(keepends=True)
    bad = tmp_path / "cut.yaml"  # the report cut inside a folded quoted string
    cut = next(n for n, ln in enumerate(lines) if "request_args: '" in ln and not ln.rstrip().endswith("'"))
    bad.write_text("".join(lines[:cut + 1]))
    db = tmp_path / "s.duckdb"
    r = infbench("import", "--from", "guidellm", str(good), str(bad), "--db", str(db))
    assert r.returncode == 2, r.stderr
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and str(bad) in err[0] and f"line {cut + 1}" in err[0] and "never closed" in err[0], err
    assert "Traceback" not in r.stderr + r.stdout
    if db.exists():  # nothing stored: not even the good file read before it
        con = duckdb.connect(str(db), read_only=True)
        try:
            assert con.execute("SELECT count(*) FROM runs").fetchone() == (0,)
        finally:
            con.close()
