"""`infbench probe import-nccl-tests | list-links | show-links` through the real CLI: users'
nccl-tests outputs import with their numbers, a garbled file is one line naming the line,
exit 2, and stores nothing."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from tests.support.cli import ROOT, infbench

pytestmark = pytest.mark.e2e

FIX = ROOT / "tests" / "fixtures" / "nccl_tests"


def test_import_list_show(tmp_path: Path) -> None:
    db = str(tmp_path / "s.duckdb")
    r = infbench("probe", "import-nccl-tests", str(FIX / "all_reduce_2.18.3_nccl-2441.txt"),
                 str(FIX / "alltoall_old_error_nccl-tests-78.txt"), "--db", db)
    assert r.returncode == 0, r.stderr
    assert "(all_reduce, 4 ranks, 2 rows)" in r.stdout and "(alltoall, ? ranks, 4 rows)" in r.stdout
    assert "188.7" in r.stdout and "3.970" in r.stdout  # the time and busbw of the first half
    con = duckdb.connect(db, read_only=True)
    assert con.execute("SELECT count(*), count(DISTINCT probe_id) FROM collectives").fetchone() == (6, 2)
    con.close()
    r = infbench("probe", "list-links", "--db", db)
    assert r.returncode == 0 and r.stdout.count("nccl-tests") == 2
    r = infbench("probe", "show-links", "last", "--db", db, "--html", str(tmp_path / "p.html"))
    assert r.returncode == 0 and "alltoall" in r.stdout
    assert "Bus bandwidth by message size" in (tmp_path / "p.html").read_text()


def test_garbled_file_is_one_line_exit_2_and_stores_nothing(tmp_path: Path) -> None:
    db = str(tmp_path / "s.duckdb")
    bad = tmp_path / "all_gather_perf.txt"
    lines = (FIX / "all_gather_bf16_nccl-1435.txt").read_text().splitlines()
    lines[7] = lines[7].replace("183.33", "18#.33")
    bad.write_text("\n".join(lines) + "\n")
    r = infbench("probe", "import-nccl-tests", str(bad), "--db", db)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "all_gather_perf.txt:8: '18#.33' is not a number" in r.stderr
    con = duckdb.connect(db, read_only=True)
    assert con.execute("SELECT count(*) FROM link_probes").fetchone() == (0,)
    con.close()
    r = infbench("probe", "import-nccl-tests", str(tmp_path / "missing.txt"), "--db", db)
    assert r.returncode == 2 and "no such file" in r.stderr
