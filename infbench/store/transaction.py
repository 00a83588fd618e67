"""Writing several tables as one: a transaction that is all or nothing and fails as one
StoreError line, and Arrow rows inserted by column name.

Every writer that stores one thing across tables (a diagnosis and its findings, a hang
capture and its per-rank tables, an imported export) needs both; each had its own copy.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import duckdb
import pyarrow as pa

from infbench.store.db import StoreError

_VIEW = "_infbench_insert_rows"


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection, failure: str) -> Iterator[None]:
    """BEGIN; COMMIT when the block ends; on an error ROLLBACK and raise
    `StoreError("<failure>: <the error's first line>")` (a DuckDB error's later lines are
    hints and context a user's one-line error does not want).

    Ownership: the caller owns `con` (opened writable); no transaction may be open on it."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield
        con.execute("COMMIT")
    except Exception as exc:
        con.execute("ROLLBACK")
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise StoreError(f"{failure}: {first}") from exc


def insert_arrow(con: duckdb.DuckDBPyConnection, table: str, columns: Sequence[str],
                 rows: pa.Table) -> None:
    """INSERT INTO `table` the columns named `columns`, taken by name from `rows` (extra Arrow
    columns are ignored; the store's other columns get their defaults). The view DuckDB reads
    the Arrow table through lives for this statement only."""
    cols = ", ".join(columns)
    con.register(_VIEW, rows)
    try:
        con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {_VIEW}")
    finally:
        con.unregister(_VIEW)
