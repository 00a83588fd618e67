"""After a multi-worker run: one `run_workers` row per worker, and the summary's `workers` part.

Counts come from the store, not from the coordinator's tallies: `stored_requests` is what a
reader of the file finds. A worker that died may have shipped a request's chunks but not its
row (they travel as two batches); those chunks are removed, so a request is stored whole or
not at all and no ITL comes from a request nobody can see.
"""

from __future__ import annotations

from typing import Any

import duckdb

from infbench.loadgen.workers.coordinator import Coordinator
from infbench.store.workers_schema import WORKER_COLUMNS

_COLUMNS = [n for n, _ in WORKER_COLUMNS]


def record_workers(con: duckdb.DuckDBPyConnection, run_id: str, coord: Coordinator) -> dict[str, Any]:
    """Write the rows (after the writer closed) and return the summary's `workers` object."""
    stored = dict(con.execute(
        "SELECT worker, count(*) FROM requests WHERE run_id = ? GROUP BY worker", [run_id]).fetchall())
    if any(s.status != "completed" for s in coord.workers):
        con.execute(
            "DELETE FROM chunks WHERE run_id = ? AND request_idx NOT IN "
            "(SELECT request_idx FROM requests WHERE run_id = ?)", [run_id, run_id])
    rows, per_worker, lost_total = [], [], 0
    for s in coord.workers:
        s.stored["requests"] = int(stored.get(s.worker, 0))
        sent_lost, unsent = s.lost()
        lost = sent_lost + (unsent or 0)
        lost_total += lost
        c = s.clock
        row = {
            "run_id": run_id, "worker": s.worker, "backend": s.backend,
            "node": s.info.get("node"), "hostname": s.info.get("hostname"), "pid": s.info.get("pid"),
            "concurrency": s.concurrency, "session_share": s.share, "planned_requests": s.planned,
            "sent_requests": s.sent, "stored_requests": s.stored["requests"], "lost_requests": lost,
            "status": s.status or "died", "reason": s.reason,
            "clock_shared": None if c is None else c.shared,
            "clock_offset_ns": None if c is None else c.offset_ns,
            "clock_uncertainty_ns": None if c is None else c.uncertainty_ns,
            "clock_rtt_min_ns": None if c is None else c.rtt_min_ns,
            "clock_rounds": None if c is None else c.rounds,
        }
        rows.append([row[n] for n in _COLUMNS])
        per_worker.append({k: row[k] for k in _COLUMNS if k != "run_id"})
    con.executemany(f"INSERT INTO run_workers ({', '.join(_COLUMNS)}) VALUES "
                    f"({', '.join('?' for _ in _COLUMNS)})", rows)
    unshared = [s.clock.uncertainty_ns for s in coord.workers if s.clock is not None and not s.clock.shared]
    return {
        "backend": coord.backend.name, "count": len(coord.workers), "lost_requests": lost_total,
        "failed_workers": [s.worker for s in coord.workers if s.status != "completed"],
        # Times across nodes compare to within the sum of two nodes' uncertainties; one host's
        # workers share its clock (0).
        "max_clock_uncertainty_ms": (max(unshared) / 1e6) if unshared else 0.0,
        "per_worker": per_worker,
    }


def worker_warnings(part: dict[str, Any], coord: Coordinator) -> list[str]:
    return [s.describe() for s in coord.workers if s.status != "completed"]
