"""The `infbench` examples of docs/guides/dilution.md, run as written, section by section in the guide's order
(how: tests/e2e/docs_runner.py; a file per guide so the guides run side by side), then its Python example in
the same scratch directory, against the same server."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from tests.e2e.docs_runner import guide_test
from tests.support.cli import ROOT, cli_env

GUIDE = ROOT / "docs/guides/dilution.md"
test_section_runs_as_written = guide_test("docs/guides/dilution.md")


@pytest.mark.e2e
def test_the_python_example_runs_as_written(docs_workspaces: dict, docs_server: str) -> None:
    workspace = docs_workspaces.get(GUIDE)
    assert workspace is not None, "the guide's sections run first (same file, in order)"
    con = duckdb.connect(str(workspace.cwd / "bench.duckdb"), read_only=True)
    try:  # the benchmark: the first run of its store (the production run was copied in later)
        bench = con.execute("SELECT run_id FROM runs WHERE json_extract(config, '$.dilution') IS NULL "
                            "AND run_id NOT IN (SELECT run_id FROM runs WHERE config LIKE '%gamma%') "
                            "ORDER BY created_at LIMIT 1").fetchone()[0]
        before = con.execute("SELECT count(*) FROM runs").fetchone()[0]
    finally:
        con.close()
    code = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.S)
    assert len(code) == 1
    script = code[0].replace("BENCH_RUN", bench).replace("http://127.0.0.1:8000", docs_server)
    r = subprocess.run([sys.executable, "-c", script], cwd=workspace.cwd, env=cli_env(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    for part in ("gap", "interaction"):
        assert part in r.stdout, r.stdout
    con = duckdb.connect(str(workspace.cwd / "bench.duckdb"), read_only=True)
    try:  # it re-ran: new runs, tagged as this API's session
        assert con.execute("SELECT count(*) FROM runs").fetchone()[0] > before
    finally:
        con.close()
    assert Path(workspace.cwd / "prod.duckdb").exists()
