"""Shared by the import tests: the real fixtures, and importing one into a fresh store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from infbench.imports import import_files
from tests.support.cli import ROOT
from tests.support.stores import new_store

FIXTURES = ROOT / "tests" / "fixtures" / "imports"
BAD = FIXTURES / "bad"


def import_one(tmp_path: Path, tool: str, path: Path) -> tuple[Path, str, dict[str, Any]]:
    """Import `path` into a new store; return the store, the run id and its summary."""
    db = tmp_path / "s.duckdb"
    con = new_store(db)
    try:
        [stored] = import_files(con, tool, [path])
        row = con.execute("SELECT summary FROM runs WHERE run_id = ?", [stored.run_id]).fetchone()
    finally:
        con.close()
    assert row is not None
    return db, stored.run_id, json.loads(row[0])


def check_entries(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["tool_key"]: c for c in summary["imported"]["check"]}
