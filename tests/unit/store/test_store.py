"""The store: schema creation, migration, bulk writer, run rows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from infbench.store import (
    MIGRATIONS,
    SCHEMA_VERSION,
    BatchWriter,
    ColumnBuffer,
    Migration,
    StoreError,
    create_run,
    finish_run,
    get_run,
    list_runs,
    open_store,
    schema_version,
)


def _new_run(con: duckdb.DuckDBPyConnection, run_id: str = "r1") -> None:
    create_run(
        con,
        run_id=run_id,
        config={"rate": 2.0},
        target_url="http://127.0.0.1:1",
        model="m",
        endpoint="completions",
        t0_monotonic_ns=0,
    )


def test_new_file_gets_current_schema(tmp_path: Path) -> None:
    con = open_store(tmp_path / "s.duckdb")
    assert schema_version(con) == SCHEMA_VERSION
    tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    assert {"runs", "requests", "chunks", "metric_samples", "engine_steps", "client_samples"} <= tables


def test_older_schema_is_migrated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    con = open_store(path, migrations=MIGRATIONS)
    _new_run(con)
    con.close()
    v2 = Migration(SCHEMA_VERSION + 1, "add a column", ("ALTER TABLE runs ADD COLUMN note VARCHAR",))
    con = open_store(path, migrations=(*MIGRATIONS, v2))
    assert schema_version(con) == SCHEMA_VERSION + 1
    assert con.execute("SELECT run_id, note FROM runs").fetchall() == [("r1", None)]


def test_failed_migration_leaves_file_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    open_store(path).close()
    bad = Migration(SCHEMA_VERSION + 1, "broken", ("ALTER TABLE runs ADD COLUMN x INT", "SELECT * FROM nowhere"))
    with pytest.raises(StoreError, match="migration"):
        open_store(path, migrations=(*MIGRATIONS, bad))
    con = open_store(path)
    assert schema_version(con) == SCHEMA_VERSION
    assert "x" not in [r[0] for r in con.execute("DESCRIBE runs").fetchall()]


def test_newer_schema_is_refused_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    v_next = Migration(SCHEMA_VERSION + 1, "future", ("CREATE TABLE later (x INT)",))
    open_store(path, migrations=(*MIGRATIONS, v_next)).close()
    with pytest.raises(StoreError, match="newer infbench"):
        open_store(path)


def test_read_only_open_of_old_schema_migrates_it_first(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    open_store(path).close()
    v_next = Migration(SCHEMA_VERSION + 1, "next", ("CREATE TABLE later (x INT)",))
    con = open_store(path, read_only=True, migrations=(*MIGRATIONS, v_next))
    assert schema_version(con) == SCHEMA_VERSION + 1
    with pytest.raises(duckdb.Error):  # and what the reader got is read-only
        con.execute("INSERT INTO later VALUES (1)")
    con.close()


def test_read_only_old_schema_that_cannot_be_written_says_so(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    open_store(path).close()
    v_next = Migration(SCHEMA_VERSION + 1, "next", ("CREATE TABLE later (x INT)",))
    # Another process reads it: no writer can open the file until it lets go.
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1], "
         "read_only=True); print('held', flush=True); time.sleep(60)", str(path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreError, match="older than .* could not be migrated"):
            open_store(path, read_only=True, migrations=(*MIGRATIONS, v_next))
    finally:
        holder.kill()
        holder.wait()
    assert schema_version(open_store(path)) == SCHEMA_VERSION  # untouched: still the old one


def test_foreign_duckdb_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t (x INT)")
    con.close()
    with pytest.raises(StoreError, match="not an infbench store"):
        open_store(path)


def test_missing_file_read_only_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no such store"):
        open_store(tmp_path / "absent.duckdb", read_only=True)


def test_writer_ingests_batches_and_fills_missing_columns(tmp_path: Path) -> None:
    con = open_store(tmp_path / "s.duckdb")
    _new_run(con)
    writer = BatchWriter(con, "r1", max_pending=1)
    buf = ColumnBuffer("chunks")
    for batch in range(5):
        n = 1000
        buf.extend(
            {
                "request_idx": [batch] * n,
                "seq": list(range(n)),
                "t_ns": list(range(0, n * 10, 10)),
                "read_idx": list(range(n)),
                "nbytes": [100] * n,
                "content": [True] * n,
            }
        )
        writer.put_buffer(buf)
        assert len(buf) == 0
    writer.close()
    assert writer.rows_written["chunks"] == 5000
    count, nulls, runs = con.execute(
        "SELECT count(*), count(*) FILTER (WHERE coalesced IS NULL), count(DISTINCT run_id) FROM chunks"
    ).fetchone()
    assert (count, nulls, runs) == (5000, 5000, 1)
    itl = con.execute("SELECT max(itl_ms) FROM itl").fetchone()[0]
    assert itl == pytest.approx(10 / 1e6)


def test_column_buffer_rejects_ragged_columns() -> None:
    buf = ColumnBuffer("chunks")
    with pytest.raises(ValueError, match="chunks.seq"):
        buf.extend({"request_idx": [1, 2], "seq": [1]})


def test_writer_error_surfaces_in_producer(tmp_path: Path) -> None:
    con = open_store(tmp_path / "s.duckdb")
    writer = BatchWriter(con, "r1")
    writer.put("chunks", {"request_idx": ["not-an-int"], "seq": [0], "t_ns": [0], "read_idx": [0],
                          "nbytes": [0], "content": [True], "coalesced": [False]})
    with pytest.raises(RuntimeError, match="store writer failed"):
        writer.close()


def test_run_lifecycle_and_lookup(tmp_path: Path) -> None:
    con = open_store(tmp_path / "s.duckdb")
    _new_run(con, "20250101-000000-aaaaaa")
    _new_run(con, "20250101-000001-bbbbbb")
    finish_run(con, "20250101-000000-aaaaaa", status="interrupted", reason="SIGINT",
               summary={"completed": 3}, client_bound=False)
    run = get_run(con, "20250101-000000")
    assert run.status == "interrupted" and run.status_reason == "SIGINT"
    assert run.summary == {"completed": 3} and run.config == {"rate": 2.0}
    assert get_run(con, "last").run_id in {r.run_id for r in list_runs(con)}
    with pytest.raises(StoreError, match="ambiguous"):
        get_run(con, "20250101")
    with pytest.raises(StoreError, match="no such run"):
        get_run(con, "nope")
    with pytest.raises(ValueError, match="status"):
        finish_run(con, "20250101-000001-bbbbbb", status="weird")


def test_store_migrated_from_version_3_has_the_columns_of_a_new_one(tmp_path: Path) -> None:
    from infbench.store.schema import MIGRATIONS as ALL

    old = open_store(tmp_path / "v3.duckdb", migrations=ALL[:3])
    old.close()
    migrated = open_store(tmp_path / "v3.duckdb")
    new = open_store(tmp_path / "new.duckdb")
    q = ("SELECT table_name, column_name, data_type FROM information_schema.columns "
         "ORDER BY table_name, ordinal_position")
    assert migrated.execute(q).fetchall() == new.execute(q).fetchall()


def test_itl_view_spreads_a_read_over_the_events_it_delivered(tmp_path: Path) -> None:
    con = open_store(tmp_path / "s.duckdb")
    # read 0: two events at 0 ns; read 1: three events 30 ms later; read 2: one, 12 ms later.
    rows = [(0, 0, 0), (1, 0, 0), (2, 30, 1), (3, 30, 1), (4, 30, 1), (5, 42, 2)]
    con.executemany("INSERT INTO chunks (run_id, request_idx, seq, t_ns, read_idx, content) "
                    "VALUES ('r', 0, ?, ? * 1000000, ?, true)", rows)
    got = con.execute("SELECT seq, itl_ms, raw_itl_ms FROM itl ORDER BY seq").fetchall()
    assert got == [(0, None, None), (1, None, 0.0), (2, 10.0, 30.0), (3, 10.0, 0.0),
                   (4, 10.0, 0.0), (5, 12.0, 12.0)]


def test_request_latency_ends_at_the_last_choices_event(tmp_path: Path) -> None:
    con = open_store(tmp_path / "s.duckdb")
    ms = 1_000_000
    # (idx, first_content, last_content, last_choices, usage, done, output tokens)
    rows = [(0, 20, 121, 121, 400, 400, 11),   # late usage and [DONE]: e2e still ends at 121 ms
            (1, 20, 121, 130, None, 131, 11),  # a finish event after the last token, no usage
            (2, 20, 121, None, None, None, 11)]  # a store from before version 4
    con.executemany("INSERT INTO requests (run_id, request_idx, send_ns, first_content_ns, last_content_ns, "
                    "last_choices_ns, usage_ns, done_ns, last_chunk_ns, output_tokens) "
                    f"VALUES ('r', ?, 0, ? * {ms}, ? * {ms}, ? * {ms}, ? * {ms}, ? * {ms}, 400 * {ms}, ?)", rows)
    got = con.execute("SELECT e2e_ms, tpot_ms, trailing_ms FROM request_latency ORDER BY request_idx").fetchall()
    assert got == [(121.0, 10.1, 279.0), (130.0, 11.0, 1.0), (121.0, 10.1, None)]
