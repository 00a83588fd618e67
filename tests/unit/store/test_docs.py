"""docs/store.md documents every table, view and column the schema creates, and its example
queries run."""

from __future__ import annotations

import re
from pathlib import Path

from infbench.store import open_store

DOC = Path(__file__).resolve().parents[3] / "docs" / "store.md"


def test_every_table_view_and_column_is_documented(tmp_path: Path) -> None:
    text = DOC.read_text()
    con = open_store(tmp_path / "s.duckdb")
    rows = con.execute("SELECT table_name, column_name FROM information_schema.columns").fetchall()
    missing = sorted({f"{t}.{c}" for t, c in rows
                      if f"`{c}`" not in text or f"`{t}`" not in text})
    assert missing == []


def test_example_queries_run(tmp_path: Path) -> None:
    con = open_store(tmp_path / "s.duckdb")
    blocks = re.findall(r"```sql\n(.*?)```", DOC.read_text(), flags=re.S)
    statements = [s.strip() for b in blocks for s in b.split(";") if s.strip()]
    assert len(statements) >= 2
    for sql in statements:
        con.execute(sql).fetchall()
