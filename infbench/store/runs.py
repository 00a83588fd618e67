"""The `runs` table: one row per run, created at start and finished with a status."""

from __future__ import annotations

import json
import os
import socket
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import duckdb

from infbench import __version__
from infbench.store.db import StoreError

RUN_STATUSES = ("running", "completed", "completed_with_errors", "interrupted", "failed")


@dataclass(frozen=True)
class RunRow:
    run_id: str
    created_at: datetime
    finished_at: datetime | None
    status: str
    status_reason: str | None
    target_url: str | None
    model: str | None
    endpoint: str | None
    config: dict[str, Any]
    summary: dict[str, Any] | None
    client_bound: bool | None
    t0_monotonic_ns: int


_COLS = (
    "run_id, created_at, finished_at, status, status_reason, target_url, model, endpoint, "
    "config, summary, client_bound, t0_monotonic_ns"
)


def new_run_id() -> str:
    # Sortable by time at a glance, unique without coordination between processes.
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def create_run(
    con: duckdb.DuckDBPyConnection,
    *,
    run_id: str,
    config: dict[str, Any],
    target_url: str,
    model: str,
    endpoint: str,
    t0_monotonic_ns: int,
) -> None:
    con.execute(
        "INSERT INTO runs (run_id, created_at, status, target_url, model, endpoint, config, "
        "t0_monotonic_ns, infbench_version, hostname, pid) VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            run_id,
            datetime.now(UTC).replace(tzinfo=None),
            target_url,
            model,
            endpoint,
            json.dumps(config, sort_keys=True),
            t0_monotonic_ns,
            __version__,
            socket.gethostname(),
            os.getpid(),
        ],
    )


def finish_run(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    *,
    status: str,
    reason: str | None = None,
    summary: dict[str, Any] | None = None,
    client_bound: bool | None = None,
) -> None:
    if status not in RUN_STATUSES:
        raise ValueError(f"status: {status!r} is not one of {RUN_STATUSES}")
    con.execute(
        "UPDATE runs SET status = ?, status_reason = ?, finished_at = ?, summary = ?, "
        "client_bound = ? WHERE run_id = ?",
        [
            status,
            reason,
            datetime.now(UTC).replace(tzinfo=None),
            json.dumps(summary, sort_keys=True) if summary is not None else None,
            client_bound,
            run_id,
        ],
    )


def _row(r: tuple[Any, ...]) -> RunRow:
    return RunRow(
        run_id=r[0],
        created_at=r[1],
        finished_at=r[2],
        status=r[3],
        status_reason=r[4],
        target_url=r[5],
        model=r[6],
        endpoint=r[7],
        config=json.loads(r[8]) if r[8] else {},
        summary=json.loads(r[9]) if r[9] else None,
        client_bound=r[10],
        t0_monotonic_ns=r[11],
    )


def list_runs(con: duckdb.DuckDBPyConnection, limit: int | None = None) -> list[RunRow]:
    sql = f"SELECT {_COLS} FROM runs ORDER BY created_at DESC, run_id DESC"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return [_row(r) for r in con.execute(sql).fetchall()]


def get_run(con: duckdb.DuckDBPyConnection, run_ref: str) -> RunRow:
    """A run by id, unique id prefix, or `last`/`latest`."""
    if run_ref in ("last", "latest"):
        rows = con.execute(
            f"SELECT {_COLS} FROM runs ORDER BY created_at DESC, run_id DESC LIMIT 1"
        ).fetchall()
    else:
        rows = con.execute(
            f"SELECT {_COLS} FROM runs WHERE starts_with(run_id, ?) ORDER BY run_id", [run_ref]
        ).fetchall()
        exact = [r for r in rows if r[0] == run_ref]
        rows = exact or rows
    if not rows:
        raise StoreError(f"run {run_ref!r}: no such run in this store (see `infbench runs`)")
    if len(rows) > 1:
        raise StoreError(f"run {run_ref!r}: ambiguous prefix, matches {len(rows)} runs")
    return _row(rows[0])
