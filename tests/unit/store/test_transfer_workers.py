"""A multi-worker run's run_workers rows travel with it: export then import keeps them."""

from __future__ import annotations

from pathlib import Path

import pytest

from infbench.store import create_run, finish_run, open_store
from infbench.store.transfer import export_run, import_run


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_run_workers_round_trip(tmp_path: Path, fmt: str) -> None:
    src = open_store(tmp_path / "a.duckdb")
    for run in ("r1", "r2"):
        create_run(src, run_id=run, config={}, target_url="u", model="m", endpoint="chat", t0_monotonic_ns=0)
        finish_run(src, run, status="interrupted", reason="worker 1 died")
    src.execute("INSERT INTO run_workers (run_id, worker, backend, node, hostname, pid, concurrency, "
                "session_share, planned_requests, sent_requests, stored_requests, lost_requests, status, "
                "reason, clock_shared, clock_offset_ns, clock_uncertainty_ns, clock_rtt_min_ns, clock_rounds) "
                "VALUES ('r1', 0, 'ray', 'n0', 'h0', 11, 3, 0.5, 30, 30, 30, 0, 'completed', NULL, false, "
                "-1234567, 350000, 700001, 64), ('r1', 1, 'ray', 'n1', 'h1', 12, 3, 0.5, 30, 9, 7, 23, "
                "'died', 'Ray actor lost', false, 88, 410000, 820000, 64), "
                "('r2', 0, 'process', 'h', 'h', 13, 1, 1.0, NULL, 5, 5, 0, 'completed', NULL, true, 3, 40000, 80000, 64)")
    export_run(src, "r1", tmp_path / "out", fmt)
    dst = open_store(tmp_path / "b.duckdb")
    assert import_run(dst, tmp_path / "out") == ["r1"]
    q = "SELECT * FROM run_workers WHERE run_id = 'r1' ORDER BY worker"
    assert dst.execute(q).fetchall() == src.execute(q).fetchall()
    assert dst.execute("SELECT count(*) FROM run_workers").fetchone() == (2,)
