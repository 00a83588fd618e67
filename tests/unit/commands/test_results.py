"""`export` and `import`: a run moves between stores with its chunks and findings, and the
import says what it brought."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from infbench.cli import app
from tests.support.stores import new_store
from tests.support.synthetic_runs import write_timeline

runner = CliRunner()


def test_export_then_import_reports_what_arrived(tmp_path: Path) -> None:
    src = tmp_path / "a.duckdb"
    con = new_store(src)
    run_id = write_timeline(con, requests=6, concurrency=3, tokens=11)
    con.close()
    out = tmp_path / "exp"
    r = runner.invoke(app, ["export", run_id, "--db", str(src), "--format", "csv", "--out", str(out)])
    assert r.exit_code == 0, r.output
    dst = tmp_path / "b.duckdb"
    r = runner.invoke(app, ["import", str(out), "--db", str(dst)])
    assert r.exit_code == 0, r.output
    assert r.output.strip() == (f"imported run {run_id} (6 requests, 66 chunks, 0 findings) "
                                f"from {out} into {dst}")
    r = runner.invoke(app, ["import", str(out), "--db", str(dst)])
    assert r.exit_code == 2 and run_id in r.output  # already there: refused, nothing doubled
