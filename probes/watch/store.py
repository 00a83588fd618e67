"""The live watch's records into the store, once the run itself is stored: `watch_triggers`,
`watch_metrics`, and each stacks capture as a hang capture linked to the run (so the hang
playbook, and `infbench diagnose RUN`, read it without a second command)."""

from __future__ import annotations

import json
from typing import Any

import duckdb

from infbench.store.transaction import transaction
from infbench.store.watch_schema import WATCH_COLUMNS
from probes.hang.writer import write_capture
from probes.watch.capture import CaptureRecord


def _insert(con: duckdb.DuckDBPyConnection, table: str, row: dict[str, Any]) -> None:
    names = [n for n, _ in WATCH_COLUMNS[table]]
    con.execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                [row.get(n) for n in names])


def store_watch(con: duckdb.DuckDBPyConnection, run_id: str, t0_ns: int,
                records: list[CaptureRecord]) -> int:
    """Write every record of the run (`t0_ns`: the run's start on the monotonic clock);
    returns how many triggers were stored. The caller owns `con` (writable)."""
    for i, rec in enumerate(records):
        tid = f"{run_id}-w{i}"
        cap_id = None
        if rec.stacks is not None:
            rec.stacks.run_id = run_id
            write_capture(con, rec.stacks)  # its own transaction
            cap_id = rec.stacks.capture_id
        with transaction(con, f"watch trigger {tid}: storing it failed"):
            _insert(con, "watch_triggers", {
                "trigger_id": tid, "run_id": run_id, "seq": i, "kind": rec.kind,
                "t_s": round((rec.at_ns - t0_ns) / 1e9, 4), "replica": rec.replica,
                "summary": rec.summary, "detail": json.dumps(rec.detail, default=str),
                "captured": json.dumps(rec.captured, default=str),
                "failed": json.dumps(rec.failed), "capture_s": rec.capture_s,
                "hang_capture_id": cap_id})
            for page in rec.metrics:
                _insert(con, "watch_metrics", {
                    "trigger_id": tid, "target": page.target, "url": page.url,
                    "t_s": round((page.t_ns - t0_ns) / 1e9, 4), "status": page.status,
                    "bytes": page.bytes, "truncated": page.truncated, "body": page.body,
                    "error": page.error})
    return len(records)


def store_watch_after_run(db: Any, run_id: str, records: list[CaptureRecord]) -> list[dict[str, Any]]:
    """Open the store at `db`, write the records on the run's time axis; what the summary
    shows of each (`summary["watch"]`)."""
    from infbench.store import open_store

    con = open_store(db)
    try:
        row = con.execute("SELECT t0_monotonic_ns FROM runs WHERE run_id = ?", [run_id]).fetchone()
        t0 = int(row[0]) if row and row[0] is not None else (records[0].at_ns if records else 0)
        store_watch(con, run_id, t0, records)
    finally:
        con.close()
    return [{"t_s": round((r.at_ns - t0) / 1e9, 3), "kind": r.kind, "replica": r.replica,
             "summary": r.summary, "captured": [c["what"] for c in r.captured],
             "failed": r.failed, "capture_s": r.capture_s,
             "hang_capture_id": r.stacks.capture_id if r.stacks is not None else None}
            for r in records]
