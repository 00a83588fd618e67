"""The first part's scheduler: real-engine files are one unit, units go out longest first, a
file's tests keep their order, and the committed table names files that exist."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.support import schedule
from tests.support.schedule import REAL_ENGINE, longest_first, table_from_round, unit_of

ROOT = Path(__file__).resolve().parents[3]


def test_real_engine_files_are_one_unit_and_others_their_file() -> None:
    assert unit_of("tests/real_engine/test_gate_sweep.py::test_sweep") == REAL_ENGINE
    assert unit_of("tests/real_engine/test_memory.py::test_x[a-b]") == REAL_ENGINE
    assert unit_of("tests/e2e/test_sweep.py::test_knee[1::2]") == "tests/e2e/test_sweep.py"


def units(ids: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for i in ids:
        counts[unit_of(i)] = counts.get(unit_of(i), 0) + 1
    return counts


def test_units_go_out_longest_first() -> None:
    ids = ["tests/a.py::t1", "tests/a.py::t2", "tests/b.py::t1", "tests/real_engine/test_x.py::t1",
           "tests/c.py::t1", "tests/real_engine/test_y.py::t1", "tests/b.py::t2"]
    table = {"tests/a.py": 5.0, "tests/b.py": 50.0, "tests/c.py": 7.0,
             "tests/real_engine/test_x.py": 20.0, "tests/real_engine/test_y.py": 40.0}
    # the two real-engine files add up to 60 s, more than b's 50
    assert longest_first(units(ids), table) == [REAL_ENGINE, "tests/b.py", "tests/c.py", "tests/a.py"]
    assert longest_first(units(ids), {**table, REAL_ENGINE: 1.0})[-1] == REAL_ENGINE


def test_a_file_missing_from_the_table_counts_its_tests_at_the_median_rate() -> None:
    # measured rates: 10 s/test (a), 1 s/test (b), 4 s/test (c): median 4 s a test
    ids = ["a::1", "b::1", "b::2", "c::1", "new::1", "new::2", "new::3"]
    # new: 3 tests x 4 s = 12 s, before a (10)
    assert longest_first(units(ids), {"a": 10.0, "b": 2.0, "c": 4.0}) == ["new", "a", "c", "b"]
    # an empty table keeps the collected order
    assert longest_first(units(ids), {}) == ["a", "b", "c", "new"]


def test_table_from_a_rounds_csvs_sums_wall_seconds_per_unit(tmp_path: Path) -> None:
    rows = {"gw0": [("tests/e2e/test_a.py::x", 1.0, 30.5), ("tests/e2e/test_a.py::y", 0.5, 12.0),
                    ("tests/unit/test_tiny.py::z", 0.1, 0.2)],
            "gw3": [("tests/real_engine/test_m.py::m", 3.0, 40.0),
                    ("tests/real_engine/test_n.py::n", 2.0, 25.25)],
            # the second part's (serial tests, never scheduled): not counted
            "main": [("tests/real_engine/test_m.py::serial", 3.0, 80.0)]}
    for worker, lines in rows.items():
        with (tmp_path / f"cpu_by_test.{worker}.csv").open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["nodeid", "cpu_s", "wall_s"])
            w.writerows(lines)
    table = table_from_round(tmp_path)
    assert table == {REAL_ENGINE: 65.2, "tests/e2e/test_a.py": 42.5}  # under 1 s left out
    assert list(table) == [REAL_ENGINE, "tests/e2e/test_a.py"]


def test_committed_table_names_units_that_exist_and_loads() -> None:
    table = schedule.load_table()
    assert table, "tests/support/file_seconds.json is missing or empty"
    # a renamed or deleted file would only lose its place in the order: refresh the table
    assert [u for u in table if not (ROOT / u).exists()] == []


def test_refresh_command_rejects_a_directory_without_csvs(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert schedule.main([str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"no cpu_by_test.gw*.csv rows in {tmp_path}"
    assert schedule.main([]) == 2


def test_refresh_writes_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cpu_by_test.gw1.csv").write_text("nodeid,cpu_s,wall_s\ntests/x.py::t,1,3.0\n")
    out = tmp_path / "table.json"
    monkeypatch.setattr(schedule, "TABLE", out)
    assert schedule.main([str(tmp_path)]) == 0
    assert json.loads(out.read_text())["seconds"] == {"tests/x.py": 3.0}
