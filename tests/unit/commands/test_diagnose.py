"""`infbench diagnose stalls`: findings are saved with the run unless told not to, and a store
that cannot be written is still diagnosed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from infbench.cli import app
from infbench.commands.diagnose import session as diagnose_session
from infbench.store import StoreError, open_store
from infbench.store.findings import load_diagnoses
from tests.support.stores import new_store
from tests.support.synthetic_runs import write_timeline

runner = CliRunner()


@pytest.fixture()
def db(tmp_path: Path) -> Path:
    path = tmp_path / "s.duckdb"
    con = new_store(path)
    write_timeline(con, requests=16, concurrency=8, tokens=100, stall_every=30, stall_ms=200)
    con.close()
    return path


def _stored(db: Path) -> list[str]:
    con = open_store(db, read_only=True)
    try:
        return [f["verdict"] for d in load_diagnoses(con, con.execute(
            "SELECT run_id FROM runs").fetchone()[0]) for f in d.findings]
    finally:
        con.close()


def test_findings_are_saved_by_default_and_replaced_on_rerun(db: Path) -> None:
    r = runner.invoke(app, ["diagnose", "stalls", "last", "--db", str(db), "--json"])
    assert r.exit_code == 0, r.stderr
    printed = [f["verdict"] for f in json.loads(r.stdout)["findings"]]
    assert printed and _stored(db) == printed
    r = runner.invoke(app, ["diagnose", "stalls", "last", "--db", str(db)])
    assert r.exit_code == 0 and f"saved {len(printed)} finding(s)" in r.stdout
    assert _stored(db) == printed  # replaced, not appended


def test_no_save_leaves_the_store_alone(db: Path) -> None:
    r = runner.invoke(app, ["diagnose", "stalls", "last", "--db", str(db), "--no-save"])
    assert r.exit_code == 0 and "saved" not in r.stdout
    assert _stored(db) == []


def test_unwritable_store_is_diagnosed_and_says_it_was_not_saved(
        db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def open_read_only_only(path: Path, *, read_only: bool = False) -> object:
        if not read_only:
            raise StoreError(f"{path}: cannot open the store (Permission denied)")
        return open_store(path, read_only=True)

    monkeypatch.setattr(diagnose_session, "open_store", open_read_only_only)
    r = runner.invoke(app, ["diagnose", "stalls", "last", "--db", str(db)])
    assert r.exit_code == 0
    assert "periodic_engine_stall" in r.stdout
    assert "not saved" in r.stderr and "Permission denied" in r.stderr
    assert _stored(db) == []


def test_missing_store_is_an_error_not_a_new_file(tmp_path: Path) -> None:
    missing = tmp_path / "none.duckdb"
    r = runner.invoke(app, ["diagnose", "stalls", "last", "--db", str(missing)])
    assert r.exit_code == 2 and "no such store" in r.stderr
    assert not missing.exists()
