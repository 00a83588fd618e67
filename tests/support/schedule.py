"""How the suite's first part spreads its files over the xdist workers (`--dist loadfile`).

xdist's loadfile sends each file whole to one worker (a module's engine starts once, a
document's examples run in order), in order of how many tests a file holds. That order is not
the order of how long a file takes: a file of four dilution tests waits on its engine's real
time for five minutes and was handed out last, so in a round without a neighbour the machine
sat ~80% idle for the last three minutes of the part waiting on it. Here files go out longest
first (a list scheduler's longest-processing-time rule), from the wall seconds each took in a
measured round (`file_seconds.json`), and the real-engine files are one unit: they share a
vLLM server and pin it to CPU 0, so they run one after another in one worker, beside the rest
instead of after it.

    python -m tests.support.schedule DIR   # refresh file_seconds.json from a round's
                                           # cpu_by_test.gw*.csv (tests/support/cpu_by_test.py)

A file missing from the table counts its tests at the table's median seconds a test, so a new
slow file goes out in the middle, not first; refresh the table when that matters. The order
changes when tests run, never which run or what they check.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from collections import OrderedDict, defaultdict
from pathlib import Path

from xdist.scheduler import LoadScopeScheduling

TABLE = Path(__file__).with_name("file_seconds.json")
REAL_ENGINE = "tests/real_engine/"


def unit_of(nodeid: str) -> str:
    """The work unit a test belongs to: its file, or all real-engine files together."""
    path = nodeid.split("::", 1)[0]
    return REAL_ENGINE if path.startswith(REAL_ENGINE) else path


def load_table(path: Path = TABLE) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.get("seconds", {}).items()}


def longest_first(units: dict[str, int], table: dict[str, float]) -> list[str]:
    """Units (name: number of tests, in collected order) in descending estimated seconds;
    ties keep the collected order."""
    measured = [table[u] / n for u, n in units.items() if u in table and n]
    per_test = statistics.median(measured) if measured else 0.0

    def estimate(unit: str) -> float:
        if unit in table:
            return table[unit]
        if unit == REAL_ENGINE:  # summed from its files if the table lists them one by one
            parts = [s for f, s in table.items() if f.startswith(REAL_ENGINE)]
            if parts:
                return sum(parts)
        return units[unit] * per_test

    first = {unit: i for i, unit in enumerate(units)}
    return sorted(units, key=lambda unit: (-estimate(unit), first[unit]))


class LongestFirstScheduling(LoadScopeScheduling):
    """loadfile's scheduler with two changes: the unit of work (`unit_of`) and the order units
    go out (`longest_first`, in place of xdist's order by number of tests)."""

    def __init__(self, config, log=None, table: dict[str, float] | None = None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(config, log)
        self.table = load_table() if table is None else table
        self._ordered = False

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)

    def _assign_work_unit(self, node) -> None:  # type: ignore[no-untyped-def]
        # schedule() fills the whole queue before it hands out the first unit
        if not self._ordered:
            units = {scope: len(tests) for scope, tests in self.workqueue.items()}
            self.workqueue = OrderedDict((u, self.workqueue[u]) for u in longest_first(units, self.table))
            self._ordered = True
        super()._assign_work_unit(node)


def table_from_round(directory: Path) -> dict[str, float]:
    """Wall seconds per unit from the xdist workers' cpu_by_test CSVs of a round's first part
    (`cpu_by_test.gw*.csv`; the second part's `main` file holds the serial tests, which this
    scheduler never hands out), rounded; under a second left out."""
    seconds: dict[str, float] = defaultdict(float)
    for f in sorted(directory.glob("cpu_by_test.gw*.csv")):
        with f.open(newline="") as fh:
            for row in csv.DictReader(fh):
                seconds[unit_of(row["nodeid"])] += float(row["wall_s"])
    return {u: round(s, 1) for u, s in sorted(seconds.items(), key=lambda x: -x[1]) if s >= 1.0}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python -m tests.support.schedule DIR  (a round's cpu_by_test.gw*.csv)",
              file=sys.stderr)
        return 2
    table = table_from_round(Path(argv[0]))
    if not table:
        print(f"no cpu_by_test.gw*.csv rows in {argv[0]}", file=sys.stderr)
        return 2
    TABLE.write_text(json.dumps({"source": str(argv[0]), "seconds": table}, indent=1) + "\n")
    print(f"{len(table)} units, {sum(table.values()):.0f} s in all -> {TABLE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
