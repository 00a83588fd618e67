"""Read what a command left in its store file: open read-only, query, close (so the next
command the test runs can open the file for writing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb


def store_rows(db: Path, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()
