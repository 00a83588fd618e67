"""`infbench import --from TOOL PATH...`: the command's output, exit codes, and that a bad
file leaves the store exactly as it was."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb

from tests.support.cli import infbench
from tests.unit.imports.support import BAD, FIXTURES

VLLM = FIXTURES / "vllm-bench" / "vllm-bench-serve.json"


def _counts(db: Path) -> tuple[int, int, int]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        row = con.execute("SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM requests), "
                          "(SELECT count(*) FROM chunks)").fetchone()
    finally:
        con.close()
    assert row is not None
    return row


def test_imports_several_files_and_reports_the_check(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    r = infbench("import", "--from", "vllm-bench", str(VLLM), str(VLLM), "--db", str(db))
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("imported run ") == 2
    assert "32 of the tool's numbers recomputed and equal within rounding" in r.stdout
    assert "no intended send times" in r.stdout
    assert _counts(db) == (2, 80, 1280)


def test_a_bad_file_among_good_ones_stores_nothing(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    assert infbench("import", "--from", "aiperf", str(FIXTURES / "aiperf"), "--db", str(db)).returncode == 0
    before = _counts(db)
    bad = BAD / "vllm-bench-latency-string.json"
    r = infbench("import", "--from", "vllm-bench", str(VLLM), str(bad), "--db", str(db))
    assert r.returncode == 2
    assert r.stderr == f"error: {bad}: request 7: latencies: expected a finite number, got '0.12'\n"
    assert r.stdout == ""
    assert _counts(db) == before


def test_unknown_tool_and_missing_file_are_usage_errors(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    r = infbench("import", "--from", "locust", str(VLLM), "--db", str(db))
    assert r.returncode == 2 and r.stderr.startswith("error: --from: option: tool: 'locust' is not one of")
    r = infbench("import", "--from", "guidellm", str(tmp_path / "nope.json"), "--db", str(db))
    assert r.returncode == 2 and "nope.json: whole file: (path): no such file or directory" in r.stderr
    assert "Traceback" not in r.stderr and not db.exists()


def test_user_text_is_printed_literally(tmp_path: Path) -> None:
    # A path with rich markup and an emoji code: printed as given, not styled.
    odd = tmp_path / "[bold]x:100:.json"
    shutil.copy(BAD / "vllm-bench-truncated.json", odd)
    r = infbench("import", "--from", "vllm-bench", str(odd), "--db", str(tmp_path / "s.duckdb"))
    assert r.returncode == 2 and f"error: {odd}: line 1" in r.stderr


def test_an_export_directory_still_imports_without_from(tmp_path: Path) -> None:
    db, other = tmp_path / "a.duckdb", tmp_path / "b.duckdb"
    assert infbench("import", "--from", "vllm-bench", str(VLLM), "--db", str(db)).returncode == 0
    out = tmp_path / "exp"
    assert infbench("export", "last", "--db", str(db), "--out", str(out)).returncode == 0
    r = infbench("import", str(out), "--db", str(other))
    assert r.returncode == 0, r.stderr
    assert "(40 requests, 640 chunks, 0 findings)" in r.stdout
    r = infbench("import", str(out), str(out), "--db", str(other))
    assert r.returncode == 2 and "several files need --from TOOL" in r.stderr


def test_unknown_files_are_one_line_each(tmp_path: Path) -> None:
    binary, listing, folder = tmp_path / "b.json", tmp_path / "l.json", tmp_path / "d"
    binary.write_bytes(bytes(range(128, 256)))
    listing.write_text("[1, 2]\n")
    folder.mkdir()
    cases = [("vllm-bench", binary, "whole file: encoding: not UTF-8 text"),
             ("vllm-bench", listing, "whole file: (record): expected a JSON object, got list"),
             ("guidellm", folder, "whole file: (path): a directory"),
             ("sglang-bench", listing, "line 1: (record): expected a JSON object, got list"),
             ("inference-perf", listing, "request 0: (record): expected a JSON object, got int")]
    for tool, path, said in cases:
        r = infbench("import", "--from", tool, str(path), "--db", str(tmp_path / "s.duckdb"))
        assert r.returncode == 2 and r.stderr == f"error: {path}: {said}" + r.stderr.split(said, 1)[1], r.stderr
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert not (tmp_path / "s.duckdb").exists()
