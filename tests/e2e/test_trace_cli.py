"""`infbench trace import | list | analyze` through the real CLI in a subprocess: a real trace
round-trips to HTA's numbers, JSON output is machine-readable, bad input is one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import ROOT, cli_env, infbench
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


def test_a_trace_file_analysed_in_memory_gives_the_imported_numbers(tmp_path: Path) -> None:
    db = str(tmp_path / "s.duckdb")
    assert infbench("trace", "import", str(TWO_RANKS), "--db", db).returncode == 0
    names = "temporal,idle,idle_stats,kernel_types,kernels,overlap"
    stored = json.loads(infbench("trace", "analyze", "last", "--db", db, "--json", "--only", names,
                                 "--top", "3").stdout)
    r = infbench("trace", "analyze", str(TWO_RANKS), "--json", "--top", "3")
    assert r.returncode == 0, r.stderr
    mine = json.loads(r.stdout)
    assert mine["trace_id"] is None and mine["path"] == str(TWO_RANKS)
    for n in names.split(","):
        assert len(mine[n]) == len(stored[n]), n
        if n == "kernel_types":
            continue  # ordered by time; compared as a set below
        for a, b in zip(mine[n], stored[n], strict=True):
            assert a.keys() == b.keys()
            for k in a:
                assert a[k] == pytest.approx(b[k], rel=1e-9) if isinstance(a[k], float) else a[k] == b[k]
    assert {x["kernel_type"] for x in mine["kernel_types"]} == {x["kernel_type"] for x in stored["kernel_types"]}
    r = infbench("trace", "analyze", str(NCCL2))
    assert r.returncode == 0 and "in memory, not imported" in r.stdout and "ncclKernel" in r.stdout


@pytest.mark.parametrize(("args", "says"), [
    (["--sql"], "analysed in memory, without SQL"),
    (["--only", "steps"], "'steps' needs the trace imported"),
])
def test_what_a_file_cannot_give_is_one_line(args: list[str], says: str) -> None:
    r = infbench("trace", "analyze", str(NCCL2), *args)
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("args", [
    ["trace", "import", "/nonexistent/trace.json"],
    ["trace", "import", "{bad}"],
    ["trace", "import", "{fixture}", "--run", "no-such-run"],
    ["trace", "analyze", "no-such-trace"],
    ["trace", "analyze", "{bad}"],
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


def test_a_third_party_sub_microsecond_trace_gives_htas_numbers_both_ways(tmp_path: Path) -> None:
    # HTA's own ns_resolution trace: epoch-microsecond ts with nanosecond digits
    fixture = NCCL2.parent / "hta_ns_resolution_resnet_v100.json.gz"
    hta = json.loads((NCCL2.parent / "hta_ns_resolution_expected.json").read_text())[
        "holistictraceanalysis_0.5.0"]["traces"]["ns_resolution"]["temporal_breakdown"][0]
    db = str(tmp_path / "s.duckdb")
    assert infbench("trace", "import", str(fixture), "--db", db).returncode == 0
    for args in (["last", "--db", db], [str(fixture)]):
        r = infbench("trace", "analyze", *args, "--json", "--only", "temporal")
        assert r.returncode == 0, r.stderr
        mine = json.loads(r.stdout)["temporal"][0]
        for k in ("idle_time_pctg", "compute_time_pctg", "non_compute_time_pctg"):
            assert mine[k] == hta[k], (args, k, mine, hta)  # 2.63 / 96.75 / 0.62


def test_analysing_a_file_in_memory_loads_no_store_or_duckdb(tmp_path: Path) -> None:
    # The whole process is what a user waits for (benchmarks/results/traces.md): DuckDB,
    # Arrow, pandas and the store are half a second of imports the in-memory path never uses;
    # its tables to a pipe are plain text, without rich's import and layout.
    out = tmp_path / "modules.json"
    code = ("import json, sys\n"
            f"sys.argv = ['infbench', 'trace', 'analyze', {str(NCCL2)!r}]\n"
            "from infbench.cli import main\n"
            "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
            f"json.dump(sorted(sys.modules), open({str(out)!r}, 'w'))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=ROOT, env=cli_env())
    assert r.returncode == 0 and "ncclKernel" in r.stdout, r.stderr
    loaded = set(json.loads(out.read_text()))
    heavy = {"duckdb", "pyarrow", "pandas", "infbench.store", "probes.traces.importer",
             "probes.traces.analysis", "rich", "rich.console", "rich.table"}
    assert not heavy & loaded, heavy & loaded
