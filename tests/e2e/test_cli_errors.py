"""Every command, given bad input or a file it cannot use, says so in one line and exits with
the documented code; nothing already stored is lost. Runs the real CLI in a subprocess, so the
process boundary (exit code, what reaches stderr) is what a user or a CI job sees."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from infbench.store import open_store
from tests.support.cli import infbench

pytestmark = pytest.mark.e2e

USAGE = 2


def _synthetic_store(path: Path) -> None:
    from playbooks.synthetic import write_timeline

    con = open_store(path)
    write_timeline(con, requests=8, concurrency=4, tokens=24)
    con.close()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cli")
    good = d / "good.duckdb"
    _synthetic_store(good)
    truncated = d / "truncated.duckdb"
    data = good.read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    empty = d / "empty.duckdb"
    empty.write_bytes(b"")
    garbage = d / "garbage.duckdb"
    garbage.write_bytes(b"not a database\n" * 64)
    a_file = d / "a_file"
    a_file.write_text("x")
    a_dir = d / "a_dir"
    a_dir.mkdir()
    rules = d / "bad.toml"
    rules.write_text("[rule\n")
    return {"good": good, "truncated": truncated, "empty": empty, "garbage": garbage,
            "file": a_file, "dir": a_dir, "missing": d / "missing" / "x", "rules": rules}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


CASES = [
    # (argv with {placeholders}, what the one line must name)
    (["runs", "--db", "{truncated}"], "store"),
    (["runs", "--db", "{empty}"], "empty.duckdb"),
    (["runs", "--db", "{garbage}"], "garbage.duckdb"),
    (["runs", "--db", "{dir}"], "a_dir"),
    (["runs", "--db", "{missing}"], "no such store"),
    (["show", "last", "--db", "{truncated}"], "store"),
    (["show", "no-such-run", "--db", "{good}"], "no-such-run"),
    (["diagnose", "stalls", "last", "--db", "{truncated}"], "store"),
    (["diagnose", "stalls", "last", "--db", "{garbage}"], "garbage.duckdb"),
    (["report", "last", "--db", "{good}", "--html", "{missing}"], "missing"),
    (["report", "last", "--db", "{good}", "--html", "{dir}"], "a_dir"),
    (["export", "last", "--db", "{good}", "--out", "{file}/sub"], "a_file"),
    (["import", "{file}", "--db", "{good}"], "a_file"),
    (["import", "{dir}", "--db", "{good}"], "a_dir"),
    (["gate", "--baseline", "last", "--candidate", "last", "--db", "{good}",
      "--markdown", "{missing}"], "missing"),
    (["gate", "--baseline", "last", "--candidate", "last", "--db", "{good}",
      "--rules", "{rules}"], "bad.toml"),
    (["gate", "--baseline", "last", "--candidate", "last", "--db", "{good}",
      "--junit", "{dir}"], "a_dir"),
    (["run", "--url", "http://127.0.0.1:9", "--input-tokens", "uniform:100:10"],
     "'uniform:100:10'"),
    (["run", "--url", "http://127.0.0.1:9", "--output-tokens", "normal:[bold]:1"],
     "normal:[bold]:1"),
    (["run", "--url", "http://127.0.0.1:9", "--db", "{dir}"], "a_dir"),
    (["plan", "memory", "-m", "no-such-model", "-g", "h100"], "no-such-model"),
]


@pytest.mark.parametrize(("argv", "names"), CASES, ids=[" ".join(c[0][:2]) + f"-{i}"
                                                        for i, c in enumerate(CASES)])
def test_bad_input_is_one_line_exit_2_and_loses_nothing(files: dict[str, Path], argv: list[str],
                                                        names: str) -> None:
    before = _digest(files["good"])
    args = [a.format(**{k: str(v) for k, v in files.items()}) for a in argv]
    r = infbench(*args)
    assert r.returncode == USAGE, (args, r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ") and names in lines[0], lines[0]
    assert "Traceback" not in r.stderr + r.stdout
    assert _digest(files["good"]) == before  # nothing already stored was touched
