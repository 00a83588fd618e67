"""`infbench trace import | list | analyze` through the real CLI in a subprocess: a real trace
round-trips to HTA's numbers, JSON output is machine-readable, bad input is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import infbench
from tests.unit.probes.traces_support import NCCL2, TWO_RANKS, hta_expected, nsys_sqlite

pytestmark = pytest.mark.e2e


def test_import_then_analyze_reproduces_hta(tmp_path: Path) -> None:
    db = str(tmp_path / "s.duckdb")
    r = infbench("trace", "import", str(NCCL2), "--db", db, "--json")
    assert r.returncode == 0, r.stderr
    imported = json.loads(r.stdout)
    assert imported["source"] == "kineto" and imported["counts"]["trace_collectives"] == 21
    r = infbench("trace", "analyze", "last", "--db", db, "--json", "--only", "temporal,overlap,idle")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["trace_id"] == imported["trace_id"]
    exp = hta_expected("nccl2")
    assert out["temporal"][0]["idle_time_pctg"] == exp["temporal_breakdown"][0]["idle_time_pctg"]
    assert out["overlap"][0]["comp_comm_overlap_pctg"] == exp["comm_comp_overlap"][0]["comp_comm_overlap_pctg"]
    # tables for people, with the SQL when asked
    r = infbench("trace", "analyze", imported["trace_id"][:12], "--db", db, "--sql", "--only", "kernels")
    assert r.returncode == 0 and "ncclKernel_AllReduce" in r.stdout and "SELECT" in r.stdout


def test_rank_directory_nsys_and_list(tmp_path: Path) -> None:
    db = str(tmp_path / "s.duckdb")
    assert infbench("trace", "import", str(TWO_RANKS), "--db", db).returncode == 0
    r = infbench("trace", "import", str(nsys_sqlite(tmp_path)), "--db", db)
    assert r.returncode == 0 and "nsys" in r.stdout, r.stderr
    r = infbench("trace", "list", "--db", db)
    assert r.returncode == 0 and r.stdout.count("tr-") == 2
    r = infbench("trace", "analyze", "last", "--db", db, "--json", "--only", "temporal")
    assert json.loads(r.stdout)["temporal"][0]["kernel_time_us"] == pytest.approx(1097327.843)


@pytest.mark.parametrize("args", [
    ["trace", "import", "/nonexistent/trace.json"],
    ["trace", "import", "{bad}"],
    ["trace", "import", "{fixture}", "--run", "no-such-run"],
    ["trace", "analyze", "no-such-trace"],
    ["trace", "analyze", "last", "--only", "nonsense"],
    ["trace", "analyze", "last", "--top", "0"],
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "ts": 1, ')
    db = str(tmp_path / "s.duckdb")
    assert infbench("trace", "import", str(NCCL2), "--db", db).returncode == 0
    args = [a.replace("{bad}", str(bad)).replace("{fixture}", str(NCCL2)) for a in args]
    r = infbench(*args, "--db", db)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith("error:") and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr
