"""`infbench run` captures the target's configuration and links it to the run; `infbench config
capture URL` reads a running engine; `config diff` compares two runs' engines by run id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infbench.store import open_store
from tests.e2e.engine_process import FAST_FLAGS
from tests.support.cli import infbench

pytestmark = [pytest.mark.e2e]


def _run(db: Path, *engine: str) -> str:
    args = [f"--engine-arg={a}" for a in (*FAST_FLAGS, *engine)]
    r = infbench("run", "--db", str(db), "--num-requests", "6", "--arrival", "closed", "--concurrency", "2",
                 "--input-tokens", "64", "--output-tokens", "8", "--quiet", "--json", *args, timeout=180)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["run_id"]


def test_run_links_the_engines_config_and_diff_compares_two_runs(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    one = _run(db, "--defaults", "ref-1")
    two = _run(db, "--defaults", "ref-2", "--max-num-seqs", "64")
    con = open_store(db)
    rows = con.execute("SELECT run_id, engine, version FROM configs ORDER BY created_at").fetchall()
    origin = con.execute("SELECT v.origin FROM configs c JOIN config_values v USING (config_id) "
                         "WHERE c.run_id = ? AND v.key = 'max_num_seqs'", [two]).fetchone()
    con.close()
    assert rows == [(one, "reference", "ref-1"), (two, "reference", "ref-2")]
    assert origin == ("set",)
    r = infbench("config", "diff", one, two, "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr
    diffs = {d["key"]: d for d in json.loads(r.stdout)["differences"]}
    assert {"async_scheduling", "cudagraph_mode", "max_num_batched_tokens", "enable_prefix_caching",
            "max_num_seqs"} <= set(diffs)
    assert diffs["max_num_seqs"]["why_different"].startswith("set explicitly on B")
