"""Our own hot path, gated by our own statistics in every CI run: `benchmarks/bench_hot_path.py
--gate` runs this checkout's `infbench run` and the stored baseline build's
(benchmarks/hot_path_baseline.txt) against one zero-delay streaming mock in interleaved,
paired rounds and fails when client CPU per streamed chunk rose beyond 5% by an interval the
rounds can tell from noise. An undecided interval after the last round is inconclusive and
passes (noise is not a regression); its figures are printed either way.

Serial: it measures CPU time, which other xdist workers on the same cores would inflate on
one side of a round and not the other."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.e2e, pytest.mark.serial]


@pytest.mark.timeout(1200)
def test_client_cpu_per_chunk_has_not_regressed_against_the_baseline(tmp_path: Path) -> None:
    out = tmp_path / "hot_path.md"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_hot_path.py"), "--gate",
                           "--rounds", "6", "--max-rounds", "10", "--requests", "2048", "--out", str(out)],
                          capture_output=True, text=True, timeout=1150, cwd=ROOT)
    result = json.loads(proc.stderr.strip().splitlines()[-1]) if proc.stderr.strip() else {}
    print(out.read_text() if out.exists() else proc.stdout[-3000:])
    assert result.get("verdict") in ("pass", "inconclusive"), (
        f"hot path regressed (exit {proc.returncode}): {result}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    assert proc.returncode == 0
    table = out.read_text()
    assert table.count("\n| ") >= 2 + 6  # header, rule, at least six rounds, median
