"""Stores for unit tests that write their own rows: a fresh store in a third of the time, and
rows inserted in one statement.

A new DuckDB store costs ~150 ms here (connect, then the ~70 migration statements in one
transaction); the quick loop opens hundreds. `new_store` copies a store the real `open_store`
created and migrated once in this process, then opens the copy with `open_store` (which finds
it at the latest version): the same file a fresh store is, for ~50 ms. Tests of creating and
migrating stores (tests/unit/store/) call `open_store` on an empty path themselves.

DuckDB's row-at-a-time INSERT costs ~5 ms per row on the requests table (one prepared
statement per call, executemany no better); `insert_rows` builds an Arrow table and inserts
it with one statement.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from infbench.store import open_store

_template: dict[int, Path] = {}  # pid -> a migrated empty store (a forked child makes its own)
# Where templates go: pytest's base temp dir (tests/conftest.py sets it), which pytest itself
# prunes, so a worker killed before its exit handlers ran leaves nothing behind for long.
TEMPLATE_DIR: Path | None = None


def _template_path() -> Path:
    pid = os.getpid()
    if pid not in _template:
        if TEMPLATE_DIR is not None:
            where = TEMPLATE_DIR / f"store-template-{pid}"
            where.mkdir(parents=True, exist_ok=True)
        else:  # outside pytest
            where = Path(tempfile.mkdtemp(prefix="infbench-store-template-"))
        path = where / "empty.duckdb"
        path.unlink(missing_ok=True)
        open_store(path).close()
        atexit.register(shutil.rmtree, where, True)
        _template[pid] = path
    return _template[pid]


def new_store(path: str | Path) -> duckdb.DuckDBPyConnection:
    """`open_store(path)`: a store that exists is opened as it is; a new one starts as a copy
    of the migrated empty store."""
    path = Path(path)
    if not path.exists():
        shutil.copyfile(_template_path(), path)
    return open_store(path)


def insert_rows(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict[str, Any]]) -> None:
    """Insert `rows` (dicts with the same keys: column names) into `table` in one statement."""
    if not rows:
        return
    cols = list(rows[0])
    if any(list(r) != cols for r in rows):
        raise ValueError(f"{table}: rows name different columns")
    arrow = pa.table({c: [r[c] for r in rows] for c in cols})  # noqa: F841 (read by DuckDB below)
    con.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(cols)} FROM arrow")
