"""One write across tables: all or nothing, one StoreError line on failure, Arrow rows by
column name (a real DuckDB file)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from infbench.store import StoreError
from infbench.store.transaction import insert_arrow, transaction


@pytest.fixture
def con(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    c = duckdb.connect(str(tmp_path / "t.duckdb"))
    c.execute("CREATE TABLE a (k VARCHAR PRIMARY KEY, v DOUBLE, note VARCHAR DEFAULT 'none')")
    c.execute("CREATE TABLE b (k VARCHAR, n BIGINT)")
    return c


def test_rows_go_in_by_name_extra_columns_ignored_defaults_kept(con: duckdb.DuckDBPyConnection) -> None:
    rows = pa.table({"extra": [9, 9], "v": [1.5, 2.5], "k": ["x", "y"]})
    insert_arrow(con, "a", ["k", "v"], rows)
    assert con.execute("SELECT k, v, note FROM a ORDER BY k").fetchall() == [
        ("x", 1.5, "none"), ("y", 2.5, "none")]
    # The view is gone: a second insert (another table, same helper) does not see stale rows.
    insert_arrow(con, "b", ["k", "n"], pa.table({"k": ["z"], "n": [3]}))
    assert con.execute("SELECT * FROM b").fetchall() == [("z", 3)]
    assert con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name LIKE '_infbench%'"
                       ).fetchone() == (0,)


def test_a_failure_rolls_back_every_table_and_says_one_line(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("INSERT INTO a VALUES ('x', 1, 'kept')")
    with pytest.raises(StoreError) as info, transaction(con, "capture c1: storing it failed"):
        insert_arrow(con, "b", ["k", "n"], pa.table({"k": ["new"], "n": [1]}))
        insert_arrow(con, "a", ["k", "v"], pa.table({"k": ["x"], "v": [2.0]}))  # duplicate key
    msg = str(info.value)
    assert msg.startswith("capture c1: storing it failed: ") and "\n" not in msg
    assert "x" in msg or "uplicate" in msg or "onstraint" in msg
    assert isinstance(info.value.__cause__, duckdb.Error)
    assert con.execute("SELECT count(*) FROM b").fetchone() == (0,)
    assert con.execute("SELECT * FROM a").fetchall() == [("x", 1.0, "kept")]
    # No transaction is left open: the connection writes again at once.
    with transaction(con, "second"):
        con.execute("INSERT INTO b VALUES ('after', 2)")
    assert con.execute("SELECT k FROM b").fetchall() == [("after",)]


def test_an_error_of_ours_inside_the_block_is_also_rolled_back(con: duckdb.DuckDBPyConnection) -> None:
    with pytest.raises(StoreError, match=r"^import failed: ValueError$"), transaction(con, "import failed"):
        con.execute("INSERT INTO b VALUES ('gone', 1)")
        raise ValueError()
    assert con.execute("SELECT count(*) FROM b").fetchone() == (0,)
