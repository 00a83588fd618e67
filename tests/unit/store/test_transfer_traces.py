"""Traces travel with their run: `export` writes the traces linked to the run with all their
events, `import` brings them into another store, and every analysis there gives the same
rows as in the store the trace was imported into."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from infbench.store import StoreError, create_run, open_store
from infbench.store.trace_schema import TRACE_TABLES
from infbench.store.transfer import export_run, import_run
from probes.traces import import_trace
from probes.traces.analysis import Timeline
from tests.unit.probes.traces_support import ALEXNET, NCCL2, TWO_RANKS, nsys_sqlite

ANALYSES = ("temporal", "idle", "idle_stats", "kernel_types", "kernels", "overlap",
            "launch_summary", "steps")


def _run(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    create_run(con, run_id=run_id, config={}, target_url="u", model="m", endpoint="chat",
               t0_monotonic_ns=0)


def _analyses(con: duckdb.DuckDBPyConnection, trace_id: str) -> dict[str, list[tuple]]:
    # NaN (a stream never idle has no idle share) is not equal to itself: compare it as text.
    with Timeline(con, trace_id) as tl:
        return {name: [tuple("NaN" if v != v else v for v in row) for row in tl.query(name)[1]]
                for name in ANALYSES}


def _rows(con: duckdb.DuckDBPyConnection, trace_id: str) -> dict[str, list[tuple]]:
    return {t: con.execute(f"SELECT * EXCLUDE (trace_id) FROM {t} WHERE trace_id = ? "
                           "ORDER BY ALL", [trace_id]).fetchall() for t in TRACE_TABLES}


def _close_to(analyses: dict[str, list[tuple]]) -> dict[str, list[tuple]]:
    """The same rows with every float compared to 1e-12 relative (parallel summation order)."""
    return {k: [tuple(pytest.approx(v, rel=1e-12) if isinstance(v, float) else v for v in row)
                for row in rows] for k, rows in analyses.items()}


@pytest.mark.parametrize(("fmt", "source"), [("parquet", TWO_RANKS), ("csv", NCCL2)])
def test_a_run_moves_with_its_traces_and_the_analysis_is_identical(
        tmp_path: Path, fmt: str, source: Path) -> None:
    con = open_store(tmp_path / "a.duckdb")
    _run(con, "r1")
    _run(con, "r2")
    mine = import_trace(con, source, run="r1")
    other = import_trace(con, ALEXNET, run="r2")   # another run's trace stays behind
    loose = import_trace(con, ALEXNET)             # and so does one linked to no run
    before, rows_before = _analyses(con, mine.trace_id), _rows(con, mine.trace_id)
    files = export_run(con, "r1", tmp_path / "out", fmt)
    assert {f.name for f in files} >= {f"{t}.{fmt}" for t in TRACE_TABLES}

    fresh = open_store(tmp_path / "b.duckdb")
    assert import_run(fresh, tmp_path / "out") == ["r1"]
    assert fresh.execute("SELECT trace_id, run_id, ranks, events FROM traces").fetchall() == [
        (mine.trace_id, "r1", len(mine.ranks), mine.events)]
    assert _rows(fresh, mine.trace_id) == rows_before   # every event, every column
    # So every number: equal to the last bits but for sums DuckDB adds in parallel, whose
    # order (and so their last bit) changes from one query to the next.
    assert _analyses(fresh, mine.trace_id) == _close_to(before)
    assert before["temporal"] and before["kernels"]     # (and there are numbers)
    for t in (other, loose):
        assert not fresh.execute("SELECT 1 FROM traces WHERE trace_id = ?", [t.trace_id]).fetchall()


def test_a_trace_already_in_the_store_refuses_the_import_and_stores_nothing(tmp_path: Path) -> None:
    con = open_store(tmp_path / "a.duckdb")
    _run(con, "r1")
    t = import_trace(con, nsys_sqlite(tmp_path), run="r1")
    export_run(con, "r1", tmp_path / "out", "parquet")
    dest = open_store(tmp_path / "b.duckdb")
    _run(dest, "elsewhere")
    # The same trace, already imported here under another run (as when an export is loaded
    # into the store it came from after its run was deleted).
    dest.execute("INSERT INTO traces SELECT * REPLACE ('elsewhere' AS run_id) FROM "
                 f"read_parquet('{tmp_path / 'out' / 'traces.parquet'}')")
    with pytest.raises(StoreError, match=f"trace '{t.trace_id}': already in this store"):
        import_run(dest, tmp_path / "out")
    assert dest.execute("SELECT count(*) FROM runs WHERE run_id = 'r1'").fetchone() == (0,)
    assert dest.execute("SELECT count(*) FROM trace_gpu_ops").fetchone() == (0,)


def test_an_export_without_trace_files_still_imports(tmp_path: Path) -> None:
    con = open_store(tmp_path / "a.duckdb")
    _run(con, "r1")
    export_run(con, "r1", tmp_path / "out", "csv")
    for t in TRACE_TABLES:  # as an infbench from before traces travelled wrote it
        (tmp_path / "out" / f"{t}.csv").unlink()
    fresh = open_store(tmp_path / "b.duckdb")
    assert import_run(fresh, tmp_path / "out") == ["r1"]
    assert fresh.execute("SELECT count(*) FROM traces").fetchone() == (0,)


def test_the_cli_round_trip_says_the_trace_arrived(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from infbench.cli import app

    src = tmp_path / "a.duckdb"
    con = open_store(src)
    _run(con, "r1")
    t = import_trace(con, ALEXNET, run="r1")
    con.close()
    runner = CliRunner()
    r = runner.invoke(app, ["export", "r1", "--db", str(src), "--out", str(tmp_path / "x")])
    assert r.exit_code == 0, r.output
    assert str(tmp_path / "x" / "trace_gpu_ops.parquet") in r.output
    r = runner.invoke(app, ["import", str(tmp_path / "x"), "--db", str(tmp_path / "b.duckdb")])
    assert r.exit_code == 0, r.output
    assert "0 findings, 1 trace) from" in r.output
    r = runner.invoke(app, ["trace", "analyze", t.trace_id, "--db", str(tmp_path / "b.duckdb")])
    assert r.exit_code == 0, r.output
